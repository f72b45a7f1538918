package orchestrator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/wire"
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

// failingModel proposes one count step, then fails its next call after
// the endpoint read the prompt (7 input tokens used, no answer).
type failingModel struct{ calls atomic.Int32 }

func (m *failingModel) Name() string { return "tester" }
func (m *failingModel) Close() error { return nil }
func (m *failingModel) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if m.calls.Add(1) == 1 {
		return &xctv1.ProposeResponse{Output: step("test.count", 1), Model: "tester", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
	}
	return nil, &ModelError{Model: "tester", Code: wire.CodeGenerationFailed, Status: 502, Msg: "upstream gone mid-answer", Usage: &xctv1.Usage{InputTokens: 7}}
}

// tokens15 left it (session 16, chaos16): a model call that failed after
// using tokens ends the run with an error event outside a step, then
// run_finished with the run's totals. A takeover between the two (the
// owner stopped, or lost NATS, after the error) left the next owner only
// the chain, where the failed call's tokens were nowhere: its run_finished
// counted 5 of the 12. The error now carries the call's tokens, and the
// fold counts them.
func TestATakeoverAfterAFailedModelCallKeepsItsTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel())
	a, _ := f.launch(Config{RunLease: time.Minute, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute}, &failingModel{})
	id := f.start(a)
	events := f.waitEnd(id)
	if end := events[len(events)-1]; num(end.Data["tokens"].(map[string]any), "input") != 12 {
		t.Fatalf("the owner's run_finished counts %v; want 12 input tokens:\n%s", end.Data["tokens"], describe(events))
	}
	// What the next owner would read had the owner stopped before its
	// run_finished: the chain without it.
	rs := foldResume(id, events[:len(events)-1])
	if rs.endMessage == "" || rs.tokensIn != 12 || rs.tokensOut != 1 {
		t.Fatalf("resumed after the model's error: end %q, tokens %d in, %d out; want the run ended with 12 in, 1 out:\n%s",
			rs.endMessage, rs.tokensIn, rs.tokensOut, describe(events))
	}
}

const soloCrew = `crew: solo
agents:
  - name: counter
    profile: {type: analyzer, capabilities: [pattern_detection], model: "func:tester", reliability_score: 0.9}
    tools: [test.count]
handoffs: {entry: counter, max_depth: 1, cycles: forbid}
`

// The same for a crew run whose model failed with no model to fall back
// on: the error ending the run carries what the failed call used.
func TestATakeoverAfterACrewsFailedModelCallKeepsItsTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel())
	a, _ := f.launch(Config{RunLease: time.Minute, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute}, &failingModel{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "count", Crew: []byte(soloCrew), CrewFile: "solo.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	events := f.waitEnd(id)
	if end := events[len(events)-1]; num(end.Data["tokens"].(map[string]any), "input") != 12 {
		t.Fatalf("the owner's run_finished counts %v; want 12 input tokens:\n%s", end.Data["tokens"], describe(events))
	}
	rs := foldResume(id, events[:len(events)-1])
	if rs.endMessage == "" || rs.tokensIn != 12 {
		t.Fatalf("resumed after the crew's last model failed: end %q, %d input tokens; want the run ended with 12:\n%s", rs.endMessage, rs.tokensIn, describe(events))
	}
}
