package debugger_test

import (
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/debugger"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// A step_in_doubt shows its step as in doubt until the step's outcome
// follows (after xct resolve).
func TestFlowStepInDoubt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	chain := func(settled bool) []lctl.Event {
		evs := []xctevent.Event{
			xctevent.RunStarted{RunID: "run-d", Goal: "g", Model: "m", Principal: "alice"},
			xctevent.StepStart{Step: 1, StepID: "s1", Tool: "shell.run", Arguments: map[string]any{}, Intent: "run it"},
			xctevent.Verdict{Step: 1, StepID: "s1", Tool: "shell.run", Decision: xctevent.DecisionAllow, PolicyVersion: "p1"},
			xctevent.StepInDoubt{Step: 1, StepID: "s1", Tool: "shell.run", Reason: "the executor did not answer", RecordState: "pending"},
		}
		if settled {
			evs = append(evs, xctevent.ToolCall{Step: 1, StepID: "s1", Tool: "shell.run", Output: "ok", Status: xctevent.ToolCallSuccess})
		}
		out := make([]lctl.Event, 0, len(evs))
		for i, e := range evs {
			data, err := lctl.DataOf(e.Data())
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, lctl.Event{ChainID: "run-d", Seq: uint64(i + 1), Type: e.Type(), Agent: "orchestrator",
				Timestamp: lctl.FormatTime(t0.Add(time.Duration(i) * time.Second)), Data: data})
		}
		return out
	}
	for _, c := range []struct {
		settled bool
		want    string
	}{{false, "in_doubt"}, {true, "pending"}} { // settled: its step_end is still to come
		dir := t.TempDir()
		srv, _ := serve(t, debugger.Options{Title: "test"}, writeChain(t, dir, "run-d.lctl.json", "run-d", chain(c.settled)))
		var f debugger.FlowPage
		get(t, srv.URL+"/api/chains/run-d/flow").json(t, &f)
		if len(f.Nodes) != 2 {
			t.Fatalf("settled=%v: %d nodes: %+v", c.settled, len(f.Nodes), f.Nodes)
		}
		step := f.Nodes[1]
		if step.Status != c.want {
			t.Errorf("settled=%v: step status %q, want %q", c.settled, step.Status, c.want)
		}
		found := false
		for _, a := range step.Attached {
			if a.Type == xctevent.TypeStepInDoubt {
				found = true
				if a.Status != "in_doubt" || a.Label != "in doubt: the executor did not answer" {
					t.Errorf("attachment %+v", a)
				}
			}
		}
		if !found {
			t.Errorf("settled=%v: step_in_doubt not attached: %+v", c.settled, step.Attached)
		}
	}
}
