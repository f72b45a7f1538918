package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl"
)

// Session 20 (faults20), issue 12: an approval granted just before its
// expiry, whose owner is killed between the decision and the verdict
// after it. The approver decided in time (the validator took the
// decision); the next owner, after the lease, asked for the verdict once
// the expiry had passed, and the validator counted the approval only
// until expires_at: the chain said APPROVAL_EXPIRED under bob's
// approval, and the step he approved never ran. Now an approval approved
// in time counts for the verdict TTL after its decision.
//
// The validator's clock is 90 s behind at first (approvals last a minute,
// so bob decides with half a minute to spare on it), then set right
// before the next owner starts: deterministic, whatever the machine's
// load. The owner is killed as SIGKILL leaves it for the cluster: its
// NATS connection closed, no renewal, no append.
func TestApprovalGrantedJustBeforeItsExpiryHoldsOnTakeover(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n")))
	var behind atomic.Int64
	behind.Store(int64(90 * time.Second))
	pv := f.withPolicyClock(approvalSkewPolicy, func() time.Time { return time.Now().Add(-time.Duration(behind.Load())) })
	a, anc := f.orchestrator("orch-a", time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, stepID := f.startWaiting(ctx, a)
	anc.Close() // orch-a is gone for the cluster, the approval open

	d, err := pv.DecideApproval(as(ctx, "bob", auth.RoleApprover), &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "fine"})
	if err != nil {
		t.Fatalf("bob's approval, within the approval's minute: %v", err)
	}
	if !d.GetApproval().GetDecidedAt().AsTime().Before(d.GetApproval().GetExpiresAt().AsTime()) {
		t.Fatalf("decided at %v, expires at %v: not in time", d.GetApproval().GetDecidedAt().AsTime(), d.GetApproval().GetExpiresAt().AsTime())
	}
	// The expiry passes on the validator's clock before anyone asks
	// for the verdict after the decision.
	behind.Store(0)
	if !time.Now().After(d.GetApproval().GetExpiresAt().AsTime()) {
		t.Fatal("the approval has not expired on the validator's clock")
	}
	f.orchestrator("orch-b", time.Second)

	events := f.waitEnd(id)
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	entry := f.approvalEntry(id, stepID)
	if entry.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("the validator's entry is %s, want approved by bob", entry.GetState())
	}
	f.decidedAgrees(events, 1, entry)
	var final lctl.Event
	for _, e := range events {
		if e.Type == lctl.TypeVerdict {
			final = e
		}
	}
	if str(final.Data, "decision") != "allow" {
		t.Fatalf("bob approved step 1 in time, the verdict after it is %v:\n%s", final.Data, describe(events))
	}
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "one\n" {
		t.Fatalf("bob approved the write in time, and notes.txt is %q, %v:\n%s", got, err, describe(events))
	}
	if n := len(only(events, lctl.TypeToolCall)); n != 1 {
		t.Fatalf("%d tool calls on the chain, want 1:\n%s", n, describe(events))
	}
}
