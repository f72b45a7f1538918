package analysis

import (
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// XCT's own extension events are described, not shown as unknown types.
func TestLineXCTExtensionTypes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ev   xctevent.Event
		want string
	}{
		{xctevent.ApprovalRequested{Step: 2, StepID: "s", Tool: "fs.write", ExpiresAt: "2030-01-01T00:00:00Z"}, "approval_requested fs.write (step 2 waits for a human, expires 2030-01-01T00:00:00Z)"},
		{xctevent.ApprovalDecided{Step: 2, Decision: xctevent.ApprovalApproved, By: "carol", Reason: "fine"}, "approval_decided approved (by carol, fine, step 2)"},
		{xctevent.StepInDoubt{Step: 3, Tool: "shell.run", Reason: "the executor did not answer"}, "step_in_doubt shell.run (step 3 in doubt, the executor did not answer)"},
		{xctevent.RunReleased{Instance: "orch-a", Reason: "stopping", Step: 4}, "run_released orch-a (released at step 4, stopping)"},
		{xctevent.RunResumed{Instance: "orch-b", PreviousOwner: "orch-a", Reason: "released", Step: 4}, "run_resumed orch-b (resumed at step 4, from orch-a, released)"},
		{xctevent.RollbackStarted{Principal: "carol", ToStep: 1, Steps: []int{3, 2}}, "rollback_started (2 steps to undo, by carol)"},
		{xctevent.RollbackFinished{Status: xctevent.StatusDone, Undone: []int{3, 2}}, "rollback_finished done (2 undone)"},
	}
	for _, c := range cases {
		data, err := lctl.DataOf(c.ev.Data())
		if err != nil {
			t.Fatal(err)
		}
		got := Line(&lctl.Event{Seq: 5, Agent: "orchestrator", Type: c.ev.Type(), Data: data})
		if want := "[5] orchestrator: " + c.want; got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
		if strings.Contains(got, "unknown type") {
			t.Errorf("%s shown as unknown", c.ev.Type())
		}
	}
}

// lctl stats counts XCT's own types and the spec's handoff as known; a
// type no one knows still counts.
func TestStatsXCTTypesAreNotUnknown(t *testing.T) {
	t.Parallel()
	evs := []xctevent.Event{
		xctevent.RunStarted{RunID: "r", Goal: "g", Model: "m", Principal: "p"},
		xctevent.StepStart{Step: 1, StepID: "s1", Tool: "fs.write", Arguments: map[string]any{}},
		xctevent.Verdict{Step: 1, StepID: "s1", Tool: "fs.write", Decision: xctevent.DecisionNeedsApproval},
		xctevent.ApprovalRequested{Step: 1, StepID: "s1", Tool: "fs.write"},
		xctevent.ApprovalDecided{Step: 1, StepID: "s1", Decision: xctevent.ApprovalApproved, By: "carol"},
		xctevent.StepInDoubt{Step: 1, StepID: "s1", Tool: "fs.write"},
		xctevent.RunReleased{Instance: "a", Step: 1},
		xctevent.RunResumed{Instance: "b", Step: 1},
		xctevent.Unknown{EventType: "handoff", Payload: map[string]any{"to": "x"}},
		xctevent.Unknown{EventType: "signed_checkpoint", Payload: map[string]any{"seq": 9}},
		xctevent.Unknown{EventType: "custom_thing", Payload: map[string]any{"to": "x"}},
	}
	var chain []lctl.Event
	for i, e := range evs {
		data, err := lctl.DataOf(e.Data())
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, lctl.Event{ChainID: "r", Seq: uint64(i + 1), Type: e.Type(), Agent: "orchestrator",
			Timestamp: "2026-11-21T12:00:00Z", Data: data})
	}
	if n := ComputeStats("r", chain, nil).UnknownTypes; n != 1 {
		t.Errorf("unknown types = %d, want 1 (custom_thing)", n)
	}
}
