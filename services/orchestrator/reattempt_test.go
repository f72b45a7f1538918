package orchestrator

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
	"github.com/xct-dev/xct/services/executor"
)

// Session 16 (chaos16), issue 12: chaos seed 594700, run r3-82 step 1.
// The executor was killed after the tool's effect, before its outcome
// record (the record stays pending, then in doubt). The run's next owner
// asked the validator for a fresh verdict for a new attempt while the
// validator could not be reached, and recorded that refusal as the step's
// last verdict (rightly: no new attempt started, the step stayed in
// doubt). The owner after that read the step's last verdict, a refusal,
// and ended the step "refused: VALIDATOR_UNAVAILABLE", not executed,
// while the first attempt had acted; the model then proposed the charge
// again. A refusal of a later attempt says nothing about an earlier one:
// the step stays in doubt until its record (or a human) says.
func TestRefusedReattemptAfterATakeoverIsNotNotExecuted(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, 300*time.Millisecond)
	gate := f.charge.gate(1)
	model := retryModel{newGatedModel()}
	a, _ := f.orch("orch-a", model)
	id := f.startWith(a)
	entered(t, f.charge.entered) // the charge acted (committed) and waits
	f.proxy.Cut()                // the executor "dies" before its outcome record
	f.es.kill()
	close(gate)
	ex2 := f.executorOn(t, f.ns.ClientURL(), f.charge) // restarted, on the same address and records
	f.es.ex = ex2
	f.es.start()
	events := f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
	stepID := str(only(events, TypeStepInDoubt)[0].Data, "step_id")

	// B's validator cannot be reached: its fresh verdict is a refusal.
	b := f.orchWithValidator("orch-b", model, deadAddr(t))
	stopOrch(t, a)
	events = f.waitFor(id, "B's step_in_doubt", func(e lctl.Event) bool {
		return e.Type == TypeStepInDoubt && e.Seq > only(events, TypeStepInDoubt)[0].Seq
	})
	if v := only(events, lctl.TypeVerdict); len(v) < 2 || v[len(v)-1].Data["decision"] == "allow" {
		t.Fatalf("want B's refused verdict for a new attempt on the chain:\n%s", describe(events))
	}

	// C, with the validator back, takes the run over from B.
	c, _ := f.orch("orch-c", model)
	stopOrch(t, b)
	resumed := 0 // (waitFor reads the chain from its start)
	events = f.waitFor(id, "C's step_in_doubt or an outcome of step 1", func(e lctl.Event) bool {
		if e.Type == TypeRunResumed {
			resumed++
		}
		return resumed >= 2 && (e.Type == TypeStepInDoubt || e.Type == lctl.TypeError || e.Type == lctl.TypeStepEnd)
	})
	if last := events[len(events)-1]; last.Type != TypeStepInDoubt {
		t.Fatalf("after a refused re-attempt, the next owner ended the step (%s %v) while its first attempt charged; want it in doubt:\n%s",
			last.Type, last.Data, describe(events))
	}
	f.runStatus(c, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ex2.ResolveStep(ctx, stepID, executor.Resolution{Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		ResolvedBy: "carol", Reason: "seen in the ledger", Result: map[string]any{"n": 1.0}, RunID: id}); err != nil {
		t.Fatal(err)
	}
	events = f.waitEnd(id)
	f.agree(id, events)
}

// orchWithValidator is f.orch calling its validator at val.
func (f *outcomeFixture) orchWithValidator(name string, model Proposer, val string) *Service {
	f.t.Helper()
	real := f.valAddr
	defer func() { f.valAddr = real }()
	f.valAddr = val
	s, _ := f.orch(name, model)
	return s
}

// stopOrch stops s gracefully (it hands its runs over).
func stopOrch(t *testing.T, s *Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// A step's last verdict refusing a new attempt after an allowed one does
// not make the step "denied" when a run is taken over: the attempt the
// allow started may have acted. The resumed step acts on the allow (the
// executor's record decides, binding.go), its in-doubt error ends the run
// on resume, and GetRun shows it allowed.
func TestResumeAfterARefusedReattempt(t *testing.T) {
	t.Parallel()
	allow := xctevent.Verdict{Step: 1, StepID: "s1", Decision: xctevent.DecisionAllow}
	deny := xctevent.Verdict{Step: 1, StepID: "s1", Decision: xctevent.DecisionDeny, Code: "VALIDATOR_UNAVAILABLE"}
	start := &xctevent.Step{Start: xctevent.StepStart{Step: 1, StepID: "s1", Tool: "test.charge", Arguments: map[string]any{"n": 1.0}}}
	open := *start
	open.Verdicts = []xctevent.Verdict{allow, deny}
	st := openStepOf("run", &open)
	if st.verdict.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Errorf("resumed step after [allow, deny]: verdict %v; want the allow (an attempt may have acted)", st.verdict.GetDecision())
	}
	if got := stepRecord(&open).GetState(); got != xctv1.StepState_STEP_STATE_ALLOWED {
		t.Errorf("GetRun state of a step allowed, its re-attempt refused: %s; want ALLOWED", got)
	}
	doubtful := open
	doubtful.Error = &xctevent.Error{Step: 1, StepID: "s1", Code: "IN_DOUBT", Message: "may have acted", Details: map[string]any{"outcome_unknown": true}}
	st = openStepOf("run", &doubtful)
	if st.outcome != xctevent.OutcomeError || st.inDoubt == nil {
		t.Errorf("resumed step after [allow, deny] and an in-doubt error: outcome %q, in doubt %v; want error, in doubt", st.outcome, st.inDoubt)
	}
	ended := doubtful
	ended.End = &xctevent.StepEnd{Step: 1, StepID: "s1", Outcome: xctevent.OutcomeError}
	rs := resumeFrom("run", &xctevent.Run{Steps: []*xctevent.Step{&ended}})
	if rs.endMessage == "" {
		t.Errorf("a run whose last step ended in doubt (after a refused re-attempt) resumes proposing; want it ended in doubt")
	}
	budget := deny
	budget.Code, budget.EndsRun = "BUDGET_EXCEEDED", true
	ended.Verdicts = []xctevent.Verdict{allow, budget}
	if rs := resumeFrom("run", &xctevent.Run{Steps: []*xctevent.Step{&ended}}); !strings.Contains(rs.endMessage, "is in doubt") {
		t.Errorf("a step in doubt whose re-attempt a budget refused ends the resumed run with %q; want its doubt", rs.endMessage)
	}
	if got := stepRecord(&ended).GetState(); got != xctv1.StepState_STEP_STATE_FAILED {
		t.Errorf("GetRun state: %s; want FAILED (its error is the executor's)", got)
	}
	approval := *start
	approval.Verdicts = []xctevent.Verdict{allow, {Step: 1, StepID: "s1", Decision: xctevent.DecisionNeedsApproval}}
	if st := openStepOf("run", &approval); st.verdict.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Errorf("resumed step whose re-attempt's verdict asks for a human: %v; want the allow (no approval is waited for an attempt that may have acted)", st.verdict.GetDecision())
	}
	refused := *start
	refused.Verdicts = []xctevent.Verdict{deny}
	if st := openStepOf("run", &refused); st.verdict.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_DENY {
		t.Errorf("a step never allowed: verdict %v; want its refusal", st.verdict.GetDecision())
	}
}

// heldValidator relays ValidatorService's Validate to the real validator
// over gRPC and holds the n-th call until released (the network is slow
// for it). Every call is answered by the real validator.
type heldValidator struct {
	xctv1.UnimplementedValidatorServiceServer
	to xctv1.ValidatorServiceClient

	n       int32
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
	let     sync.Once
}

// letGo releases the held call.
func (h *heldValidator) letGo() { h.let.Do(func() { close(h.release) }) }

func newHeldValidator(t *testing.T, f *fixture, n int32) (*heldValidator, string) {
	t.Helper()
	conn, err := grpcx.Dial(f.valAddr, grpcx.WithToken(f.creds.Token(t, grpcxtest.Service)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h := &heldValidator{to: xctv1.NewValidatorServiceClient(conn), n: n, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.letGo)
	addr := serveGRPC(t, f.creds, "validator-relay", func(s *grpcx.Server) { xctv1.RegisterValidatorServiceServer(s.GRPC, h) })
	return h, addr
}

func (h *heldValidator) Validate(ctx context.Context, req *xctv1.ValidateRequest) (*xctv1.ValidateResponse, error) {
	if h.calls.Add(1) == h.n {
		close(h.entered)
		<-h.release
	}
	return h.to.Validate(ctx, req)
}

// The same hole in one orchestrator: an idempotent step's first attempt
// acted and its executor died before the outcome record, so the record is
// in doubt and the step is re-run once. The re-run's fresh verdict came,
// but its Execute never reached the executor (down again: the call was
// refused before any stream opened), which proves only that the re-run
// did not act. On main that "not executed" became the step's outcome
// (EXECUTOR_UNAVAILABLE, not_executed) while the first attempt had acted.
func TestReRunNotSentIsNotNotExecuted(t *testing.T) {
	t.Parallel()
	put := newCountTool("test.charge", xctv1.Effect_EFFECT_REVERSIBLE)
	put.timeout, put.commit, put.idem = 300*time.Millisecond, true, true
	f := newOutcomeFixtureOf(t, put)
	held, relay := newHeldValidator(t, f.fixture, 2) // the first verdict passes, the re-run's is held
	f.valAddr = relay
	gate := put.gate(1)
	// Settling waits long enough for the record to go in doubt (its
	// deadline passes) with the executor back, not for the run's end.
	a, _ := f.launch(Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute,
		TakeoverTimeout: 2 * time.Second, SettleTimeout: 10 * time.Second, SettlePoll: 200 * time.Millisecond}, retryModel{newGatedModel()})
	id := f.startWith(a)
	entered(t, put.entered) // the first attempt acted (committed) and waits
	f.proxy.Cut()           // its executor "dies" before the outcome record
	f.es.kill()
	close(gate)
	f.es.ex = f.executorOn(t, f.ns.ClientURL(), put) // restarted: the record goes in doubt, the step is re-run
	f.es.start()
	entered(t, held.entered) // the re-run asks for its fresh verdict
	f.es.kill()              // and its executor is down when the re-run is sent
	held.letGo()
	events := f.waitFor(id, "step 1's outcome", func(e lctl.Event) bool {
		return e.Type == lctl.TypeError && num(e.Data, "step") == 1
	})
	e := events[len(events)-1]
	details, _ := e.Data["details"].(map[string]any)
	inDoubt := e.Data["code"] == "IN_DOUBT" || details["outcome_unknown"] == true
	if notExec, _ := details["not_executed"].(bool); notExec || !inDoubt {
		t.Fatalf("the re-run was not sent, and step 1 ended %v while its first attempt acted (%d call(s)); want it in doubt:\n%s",
			e.Data, put.count(1), describe(events))
	}
	if put.count(1) != 1 {
		t.Fatalf("the step acted %d times", put.count(1))
	}
}
