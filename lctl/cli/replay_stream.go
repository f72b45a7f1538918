package cli

import (
	"bufio"
	"fmt"
	"io"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// replayStream is replay on a chain file read as a stream: with --to-seq it
// stops reading at the seq. It reports false when the chain must be read
// in full (see streamChain); its output is the full read's.
func (c *cmdContext) replayStream(o operand, toSeq uint64, showEvents, withHash bool) (bool, error) {
	var s *lctl.State
	// The facts as they stand are shown by --to-seq and --json; the text
	// of the whole chain gives only their number, which is the state's.
	var facts *analysis.FactStoreBuilder
	if c.jsonOut || toSeq != 0 {
		facts = analysis.NewFactStoreBuilder()
	}
	var lastStart *lctl.Event // the latest step_start applied
	// stepOpen says no step_end came after it: the text's state keeps no
	// current step as it goes (an allocation and three reads a step),
	// but sets it from lastStart at the end, as Apply would have.
	stepOpen := false
	noCurrent := false
	printLines := !c.jsonOut && (toSeq == 0 || showEvents)
	// The lines are kept until the chain has been read: the full read,
	// should the stream give way to it, prints them itself. They are the
	// stream's own arrays (a batch's lines in one), not copied.
	var lines [][]byte
	var render func([]byte, *lctl.Event) []byte
	if printLines {
		render = analysis.AppendLine // on the decoding cores
	}
	// Without lines, the data read is the state's, the facts' and the
	// step in progress's (lastStart): the rest is checked, not decoded.
	// (The state's types are taken once it is made, in a function that
	// reads nothing of it: State.DataTypes.)
	var data, stateReads func(string) bool
	if !printLines {
		data = func(typ string) bool {
			return typ == lctl.TypeStepStart || analysis.FactStoreData(typ) || stateReads(typ)
		}
	}
	if !c.jsonOut && !withHash {
		c.unread = summaryUnread
	}
	sd, err := c.streamChain(o, false, render, data, func(id string) {
		// The text shows a summary of the state: without the steps, which
		// are most of it on a long chain. --json and --hash need them.
		if c.jsonOut || withHash {
			s = lctl.NewState(id)
		} else {
			s = lctl.NewSummaryState(id)
			s.CountToolCalls() // the text gives their number
			s.NoFactHistory()  // and the facts' (from facts below)
			s.NoCurrentStep()  // set at the end (stepOpen)
			noCurrent = true
		}
		s.DeferTypeCounts() // flushed when the stream ends
		stateReads = s.DataTypes()
	}, func(e *lctl.StreamEvent) error {
		if toSeq != 0 && e.Seq > toSeq {
			return lctl.ErrStop
		}
		s.Apply(&e.Event)
		if facts != nil {
			facts.Add(&e.Event)
		}
		switch e.Type {
		case lctl.TypeStepStart:
			if lastStart == nil {
				lastStart = new(lctl.Event)
			}
			e.OwnInto(lastStart)
			stepOpen = true
		case lctl.TypeStepEnd:
			stepOpen = false
		}
		if printLines {
			lines = appendLine(lines, e.Line)
		}
		return nil
	})
	if err != nil {
		return false, nil
	}
	s.FlushTypeCounts()
	if noCurrent && stepOpen {
		s.SetCurrentStep(lastStart)
	}
	c.reportInput(sd.data())
	if toSeq != 0 && toSeq > sd.lastSeq {
		return true, &inputError{fmt.Errorf("--to-seq %d: %s ends at seq %d", toSeq, sd.label, sd.lastSeq)}
	}
	var shown []lctl.Event
	if lastStart != nil {
		shown = []lctl.Event{*lastStart}
	}
	sum := summarize(s, nil)
	if s.CurrentStep == nil && lastStart != nil {
		sum.Agent = lastStart.Agent
	}
	res := replayResult{ChainID: sd.id, ToSeq: toSeq, Events: s.EventCount, Summary: sum,
		Warnings: append([]string{}, sd.warnings...)}
	if facts != nil {
		res.Facts = facts.Facts()
	}
	if toSeq != 0 && withHash {
		if res.StateHash, err = s.HashVersion(c.hashVersion); err != nil {
			return true, err
		}
	}
	if c.jsonOut {
		res.State = s
		return true, c.printJSON(res)
	}
	w := bufio.NewWriterSize(c.env.Stdout, 1<<20)
	out := c.env.Stdout
	c.env.Stdout = w
	defer func() { c.env.Stdout = out }()
	if toSeq == 0 {
		c.out("Replaying %d events...\n", sd.events)
		if err := writeLines(w, out, lines); err != nil {
			return true, err
		}
		c.out("Replay complete. Final state has %d %s.\n", len(s.Facts), plural(len(s.Facts), "fact", "facts"))
		c.printRecap(res.Summary)
		return true, w.Flush()
	}
	c.out("Replaying to event %d...\n", toSeq)
	if err := writeLines(w, out, lines); err != nil {
		return true, err
	}
	c.printStateAt(toSeq, res.Summary, res.Facts, res.StateHash, shown)
	return true, w.Flush()
}

// appendLine adds line to lines, extending the last one when line follows
// it in the same array.
func appendLine(lines [][]byte, line []byte) [][]byte {
	if n := len(lines); n > 0 && len(line) > 0 {
		last := lines[n-1]
		if len(last) < cap(last) && &last[:len(last)+1][len(last)] == &line[0] && len(last)+len(line) <= cap(last) {
			lines[n-1] = last[:len(last)+len(line)]
			return lines
		}
	}
	return append(lines, line)
}

// writeLines writes the lines after what w holds: a batch's lines (tens
// of KB in one array) straight to out, not copied through w (on the 1M
// file, some 100 MB copied after the stream, on one core).
func writeLines(w *bufio.Writer, out io.Writer, lines [][]byte) error {
	for _, l := range lines {
		if len(l) < 4096 {
			if _, err := w.Write(l); err != nil {
				return err
			}
			continue
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if _, err := out.Write(l); err != nil {
			return err
		}
	}
	return nil
}

// summaryUnread is the member of a type's data that neither replay's text
// reads (its lines, the summary state, the facts, the step in progress)
// nor a line (analysis.AppendLine): a step's id, a new string at every
// step that the decoder copied and put in its tables, four events a step
// (lctl.StreamOptions.Unread). The state's steps and tool calls keep it,
// but the summary state keeps neither; --json and --hash read the full
// state.
func summaryUnread(typ string) string {
	switch typ {
	case lctl.TypeStepStart, lctl.TypeStepEnd, lctl.TypeToolCall, lctl.TypeVerdict:
		return "step_id"
	}
	return ""
}
