package analysis_test

import (
	"math"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

func otel(span, parent string) map[string]any {
	ref := map[string]any{"span_id": span}
	if parent != "" {
		ref["parent_span_id"] = parent
	}
	return map[string]any{"otel": ref}
}

func with(d map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		d[kv[i].(string)] = kv[i+1]
	}
	return d
}

// TestNestedStepsCountOnce is the case: an agent span of 3.0s with
// model spans of 1.0s and 0.5s inside, and a sub-agent of another name
// inside it too. The duration is the agent's 3.0s, not the sum; each
// step's own time adds up to it.
func TestNestedStepsCountOnce(t *testing.T) {
	events := renumber([]lctl.Event{
		{Type: "step_start", Agent: "planner", Timestamp: "2026-01-01T00:00:00Z", Data: otel("a", "")},
		{Type: "step_start", Agent: "planner", Timestamp: "2026-01-01T00:00:00.1Z", Data: otel("m1", "a")},
		{Type: "step_end", Agent: "planner", Timestamp: "2026-01-01T00:00:01.1Z", Data: with(otel("m1", "a"), "duration_ms", 1000.0)},
		{Type: "step_start", Agent: "helper", Timestamp: "2026-01-01T00:00:01.2Z", Data: otel("s", "a")},
		{Type: "step_start", Agent: "helper", Timestamp: "2026-01-01T00:00:01.3Z", Data: otel("m2", "s")},
		{Type: "step_end", Agent: "helper", Timestamp: "2026-01-01T00:00:01.8Z", Data: with(otel("m2", "s"), "duration_ms", 500.0)},
		{Type: "step_end", Agent: "helper", Timestamp: "2026-01-01T00:00:02Z", Data: with(otel("s", "a"), "duration_ms", 800.0)},
		{Type: "step_end", Agent: "planner", Timestamp: "2026-01-01T00:00:03Z", Data: with(otel("a", ""), "duration_ms", 3000.0)},
	})
	st := analysis.ComputeStats("c", events, nil)
	if st.DurationMS != 3000 || st.WallClockMS != 3000 {
		t.Fatalf("duration %v wall clock %v", st.DurationMS, st.WallClockMS)
	}
	r := analysis.Bottlenecks("c", events, 10)
	if r.TotalMS != 3000 || len(r.Steps) != 4 {
		t.Fatalf("total %v steps %+v", r.TotalMS, r.Steps)
	}
	self := map[uint64]float64{}
	var sum, shares float64
	for _, s := range r.Steps {
		self[s.StartSeq] = s.SelfMS
		sum += s.SelfMS
		shares += s.Share
	}
	// planner: 3000 - 1000 - 800; helper: 800 - 500.
	if self[1] != 1200 || self[2] != 1000 || self[4] != 300 || self[5] != 500 || sum != 3000 || math.Abs(shares-1) > 1e-9 {
		t.Fatalf("own times %v (sum %v, shares %v)", self, sum, shares)
	}
	parent := map[uint64]uint64{}
	for _, s := range r.Steps {
		parent[s.StartSeq] = s.ParentSeq
	}
	if r.Steps[0].StartSeq != 1 || r.Steps[0].DurationMS != 3000 || parent[1] != 0 || parent[2] != 1 || parent[4] != 1 || parent[5] != 4 {
		t.Fatalf("steps %+v", r.Steps)
	}
	for _, a := range r.ByAgent {
		if (a.Agent == "planner" && a.DurationMS != 2200) || (a.Agent == "helper" && a.DurationMS != 800) {
			t.Fatalf("by agent %+v", r.ByAgent)
		}
	}
}

// TestSameAgentNestingWithoutSpans: steps of one agent without span ids
// nest as a stack; XCT's numbered steps never do.
func TestSameAgentNestingWithoutSpans(t *testing.T) {
	events := renumber([]lctl.Event{
		{Type: "step_start", Agent: "a"},
		{Type: "step_start", Agent: "a"},
		{Type: "step_end", Agent: "a", Data: map[string]any{"duration_ms": 400.0}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"duration_ms": 1000.0}},
		{Type: "step_start", Agent: "a", Data: map[string]any{"step": 1.0}},
		{Type: "step_start", Agent: "a", Data: map[string]any{"step": 2.0}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"step": 2.0, "duration_ms": 50.0}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"step": 1.0, "duration_ms": 70.0}},
	})
	if st := analysis.ComputeStats("c", events, nil); st.DurationMS != 1000+50+70 {
		t.Fatalf("duration %v", st.DurationMS)
	}
}

// TestStreamsCountTokensAndTime: a stream outside any step adds its tokens
// (total_tokens, else its chunks') and its time; one inside a step that
// reports tokens adds neither twice.
func TestStreamsCountTokensAndTime(t *testing.T) {
	events := renumber([]lctl.Event{
		{Type: "stream_start", Agent: "w"},
		{Type: "stream_chunk", Agent: "w", Data: map[string]any{"tokens": 5.0}},
		{Type: "stream_chunk", Agent: "w", Data: map[string]any{"tokens": 4.0}},
		{Type: "stream_end", Agent: "w", Data: map[string]any{"duration_ms": 900.0}},
		{Type: "step_start", Agent: "w"},
		{Type: "stream_start", Agent: "w"},
		{Type: "stream_end", Agent: "w", Data: map[string]any{"duration_ms": 300.0, "total_tokens": 20.0}},
		{Type: "step_end", Agent: "w", Data: map[string]any{"duration_ms": 500.0, "tokens": map[string]any{"input": 10.0, "output": 20.0}}},
		{Type: "step_start", Agent: "v"},
		{Type: "stream_start", Agent: "v"},
		{Type: "stream_end", Agent: "v", Data: map[string]any{"duration_ms": 100.0, "total_tokens": 7.0}},
		{Type: "step_end", Agent: "v", Data: map[string]any{"duration_ms": 200.0}},
	})
	st := analysis.ComputeStats("c", events, nil)
	if st.Streams != 3 || st.StreamTokens != 9+20+7 || st.StreamMS != 1300 {
		t.Fatalf("streams %d tokens %d ms %v", st.Streams, st.StreamTokens, st.StreamMS)
	}
	// 20 output tokens from w's step (its stream's are in them), 9 + 7
	// from the streams no step reported.
	if st.Tokens.Input != 10 || st.Tokens.Output != 20+9+7 || st.TotalTokens != 46 {
		t.Fatalf("tokens %+v total %d", st.Tokens, st.TotalTokens)
	}
	if st.DurationMS != 900+500+200 {
		t.Fatalf("duration %v", st.DurationMS)
	}
}

func TestLineOfSignedCheckpoint(t *testing.T) {
	e := lctl.Event{Seq: 38, Type: "signed_checkpoint", Agent: "orchestrator", Data: map[string]any{"seq": 37.0, "key": "xct-dev", "note": "…", "head_hash": "ab"}}
	if got, want := analysis.Line(&e), "[38] orchestrator: signed_checkpoint (signs seq 1 to 37, key xct-dev)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}
