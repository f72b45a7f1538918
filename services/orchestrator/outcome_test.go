package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
)

// Honest outcomes (issue 12), end to end over real gRPC on loopback and
// real NATS JetStream: faults are injected while a tool call is in flight,
// the model retries whenever it is told a step failed (as a model told
// "retry_later" does), and every test checks that the tool acted once, the
// chain and the executor's record agree, and the model was told that.

// retryModel proposes the same charge until it is told it succeeded (a new
// step each time, so the executor could act again), then finishes.
type retryModel struct{ *gatedModel }

func (m retryModel) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	h := req.GetHistory()
	out := step("test.charge", 1)
	if n := len(h); n > 0 && strings.Contains(h[n-1].GetResponse(), `"status":"success"`) || n >= 4 {
		out = `{"done": true, "message": "deployed"}`
	}
	return &xctv1.ProposeResponse{Output: out, Model: "tester", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

// execServer is the executor's gRPC server at a fixed loopback address,
// which the test can kill (connections cut mid-call) and start again.
type execServer struct {
	t    *testing.T
	addr string
	ex   *executor.Service
	srv  *grpcx.Server
	cr   *grpcxtest.Creds
	hold func() // frees the address a killed server keeps (testutil.HoldPort)
}

func (e *execServer) start() {
	e.t.Helper()
	srv := grpcx.NewServer("executor", testLogger(), e.cr.ServerOptions()...)
	addr := e.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	e.release()
	if err := srv.Listen(addr); err != nil {
		e.t.Fatal(err)
	}
	e.ex.Register(srv.GRPC)
	e.addr, e.srv = srv.Addr(), srv
	go func() { _ = srv.Serve() }()
}

// kill stops the server at once: calls in flight fail as when the process
// dies (the orchestrator sees its stream break).
func (e *execServer) kill() {
	e.srv.GRPC.Stop()
	e.release()
	e.hold = testutil.HoldPort(e.t, e.addr) // until it serves there again
}

// release frees the address a killed server held, just before something
// listens there again.
func (e *execServer) release() {
	if e.hold != nil {
		e.hold()
		e.hold = nil
	}
}

// outcomeFixture extends the takeover fixture: the executor's NATS
// connection goes through a proxy the test can cut, and its gRPC server can
// be killed and restarted.
type outcomeFixture struct {
	*fixture
	charge *countTool // reversible (allowed without approval), not idempotent
	proxy  *testutil.Proxy
	es     *execServer
}

func newOutcomeFixture(t *testing.T, toolTimeout time.Duration) *outcomeFixture {
	t.Helper()
	charge := newCountTool("test.charge", xctv1.Effect_EFFECT_REVERSIBLE)
	charge.timeout, charge.commit = toolTimeout, true
	return newOutcomeFixtureOf(t, charge)
}

// newOutcomeFixtureOf is newOutcomeFixture with its charge tool.
func newOutcomeFixtureOf(t *testing.T, charge *countTool) *outcomeFixture {
	t.Helper()
	f := &outcomeFixture{fixture: newFixture(t, newGatedModel()), charge: charge}
	f.proxy = testutil.NewProxy(t, strings.TrimPrefix(f.ns.ClientURL(), "nats://"))
	ex := f.executorOn(t, "nats://"+f.proxy.Addr(), f.charge) // its records go through the proxy
	f.es = &execServer{t: t, ex: ex, cr: f.creds}
	f.es.start()
	t.Cleanup(func() { f.es.kill() })
	f.execAddr = f.es.addr // orchestrators call this executor
	return f
}

// orch starts an orchestrator with short settle and takeover bounds.
func (f *outcomeFixture) orch(name string, model Proposer) (*Service, *nats.Conn) {
	f.t.Helper()
	return f.launch(Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: name, CallTimeout: time.Minute,
		TakeoverTimeout: 2 * time.Second, SettleTimeout: 500 * time.Millisecond, SettlePoll: 200 * time.Millisecond}, model)
}

// agree checks what every fault must leave: the chain verifies and ends
// done, the deploy acted once, exactly one tool_call for it, no error
// event telling the model it did not run, and the executor's record says
// succeeded with the result the chain holds.
func (f *outcomeFixture) agree(id string, events []lctl.Event) {
	f.t.Helper()
	if err := lctl.Verify(events); err != nil {
		f.t.Fatalf("chain does not verify: %v", err)
	}
	if last := events[len(events)-1]; last.Type != lctl.TypeRunFinished || last.Data["status"] != "done" {
		f.t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
	}
	if n := f.charge.count(1); n != 1 {
		f.t.Fatalf("the deploy acted %d times:\n%s", n, describe(events))
	}
	calls := only(events, lctl.TypeToolCall)
	if len(calls) != 1 || len(only(events, lctl.TypeError)) != 0 {
		f.t.Fatalf("want one tool_call and no error:\n%s", describe(events))
	}
	stepID := str(calls[0].Data, "step_id")
	rec, doubt, err := f.es.ex.Step(context.Background(), stepID)
	if err != nil || doubt || rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED {
		f.t.Fatalf("record of %s: %v (in doubt %v), %v", stepID, rec, doubt, err)
	}
	got := fmt.Sprint(calls[0].Data["output"])
	if want := fmt.Sprint(rec.GetResponse().GetSuccess().GetResult().AsInterface()); got != want {
		f.t.Fatalf("chain output %s, record %s", got, want)
	}
}

// Finding 1: the executor dies while the tool acts (its gRPC server is
// killed: the orchestrator's call fails with Unavailable, "error reading
// from server: EOF"). That used to be recorded as EXECUTOR_UNAVAILABLE
// "not executed", and the retrying model deployed twice. Now the step is in
// doubt until the executor's record is read: the tool's real outcome.
func TestExecutorKilledMidCallIsNotNotExecuted(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, time.Minute)
	gate := f.charge.gate(1)
	a, _ := f.orch("orch-a", retryModel{newGatedModel()})
	id := f.startWith(a)
	entered(t, f.charge.entered)
	f.es.kill()  // mid-call
	f.es.start() // the executor comes back at the same address
	close(gate)  // the tool, which did not die with the server, finishes
	events := f.waitEnd(id)
	f.agree(id, events)
}

// Finding 3, end to end: the tool acts while the executor is cut off NATS,
// so its outcome cannot be recorded. The executor does not claim success;
// the orchestrator waits for the record (the run shows IN_DOUBT, with a
// step_in_doubt event), and once NATS is back the record holds the real
// result, which is what the chain and the model get.
func TestActedButUnrecordedWaitsForTheRecord(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, time.Minute)
	gate := f.charge.gate(1)
	a, _ := f.orch("orch-a", retryModel{newGatedModel()})
	id := f.startWith(a)
	entered(t, f.charge.entered)
	f.proxy.Cut()
	close(gate)
	f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
	f.runStatus(a, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
	f.proxy.Restore()
	events := f.waitEnd(id)
	f.agree(id, events)
}

// Finding 2: the executor ran the step and recorded it; its orchestrator
// could not append tool_call (cut off NATS) and another replica took the
// run over while the executor could not read its own record. The executor
// used to answer "nothing was executed" and the chain recorded that, so the
// model deployed again. Now the new owner waits for the record and records
// its result: one deploy.
func TestTakeoverWhileTheRecordIsUnreadable(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, time.Minute)
	gate := f.charge.gate(1)
	model := retryModel{newGatedModel()}
	a, anc := f.orch("orch-a", model)
	id := f.startWith(a)
	entered(t, f.charge.entered)
	anc.Close() // A loses NATS: it cannot append the outcome
	close(gate)
	testutil.Eventually(t, 30*time.Second, func() error {
		rec, _, err := f.es.ex.Step(context.Background(), stepIDOf(t, f, id))
		if err != nil {
			return err
		}
		if rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED {
			return fmt.Errorf("record %s", rec.GetState())
		}
		return nil
	})
	f.proxy.Cut() // the executor cannot read its record now
	b, _ := f.orch("orch-b", model)
	f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
	f.runStatus(b, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
	f.proxy.Restore()
	events := f.waitEnd(id)
	f.agree(id, events)
	if len(only(events, TypeRunResumed)) != 1 {
		t.Fatalf("want one takeover:\n%s", describe(events))
	}
}

// A step in doubt for good (its executor died after acting, the record is
// pending past its deadline, the tool is not idempotent) is not guessed:
// the run waits, visibly IN_DOUBT, until a human resolves the step, then
// goes on with the human's result; the tool is never run again.
func TestInDoubtWaitsForResolve(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, 300*time.Millisecond)
	gate := f.charge.gate(1)
	a, _ := f.orch("orch-a", retryModel{newGatedModel()})
	id := f.startWith(a)
	entered(t, f.charge.entered)
	f.proxy.Cut() // the executor "dies": nothing it does is recorded any more
	f.es.kill()
	close(gate)
	// Another executor process on the same address and records.
	ex2 := f.executorOn(t, f.ns.ClientURL(), f.charge)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.es.ex = ex2
	f.es.start()
	events := f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
	f.runStatus(a, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
	stepID := str(only(events, TypeStepInDoubt)[0].Data, "step_id")
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, doubt, err := ex2.Step(ctx, stepID); err != nil || !doubt {
			return fmt.Errorf("record not in doubt yet: %w", err)
		}
		return nil
	})
	f.runStatus(a, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT) // still waiting: nothing is guessed
	if _, err := ex2.ResolveStep(ctx, stepID, executor.Resolution{Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		ResolvedBy: "carol", Reason: "seen in the ledger", Result: map[string]any{"n": 1.0}}); err != nil {
		t.Fatal(err)
	}
	events = f.waitEnd(id)
	f.agree(id, events)
}

// startWith starts a run on s as alice.
func (f *outcomeFixture) startWith(s *Service) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "deploy", Model: "func:tester", Principal: "alice"})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.GetRun().GetRunId()
}

// runStatus waits until GetRun on s shows the status.
func (f *outcomeFixture) runStatus(s *Service, id string, want xctv1.RunStatus) {
	f.t.Helper()
	testutil.Eventually(f.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := s.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
		if err != nil {
			return err
		}
		if resp.GetRun().GetStatus() != want {
			return fmt.Errorf("status %s", resp.GetRun().GetStatus())
		}
		return nil
	})
}

// stepIDOf is the step id of the run's first step, from its chain.
func stepIDOf(t *testing.T, f *outcomeFixture, id string) string {
	t.Helper()
	events := f.waitFor(id, "step_start", func(e lctl.Event) bool { return e.Type == lctl.TypeStepStart })
	return str(events[len(events)-1].Data, "step_id")
}

// entered waits for a tool to report that it acts, or fails the test.
func entered[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was not called")
	}
}

// Finding 2 of the chaos suite (seed 2611): an idempotent step in doubt is
// re-run, but the re-run needs a fresh verdict and the validator is down.
// No new attempt started, while the first may have acted: that is still in
// doubt (the settle loop tries again later), never the validator's
// "not executed". Without an earlier attempt the refusal is the outcome.
func TestNoFreshVerdictForAnEarlierAttemptIsStillInDoubt(t *testing.T) {
	t.Parallel()
	down := wire.Errorf(wire.CodeValidatorUnavailable, "validator unreachable; the step was not executed")
	e := stillInDoubt(3, "pending past its deadline", down)
	if !unknownOutcome(e) || e.GetCode() != string(wire.CodeInDoubt) || !notStarted(e) {
		t.Fatalf("earlier attempt, no verdict: %v", e)
	}
	if !strings.Contains(e.GetMessage(), "pending past its deadline") || !strings.Contains(e.GetMessage(), "validator unreachable") {
		t.Fatalf("message does not say why: %s", e.GetMessage())
	}
	if got := stillInDoubt(3, "", down); got != down || unknownOutcome(got) || notStarted(got) {
		t.Fatalf("no earlier attempt: %v", got)
	}
}
