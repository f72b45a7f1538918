package lctltest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// WorkflowOptions tune Workflow.
type WorkflowOptions struct {
	// Seal links the events with hashes, as XCT writes them (default in
	// the files WriteWorkflow writes).
	Seal bool
	// CheckpointEvery is the distance between checkpoints (default 500; a
	// negative value writes none).
	CheckpointEvery int
	// StateHashes puts the replayed state's hash in every checkpoint
	// (state_hash, checked by `lctl verify`): version 2 (State.Hash), kept
	// up to date as events apply, so linear in the chain.
	StateHashes bool
	// StateHashVersion 1 writes the hashes of version 1 instead
	// (State.HashV1, what checkpoints carried until session 5): the whole
	// state hashed at each checkpoint, quadratic in the chain; for chains
	// of up to some 300,000 events.
	StateHashVersion int
	// Facts is how many distinct fact ids the run cycles through (default
	// 40).
	Facts int
	// Detail adds that many words to each step's intent and each fact's
	// text (chosen from a fixed list by the step): a run whose intents
	// and findings are sentences, not labels. 0 writes the labels alone.
	Detail int
}

// detailWords are the words Detail adds.
var detailWords = [...]string{"the", "billing", "service", "client", "request", "timeout", "retries", "schema",
	"migration", "endpoint", "returns", "invoice", "totals", "after", "reading", "config", "and", "checking",
	"handler", "tests", "for", "rounding", "currency", "legacy", "response", "fields", "customer", "account",
	"mapping", "version", "error", "path"}

// detail returns n words for step, each after a space.
func detail(step, n int) string {
	var b strings.Builder
	for k := range n {
		b.WriteByte(' ')
		b.WriteString(detailWords[(step*7+k*13+k*k)%len(detailWords)])
	}
	return b.String()
}

// workflowAgents are the agents of the generated run: a planner hands work
// to researchers and coders, a reviewer checks it.
var workflowAgents = [...]string{"planner", "researcher", "coder", "reviewer", "tester"}

// workflowTools are the tools the agents call.
var workflowTools = [...]string{"web.search", "fs.read", "fs.write", "shell.run", "grep", "http.get"}

// Workflow returns the first n events of a long multi-agent run,
// deterministic for the same arguments: steps (step_start, a verdict, a
// tool call or an error, step_end with tokens and duration), facts added
// and revised with confidence, handoffs between agents, contract checks,
// streamed model output and a checkpoint every CheckpointEvery events.
func Workflow(chainID string, n int, opts WorkflowOptions) []lctl.Event {
	events := make([]lctl.Event, 0, n)
	_ = genWorkflow(chainID, n, opts, func(e *lctl.Event) error {
		events = append(events, *e)
		return nil
	})
	return events
}

// EachWorkflowEvent calls f with each of Workflow's events in turn without
// holding them (f must copy an event it keeps); it stops at f's first
// error and returns it.
func EachWorkflowEvent(chainID string, n int, opts WorkflowOptions, f func(*lctl.Event) error) error {
	return genWorkflow(chainID, n, opts, f)
}

// WriteWorkflow writes Workflow's chain as an LCTL JSON file without holding
// it: the file's header, then one event per line in its canonical JSON
// (what the event stream stores), then the end of the file. Any lctl reads
// it; a million events take some 300 MB.
func WriteWorkflow(w io.Writer, chainID string, n int, opts WorkflowOptions) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := fmt.Fprintf(bw, "{\"lctl\":%q,\"chain\":{\"id\":%q},\"events\":[", lctl.Version, chainID); err != nil {
		return err
	}
	first := true
	err := genWorkflow(chainID, n, opts, func(e *lctl.Event) error {
		raw, err := e.MarshalJSON()
		if err != nil {
			return err
		}
		sep := ",\n"
		if first {
			sep = "\n"
		}
		first = false
		if _, err := bw.WriteString(sep); err != nil {
			return err
		}
		_, err = bw.Write(raw)
		return err
	})
	if err != nil {
		return err
	}
	if _, err := bw.WriteString("\n]}\n"); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteWorkflowLines writes Workflow's chain as JSON lines: each event's
// canonical JSON on a line of its own, as the event stream and the
// tracer's chain files hold them.
func WriteWorkflowLines(w io.Writer, chainID string, n int, opts WorkflowOptions) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	err := genWorkflow(chainID, n, opts, func(e *lctl.Event) error {
		raw, err := e.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := bw.Write(raw); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// genWorkflow generates the events and hands each to emit, sealed when
// asked.
func genWorkflow(chainID string, n int, opts WorkflowOptions, emit func(*lctl.Event) error) error {
	if opts.CheckpointEvery == 0 {
		opts.CheckpointEvery = 500
	}
	if opts.Facts <= 0 {
		opts.Facts = 40
	}
	start := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	seq := 0
	prev := ""
	// The facts as they stand, for the checkpoints' snapshots; the full
	// state only when its hash is asked for.
	type factNow struct {
		text string
		conf float64
	}
	facts := map[string]factNow{}
	var state *lctl.State
	if opts.StateHashes {
		state = lctl.NewState(chainID)
		if opts.StateHashVersion == 1 {
			state.CacheHashes()
		}
	}
	var err error
	add := func(typ, agent string, data map[string]any) {
		// The last event is always the run's end.
		if err != nil || seq >= n || (seq == n-1 && typ != lctl.TypeRunFinished) {
			return
		}
		seq++
		e := lctl.Event{
			ChainID:   chainID,
			Seq:       uint64(seq),
			Type:      typ,
			Timestamp: lctl.FormatTime(start.Add(time.Duration(seq) * 37 * time.Millisecond)),
			Agent:     agent,
			Data:      data,
		}
		if opts.Seal {
			if err = e.Seal(prev); err != nil {
				return
			}
			prev = e.Hash
		}
		if state != nil {
			state.Apply(&e)
		}
		if typ == lctl.TypeFactAdded || typ == lctl.TypeFactModified {
			facts[data["id"].(string)] = factNow{data["text"].(string), data["confidence"].(float64)}
		}
		err = emit(&e)
	}
	checkpoint := func() {
		if opts.CheckpointEvery < 0 || seq == 0 || (seq+1)%opts.CheckpointEvery != 0 || seq+1 >= n {
			return
		}
		ids := make([]string, 0, len(facts))
		for id := range facts {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		snap := make(map[string]any, len(ids))
		for _, id := range ids {
			snap[id] = map[string]any{"text": facts[id].text, "confidence": facts[id].conf}
		}
		data := map[string]any{"facts_snapshot": snap}
		if state != nil {
			version := opts.StateHashVersion
			if version == 0 {
				version = 2
			}
			h, herr := state.HashVersion(version)
			if herr != nil {
				err = herr
				return
			}
			data["state_hash"] = h
		}
		add(lctl.TypeCheckpoint, "system", data)
	}
	add(lctl.TypeRunStarted, "orchestrator", map[string]any{"run_id": chainID, "goal": "migrate the billing service to the new API",
		"model": "model-large", "principal": "ops", "max_steps": 1e9})
	prevAgent := ""
	for step := 1; seq < n-1 && err == nil; step++ {
		agent := workflowAgents[(step/3)%len(workflowAgents)]
		tool := workflowTools[(step*7)%len(workflowTools)]
		id := fmt.Sprintf("s%07d", step)
		s := float64(step)
		if prevAgent != "" && agent != prevAgent {
			checkpoint()
			add("handoff", prevAgent, map[string]any{"from": prevAgent, "to": agent, "facts": float64(len(facts))})
		}
		prevAgent = agent
		checkpoint()
		add(lctl.TypeStepStart, agent, map[string]any{"step": s, "step_id": id, "intent": "work on part " + fmt.Sprint(step%17) + detail(step, opts.Detail),
			"tool": tool, "model": "model-" + agent})
		checkpoint()
		add(lctl.TypeVerdict, "validator", map[string]any{"step": s, "step_id": id, "tool": tool, "decision": "allow",
			"reasons": []any{map[string]any{"rule_id": "allow-" + tool}}})
		checkpoint()
		if step%23 == 0 {
			add(lctl.TypeError, "executor", map[string]any{"step": s, "step_id": id, "code": "TIMEOUT", "category": "execution_error",
				"type": "tool_failure", "message": tool + " timed out", "recoverable": true})
		} else {
			add(lctl.TypeToolCall, "executor", map[string]any{"step": s, "step_id": id, "tool": tool,
				"duration_ms": float64(5 + step%91), "status": "success"})
		}
		checkpoint()
		if step%2 == 0 {
			fid := fmt.Sprintf("F%d", (step/2)%opts.Facts)
			typ := lctl.TypeFactAdded
			if _, ok := facts[fid]; ok {
				typ = lctl.TypeFactModified
			}
			add(typ, agent, map[string]any{"id": fid, "text": "finding " + fid + " rev " + fmt.Sprint(step%5) + detail(step, opts.Detail),
				"confidence": float64(60+step%40) / 100, "source": agent, "reason": "observed"})
			checkpoint()
		}
		if step%101 == 0 {
			add(lctl.TypeContractValidation, "system", map[string]any{"contract": agent, "direction": "output", "status": "passed", "warnings": []any{}})
			checkpoint()
		}
		if step%211 == 0 {
			add(lctl.TypeStreamStart, agent, map[string]any{"model": "model-" + agent})
			checkpoint()
			add(lctl.TypeStreamChunk, agent, map[string]any{"index": 0.0, "tokens": 12.0})
			checkpoint()
			add(lctl.TypeStreamEnd, agent, map[string]any{"total_chunks": 1.0, "total_tokens": 12.0, "duration_ms": 40.0})
			checkpoint()
		}
		add(lctl.TypeStepEnd, agent, map[string]any{"step": s, "step_id": id, "outcome": "success",
			"duration_ms": float64(20 + step%113), "tokens": map[string]any{"input": float64(300 + step%50), "output": float64(40 + step%30)}})
		checkpoint()
	}
	add(lctl.TypeRunFinished, "orchestrator", map[string]any{"run_id": chainID, "status": "succeeded", "message": "done",
		"steps": float64(seq / 5)})
	if err == nil && seq < n {
		err = fmt.Errorf("generated %d of %d events", seq, n)
	}
	return err
}

// Layouts of a chain file for WriteWorkflowShaped.
const (
	// LayoutLines writes one event per line (WriteWorkflow's layout).
	LayoutLines = "lines"
	// LayoutIndent writes the file as Python's json.dump(indent=2) does:
	// every member on a line of its own, indented by two spaces a level.
	LayoutIndent = "indent"
	// LayoutOneLine writes the whole file on one line, as Python's
	// json.dump writes it without indent (", " and ": " between members).
	LayoutOneLine = "oneline"
)

// Shape is how WriteWorkflowShaped lays out a chain file.
type Shape struct {
	// Spec writes events as the spec shows them and its reference
	// implementation writes them: the keys in the spec's order (seq, type,
	// timestamp, agent, data), no chain_id, no hash chain (the options'
	// Seal is ignored), "lctl": "4.1", and Python's separators (", " and
	// ": "). The data's keys stay sorted (deterministic). Without it,
	// events are their canonical JSON (what XCT writes).
	Spec bool
	// Layout is LayoutLines (the default), LayoutIndent or LayoutOneLine.
	Layout string
}

// WriteWorkflowShaped writes Workflow's chain as shape says, without
// holding it: the shapes other implementations write, for measuring what
// reading each costs. The zero Shape writes what WriteWorkflow writes.
func WriteWorkflowShaped(w io.Writer, chainID string, n int, opts WorkflowOptions, shape Shape) error {
	if shape.Spec {
		opts.Seal = false
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	version := lctl.Version
	if shape.Spec {
		version = "4.1"
	}
	head := fmt.Sprintf("{\"lctl\":%q,\"chain\":{\"id\":%q},\"events\":[", version, chainID)
	sep, first, end := ",\n", "\n", "\n]}\n"
	switch shape.Layout {
	case "", LayoutLines:
		if shape.Spec {
			head = pySpaces([]byte(head))
		}
	case LayoutIndent:
		head = fmt.Sprintf("{\n  \"lctl\": %q,\n  \"chain\": {\n    \"id\": %q\n  },\n  \"events\": [", version, chainID)
		sep, first, end = ",\n    ", "\n    ", "\n  ]\n}"
	case LayoutOneLine:
		head = pySpaces([]byte(head))
		sep, first, end = ", ", "", "]}"
	default:
		return fmt.Errorf("layout %q: want %s, %s or %s", shape.Layout, LayoutLines, LayoutIndent, LayoutOneLine)
	}
	if _, err := bw.WriteString(head); err != nil {
		return err
	}
	var buf bytes.Buffer
	count := 0
	err := genWorkflow(chainID, n, opts, func(e *lctl.Event) error {
		raw, err := e.MarshalJSON()
		if err != nil {
			return err
		}
		if shape.Spec {
			data, err := lctl.Canonical(e.Data)
			if err != nil {
				return err
			}
			raw = fmt.Appendf(raw[:0], `{"seq":%d,"type":%s,"timestamp":%s,"agent":%s,"data":%s}`,
				e.Seq, quote(e.Type), quote(e.Timestamp), quote(e.Agent), data)
		}
		switch {
		case shape.Layout == LayoutIndent:
			buf.Reset()
			if err := json.Indent(&buf, raw, "    ", "  "); err != nil {
				return err
			}
			raw = buf.Bytes()
		case shape.Spec:
			raw = []byte(pySpaces(raw))
		}
		s := sep
		if count == 0 {
			s = first
		}
		count++
		if _, err := bw.WriteString(s); err != nil {
			return err
		}
		_, err = bw.Write(raw)
		return err
	})
	if err != nil {
		return err
	}
	if _, err := bw.WriteString(end); err != nil {
		return err
	}
	return bw.Flush()
}

// quote is a string as canonical JSON writes it.
func quote(s string) []byte {
	b, err := lctl.Canonical(s)
	if err != nil {
		panic(err) // a string always encodes
	}
	return b
}

// pySpaces puts a space after every ':' and ',' outside strings of
// compact JSON: Python's json.dumps separators.
func pySpaces(b []byte) string {
	out := make([]byte, 0, len(b)+len(b)/8)
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		out = append(out, c)
		switch {
		case in && c == '\\':
			i++
			out = append(out, b[i])
		case c == '"':
			in = !in
		case !in && (c == ':' || c == ','):
			out = append(out, ' ')
		}
	}
	return string(out)
}
