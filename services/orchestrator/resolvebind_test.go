package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/validator"
)

// withPolicyAt is withPolicy with the validator reading its clock skewed
// by skew from this process's (verdict times, approval expiry).
func (f *fixture) withPolicyAt(policy string, skew time.Duration) *validator.Service {
	f.t.Helper()
	file := filepath.Join(f.t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	va, err := validator.New(validator.Config{Signer: f.signer, PolicyFile: file}, connect(f.t, f.ns), testLogger(),
		validator.WithClock(func() time.Time { return time.Now().Add(skew) }))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := va.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = va.Stop(context.Background()) })
	f.valAddr = serveGRPC(f.t, f.creds, "validator-policy", func(s *grpcx.Server) { va.Register(s.GRPC) })
	return va
}

// executorAs is the fixture's executor over gRPC as principal.
func (f *fixture) executorAs(principal string) xctv1.ExecutorServiceClient {
	f.t.Helper()
	return xctv1.NewExecutorServiceClient(f.creds.Dial(f.t, f.execAddr, principal))
}

// Session 15 (resolve15), issue 11: a resolution settles a step the chain
// shows in doubt, and nothing else. attack14b closed an operator's forged
// outcome of a step waiting for its approval by comparing the resolution's
// time (the executor's clock) with the issue time of the verdict that
// later allowed the step (the validator's clock). With the validator's
// clock minutes behind the executor's, carol's result still stood for the
// write bob approved: the file unchanged, the run done with her result.
// Now ResolveStep is refused unless the run's chain shows the step in
// doubt, whatever the clocks say, and the approved write runs.
func TestResolutionOfAStepWaitingForApprovalIsRefusedWhateverTheClocks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		skew time.Duration // the validator's clock minus the executor's
	}{
		{"validator behind by three minutes", -3 * time.Minute},
		// A verdict issued more than verdict.ClockSkew (a minute) ahead of
		// the executor's clock is not acted on at all.
		{"validator ahead by fifty seconds", 50 * time.Second},
		{"same clock", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, newGatedModel(writeFile("two\n")))
			if err := os.WriteFile(filepath.Join(f.ws, "notes.txt"), []byte("one\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			pv := f.withPolicyAt(rollbackWaitsPolicy, tc.skew) // carol's writes wait for a human
			a, _ := f.orchestrator("orch-a", time.Minute)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			resp, err := a.StartRun(as(ctx, "carol", auth.RoleOperator), &xctv1.StartRunRequest{Goal: "write", Model: "func:tester", Principal: "carol"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			events := f.waitFor(id, "approval_requested", func(e lctl.Event) bool { return e.Type == TypeApprovalRequested })
			stepID := str(events[len(events)-1].Data, "step_id")
			forged, err := structpb.NewValue(map[string]any{"forged": "by carol"})
			if err != nil {
				t.Fatal(err)
			}
			exe := f.executorAs("carol")
			req := &xctv1.ResolveStepRequest{StepId: stepID, Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, Reason: "done already", Result: forged}
			if _, err := exe.ResolveStep(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "in_doubt_seq") {
				t.Errorf("carol's resolution naming no doubt: %v; want INVALID_ARGUMENT asking for in_doubt_seq", err)
			}
			// Naming an event of the chain (the approval's request) as the
			// doubt it settles.
			req.RunId, req.InDoubtSeq = id, events[len(events)-1].Seq
			if _, err := exe.ResolveStep(ctx, req); status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "waiting for its approval") {
				t.Errorf("carol's resolution of a step waiting for its approval: %v; want FAILED_PRECONDITION saying the chain shows it waiting", err)
			}
			if _, err := pv.DecideApproval(as(ctx, "bob", auth.RoleApprover), &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "fine"}); err != nil {
				t.Fatal(err)
			}
			events = f.waitEnd(id)
			for _, e := range only(events, lctl.TypeToolCall) {
				if strings.Contains(describe([]lctl.Event{e}), "forged") {
					t.Errorf("the run took carol's result for the approved write:\n%s", describe(events))
				}
			}
			if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "two\n" {
				t.Errorf("notes.txt after bob approved: %q (%v), want the write done", got, err)
			}
		})
	}
}

// Session 15 (resolve15), issue 12: a resolution holds for the doubt it
// settled, not for a later attempt of the same step. charge's first
// attempt was in doubt (its executor killed mid-call), carol released it
// for a retry; the second attempt was in doubt too (its executor killed
// as well). On main carol's "retry", sent again (a replay of the very
// request, or the same command run twice), was taken for the second
// attempt, and a third executor charged a third time. Now the request
// names the step_in_doubt it settles, the second attempt's doubt is a
// new step_in_doubt on the chain, and the replay is refused.
func TestResolutionReplayedForARetriedAttemptIsRefused(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, 300*time.Millisecond)
	gate1 := f.charge.gate(1)
	a, _ := f.orch("orch-a", retryModel{newGatedModel()})
	id := f.startWith(a)
	entered(t, f.charge.entered)
	f.proxy.Cut() // the first executor "dies" mid-call: nothing it does is recorded
	f.es.kill()
	close(gate1)

	// A second executor, on the same address, itself to die mid-call.
	charge2 := newCountTool("test.charge", xctv1.Effect_EFFECT_REVERSIBLE)
	charge2.timeout, charge2.commit = 300*time.Millisecond, true
	gate2 := charge2.gate(1)
	proxy2 := testutil.NewProxy(t, strings.TrimPrefix(f.ns.ClientURL(), "nats://"))
	ex2 := f.executorOn(t, "nats://"+proxy2.Addr(), charge2)
	f.es.ex = ex2
	f.es.start()
	events := f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
	stepID := str(only(events, TypeStepInDoubt)[0].Data, "step_id")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitRecord(t, ex2, stepID, 1)
	exe := f.executorAs("carol")
	doubt1 := only(events, TypeStepInDoubt)[0].Seq
	if got := f.inDoubtSeq(a, id, 1); got != doubt1 {
		t.Fatalf("GetRun shows step 1 in doubt at event %d, want %d", got, doubt1)
	}
	retry := &xctv1.ResolveStepRequest{StepId: stepID, Decision: xctv1.StepDecision_STEP_DECISION_RETRY, Reason: "not in the ledger",
		RunId: id, InDoubtSeq: doubt1}
	if _, err := exe.ResolveStep(ctx, retry); err != nil {
		t.Fatal(err)
	}
	entered(t, charge2.entered)
	proxy2.Cut()
	f.es.kill()
	close(gate2)

	charge3 := newCountTool("test.charge", xctv1.Effect_EFFECT_REVERSIBLE)
	ex3 := f.executorOn(t, f.ns.ClientURL(), charge3)
	f.es.ex = ex3
	f.es.start()
	waitRecord(t, ex3, stepID, 2)
	// The second attempt's doubt is a step_in_doubt of its own, after the
	// verdict that let the attempt start.
	events = f.waitFor(id, "the second step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt && e.Seq > doubt1 })
	doubt2 := events[len(events)-1].Seq
	exe = f.executorAs("carol") // the first connection saw its executor die
	if _, err := exe.ResolveStep(ctx, retry); status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "later attempt") {
		t.Fatalf("carol's retry of the first attempt, sent again for the second: %v; want FAILED_PRECONDITION naming the later attempt", err)
	}
	if got := f.inDoubtSeq(a, id, 1); got != doubt2 {
		t.Fatalf("GetRun shows step 1 in doubt at event %d, want %d", got, doubt2)
	}
	if _, err := exe.ResolveStep(ctx, &xctv1.ResolveStepRequest{StepId: stepID, Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		Reason: "charged, seen in the ledger", RunId: id, InDoubtSeq: doubt2}); err != nil {
		t.Fatal(err)
	}
	events = f.waitEnd(id)
	if last := events[len(events)-1]; last.Data["status"] != "done" {
		t.Fatalf("run:\n%s", describe(events))
	}
	if n1, n2, n3 := f.charge.count(1), charge2.count(1), charge3.count(1); n1 != 1 || n2 != 1 || n3 != 0 {
		t.Fatalf("charges by the three executors: %d, %d, %d; want 1, 1, 0", n1, n2, n3)
	}
}

// inDoubtSeq is GetRun's in_doubt_seq of step n of run id.
func (f *fixture) inDoubtSeq(s *Service, id string, n int32) uint64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		f.t.Fatal(err)
	}
	var seq uint64
	for _, st := range resp.GetRun().GetSteps() {
		if st.GetNumber() == n {
			seq = st.GetInDoubtSeq()
		}
	}
	return seq
}

// executorOn starts another executor for the outcome fixture with tool,
// its records on the NATS server at url (a proxy the test may cut).
func (f *outcomeFixture) executorOn(t *testing.T, url string, tool *countTool) *executor.Service {
	t.Helper()
	return f.executorWith(t, url, tool)
}

// waitRecord waits until ex reads the step's record in doubt at attempt.
func waitRecord(t *testing.T, ex *executor.Service, stepID string, attempt int32) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec, doubt, err := ex.Step(ctx, stepID)
		if err != nil || !doubt || rec.GetAttempt() != attempt {
			return fmt.Errorf("record %v (in doubt %v), want attempt %d in doubt: %w", rec.GetState(), doubt, attempt, err)
		}
		return nil
	})
}
