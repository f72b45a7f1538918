package validator_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/services/validator"
)

// syncBuffer is a log sink the service writes from its goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestWithdrawalReasonRedactedInTheLog (session 10, trust10c): a run
// cancelled with a reason that carries a token (an operator pasting what
// leaked, "cancel: key ghp_… is in the goal") has it replaced on the chain
// (the orchestrator redacts every event), but the validator logged the
// withdrawal's reason as it came, at Info, with the redaction rules at
// hand; an approver's note on a decision likewise. The log lines now carry
// the marker, never the token.
func TestWithdrawalReasonRedactedInTheLog(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	logs := &syncBuffer{}
	s, err := validator.New(validator.Config{PolicyFile: a.path, Replicas: 1}, a.nc,
		slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), validator.WithClock(a.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	ctx := auth.NewContext(context.Background(), auth.Principal{Name: "service:orchestrator", Roles: []string{auth.RoleService}, Service: true})
	req := configWrite(t, 1, "config/app.yaml")
	if _, err := s.RequestApproval(ctx, &xctv1.RequestApprovalRequest{Run: req.GetRun(), Step: req.GetStep(), StepId: req.GetStepId(), Proposal: req.GetProposal()}); err != nil {
		t.Fatal(err)
	}
	const token = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	if _, err := s.WithdrawApproval(ctx, &xctv1.WithdrawApprovalRequest{RunId: "run-1", StepId: req.GetStepId(), By: "alice",
		Reason: "cancel: key " + token + " is in the goal"}); err != nil {
		t.Fatal(err)
	}
	// An approver's note on a decision, the same.
	a.s = s
	req2 := configWrite(t, 2, "config/app.yaml")
	if _, err := s.RequestApproval(ctx, &xctv1.RequestApprovalRequest{Run: req2.GetRun(), Step: req2.GetStep(), StepId: req2.GetStepId(), Proposal: req2.GetProposal()}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.decide("run-1", req2.GetStepId(), false, "bob", "no: it would print "+token); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "approval decided") || !strings.Contains(out, "no: it would print ") {
		t.Fatalf("no decision logged:\n%s", out)
	}
	if !strings.Contains(out, "approval withdrawn") {
		t.Fatalf("no withdrawal logged:\n%s", out)
	}
	if strings.Contains(out, token) || strings.Contains(out, token[4:]) {
		t.Fatalf("the token is in the validator's log:\n%s", out)
	}
	if !strings.Contains(out, "cancel: key ") {
		t.Fatalf("the reason is not logged at all:\n%s", out)
	}
}
