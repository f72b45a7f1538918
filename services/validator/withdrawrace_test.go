package validator_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/validator"
)

// Issue 12, session 14 (rollback14): a withdrawal and a human's decision
// race on one approval, forced: the withdrawing validator read the entry
// pending and its write is held back (a NATS proxy) while bob approves at
// another replica. The withdrawal's write is conditional on the revision it
// read, so it fails; the validator reads the entry again and answers bob's
// approval, which stands. The orchestrator records what this answer says
// (services/orchestrator withdrawrace_test.go). A guard: main's validator
// already held.
func TestWithdrawLosingTheRaceAnswersTheDecision(t *testing.T) {
	t.Parallel()
	a := startApprovals(t) // bob's replica
	proxy := testutil.NewAckLoser(t, strings.TrimPrefix(a.nc.ConnectedUrl(), "nats://"))
	nc, err := nats.Connect(proxy.URL(), testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w, err := validator.New(validator.Config{PolicyFile: a.path, Replicas: 1}, nc, nil, validator.WithClock(a.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	req := configWrite(t, 1, "config/app.yaml")
	pending := a.request(t, req, nil)
	held, let := proxy.HoldNext(func(subject string, body []byte) bool {
		return strings.HasPrefix(subject, "$KV.XCT_APPROVALS.") && bytes.Contains(body, []byte("WITHDRAWN"))
	})
	svc := auth.NewContext(ctx, auth.Principal{Name: "service:orchestrator", Roles: []string{auth.RoleService}, Service: true})
	type result struct {
		resp *xctv1.WithdrawApprovalResponse
		err  error
	}
	withdrawn := make(chan result, 1)
	go func() {
		resp, err := w.WithdrawApproval(svc, &xctv1.WithdrawApprovalRequest{RunId: "run-1", StepId: pending.GetStepId(), By: "carol", Reason: "not now"})
		withdrawn <- result{resp, err}
	}()
	select {
	case <-held: // the withdrawal read the entry pending; its write waits
	case <-ctx.Done():
		t.Fatal("the withdrawal's write never came")
	}
	if _, err := a.decide("run-1", pending.GetStepId(), true, "bob", "fine"); err != nil {
		t.Fatal(err)
	}
	let()
	r := <-withdrawn
	if r.err != nil || r.resp.GetApproval().GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || r.resp.GetApproval().GetDecidedBy() != "bob" {
		t.Fatalf("the withdrawal that lost answered %v, %v; want bob's approval", r.resp.GetApproval(), r.err)
	}
	found := false
	for _, got := range a.list(t, "run-1", true) {
		if got.GetStepId() != pending.GetStepId() {
			continue
		}
		found = true
		if got.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || got.GetDecidedBy() != "bob" {
			t.Fatalf("the entry after the race: %v", got)
		}
	}
	if !found {
		t.Fatal("the approval is not listed after the race")
	}
}
