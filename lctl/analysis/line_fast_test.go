package analysis

import (
	"bytes"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestAppendLineFast: the lines written straight into the buffer are
// Summarize's lines, byte for byte, for a generated workflow and for the
// unusual shapes of the types it takes (long and multi-line text, every
// duration range, counts past thousands, no rules, several rules, no
// subject, another status, handoffs with and without from, one fact, a
// fraction of facts); the shapes it gives to Summarize (a profile,
// invalid model output, a model without tool or intent, a consensus
// block, a handoff with a summary, a reason, a list of facts, a depth or
// queries, other types) are left to it. Each event is also read as a
// stream reads it (data as fields), the form replay renders.
func TestAppendLineFast(t *testing.T) {
	long := strings.Repeat("é", 70)
	events := lctltest.Workflow("w", 20_000, lctltest.WorkflowOptions{})
	taken := len(events)
	odd := []lctl.Event{
		{Type: "step_start", Agent: "a", Data: map[string]any{"step": 3.0, "tool": "t", "intent": "line one\nline\ttwo " + long}},
		{Type: "step_start", Agent: "", Data: map[string]any{"intent": long}},
		{Type: "step_start", Agent: "a", Data: map[string]any{"tool": "t", "step": 2.5}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"duration_ms": 9.996, "tokens": map[string]any{"input": 1234567.0, "output": 1.0}}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"duration_ms": 999.96, "outcome": "failure", "tokens": map[string]any{"prompt_tokens": 5.0}}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"duration_ms": 125_000.0, "tokens": map[string]any{"input": 0.0}}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"duration_ms": -3.0}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"duration_ms": 4_000_000.0, "tokens": map[string]any{"input": -2000.0, "output": 1.0}}},
		{Type: "step_end", Agent: "a"},
		{Type: "tool_call", Agent: "x", Data: map[string]any{"tool": "fs.read", "duration_ms": 0.0, "status": "error"}},
		{Type: "tool_call", Agent: "x", Data: map[string]any{"duration_ms": 12.34}},
		{Type: "verdict", Agent: "v", Data: map[string]any{"decision": "deny", "tool": "rm", "step": 7.0,
			"reasons": []any{map[string]any{"rule_id": "r1"}, map[string]any{"rule_id": ""}, map[string]any{"rule_id": "r2"}}}},
		{Type: "verdict", Agent: "v", Data: map[string]any{"reasons": []any{map[string]any{"rule_id": "r1"}}}},
		{Type: "verdict", Agent: "v", Data: map[string]any{"decision": "allow"}},
		{Type: "fact_added", Agent: "f", Data: map[string]any{"id": "F1", "text": "just text\nover lines " + long}},
		{Type: "fact_modified", Agent: "f", Data: map[string]any{"id": "F1", "confidence": 0.125, "reason": long}},
		{Type: "fact_modified", Agent: "f", Data: map[string]any{"confidence": 1.0}},
		{Type: "fact_added", Agent: "f"},
		{Type: "handoff", Agent: "a", Data: map[string]any{"to": "b"}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"from": "c", "to": "b", "facts": 1.0}},
		{Type: "handoff", Agent: "", Data: map[string]any{"to": "b", "facts": 2.5}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"from": 3.0, "to": "b", "facts": 40.0}},
	}
	left := []lctl.Event{
		{Type: "step_start", Agent: "a", Data: map[string]any{"raw": "{{", "step": 1.0}},
		{Type: "step_start", Agent: "a", Data: map[string]any{"tool": "t", "agent_profile": map[string]any{"type": "reviewer"}}},
		{Type: "step_start", Agent: "a", Data: map[string]any{"model": "m"}},
		{Type: "fact_added", Agent: "f", Data: map[string]any{"id": "F2", "consensus": map[string]any{"agreement": 0.5}}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"from": "a"}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"to": "b", "summary": "done\nhere"}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"to": "b", "reason": "why"}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"to": "b", "facts": []any{"F1", "F2"}}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"to": "b", "facts": "many"}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"to": "b", "depth": 2.0}},
		{Type: "handoff", Agent: "a", Data: map[string]any{"to": "b", "suggested_queries": []any{"q"}}},
		{Type: "checkpoint", Agent: "s"},
		{Type: "checkpoint", Agent: "s", Data: map[string]any{"facts_snapshot": map[string]any{"F1": map[string]any{"text": "x"}, "F2": 1.0}}},
	}
	events = append(events, odd...)
	events = append(events, left...)
	for i := range events {
		events[i].Seq = uint64(i + 1)
	}
	streamed := streamedForms(t, events)
	fast := 0
	for i := range events {
		for _, e := range []lctl.Event{events[i], streamed[i]} {
			want := string(appendLineGeneral([]byte("x"), &e))
			got, ok := appendLineFast([]byte("x"), &e)
			switch {
			case i < taken:
				if ok {
					fast++
				}
			case ok != (i < taken+len(odd)):
				t.Fatalf("event %d (%s): taken %v", i, e.Type, ok)
			}
			if ok && string(got) != want {
				t.Fatalf("event %d:\n got %s\nwant %s", i, got, want)
			}
			if !ok && string(got) != "x" {
				t.Fatalf("event %d: appended %q and gave up", i, got)
			}
			if line := string(AppendLine([]byte("x"), &e)); line != want {
				t.Fatalf("event %d: AppendLine %s, want %s", i, line, want)
			}
		}
	}
	if fast < 2*taken*3/4 {
		t.Fatalf("only %d of the workflow's %d events (read both ways) written straight", fast, 2*taken)
	}
}

// streamedForms returns the events as a stream with data as fields gives
// them (kept with Own).
func streamedForms(t *testing.T, events []lctl.Event) []lctl.Event {
	t.Helper()
	var file bytes.Buffer
	file.WriteString(`{"lctl":"4.0","chain":{"id":"w"},"events":[`)
	for i := range events {
		raw, err := events[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			file.WriteString(",\n")
		}
		file.Write(raw)
	}
	file.WriteString("]}\n")
	var out []lctl.Event
	err := lctl.Stream(&file, lctl.StreamOptions{Fields: true, SkipHashes: true}, func(*lctl.StreamHeader) error { return nil },
		func(e *lctl.StreamEvent) error { out = append(out, e.Own()); return nil })
	if err != nil || len(out) != len(events) {
		t.Fatalf("streamed %d of %d events: %v", len(out), len(events), err)
	}
	return out
}
