package analysis_test

import (
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// TestStreamBeforeItsStep: XCT's loop streams the model's answer, then
// records the step it proposed, whose duration and tokens include the
// stream's. The stream belongs to that step: 1.5 s and 77 output tokens,
// not 2.5 s and 154. A stream no numbered step follows stays its own.
func TestStreamBeforeItsStep(t *testing.T) {
	t.Parallel()
	events := renumber([]lctl.Event{
		{Type: "stream_start", Agent: "reviewer"},
		{Type: "stream_chunk", Agent: "reviewer", Data: map[string]any{"tokens": 40.0}},
		{Type: "stream_end", Agent: "reviewer", Data: map[string]any{"duration_ms": 1000.0, "total_tokens": 77.0}},
		{Type: "step_start", Agent: "reviewer", Data: map[string]any{"step": 1.0}},
		{Type: "step_end", Agent: "reviewer", Data: map[string]any{"step": 1.0, "duration_ms": 1500.0, "tokens": map[string]any{"input": 300.0, "output": 77.0}}},
		// The model's last answer (done) streams, and no step follows.
		{Type: "stream_start", Agent: "reviewer"},
		{Type: "stream_end", Agent: "reviewer", Data: map[string]any{"duration_ms": 200.0, "total_tokens": 9.0}},
	})
	st := analysis.ComputeStats("c", events, nil)
	if st.DurationMS != 1500+200 || st.Tokens.Output != 77+9 || st.Streams != 2 {
		t.Fatalf("duration %v, output tokens %d, streams %d", st.DurationMS, st.Tokens.Output, st.Streams)
	}
	r := analysis.Bottlenecks("c", events, 10)
	if r.TotalMS != 1500+200 {
		t.Fatalf("bottleneck total %v", r.TotalMS)
	}
	for _, s := range r.Steps {
		if s.Stream && s.StartSeq == 1 && s.ParentSeq != 4 {
			t.Fatalf("the stream before step 1 is not inside it: %+v", s)
		}
		if !s.Stream && s.StartSeq == 4 && s.SelfMS != 500 {
			t.Fatalf("step 1's own time %v, want 500", s.SelfMS)
		}
	}
}
