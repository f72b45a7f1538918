package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/validator"
)

// Session 17 (faults17), issue 12, attack16b's leftover: a policy reload
// makes the executor refuse every allow in flight that was signed under
// the replaced policy (FAILED_PRECONDITION, "replaced", the tool not
// run). Honest, but a needless failure when the new policy allows the
// step too: on main the step ended "not executed" (in doubt, then
// fenced) and the model was told so. Now the orchestrator asks the
// validator once more when the executor says the verdict's policy was
// replaced: the new policy decides, the chain shows both verdicts, and
// the step acts at most once (a refusal is fenced first).
func TestPolicyReloadMidStepIsJudgedAgain(t *testing.T) {
	t.Parallel()
	const first = "rules:\n  - {id: all, effect: allow, effects: [read, reversible, irreversible]}\n"
	for _, tc := range []struct {
		name, second string
		acts         bool
	}{
		// The reload forbids counting (the probe sees it in force) and
		// still allows the deploy: judged again, the deploy acts once.
		{"still-allowed", "rules:\n  - {id: deploys, effect: allow, tools: [test.deploy]}\n  - {id: no-count, effect: deny, tools: [test.count]}\n", true},
		// The reload forbids both: judged again, the deploy is denied and
		// does not act; the step ends with the new policy's refusal.
		{"now-denied", "rules:\n  - {id: none, effect: deny, tools: [test.deploy, test.count]}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, newGatedModel(step("test.deploy", 1)))
			policy, valAddr := f.reloadingValidator(first)
			relay := newAnswerHeldValidator(t, f, valAddr, 1) // the step's first verdict is held on its way back
			f.valAddr = relay.addr
			a, _ := f.orchestrator("orch-a", time.Minute)
			id := f.start(a)

			entered(t, relay.entered) // step 1's allow is signed under the first policy
			if err := os.WriteFile(policy, []byte(tc.second), 0o600); err != nil {
				t.Fatal(err)
			}
			probeUntilDenied(t, f, valAddr) // the second policy is in force, its epoch written
			relay.letGo()

			events := f.waitEnd(id)
			if err := lctl.Verify(events); err != nil {
				t.Fatalf("chain: %v", err)
			}
			var verdicts []string
			for _, v := range only(events, lctl.TypeVerdict) {
				if num(v.Data, "step") == 1 {
					verdicts = append(verdicts, str(v.Data, "decision"))
				}
			}
			acted := f.deploy.count(1)
			if tc.acts {
				if acted != 1 || len(only(events, lctl.TypeToolCall)) != 1 || len(only(events, lctl.TypeError)) != 0 {
					t.Fatalf("a step in flight through a reload that still allows it: acted %d time(s); want judged again and acted once:\n%s",
						acted, describe(events))
				}
				if strings.Join(verdicts, ",") != "allow,allow" {
					t.Fatalf("step 1's verdicts %v; want the first policy's allow and the second's:\n%s", verdicts, describe(events))
				}
			} else {
				errs := only(events, lctl.TypeError)
				if acted != 0 || len(errs) != 1 || str(errs[0].Data, "code") != string(wire.CodePolicyDenied) {
					t.Fatalf("a step in flight through a reload that denies it: acted %d time(s); want not acted, its error the new policy's deny:\n%s",
						acted, describe(events))
				}
				if strings.Join(verdicts, ",") != "allow,deny" {
					t.Fatalf("step 1's verdicts %v; want the first policy's allow and the second's deny:\n%s", verdicts, describe(events))
				}
			}
			if last := events[len(events)-1]; last.Data["status"] != "done" {
				t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
			}
			// The executor's record agrees: acted, or fenced as not executed.
			rec, _, err := f.exec.Step(context.Background(), str(only(events, lctl.TypeStepStart)[0].Data, "step_id"))
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.acts && rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED,
				!tc.acts && !recordNotExecuted(rec):
				t.Fatalf("record %v", rec)
			}
		})
	}
}

// reloadingValidator serves a validator for the fixture (its key) whose
// policy file (returned) is read again every 20 ms, with policy first;
// the orchestrators launched after call it unless a test relays them.
func (f *fixture) reloadingValidator(policy string) (file, addr string) {
	f.t.Helper()
	file, addr, _ = f.reloadingValidatorService(policy)
	return file, addr
}

// reloadingValidatorService is reloadingValidator with the validator
// itself (to decide approvals as a human would).
func (f *fixture) reloadingValidatorService(policy string) (file, addr string, va *validator.Service) {
	f.t.Helper()
	file = filepath.Join(f.t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	va, err := validator.New(validator.Config{Signer: f.signer, PolicyFile: file, PolicyReload: 20 * time.Millisecond}, connect(f.t, f.ns), testLogger())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := va.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = va.Stop(context.Background()) })
	f.valAddr = serveGRPC(f.t, f.creds, "validator-reload", func(s *grpcx.Server) { va.Register(s.GRPC) })
	return file, f.valAddr, va
}

// probeUntilDenied asks the validator at addr to judge a count step of
// another run until it denies it: the reloaded policy is in force (and
// its epoch written: a validator answers under a new policy only then).
func probeUntilDenied(t *testing.T, f *fixture, addr string) {
	t.Helper()
	val := xctv1.NewValidatorServiceClient(f.creds.Dial(t, addr, grpcxtest.Service))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := map[string]any{"n": 1.0}
	pargs, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; ; n++ {
		runID := fmt.Sprintf("probe-%d", n)
		resp, err := val.Validate(ctx, &xctv1.ValidateRequest{
			Run:  &xctv1.RunContext{RunId: runID, Principal: "alice"},
			Step: 1, StepId: wire.StepIDOf(runID, 1, "test.count", args),
			Proposal: &xctv1.NextStep{Tool: "test.count", Arguments: pargs, Goal: "probe"},
		})
		if err == nil && resp.GetVerdict().GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_DENY {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the reloaded policy never came in force (last answer %v, %v)", resp.GetVerdict().GetDecision(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// answerHeldValidator relays Validate to a validator; the n-th call's
// answer is held (the verdict already signed) until letGo.
type answerHeldValidator struct {
	xctv1.UnimplementedValidatorServiceServer
	to      xctv1.ValidatorServiceClient
	addr    string
	n       int32
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
	once    atomic.Bool
}

func newAnswerHeldValidator(t *testing.T, f *fixture, to string, n int32) *answerHeldValidator {
	t.Helper()
	h := &answerHeldValidator{to: xctv1.NewValidatorServiceClient(f.creds.Dial(t, to, grpcxtest.Service)), n: n,
		entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.letGo)
	h.addr = serveGRPC(t, f.creds, "validator-relay", func(s *grpcx.Server) { xctv1.RegisterValidatorServiceServer(s.GRPC, h) })
	return h
}

func (h *answerHeldValidator) letGo() {
	if h.once.CompareAndSwap(false, true) {
		close(h.release)
	}
}

func (h *answerHeldValidator) Validate(ctx context.Context, req *xctv1.ValidateRequest) (*xctv1.ValidateResponse, error) {
	resp, err := h.to.Validate(ctx, req)
	if h.calls.Add(1) == h.n {
		close(h.entered)
		<-h.release
	}
	return resp, err
}

// RequestApproval, ListApprovals and WithdrawApproval are relayed as
// they are.
func (h *answerHeldValidator) RequestApproval(ctx context.Context, req *xctv1.RequestApprovalRequest) (*xctv1.RequestApprovalResponse, error) {
	return h.to.RequestApproval(ctx, req)
}

func (h *answerHeldValidator) ListApprovals(ctx context.Context, req *xctv1.ListApprovalsRequest) (*xctv1.ListApprovalsResponse, error) {
	return h.to.ListApprovals(ctx, req)
}

func (h *answerHeldValidator) WithdrawApproval(ctx context.Context, req *xctv1.WithdrawApprovalRequest) (*xctv1.WithdrawApprovalResponse, error) {
	return h.to.WithdrawApproval(ctx, req)
}

// A rollback's undo in flight through a reload is judged again as what
// it is, a system step (validateSystem): the undo runs once under the
// policy in force. (On main the executor's refusal left the undo not
// done; judged again as a model's proposal it would be denied.)
func TestPolicyReloadMidUndoIsJudgedAgainAsAnUndo(t *testing.T) {
	t.Parallel()
	const first = "rules:\n  - {id: all, effect: allow, effects: [read, reversible, irreversible]}\n"
	f := newFixture(t, newGatedModel(writeFile("one\n")))
	policy, valAddr := f.reloadingValidator(first)
	b, _ := f.orchestrator("orch-b", time.Minute)
	id := f.startDone(b)
	relay := newAnswerHeldValidator(t, f, valAddr, 1) // the undo's verdict is held on its way back
	f.valAddr = relay.addr
	a, _ := f.orchestrator("orch-a", time.Minute)

	ctx, cancel := context.WithTimeout(as(context.Background(), "oscar", auth.RoleOperator), time.Minute)
	defer cancel()
	type result struct {
		resp *xctv1.RollbackRunResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := a.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id, ToStep: 0, Principal: "oscar"})
		done <- result{resp, err}
	}()
	entered(t, relay.entered)
	if err := os.WriteFile(policy, []byte(first+"  - {id: no-count, effect: deny, tools: [test.count]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	probeUntilDenied(t, f, valAddr)
	relay.letGo()
	res := <-done
	events := f.waitFor(id, "rollback_finished", func(e lctl.Event) bool { return e.Type == TypeRollbackFinished })
	if res.err != nil || res.resp.GetStatus() != "done" || fmt.Sprint(res.resp.GetUndone()) != "[1]" {
		t.Fatalf("rollback through a reload: %v %v; want step 1 undone:\n%s", res.resp, res.err, describe(events))
	}
	var undoVerdicts []string
	for _, v := range only(events, lctl.TypeVerdict) {
		if str(v.Data, "tool") == undoTool {
			undoVerdicts = append(undoVerdicts, str(v.Data, "decision"))
		}
	}
	if strings.Join(undoVerdicts, ",") != "allow,allow" {
		t.Fatalf("the undo's verdicts %v; want the first policy's allow and the second's:\n%s", undoVerdicts, describe(events))
	}
	if _, err := os.Stat(filepath.Join(f.ws, "notes.txt")); !os.IsNotExist(err) {
		t.Fatalf("notes.txt after the rollback: %v; want it gone (the write undone)", err)
	}
}

// Session 18 (faults18), issue 12, faults17's leftover: a step whose
// verdict the executor refused because a reload replaced its policy is
// judged again (rejudge); when the new policy wants a human, the step
// ended APPROVAL_REQUIRED, not executed (fenced), and the model was told
// to ask again, instead of waiting for the approval as any step the
// policy sends to a human. Now it waits: approval_requested, the
// approver decides, the verdict after the decision allows (the step acts
// once, with the same step id) or refuses it (not acted, fenced). The
// rejudged verdict is marked (rejudged: true): the allow before it did
// not act, so a takeover during the wait waits for the same approval
// (here: the owner stops while the step waits, another takes over).
func TestPolicyReloadMidStepThatWantsAHumanWaitsForTheApproval(t *testing.T) {
	t.Parallel()
	const first = "rules:\n  - {id: all, effect: allow, effects: [read, reversible, irreversible]}\n"
	const second = "rules:\n  - {id: deploys-human, effect: require_approval, tools: [test.deploy]}\n  - {id: no-count, effect: deny, tools: [test.count]}\n"
	for _, tc := range []struct {
		name     string
		approve  bool
		takeover bool
	}{
		{"approved after a takeover", true, true},
		{"denied", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, newGatedModel(step("test.deploy", 1)))
			policy, valAddr, va := f.reloadingValidatorService(first)
			relay := newAnswerHeldValidator(t, f, valAddr, 1) // the step's first verdict is held on its way back
			f.valAddr = relay.addr
			a, _ := f.orchestrator("orch-a", time.Minute)
			id := f.start(a)

			entered(t, relay.entered) // step 1's allow is signed under the first policy
			if err := os.WriteFile(policy, []byte(second), 0o600); err != nil {
				t.Fatal(err)
			}
			probeUntilDenied(t, f, valAddr) // the second policy is in force
			relay.letGo()

			events := f.waitFor(id, "approval_requested or run_finished", func(e lctl.Event) bool {
				return e.Type == TypeApprovalRequested || e.Type == lctl.TypeRunFinished
			})
			if last := events[len(events)-1]; last.Type != TypeApprovalRequested {
				t.Fatalf("a step the reloaded policy sends to a human did not wait for one:\n%s", describe(events))
			}
			if n := f.deploy.count(1); n != 0 {
				t.Fatalf("the deploy acted %d time(s) before its approval", n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if tc.takeover {
				if err := a.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				f.waitFor(id, "run_released", func(e lctl.Event) bool { return e.Type == TypeRunReleased })
				b, _ := f.orchestrator("orch-b", time.Minute)
				f.waitFor(id, "run_resumed", func(e lctl.Event) bool { return e.Type == TypeRunResumed })
				testutil.Eventually(t, 30*time.Second, func() error {
					got, err := b.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
					if err != nil {
						return err
					}
					if st := got.GetRun().GetStatus(); st != xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL {
						return fmt.Errorf("run %v after the takeover; want it waiting for the approval", st)
					}
					return nil
				})
			}
			if _, err := va.DecideApproval(as(ctx, "bob", auth.RoleApprover), &xctv1.DecideApprovalRequest{
				RunId: id, Step: "1", Approve: tc.approve, Approver: "bob", Reason: "decided"}); err != nil {
				t.Fatal(err)
			}
			events = f.waitEnd(id)
			if err := lctl.Verify(events); err != nil {
				t.Fatalf("chain: %v", err)
			}
			var verdicts []string
			for _, v := range only(events, lctl.TypeVerdict) {
				d := str(v.Data, "decision")
				if rejudged, _ := v.Data["rejudged"].(bool); rejudged {
					d += "(rejudged)"
				}
				verdicts = append(verdicts, d)
			}
			rec, _, err := f.exec.Step(context.Background(), str(only(events, lctl.TypeStepStart)[0].Data, "step_id"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.approve {
				const want = "allow,needs_approval(rejudged),allow"
				if n := f.deploy.count(1); n != 1 || strings.Join(verdicts, ",") != want || len(only(events, lctl.TypeToolCall)) != 1 ||
					rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED {
					t.Fatalf("approved: acted %d time(s), verdicts %v (want %s), record %v:\n%s", n, verdicts, want, rec, describe(events))
				}
			} else {
				errs := only(events, lctl.TypeError)
				if n := f.deploy.count(1); n != 0 || strings.Join(verdicts, ",") != "allow,needs_approval(rejudged),deny" || len(errs) != 1 || !recordNotExecuted(rec) {
					t.Fatalf("denied: acted %d time(s), verdicts %v, record %v; want not acted, fenced:\n%s", n, verdicts, rec, describe(events))
				}
			}
			if last := events[len(events)-1]; last.Data["status"] != "done" {
				t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
			}
		})
	}
}
