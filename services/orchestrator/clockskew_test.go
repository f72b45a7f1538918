package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl"
)

// approvalSkewPolicy has carol's writes wait for a human for one minute.
const approvalSkewPolicy = `approval_ttl: 1m
rules:
  - {id: allow-reversible, effect: allow, effects: [read, reversible]}
  - id: carols-changes-need-approval
    effect: require_approval
    tools: ["fs.write", "fs.delete"]
    when: 'run.principal == "carol"'
`

// Issue 12, session 15 (chaos15): clock skew between the orchestrator and
// the validator. An approval's expires_at is the validator's clock; the
// orchestrator timed it with its own and, at its own deadline, recorded
// "expired" on the chain while the validator, whose clock was behind, still
// held the approval pending and took bob's approval: the chain said
// expired (the step denied, not run), the validator's entry approved by
// bob, and bob was told his approval was taken. Here the validator's clock
// is two minutes behind and approvals last one minute, so the
// orchestrator's deadline has passed when the approval is opened. The
// chain must say what the validator holds.
func TestApprovalExpiryIsTheValidatorsNotTheOrchestratorsClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n")))
	pv := f.withPolicyClock(approvalSkewPolicy, func() time.Time { return time.Now().Add(-2 * time.Minute) })
	a, _ := f.orchestrator("orch-a", time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, stepID := f.startWaiting(ctx, a)
	bob := as(ctx, "bob", auth.RoleApprover)
	if _, err := pv.DecideApproval(bob, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "fine"}); err != nil {
		t.Fatalf("bob's approval, within the validator's minute: %v", err)
	}
	events := f.waitEnd(id)
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	entry := f.approvalEntry(id, stepID)
	if entry.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("the validator's entry is %s, want approved by bob", entry.GetState())
	}
	f.decidedAgrees(events, 1, entry)
	if got, err := os.ReadFile(filepath.Join(f.ws, "notes.txt")); err != nil || string(got) != "one\n" {
		t.Fatalf("bob approved the write, and notes.txt is %q, %v:\n%s", got, err, describe(events))
	}
}

// The other side of asking the validator at the local deadline: an
// approval the validator will never decide (withdrawn by another replica
// while this one waited) ends the wait there, recorded as not given, as
// before; the wait does not poll the validator until the run is cancelled.
func TestApprovalWithdrawnElsewhereEndsTheWaitAtItsDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n")))
	pv := f.withPolicy(strings.Replace(approvalSkewPolicy, "approval_ttl: 1m", "approval_ttl: 2s", 1))
	a, _ := f.orchestrator("orch-a", time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, stepID := f.startWaiting(ctx, a)
	if _, err := pv.WithdrawApproval(as(ctx, "orch-b", auth.RoleService), &xctv1.WithdrawApprovalRequest{RunId: id, StepId: stepID, By: "orch-b", Reason: "gone"}); err != nil {
		t.Fatal(err)
	}
	events := f.waitEnd(id)
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	decided := only(events, TypeApprovalDecided)
	if len(decided) != 1 || str(decided[0].Data, "decision") != "expired" || decided[0].Agent != agentOrchestrator {
		t.Fatalf("the withdrawn approval's wait ended:\n%s", describe(events))
	}
	if _, err := os.Stat(filepath.Join(f.ws, "notes.txt")); !os.IsNotExist(err) {
		t.Fatalf("notes.txt was written without an approval: %v", err)
	}
}
