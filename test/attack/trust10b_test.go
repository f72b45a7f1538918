package attack

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/executor"
)

// idp is an OIDC provider of the test's own: its key and JWKS file. Its
// users name themselves (the principal claim is theirs to choose, as a
// username or an e-mail address often is).
type idp struct {
	key  *ecdsa.PrivateKey
	jwks string
}

const (
	idpIssuer   = "https://idp.test.invalid"
	idpAudience = "xct-attack"
)

func newIDP(t *testing.T) *idp {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: string(jose.ES256), Use: "sig"}}}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return &idp{key: key, jwks: path}
}

// option configures the cluster to accept the provider's tokens (beside
// the test's tokens file).
func (p *idp) option() bindOption {
	return func(cfg *app.Config, _ *app.Options) {
		cfg.Auth.OIDCIssuer, cfg.Auth.OIDCAudience, cfg.Auth.OIDCJWKS = idpIssuer, idpAudience, p.jwks
	}
}

// token is a JWT for sub with roles.
func (p *idp) token(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: p.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(map[string]any{
		"iss": idpIssuer, "aud": idpAudience, "sub": sub, "roles": roles,
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// dial connects to addr with the provider's token for sub.
func (p *idp) dial(t *testing.T, addr, sub string, roles ...string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpcx.Dial(addr, grpcx.WithToken(p.token(t, sub, roles...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestAttackLookAlikeNameCancelsAnothersRun: the identity provider holds
// "sam" and, as other users, "SAM" and "ſam" (a long s; a provider that
// compares names as written keeps them apart). The orchestrator compared
// a run's owner with the caller case-insensitively with Unicode folding,
// so either of the others cancelled sam's run as its own. Now a name
// grants only itself: both are refused and the run keeps running; sam
// still cancels it.
func TestAttackLookAlikeNameCancelsAnothersRun(t *testing.T) {
	gate := make(chan struct{})
	p := newIDP(t)
	c := startBindCluster(t, p.option(), withProposer("gate", gateModel{gate: gate}))
	addr := c.app.Addr(app.TargetOrchestrator)
	sam := xctv1.NewOrchestratorServiceClient(p.dial(t, addr, "sam", "submitter"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const runID = "run-of-sam"
	if _, err := sam.StartRun(ctx, &xctv1.StartRunRequest{RunId: runID, Goal: "deploy", Model: "func:gate"}); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"SAM", "ſam", "Sam"} {
		o := xctv1.NewOrchestratorServiceClient(p.dial(t, addr, other, "submitter"))
		_, err := o.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: runID, Reason: "mine now"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%q cancels sam's run: %v, want PERMISSION_DENIED", other, err)
		}
	}
	r, err := sam.GetRun(ctx, &xctv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("sam's run after the others' cancels: %s (%s)", r.GetRun().GetStatus(), r.GetRun().GetMessage())
	}
	if _, err := sam.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: runID, Reason: "done"}); err != nil {
		t.Fatalf("sam cancels its own run: %v", err)
	}
	close(gate)
	testutil.Eventually(t, 30*time.Second, func() error {
		r, err := sam.GetRun(ctx, &xctv1.GetRunRequest{RunId: runID})
		if err != nil {
			return err
		}
		if got := r.GetRun().GetStatus(); got != xctv1.RunStatus_RUN_STATUS_CANCELLED {
			return fmt.Errorf("status %s", got)
		}
		return nil
	})
}

// TestAttackLookAlikeNameApprovesItsOwnRun: mallory (submitter and
// approver) starts a run whose irreversible deploy needs a human, then
// decides it under names a reader takes for hers ("mallory." with a
// trailing dot, full-width letters, a zero-width space inside): the
// two-person rule compared names case-insensitively only, so each was
// another approver and the deploy ran on its submitter's approval. Now
// each is refused as self-approval and nothing runs; bob's approval runs
// it once.
func TestAttackLookAlikeNameApprovesItsOwnRun(t *testing.T) {
	gate := make(chan struct{})
	close(gate)
	var deployed atomic.Int64
	p := newIDP(t)
	c := startBindCluster(t, p.option(), withProposer("gate", gateModel{gate: gate}), func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
	})
	orchAddr, valAddr := c.app.Addr(app.TargetOrchestrator), c.app.Addr(app.TargetValidator)
	mallory := xctv1.NewOrchestratorServiceClient(p.dial(t, orchAddr, "mallory", "submitter", "approver"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const runID = "run-of-mallory"
	if _, err := mallory.StartRun(ctx, &xctv1.StartRunRequest{RunId: runID, Goal: "deploy", Model: "func:gate"}); err != nil {
		t.Fatal(err)
	}
	bob := c.validatorAs(t, "bob")
	testutil.Eventually(t, 30*time.Second, func() error {
		l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: runID})
		if err != nil {
			return err
		}
		if len(l.GetApprovals()) != 1 {
			return fmt.Errorf("%d pending approvals", len(l.GetApprovals()))
		}
		return nil
	})
	for _, alias := range []string{"mallory.", "ｍａｌｌｏｒｙ", "mal\u200blory", "MALLORY", "mallory\u00ad"} {
		v := xctv1.NewValidatorServiceClient(p.dial(t, valAddr, alias, "approver"))
		_, err := v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: runID, Step: "1", Approve: true, Reason: "looks fine"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%q approves mallory's step: %v, want PERMISSION_DENIED", alias, err)
		}
	}
	if n := deployed.Load(); n != 0 {
		t.Fatalf("the deploy ran %d times on its submitter's look-alike approval", n)
	}
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: runID, Step: "1", Approve: true, Reason: "reviewed"}); err != nil {
		t.Fatalf("bob approves: %v", err)
	}
	run := c.waitRun(t, "bob", runID)
	if n := deployed.Load(); n != 1 || run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("after bob's approval: %d deploys, run %s (%s)", n, run.GetStatus(), run.GetMessage())
	}
}
