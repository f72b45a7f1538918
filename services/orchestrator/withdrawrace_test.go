package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// heldWithdraw relays ValidatorService calls to the real validator over
// gRPC and holds the first WithdrawApproval until released: a withdrawal
// on its way while a human decides. Every call is answered by the real
// validator.
type heldWithdraw struct {
	xctv1.UnimplementedValidatorServiceServer
	to xctv1.ValidatorServiceClient

	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	released sync.Once
	// failFirst makes the first WithdrawApproval fail UNAVAILABLE without
	// reaching the validator (a validator restarting), instead of holding it.
	failFirst bool
}

func newHeldWithdraw(t *testing.T, f *fixture, valAddr string) (*heldWithdraw, string) {
	t.Helper()
	conn, err := grpcx.Dial(valAddr, grpcx.WithToken(f.creds.Token(t, grpcxtest.Service)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h := &heldWithdraw{to: xctv1.NewValidatorServiceClient(conn), entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.let)
	addr := serveGRPC(t, f.creds, "validator-relay", func(s *grpcx.Server) { xctv1.RegisterValidatorServiceServer(s.GRPC, h) })
	return h, addr
}

func (h *heldWithdraw) let() { h.released.Do(func() { close(h.release) }) }

func (h *heldWithdraw) Validate(ctx context.Context, req *xctv1.ValidateRequest) (*xctv1.ValidateResponse, error) {
	return h.to.Validate(ctx, req)
}

func (h *heldWithdraw) RequestApproval(ctx context.Context, req *xctv1.RequestApprovalRequest) (*xctv1.RequestApprovalResponse, error) {
	return h.to.RequestApproval(ctx, req)
}

func (h *heldWithdraw) WithdrawApproval(ctx context.Context, req *xctv1.WithdrawApprovalRequest) (*xctv1.WithdrawApprovalResponse, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		if h.failFirst {
			return nil, status.Error(codes.Unavailable, "the validator is restarting")
		}
		<-h.release
	}
	return h.to.WithdrawApproval(ctx, req)
}

// approvalEntry is the validator's stored approval of a step.
func (f *fixture) approvalEntry(runID, stepID string) *xctv1.Approval {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := f.events.JetStream().KeyValue(ctx, ApprovalsBucket)
	if err != nil {
		f.t.Fatal(err)
	}
	e, err := kv.Get(ctx, runID+"."+stepID)
	if err != nil {
		f.t.Fatal(err)
	}
	a, ok := decodeApproval(e.Value())
	if !ok {
		f.t.Fatalf("approval %s.%s does not decode", runID, stepID)
	}
	return a
}

// decidedAgrees checks that the chain holds one approval_decided for the
// step and that it says what the validator's entry says.
func (f *fixture) decidedAgrees(events []lctl.Event, step int64, a *xctv1.Approval) {
	f.t.Helper()
	var decided []lctl.Event
	for _, e := range only(events, TypeApprovalDecided) {
		if num(e.Data, "step") == step {
			decided = append(decided, e)
		}
	}
	want := map[xctv1.ApprovalState]string{
		xctv1.ApprovalState_APPROVAL_STATE_APPROVED:  xctevent.ApprovalApproved,
		xctv1.ApprovalState_APPROVAL_STATE_DENIED:    xctevent.ApprovalDenied,
		xctv1.ApprovalState_APPROVAL_STATE_EXPIRED:   xctevent.ApprovalExpired,
		xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN: xctevent.ApprovalWithdrawn,
	}[a.GetState()]
	if len(decided) != 1 || str(decided[0].Data, "decision") != want || str(decided[0].Data, "by") != a.GetDecidedBy() {
		f.t.Fatalf("the validator's entry of step %d is %s by %s; the chain says:\n%s", step, a.GetState(), a.GetDecidedBy(), describe(events))
	}
}

// Issue 12, session 14 (rollback14): a rollback cancelled while its undo
// waited for a human withdrew the approval at the validator and recorded
// it withdrawn, whatever the validator answered. A human approving in
// between (the validator withdraws only a pending approval) left the
// entry approved and the chain saying withdrawn. Now the chain records
// what the validator holds: bob's approval, and the undo still not done
// (the rollback was cancelled).
func TestWithdrawLosingToAnApprovalIsRecordedAsTheApproval(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n"), writeFile("two\n")))
	pv := f.withPolicy(rollbackWaitsPolicy)
	b, _ := f.orchestrator("orch-b", time.Minute)
	id := f.startDone(b)
	relay, relayAddr := newHeldWithdraw(t, f, f.valAddr)
	a, _ := f.orchestratorVia("orch-a", time.Minute, "", relayAddr)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		resp *xctv1.RollbackRunResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := a.RollbackRun(as(ctx, "carol", auth.RoleOperator), &xctv1.RollbackRunRequest{RunId: id, ToStep: 1, Principal: "carol"})
		done <- result{resp, err}
	}()
	events := f.waitFor(id, "the undo's approval_requested", func(e lctl.Event) bool { return e.Type == TypeApprovalRequested })
	stepID := str(events[len(events)-1].Data, "step_id")
	if _, err := a.CancelRun(as(ctx, "carol", auth.RoleOperator), &xctv1.CancelRunRequest{RunId: id, Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	entered(t, relay.entered) // the withdrawal is on its way
	bob := as(ctx, "bob", auth.RoleApprover)
	if _, err := pv.DecideApproval(bob, &xctv1.DecideApprovalRequest{RunId: id, Step: "3", Approve: true, Approver: "bob", Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	relay.let()
	r := <-done
	if r.err != nil || r.resp.GetStatus() != xctevent.StatusFailed || len(r.resp.GetUndone()) != 0 {
		t.Fatalf("the cancelled rollback answered %v, %v; want failed, nothing undone", r.resp, r.err)
	}
	events = f.waitFor(id, "rollback_finished", func(e lctl.Event) bool { return e.Type == TypeRollbackFinished })
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	entry := f.approvalEntry(id, stepID)
	if entry.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("the race was not forced: the validator's entry is %s", entry.GetState())
	}
	f.decidedAgrees(events, 3, entry)
	view := xctevent.Fold(events)
	undo := view.Steps[len(view.Steps)-1]
	if undo.Number() != 3 || undo.End == nil || undo.End.Outcome != xctevent.OutcomeDenied || undo.Result != nil {
		t.Fatalf("the cancelled rollback's undo did not end denied without acting:\n%s", describe(events))
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "two\n" {
		t.Fatalf("notes.txt after the cancelled rollback: %q, %v", got, err)
	}
}

// The same race for a run's step: the run is cancelled while its step
// waits for a human, and bob approves while the withdrawal is on its
// way. The chain says bob approved (as the validator's entry does), the
// step did not run, and the run ended cancelled.
func TestWithdrawOfACancelledRunLosingToAnApproval(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n")))
	pv := f.withPolicy(rollbackWaitsPolicy) // carol's writes wait for a human
	relay, relayAddr := newHeldWithdraw(t, f, f.valAddr)
	a, _ := f.orchestratorVia("orch-a", time.Minute, "", relayAddr)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, stepID := f.startWaiting(ctx, a)
	if _, err := a.CancelRun(as(ctx, "carol", auth.RoleOperator), &xctv1.CancelRunRequest{RunId: id, Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	entered(t, relay.entered)
	bob := as(ctx, "bob", auth.RoleApprover)
	if _, err := pv.DecideApproval(bob, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	relay.let()
	events := f.waitEnd(id)
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; str(last.Data, "status") != xctevent.StatusCancelled {
		t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
	}
	entry := f.approvalEntry(id, stepID)
	if entry.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("the race was not forced: the validator's entry is %s", entry.GetState())
	}
	f.decidedAgrees(events, 1, entry)
	st := xctevent.Fold(events).Steps[0]
	if st.End == nil || st.End.Outcome != outcomeCancelled || st.Result != nil || len(only(events, lctl.TypeToolCall)) != 0 {
		t.Fatalf("the cancelled run's step did not end cancelled without acting:\n%s", describe(events))
	}
	if _, err := os.Stat(filepath.Join(f.ws, "notes.txt")); !os.IsNotExist(err) {
		t.Fatalf("notes.txt was written by a cancelled run: %v", err)
	}
}

// A run cancelled while its step waits for a human, and the validator
// cannot be reached at the first try of the withdrawal (it restarts).
// Before the fix the chain said withdrawn and the validator's entry stayed
// pending: listed to approvers, and bob's approval taken (allowing
// nothing). The withdrawal is idempotent at the validator, so it is tried
// again: the entry is withdrawn as the chain says, and bob's decision is
// refused.
func TestWithdrawTriedAgainWhenTheValidatorIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n")))
	pv := f.withPolicy(rollbackWaitsPolicy) // carol's writes wait for a human
	relay, relayAddr := newHeldWithdraw(t, f, f.valAddr)
	relay.failFirst = true
	a, _ := f.orchestratorVia("orch-a", time.Minute, "", relayAddr)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, stepID := f.startWaiting(ctx, a)
	if _, err := a.CancelRun(as(ctx, "carol", auth.RoleOperator), &xctv1.CancelRunRequest{RunId: id, Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	events := f.waitEnd(id)
	select {
	case <-relay.entered:
	default:
		t.Fatal("no withdrawal was asked for")
	}
	entry := f.approvalEntry(id, stepID)
	if entry.GetState() != xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN || entry.GetDecidedBy() != "carol" {
		t.Fatalf("the validator's entry after the cancel is %s by %q, want withdrawn by carol", entry.GetState(), entry.GetDecidedBy())
	}
	f.decidedAgrees(events, 1, entry)
	bob := as(ctx, "bob", auth.RoleApprover)
	if _, err := pv.DecideApproval(bob, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "fine"}); err == nil {
		t.Fatal("bob approved the step of a cancelled run")
	}
}
