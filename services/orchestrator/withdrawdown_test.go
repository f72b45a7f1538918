package orchestrator

import (
	"context"
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
	"github.com/xct-dev/xct/services/validator"
)

// validatorProcess is a validator with its own gRPC server at a loopback
// address that stays its across a stop and a start, as a validator
// process restarted in place.
type validatorProcess struct {
	f      *fixture
	policy string // the policy file
	addr   string
	va     *validator.Service
	srv    *grpcx.Server
}

func (f *fixture) validatorProcess(policy string) *validatorProcess {
	f.t.Helper()
	file := filepath.Join(f.t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		f.t.Fatal(err)
	}
	p := &validatorProcess{f: f, policy: file}
	p.start()
	return p
}

// start starts a new validator (its own NATS connection; its approvals
// and keys are the fixture's) serving at the process's address.
func (p *validatorProcess) start() {
	f := p.f
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	va, err := validator.New(validator.Config{Signer: f.signer, PolicyFile: p.policy}, connect(f.t, f.ns), testLogger())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := va.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	srv := grpcx.NewServer("validator", testLogger(), f.creds.ServerOptions()...)
	addr := p.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if err := srv.Listen(addr); err != nil {
		f.t.Fatal(err)
	}
	va.Register(srv.GRPC)
	go func() { _ = srv.Serve() }()
	p.addr, p.va, p.srv = srv.Addr(), va, srv
	f.t.Cleanup(p.stop)
}

// stop stops the server at once and the validator after it.
func (p *validatorProcess) stop() {
	if p.srv == nil {
		return
	}
	p.srv.GRPC.Stop()
	_ = p.va.Stop(context.Background())
	p.srv, p.va = nil, nil
}

// Session 15 (resolve15), issue 12: a withdrawal the validator was down
// for. Carol cancelled her run while its write waited for a human, and
// the validator was stopped: the orchestrator's withdrawal, tried again
// for under a second, never reached it, and the chain said withdrawn
// while the validator's entry stayed pending. On main bob, once the
// validator was back, approved it (the entry said approved, the chain
// withdrawn). Now a decision reads the run's chain: an approval the chain
// shows withdrawn is withdrawn at the validator too (by carol, her
// reason) and bob is refused.
func TestWithdrawalWhileTheValidatorIsDownHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(writeFile("one\n")))
	vp := f.validatorProcess(rollbackWaitsPolicy) // carol's writes wait for a human
	a, _ := f.orchestratorVia("orch-a", time.Minute, "", vp.addr)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, stepID := f.startWaiting(ctx, a)
	vp.stop()
	if _, err := a.CancelRun(as(ctx, "carol", auth.RoleOperator), &xctv1.CancelRunRequest{RunId: id, Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	events := f.waitEnd(id)
	if entry := f.approvalEntry(id, stepID); entry.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("the validator's entry while it was down: %s, want pending (the withdrawal could not reach it)", entry.GetState())
	}
	vp.start()
	bob := xctv1.NewValidatorServiceClient(f.creds.Dial(t, vp.addr, "bob"))
	_, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: stepID, Approve: true, Reason: "fine"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "withdrawn") {
		t.Fatalf("bob's approval of the cancelled run's step: %v; want FAILED_PRECONDITION, withdrawn", err)
	}
	entry := f.approvalEntry(id, stepID)
	if entry.GetState() != xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN || entry.GetDecidedBy() != "carol" || entry.GetReason() != "not now" {
		t.Fatalf("the validator's entry after bob's try: %s by %q (%q), want withdrawn by carol (not now)", entry.GetState(), entry.GetDecidedBy(), entry.GetReason())
	}
	f.decidedAgrees(events, 1, entry)
}
