package analysis

import (
	"fmt"
	"math"
	"strings"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

// VerifyReport is what Verify found out about a chain.
type VerifyReport struct {
	ChainID string `json:"chain_id"`
	Events  int    `json:"events"`
	// OK is true when no check found a problem.
	OK bool `json:"ok"`
	// Checks are the four checks in the order they run: sequence,
	// timestamps, hash_chain, checkpoints.
	Checks []Check `json:"checks"`
	// Problems lists every problem, in chain order; First is the earliest.
	Problems []lctl.Problem `json:"problems"`
	First    *lctl.Problem  `json:"first_problem,omitempty"`
	// Notes are observations that are not failures (a checkpoint hash of
	// another implementation that cannot be recomputed, a run without its
	// end).
	Notes []string `json:"notes"`
}

// Check is the outcome of one of Verify's checks.
type Check struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Summary  string `json:"summary"`
	Problems int    `json:"problems"`
}

// Verify checks a chain end to end: seqs (1, 2, 3, … without gaps or
// repeats), timestamps (parse, never go backwards), the hash chain (every
// hash matches its event, every prev_hash links to the event before) and
// checkpoints (state_hash equals the hash of the state replayed up to the
// checkpoint, facts_snapshot equals the facts). Every problem names the
// event: which one was edited, removed, reordered or re-sealed.
func Verify(chainID string, events []lctl.Event) *VerifyReport {
	r := &VerifyReport{ChainID: chainID, Events: len(events), Problems: []lctl.Problem{}, Notes: []string{}}

	seqProblems, timeProblems := []lctl.Problem{}, []lctl.Problem{}
	for _, p := range lctl.CheckSequence(chainID, events) {
		if p.Kind == lctl.ProblemBadTimestamp || p.Kind == lctl.ProblemTimestampOrder {
			timeProblems = append(timeProblems, p)
		} else {
			seqProblems = append(seqProblems, p)
		}
	}
	seqSummary := "no events"
	if n := len(events); n > 0 {
		seqSummary = fmt.Sprintf("seq %d..%d, no gaps or duplicates", events[0].Seq, events[n-1].Seq)
	}
	r.add("sequence", seqSummary, seqProblems)

	timeSummary := "every timestamp parses; none goes backwards"
	stamped := 0
	for i := range events {
		if events[i].Timestamp != "" {
			stamped++
		}
	}
	if stamped == 0 && len(events) > 0 {
		timeSummary = "no event has a timestamp"
		r.Notes = append(r.Notes, "no event has a timestamp, so durations come only from duration_ms")
	} else if stamped < len(events) {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of %d events have no timestamp", len(events)-stamped, len(events)))
	}
	r.add("timestamps", timeSummary, timeProblems)

	hashProblems, hashSummary := verifyHashes(events)
	r.add("hash_chain", hashSummary, hashProblems)

	cpProblems, cpSummary, cpNotes := verifyCheckpoints(chainID, events)
	r.Notes = append(r.Notes, cpNotes...)
	r.add("checkpoints", cpSummary, cpProblems)

	r.Notes = append(r.Notes, runNotes(events)...)

	// Problems in chain order; the earliest is the headline.
	sortProblems(r.Problems)
	if len(r.Problems) > 0 {
		first := r.Problems[0]
		r.First = &first
	}
	r.OK = len(r.Problems) == 0
	return r
}

func (r *VerifyReport) add(name, okSummary string, problems []lctl.Problem) {
	c := Check{Name: name, OK: len(problems) == 0, Summary: okSummary, Problems: len(problems)}
	if len(problems) > 0 {
		c.Summary = problems[0].Message
		if len(problems) > 1 {
			c.Summary += fmt.Sprintf(" (and %d more)", len(problems)-1)
		}
	}
	r.Checks = append(r.Checks, c)
	r.Problems = append(r.Problems, problems...)
}

func sortProblems(ps []lctl.Problem) {
	// Stable insertion sort by position: the lists are short and mostly
	// sorted already.
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Position < ps[j-1].Position; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// noHashMessage is the problem of a chain of which no event has a hash.
const noHashMessage = "no event carries a hash: the chain was written without a hash chain, so edits cannot be detected"

// verifyHashes checks every hash and link, naming the event that was
// edited, removed, reordered or re-sealed.
func verifyHashes(events []lctl.Event) ([]lctl.Problem, string) {
	var out []lctl.Problem
	if len(events) == 0 {
		return nil, "no events"
	}
	hashed := 0
	for i := range events {
		if events[i].Hash != "" {
			hashed++
		}
	}
	if hashed == 0 {
		e := &events[0]
		return []lctl.Problem{{Seq: e.Seq, Position: 1, Kind: lctl.ProblemNoHash, Message: noHashMessage}}, ""
	}
	// Where each stored hash is, to tell a reordered link from a removed one.
	at := make(map[string]int, len(events))
	for i := range events {
		if h := events[i].Hash; h != "" {
			if _, dup := at[h]; !dup {
				at[h] = i
			}
		}
	}
	contentOK := make([]bool, len(events))
	for i := range events {
		e := &events[i]
		pos := i + 1
		add := func(kind, format string, args ...any) {
			out = append(out, lctl.Problem{Seq: e.Seq, Position: pos, Kind: kind, Message: fmt.Sprintf(format, args...)})
		}
		if e.Hash == "" {
			add(lctl.ProblemNoHash, "%s has no hash", lctl.Describe(e))
			continue
		}
		h, err := e.ComputeHash()
		contentOK[i] = err == nil && h == e.Hash
		if err != nil {
			add(lctl.ProblemEdited, "%s cannot be hashed: %v", lctl.Describe(e), err)
		} else if h != e.Hash {
			add(lctl.ProblemEdited, "%s was edited: its content does not match its hash", lctl.Describe(e))
		}
		if i == 0 {
			if e.PrevHash != "" {
				add(lctl.ProblemHeadRemoved, "%s links to an earlier event (prev_hash %s): the chain's first events were removed", lctl.Describe(e), clip(e.PrevHash, 12))
			}
			continue
		}
		prev := &events[i-1]
		if prev.Hash == "" || e.PrevHash == prev.Hash {
			continue
		}
		switch p, known := at[e.PrevHash]; {
		case e.PrevHash == "":
			add(lctl.ProblemRemoved, "%s has no prev_hash although it is not the first event: events before it were removed or it was inserted", lctl.Describe(e))
		case known && p != i-1:
			add(lctl.ProblemReordered, "%s at position %d links to %s at position %d, not to %s before it: events were reordered or inserted",
				lctl.Describe(e), pos, lctl.Describe(&events[p]), p+1, lctl.Describe(prev))
		case e.Seq > prev.Seq+1:
			add(lctl.ProblemRemoved, "%s links to an event that is not in the chain: %s removed (between %s and it)",
				lctl.Describe(e), seqSpan(prev.Seq+1, e.Seq-1), lctl.Describe(prev))
		case contentOK[i-1]:
			// The event before is self-consistent but is not the one this
			// event was linked to: it was changed and sealed again.
			out = append(out, lctl.Problem{Seq: prev.Seq, Position: i, Kind: lctl.ProblemResealed,
				Message: fmt.Sprintf("%s was changed and re-sealed: %s's prev_hash does not match its hash", lctl.Describe(prev), lctl.Describe(e))})
		default:
			add(lctl.ProblemRemoved, "%s: prev_hash does not match the hash of %s (an event before it was changed, removed or reordered)", lctl.Describe(e), lctl.Describe(prev))
		}
	}
	summary := fmt.Sprintf("%d events linked, every hash matches its event", len(events))
	if hashed < len(events) && len(out) == 0 {
		summary = fmt.Sprintf("%d of %d events hashed", hashed, len(events))
	}
	return out, summary
}

func seqSpan(lo, hi uint64) string {
	if lo == hi {
		return fmt.Sprintf("seq %d was", lo)
	}
	return fmt.Sprintf("seqs %d to %d were", lo, hi)
}

// verifyCheckpoints replays the chain and checks each checkpoint against the
// state before it.
func verifyCheckpoints(chainID string, events []lctl.Event) (problems []lctl.Problem, summary string, notes []string) {
	s := lctl.NewState(chainID)
	s.CacheHashes() // version-1 hashes (old chains) write only what changed; version 2 keeps itself
	checked, total := 0, 0
	for i := range events {
		e := &events[i]
		if e.Type == lctl.TypeCheckpoint {
			total++
			ps, did, ns := checkCheckpoint(s, e, i+1)
			problems = append(problems, ps...)
			notes = append(notes, ns...)
			if did {
				checked++
			}
		}
		s.Apply(e)
	}
	switch {
	case total == 0:
		summary = "no checkpoints"
	case checked == total:
		summary = fmt.Sprintf("%d %s; state hashes and fact snapshots match the replay", total, plural(total, "checkpoint", "checkpoints"))
	default:
		summary = fmt.Sprintf("%d of %d checkpoints could be checked", checked, total)
	}
	return problems, summary, notes
}

// checkCheckpoint compares one checkpoint with s, the state before it.
func checkCheckpoint(s *lctl.State, e *lctl.Event, pos int) (problems []lctl.Problem, checked bool, notes []string) {
	add := func(format string, args ...any) {
		problems = append(problems, lctl.Problem{Seq: e.Seq, Position: pos, Kind: lctl.ProblemCheckpoint,
			Message: fmt.Sprintf("%s: ", lctl.Describe(e)) + fmt.Sprintf(format, args...)})
	}
	d := e.DataMap()
	if h, ok := d["state_hash"].(string); ok && h != "" {
		if v := lctl.StateHashVersion(h); v != 0 {
			// Version 1 hashes the whole state (old chains: quadratic over
			// a chain's checkpoints); version 2 is kept up to date.
			want, err := s.HashVersion(v)
			switch {
			case err != nil:
				add("the state before it cannot be hashed: %v", err)
			case want != h:
				add("state_hash %s does not match the replayed state %s (an event before it, or the checkpoint, was changed)", clipHash(h), clipHash(want))
			default:
				checked = true
			}
		} else {
			notes = append(notes, fmt.Sprintf("%s: state_hash %q is not an LCTL state hash (v2:sha256:… or sha256:…), so it cannot be recomputed", lctl.Describe(e), clip(h, 24)))
		}
	}
	snap, ok := d["facts_snapshot"].(map[string]any)
	if !ok {
		return problems, checked, notes
	}
	ids := make([]string, 0, len(snap))
	for id := range snap {
		ids = append(ids, id)
	}
	sortNatural(ids)
	for _, id := range ids {
		f := s.Facts[id]
		if f == nil {
			add("facts_snapshot has %s, which no event before it added", id)
			continue
		}
		entry, _ := snap[id].(map[string]any)
		if text, ok := entry["text"].(string); ok && !sameText(text, f.Text) {
			add("facts_snapshot says %s is %q, the replay %q", id, clip(text, 40), clip(f.Text, 40))
		}
		if c, ok := numberOf(entry["confidence"]); ok {
			if f.Confidence == nil || math.Abs(*f.Confidence-c) > 1e-9 {
				add("facts_snapshot gives %s confidence %s, the replay %s", id, fmtConf(c), fmtConfPtr(f.Confidence))
			}
		}
	}
	var missing []string
	for id := range s.Facts {
		if _, ok := snap[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sortNatural(missing)
		notes = append(notes, fmt.Sprintf("%s: facts_snapshot leaves out %s", lctl.Describe(e), strings.Join(missing, ", ")))
	}
	if len(problems) == 0 && !checked {
		checked = true
	}
	return problems, checked, notes
}

// sameText compares a snapshot's text with the replayed one, accepting the
// abbreviations the spec's example uses ("SQL query constructed...").
func sameText(snap, replayed string) bool {
	if snap == replayed {
		return true
	}
	for _, ell := range []string{"...", "…"} {
		if p, ok := strings.CutSuffix(snap, ell); ok && strings.HasPrefix(replayed, p) {
			return true
		}
	}
	return false
}

func fmtConf(c float64) string { return fmt.Sprintf("%.2f", c) }

func fmtConfPtr(c *float64) string {
	if c == nil {
		return "none"
	}
	return fmtConf(*c)
}

// runNotes notes an XCT run that did not finish.
func runNotes(events []lctl.Event) []string {
	started, finished := -1, -1
	for i := range events {
		switch events[i].Type {
		case lctl.TypeRunStarted:
			started = i
		case lctl.TypeRunFinished:
			finished = i
		}
	}
	var out []string
	if started >= 0 && finished < 0 {
		out = append(out, "the run has no run_finished event: it is still running, or the chain was cut short")
	}
	after := 0
	for i := finished + 1; finished >= 0 && i < len(events); i++ {
		if events[i].Type != checkpoint.EventType { // the run's end is signed after it
			after++
		}
	}
	if after > 0 {
		out = append(out, fmt.Sprintf("%d %s after run_finished", after, plural(after, "event comes", "events come")))
	}
	return out
}
