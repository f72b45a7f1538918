package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/devcerts"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/orchestrator"
)

// idp is an OIDC provider of the test's own: a key, its JWKS file, and
// tokens it signs.
type idp struct {
	key  *ecdsa.PrivateKey
	jwks string
}

const (
	idpIssuer   = "https://idp.test.invalid"
	idpAudience = "xct-e2e"
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

// token signs claims over sensible defaults (nil deletes a claim).
func (p *idp) token(t *testing.T, key *ecdsa.PrivateKey, over map[string]any) string {
	t.Helper()
	claims := map[string]any{"iss": idpIssuer, "aud": idpAudience, "sub": "erin", "roles": []string{"submitter"},
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range over {
		claims[k] = v
	}
	if key == nil {
		key = p.key
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

const writeScript = `
steps:
  - next_step: {tool: fs.write, arguments: {path: written.txt, content: "x"}, goal: write}
  - done: true
`

// TestRefusedCallsDoNothing: a missing, unknown, expired or wrong-audience
// token is UNAUTHENTICATED, a caller without the role PERMISSION_DENIED,
// and none of them starts a run; a valid JWT does, in its subject's name.
func TestRefusedCallsDoNothing(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Auth.OIDCIssuer, cfg.Auth.OIDCAudience, cfg.Auth.OIDCJWKS = idpIssuer, idpAudience, p.jwks
	})
	c.writeScript(t, "w.yaml", writeScript)
	addr := c.app.Addr(app.TargetOrchestrator)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	with := func(opts ...grpcx.DialOption) xctv1.OrchestratorServiceClient {
		return xctv1.NewOrchestratorServiceClient(dial(t, addr, opts...))
	}
	tests := []struct {
		name   string
		client xctv1.OrchestratorServiceClient
		req    *xctv1.StartRunRequest
		want   codes.Code
		msg    string
	}{
		{"no token", with(), nil, codes.Unauthenticated, "no credentials"},
		{"unknown token", with(grpcx.WithToken("not-anyones-token-at-all")), nil, codes.Unauthenticated, "invalid or unknown"},
		{"expired JWT", with(grpcx.WithToken(p.token(t, nil, map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}))), nil, codes.Unauthenticated, "token expired"},
		{"JWT for another audience", with(grpcx.WithToken(p.token(t, nil, map[string]any{"aud": "someone-else"}))), nil, codes.Unauthenticated, "invalid or unknown"},
		{"JWT of another issuer", with(grpcx.WithToken(p.token(t, nil, map[string]any{"iss": "https://evil.test.invalid"}))), nil, codes.Unauthenticated, "invalid or unknown"},
		{"JWT signed by another key", with(grpcx.WithToken(p.token(t, stranger, nil))), nil, codes.Unauthenticated, "invalid or unknown"},
		{"JWT without the role", with(grpcx.WithToken(p.token(t, nil, map[string]any{"roles": []string{"auditor"}}))), nil, codes.PermissionDenied, "may not call"},
		{"approver starts a run", c.orchAs(t, "bob"), nil, codes.PermissionDenied, "may not call"},
		{"auditor starts a run", c.orchAs(t, "dave"), nil, codes.PermissionDenied, "may not call"},
		{"submitter in another's name", c.orch, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml", Principal: "dev"}, codes.PermissionDenied, "may not act as dev"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			if req == nil {
				req = &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml"}
			}
			_, err := tc.client.StartRun(ctx, req)
			if status.Code(err) != tc.want || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("err = %v, want %s with %q", err, tc.want, tc.msg)
			}
		})
	}
	// Nothing was started, nothing written.
	list, err := c.orchAs(t, "dave").ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil || len(list.GetRuns()) != 0 {
		t.Fatalf("runs after refused calls: %v %v", list.GetRuns(), err)
	}
	if _, err := os.Stat(filepath.Join(c.workspace, "written.txt")); !os.IsNotExist(err) {
		t.Fatal("a refused call wrote a file")
	}
	// Reads need authentication too; health does not.
	if _, err := with().ListRuns(ctx, &xctv1.ListRunsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("list runs without a token: %v", err)
	}

	// A valid JWT: the run is erin's, with her roles on the chain.
	erin := with(grpcx.WithToken(p.token(t, nil, nil)))
	resp, err := erin.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, resp.GetRun().GetRunId())
	start := events[0]
	if start.Type != lctl.TypeRunStarted || start.Data["principal"] != "erin" || !strings.Contains(strings.Join(anyStrings(start.Data["roles"]), ","), "submitter") {
		t.Fatalf("run_started = %v", start.Data)
	}
	if events[len(events)-1].Data["status"] != "done" {
		t.Fatalf("run ended %v", events[len(events)-1].Data)
	}
}

func anyStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestApproverCannotApproveOwnRun: an approver (here the admin, who holds
// every role) who started the run cannot decide its approval; another
// approver can, and the chain says who.
func TestApproverCannotApproveOwnRun(t *testing.T) {
	t.Parallel()
	c, tool, bob := approvalCluster(t, "1h", "blue")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orchAs(t, "admin").StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	a := pending(t, bob, id, 1)
	if a.GetRequestedBy() != "admin" {
		t.Fatalf("requested by %q", a.GetRequestedBy())
	}
	_, err = c.validatorAs(t, "admin").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cannot decide its approvals") {
		t.Fatalf("self-approval: %v", err)
	}
	// Nothing decided, nothing deployed.
	if a := pending(t, bob, id, 1); a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING || tool.count("blue") != 0 {
		t.Fatalf("after the refused self-approval: %v, %d deploys", a.GetState(), tool.count("blue"))
	}
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, id)
	decided := false
	for _, e := range events {
		if e.Type == orchestrator.TypeApprovalDecided {
			decided = e.Data["by"] == "bob" && e.Agent == "bob" && e.Data["decision"] == "approved"
		}
	}
	if !decided || tool.count("blue") != 1 {
		t.Fatalf("decided by bob: %v, %d deploys", decided, tool.count("blue"))
	}
}

// TestSubmitterCancelsOnlyOwnRuns: another submitter (erin, from the
// OIDC provider) cannot cancel a run; an operator can (its own submitter
// can too: TestCancelRun).
func TestSubmitterCancelsOnlyOwnRuns(t *testing.T) {
	t.Parallel()
	p := &blockingProposer{entered: make(chan struct{}, 1)}
	provider := newIDP(t)
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Auth.OIDCIssuer, cfg.Auth.OIDCAudience, cfg.Auth.OIDCJWKS = idpIssuer, idpAudience, provider.jwks
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("block", p))
	})
	erin := xctv1.NewOrchestratorServiceClient(dial(t, c.app.Addr(app.TargetOrchestrator), grpcx.WithToken(provider.token(t, nil, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "func:block"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	<-p.entered
	_, err = erin.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "not yours"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another submitter cancels: %v", err)
	}
	if _, err := c.orchAs(t, "dave").CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an auditor cancels: %v", err)
	}
	if r, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id}); err != nil || r.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("after refused cancels: %v %v", r.GetRun().GetStatus(), err)
	}
	if _, err := c.orchAs(t, "carol").CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "operator stop"}); err != nil {
		t.Fatalf("an operator cancels: %v", err)
	}
	events := c.watch(t, ctx, id)
	if last := events[len(events)-1]; last.Data["status"] != "cancelled" || last.Data["message"] != "cancelled by carol: operator stop" {
		t.Fatalf("last event %v", last.Data)
	}
}

// TestPoliciesSeeTheAuthenticatedPrincipal: run.principal and run.roles in
// CEL are the identity that started the run, whatever a request says.
func TestPoliciesSeeTheAuthenticatedPrincipal(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	body := `
rules:
  - id: reads
    effect: allow
    effects: [read]
  - id: writes-by-alice
    effect: allow
    effects: [reversible]
    when: 'run.principal == "alice" && "submitter" in run.roles'
`
	if err := os.WriteFile(policy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) { cfg.Validator.PolicyFile = policy })
	c.writeScript(t, "w.yaml", writeScript)
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml"})
	if run.GetPrincipal() != "alice" || run.GetSteps()[0].GetState() != xctv1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("alice's write: %s %v", run.GetPrincipal(), run.GetSteps()[0])
	}
	if err := os.Remove(filepath.Join(c.workspace, "written.txt")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orchAs(t, "dev").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	c.watch(t, ctx, resp.GetRun().GetRunId())
	got, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: resp.GetRun().GetRunId()})
	if err != nil || got.GetRun().GetSteps()[0].GetState() != xctv1.StepState_STEP_STATE_DENIED {
		t.Fatalf("dev's write: %v %v", got.GetRun().GetSteps(), err)
	}
	if _, err := os.Stat(filepath.Join(c.workspace, "written.txt")); !os.IsNotExist(err) {
		t.Fatal("dev's denied write happened")
	}
}

// TestClusterOverMTLS runs the cluster with mTLS on every hop: the
// services identify each other by certificate (no service token), a client
// presents a certificate and a token, and a certificate from another CA
// is refused at the handshake.
func TestClusterOverMTLS(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := devcerts.Write(dir); err != nil {
		t.Fatal(err)
	}
	files := func(d, name string) grpcx.TLSFiles {
		return grpcx.TLSFiles{Cert: filepath.Join(d, name+".crt"), Key: filepath.Join(d, name+".key"), CA: filepath.Join(d, "ca.crt")}
	}
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Security.Plaintext, cfg.Security.ServiceToken = false, ""
		cfg.Security.TLS = files(dir, "orchestrator")
		cfg.HealthListen = "127.0.0.1:0"
	})
	c.writeScript(t, "w.yaml", writeScript)
	addr := c.app.Addr(app.TargetOrchestrator)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	alice := xctv1.NewOrchestratorServiceClient(dial(t, addr, grpcx.WithTLS(files(dir, "client")), grpcx.WithToken(c.creds.Token(t, "alice"))))
	resp, err := alice.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	events := c.watchWith(t, ctx, alice, resp.GetRun().GetRunId())
	if last := events[len(events)-1]; last.Data["status"] != "done" {
		t.Fatalf("run over mTLS ended %v", last.Data)
	}
	if _, err := os.Stat(filepath.Join(c.workspace, "written.txt")); err != nil {
		t.Fatalf("the executor, called over mTLS, did not write: %v", err)
	}

	other := filepath.Join(t.TempDir(), "other")
	if _, err := devcerts.Write(other); err != nil {
		t.Fatal(err)
	}
	stranger := files(other, "client")
	stranger.CA = filepath.Join(dir, "ca.crt") // it trusts the cluster; the cluster does not trust it
	tests := []struct {
		name string
		opts []grpcx.DialOption
		want codes.Code
	}{
		{"certificate of another CA", []grpcx.DialOption{grpcx.WithTLS(stranger), grpcx.WithToken(c.creds.Token(t, "alice"))}, codes.Unavailable},
		{"service certificate of another CA", []grpcx.DialOption{grpcx.WithTLS(grpcx.TLSFiles{Cert: files(other, "orchestrator").Cert, Key: files(other, "orchestrator").Key, CA: stranger.CA})}, codes.Unavailable},
		{"no certificate", []grpcx.DialOption{grpcx.WithTLS(grpcx.TLSFiles{CA: stranger.CA}), grpcx.WithToken(c.creds.Token(t, "alice"))}, codes.Unavailable},
		{"plaintext", []grpcx.DialOption{grpcx.WithToken(c.creds.Token(t, "alice"))}, codes.Unavailable},
		{"certificate without a token", []grpcx.DialOption{grpcx.WithTLS(files(dir, "client"))}, codes.Unauthenticated},
		{"a service's certificate starting a run", []grpcx.DialOption{grpcx.WithTLS(files(dir, "validator"))}, codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := xctv1.NewOrchestratorServiceClient(dial(t, addr, tc.opts...))
			if _, err := client.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml"}); status.Code(err) != tc.want {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
		})
	}
	list, err := alice.ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil || len(list.GetRuns()) != 1 {
		t.Fatalf("runs: %v %v", list.GetRuns(), err)
	}

	// Probes that cannot speak mTLS use the plaintext health-only port,
	// which serves nothing else.
	probe := dial(t, c.app.HealthAddr())
	if r, err := healthpb.NewHealthClient(probe).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health port: %v %v", r, err)
	}
	if _, err := xctv1.NewOrchestratorServiceClient(probe).ListRuns(ctx, &xctv1.ListRunsRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("the health port serves more than health: %v", err)
	}
}
