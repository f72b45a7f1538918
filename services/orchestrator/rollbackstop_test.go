package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
	"github.com/xct-dev/xct/services/validator"
)

// rollbackWaitsPolicy lets runs write files and has carol's writes and
// deletes (what her rollbacks' undos are judged as) wait for a human.
const rollbackWaitsPolicy = `rules:
  - {id: allow-reversible, effect: allow, effects: [read, reversible]}
  - id: carols-changes-need-approval
    effect: require_approval
    tools: ["fs.write", "fs.delete"]
    when: 'run.principal == "carol"'
`

// withPolicy serves another validator for the fixture (its key, its
// approvals' bucket) with policy, for the orchestrators launched after.
func (f *fixture) withPolicy(policy string) *validator.Service {
	f.t.Helper()
	return f.withPolicyClock(policy, nil)
}

// withPolicyClock is withPolicy for a validator whose wall clock is now
// (nil: the machine's): a validator whose clock is not the orchestrator's.
func (f *fixture) withPolicyClock(policy string, now func() time.Time) *validator.Service {
	f.t.Helper()
	file := filepath.Join(f.t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	va, err := validator.New(validator.Config{Signer: f.signer, PolicyFile: file}, connect(f.t, f.ns), testLogger(), validator.WithClock(now))
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

// serveOrchestrator serves s on loopback; the test stops the server (its
// cleanup stops it hard, for a test that failed).
func (f *fixture) serveOrchestrator(s *Service) *grpcx.Server {
	f.t.Helper()
	srv := grpcx.NewServer("orchestrator", testLogger(), f.creds.ServerOptions()...)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		f.t.Fatal(err)
	}
	s.Register(srv.GRPC)
	go func() { _ = srv.Serve() }()
	f.t.Cleanup(srv.GRPC.Stop)
	return srv
}

func writeFile(content string) string {
	return fmt.Sprintf(`{"next_step": {"tool": "fs.write", "arguments": {"path": "notes.txt", "content": %q}, "goal": "write"}}`, content)
}

// Issue 12, session 13 (stop13): a rollback waiting for a human held its
// orchestrator's shutdown. Stop let rollbacks finish on their own and
// RollbackRun ran on a background context, so gRPC's graceful stop
// waited until someone decided (in Kubernetes: until the pod was killed,
// leaving the approval pending for a rollback no one continued, and the
// chain without its end). Now a stopping orchestrator ends the waiting
// undo as a cancel does: the approval is withdrawn, the undo is not done,
// rollback_finished says failed because the orchestrator stopped, the
// caller is answered UNAVAILABLE, and the run is free at once for the
// rollback retried on another replica.
func TestStopEndsARollbackWaitingForAHuman(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n"), writeFile("two\n")))
	pv := f.withPolicy(rollbackWaitsPolicy)
	b, _ := f.orchestrator("orch-b", time.Minute)
	id := f.startDone(b)
	a, _ := f.orchestrator("orch-a", time.Minute)
	srv := f.serveOrchestrator(a)
	carol := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, srv.Addr(), "carol"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := carol.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id, ToStep: 1})
		first <- err
	}()
	f.waitFor(id, "the undo's approval_requested", func(e lctl.Event) bool { return e.Type == TypeApprovalRequested })

	// A stops as the app stops it: the service, then gRPC's graceful stop.
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		err := a.Stop(sctx)
		srv.GRPC.GracefulStop()
		stopped <- err
	}()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the orchestrator's stop waits for a human deciding the rollback's undo")
	}
	if err := <-first; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("the rollback at a stopping orchestrator answered %v, want UNAVAILABLE saying it stopped", err)
	}
	events := f.waitFor(id, "rollback_finished", func(e lctl.Event) bool { return e.Type == TypeRollbackFinished })
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	end := events[len(events)-1]
	if str(end.Data, "status") != xctevent.StatusFailed || !strings.Contains(str(end.Data, "message"), "orchestrator stopped") {
		t.Fatalf("rollback_finished %v, want failed because the orchestrator stopped:\n%s", end.Data, describe(events))
	}
	view := xctevent.Fold(events)
	undo := view.Steps[len(view.Steps)-1]
	if undo.Start.Tool != undoTool || undo.Number() != 3 || undo.End == nil || undo.End.Outcome != xctevent.OutcomeDenied || undo.Result != nil {
		t.Fatalf("the waiting undo (step 3) did not end denied without acting:\n%s", describe(events))
	}
	withdrawn := false
	for _, e := range only(events, TypeApprovalDecided) {
		withdrawn = withdrawn || (num(e.Data, "step") == 3 && str(e.Data, "decision") == xctevent.ApprovalWithdrawn)
	}
	if !withdrawn {
		t.Fatalf("the undo's approval was not recorded withdrawn:\n%s", describe(events))
	}
	bob := as(ctx, "bob", auth.RoleApprover)
	if l, err := pv.ListApprovals(bob, &xctv1.ListApprovalsRequest{RunId: id}); err != nil || len(l.GetApprovals()) != 0 {
		t.Fatalf("approvals still pending for the stopped rollback: %v, %v", l.GetApprovals(), err)
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "two\n" {
		t.Fatalf("notes.txt after the stopped rollback: %q, %v", got, err)
	}

	// Retried on another replica at once (the stopped rollback gave up
	// its claim): it waits for bob again, under a new step, and undoes.
	type result struct {
		resp *xctv1.RollbackRunResponse
		err  error
	}
	retried := make(chan result, 1)
	go func() {
		resp, err := b.RollbackRun(as(ctx, "carol", auth.RoleOperator), &xctv1.RollbackRunRequest{RunId: id, ToStep: 1, Principal: "carol"})
		retried <- result{resp, err}
	}()
	f.waitFor(id, "the retried undo's approval_requested", func(e lctl.Event) bool {
		return e.Type == TypeApprovalRequested && num(e.Data, "step") == 4
	})
	if _, err := pv.DecideApproval(bob, &xctv1.DecideApprovalRequest{RunId: id, Step: "4", Approve: true, Approver: "bob", Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	r := <-retried
	if r.err != nil || r.resp.GetStatus() != xctevent.StatusDone || fmt.Sprint(r.resp.GetUndone()) != "[2]" {
		t.Fatalf("retried rollback: %v %v", r.resp, r.err)
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "one\n" {
		t.Fatalf("notes.txt after the retried rollback: %q, %v", got, err)
	}
	events = f.waitFor(id, "the retried rollback_finished", func(e lctl.Event) bool {
		return e.Type == TypeRollbackFinished && str(e.Data, "status") == xctevent.StatusDone
	})
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	for _, st := range xctevent.Fold(events).Steps {
		if st.End == nil {
			t.Fatalf("step %d has no end:\n%s", st.Number(), describe(events))
		}
	}
}

// A rollback whose undo is executing when its orchestrator stops finishes
// that undo and records it (never an effect the chain does not hold),
// starts no other, ends failed because the orchestrator stopped, and
// answers UNAVAILABLE; the rollback retried on another replica undoes
// what is left.
func TestStopLetsTheUndoInFlightFinish(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n"), writeFile("two\n"), writeFile("three\n")))
	b, _ := f.orchestrator("orch-b", time.Minute)
	id := f.startDone(b)
	relay, relayAddr := newHeldExecutor(t, f, f.execAddr)
	a, _ := f.orchestratorVia("orch-a", time.Minute, relayAddr, "")
	srv := f.serveOrchestrator(a)
	carol := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, srv.Addr(), "carol"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := carol.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id, ToStep: 1})
		first <- err
	}()
	entered(t, relay.entered) // the undo of step 3 is on its way to the executor
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		err := a.Stop(sctx)
		srv.GRPC.GracefulStop()
		stopped <- err
	}()
	testutil.Eventually(t, 30*time.Second, func() error {
		for _, r := range a.activeRuns() {
			if r.rollbackStopped() {
				return nil
			}
		}
		return errors.New("the rollback is not told to stop yet")
	})
	relay.let()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the orchestrator's stop did not return")
	}
	select {
	case err := <-relay.done:
		if err != nil {
			t.Fatalf("the undo's call: %v", err)
		}
	default:
		t.Fatal("the orchestrator stopped before the undo in flight finished")
	}
	if err := <-first; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("the rollback at a stopping orchestrator answered %v, want UNAVAILABLE saying it stopped", err)
	}
	events := f.waitFor(id, "rollback_finished", func(e lctl.Event) bool { return e.Type == TypeRollbackFinished })
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	end := events[len(events)-1]
	if str(end.Data, "status") != xctevent.StatusFailed || !strings.Contains(str(end.Data, "message"), "orchestrator stopped") || fmt.Sprint(end.Data["undone"]) != "[3]" {
		t.Fatalf("rollback_finished %v, want failed because the orchestrator stopped, step 3 undone:\n%s", end.Data, describe(events))
	}
	view := xctevent.Fold(events)
	undo := view.Steps[len(view.Steps)-1]
	if undo.Start.Tool != undoTool || undo.Number() != 4 || undo.End == nil || undo.End.Outcome != xctevent.OutcomeSuccess || undo.Result == nil {
		t.Fatalf("the undo in flight (step 4) is not recorded done, or another undo started:\n%s", describe(events))
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "two\n" {
		t.Fatalf("notes.txt after the stopped rollback: %q, %v", got, err)
	}

	resp, err := b.RollbackRun(as(ctx, "carol", auth.RoleOperator), &xctv1.RollbackRunRequest{RunId: id, ToStep: 1, Principal: "carol"})
	if err != nil || resp.GetStatus() != xctevent.StatusDone || fmt.Sprint(resp.GetUndone()) != "[2]" {
		t.Fatalf("retried rollback: %v %v", resp, err)
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "one\n" {
		t.Fatalf("notes.txt after the retried rollback: %q, %v", got, err)
	}
}
