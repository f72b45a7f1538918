package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// A run taken over while a step waits for its approval: the model call
// that proposed the step (5 input, 1 output tokens) was counted in memory
// at A only; the step_start on the chain carried no tokens, and B's
// step_end for the resumed step recorded none, so the run's tokens, and
// what the validator's budgets see from then on, lacked that call.
// Session 15 (attack15b found it; tokens15): the step_start carries the
// call's tokens, and a resumed run counts them for the step left open.
func TestTakeoverKeepsTheStepsTokens(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.deploy", 1))
	f := newFixture(t, model)
	a, _ := f.orchestrator("orch-a", time.Minute)
	id := f.start(a)
	f.waitFor(id, "approval_requested", func(e lctl.Event) bool { return e.Type == TypeApprovalRequested })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.waitFor(id, "run_released", func(e lctl.Event) bool { return e.Type == TypeRunReleased })
	_, _ = f.orchestrator("orch-b", time.Minute)
	f.waitFor(id, "run_resumed", func(e lctl.Event) bool { return e.Type == TypeRunResumed })
	if _, err := f.val.DecideApproval(as(ctx, "bob", auth.RoleApprover), &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	events := f.waitEnd(id)
	model.mu.Lock()
	calls := 0
	for _, n := range model.calls {
		calls += n
	}
	model.mu.Unlock()
	end := events[len(events)-1]
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type == lctl.TypeRunFinished {
			end = events[i]
			break
		}
	}
	tokens, _ := end.Data["tokens"].(map[string]any)
	if in, _ := tokens["input"].(float64); int(in) != 5*calls {
		t.Fatalf("%d model calls of 5 input tokens each; run_finished counts %v", calls, tokens)
	}
}
