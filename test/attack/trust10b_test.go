package attack

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/validator"
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

// runStatusOf is run id's status as GetRun reads it (as alice).
func (c *bindCluster) runStatusOf(t *testing.T, ctx context.Context, id string) xctv1.RunStatus {
	t.Helper()
	r, err := c.orchestratorAs(t, "alice").GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatalf("get run %s: %v", id, err)
	}
	return r.GetRun().GetStatus()
}

// TestAttackLookAlikeNameCancelsAnothersRun: the identity provider holds
// "sam" and, as other users, "SAM" and "ſam" (a long s; a provider that
// compares names as written keeps them apart). The orchestrator compared
// a run's owner with the caller case-insensitively with Unicode folding,
// so either of the others cancelled sam's run as its own. Now a name
// grants only itself: both are refused and the run keeps running; sam
// still cancels it.
func TestAttackLookAlikeNameCancelsAnothersRun(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// debuggerLink asks the tracer's debugger for a one-time link with token
// and returns it (absolute) and its code.
func debuggerLink(t *testing.T, ctx context.Context, base, token, chain string) (string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/login-links", strings.NewReader(`{"chain":"`+chain+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-XCT-CSRF", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Path string `json:"path"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("link: %s %v", resp.Status, err)
	}
	u, err := url.Parse(base + out.Path)
	if err != nil {
		t.Fatal(err)
	}
	return u.String(), u.Query().Get("code")
}

// TestAttackDebuggerLinkSignsInTheOpener: bob (approver) has the debugger
// open in his browser, signed in through his own link. mallory (another
// approver) makes a link for herself and gets bob's browser to it from a
// page of another site: by sending him there (a link in a chat, or the
// page's script), and by a form that posts her code to /login by itself.
// Opening a link signed the browser in at once, silently replacing bob's
// session, so the approval bob then gave in the debugger was recorded as
// mallory's (decided_by mallory on main). Now opening a link only shows
// whom it would sign in as, another site's post is refused, and bob's
// decision is his. Pages of another site, and of another origin of the
// same site, that try to decide or cancel with bob's session themselves
// (fetch with and without the CSRF header, a text/plain form) change
// nothing (held before too; tested now).
func TestAttackDebuggerLinkSignsInTheOpener(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	close(gate)
	var deployed atomic.Int64
	p := newIDP(t)
	c := startBindCluster(t, p.option(), withProposer("gate", gateModel{gate: gate}), func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const runID = "run-for-bob"
	if _, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{RunId: runID, Goal: "deploy", Model: "func:gate"}); err != nil {
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
	tracerHost := c.app.Tracer.HTTPAddr()
	base := "http://" + tracerHost

	b := browser.New(t, 2*time.Minute)
	// bob signs in with his own link.
	own, _ := debuggerLink(t, ctx, base, c.creds.Token(t, "bob"), runID)
	b.Do(t, "bob opens his link", chromedp.Navigate(own))
	b.Until(t, "bob's sign-in", `location.hash.split('?')[0] === '#/chain/`+runID+`' || !!document.querySelector('#continue')`)
	if browser.Eval[bool](t, b, `!!document.querySelector('#continue')`) {
		b.Do(t, "bob continues", chromedp.Click(chromedp.CSS("#continue")))
	}
	b.Until(t, "bob on the chain", `location.hash.split('?')[0] === '#/chain/`+runID+`'`)
	home := browser.Eval[string](t, b, `location.pathname`) // the session's own path

	// mallory's page, on another site (localhost, not 127.0.0.1).
	token := p.token(t, "mallory", "approver")
	sent, _ := debuggerLink(t, ctx, base, token, runID)
	_, posted := debuggerLink(t, ctx, base, token, runID)
	mux := http.NewServeMux()
	mux.HandleFunc("/go", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprintf(w, `<!doctype html><script>location.href = %q</script>`, sent)
	})
	mux.HandleFunc("/post", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/login"><input type="hidden" name="code" value="%s"></form>`+
			`<script>document.getElementById('f').submit()</script>`, base, posted)
	})
	// Pages that try to decide or cancel with bob's session themselves: a
	// script's fetch with the CSRF header (a preflight the debugger does
	// not answer), one without it, and a form posting JSON as text/plain.
	body := `{"run_id": "` + runID + `", "step": 1, "approve": false, "reason": "csrf"}`
	mux.HandleFunc("/fetch", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprintf(w, `<!doctype html><script>
const b = %q;
Promise.allSettled([
  fetch(%q, {method: 'POST', credentials: 'include', headers: {'Content-Type': 'application/json', 'X-XCT-CSRF': '1'}, body: b}),
  fetch(%q, {method: 'POST', mode: 'no-cors', credentials: 'include', headers: {'Content-Type': 'text/plain'}, body: b}),
  fetch(%q, {method: 'POST', mode: 'no-cors', credentials: 'include', headers: {'Content-Type': 'text/plain'}, body: '{"run_id": "`+runID+`", "reason": "csrf"}'}),
]).then(() => { document.title = 'done'; });
</script>`, body, base+"/api/approvals/decide", base+"/api/approvals/decide", base+"/api/runs/cancel")
	})
	mux.HandleFunc("/form", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprintf(w, `<!doctype html><form id="f" method="post" enctype="text/plain" action="%s/api/approvals/decide">`+
			`<input type="hidden" name='{"run_id": "%s", "step": 1, "approve": false, "reason": "csrf", "x": "' value='"}'></form>`+
			`<script>document.getElementById('f').submit()</script>`, base, runID)
	})
	evil := httptest.NewServer(mux)
	defer evil.Close()
	// Another site (localhost), and another origin of the same site
	// (127.0.0.1 on another port: SameSite cookies go there too).
	for _, evilURL := range []string{strings.Replace(evil.URL, "127.0.0.1", "localhost", 1), evil.URL} {
		for _, page := range []string{"/go", "/post", "/form"} {
			b.Do(t, "bob's browser on mallory's page "+evilURL+page, chromedp.Navigate(evilURL+page))
			b.Until(t, "the tracer's answer to "+page, `location.host === '`+tracerHost+`' && document.readyState === 'complete'`)
		}
		b.Do(t, "bob's browser on "+evilURL+"/fetch", chromedp.Navigate(evilURL+"/fetch"))
		b.Until(t, "the page's requests", `document.title === 'done'`)
	}
	l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: runID})
	if err != nil || len(l.GetApprovals()) != 1 {
		t.Fatalf("after the pages, the approval is no longer pending: %v %v", l, err)
	}
	if st := c.runStatusOf(t, ctx, runID); st != xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL {
		t.Fatalf("after the pages, the run is %s", st)
	}

	// bob approves in the debugger, with the page's own Approve button.
	b.Do(t, "back to the debugger", chromedp.Navigate(base+home+"#/approvals"))
	b.Until(t, "the debugger", `location.host === '`+tracerHost+`' && document.readyState === 'complete'`)
	approveInPage(t, b, runID, "reviewed")
	l, err = bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: runID, All: true})
	if err != nil || len(l.GetApprovals()) != 1 {
		t.Fatalf("approvals: %v %v", l, err)
	}
	if a := l.GetApprovals()[0]; a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || a.GetDecidedBy() != "bob" {
		t.Fatalf("bob's approval in his browser: %s by %q (%s), want approved by bob", a.GetState(), a.GetDecidedBy(),
			browser.Eval[string](t, b, `document.body.innerText`))
	}
	run := c.waitRun(t, "bob", runID)
	if n := deployed.Load(); n != 1 || run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("after bob's approval: %d deploys, run %s (%s)", n, run.GetStatus(), run.GetMessage())
	}
}

// TestAttackOnePrincipalsRunsHoldEveryApprovalWait: a run waiting for an
// approval holds a consumer on the approvals' stream, and a stream's
// consumers are bounded for everyone (natsauth.MaxConsumersPerStream; 12
// on this test's server, to reach it with few runs). alice started runs
// whose steps need a human until the bound was reached; then dev's run,
// whose deploy needed bob's approval, could not wait for it and failed,
// and bob had nothing to approve (so on main, and with --max-runs set
// past the stream's bound). Now alice's runs past --max-runs are refused
// with RESOURCE_EXHAUSTED naming the limit, dev's run waits and deploys
// on bob's approval, and alice may start again once one of hers ends.
func TestAttackOnePrincipalsRunsHoldEveryApprovalWait(t *testing.T) {
	t.Parallel()
	const bound = 4
	ns := testutil.RunJetStreamWith(t, natsembed.Config{MaxConsumersPerStream: 12})
	gate := make(chan struct{})
	close(gate)
	var deployed atomic.Int64
	c := startBindClusterOn(t, ns, withProposer("gate", gateModel{gate: gate}), func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
		cfg.Orchestrator.MaxRuns = bound
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	alice, bob := c.orchestratorAs(t, "alice"), c.validatorAs(t, "bob")
	pending := func(run string) error {
		l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: run})
		if err != nil {
			return err
		}
		if len(l.GetApprovals()) != 1 {
			return fmt.Errorf("run %s: %d pending approvals", run, len(l.GetApprovals()))
		}
		return nil
	}
	var refused error
	started := 0
	for i := range 20 {
		id := fmt.Sprintf("alice-%d", i)
		if _, refused = alice.StartRun(ctx, &xctv1.StartRunRequest{RunId: id, Goal: "deploy", Model: "func:gate"}); refused != nil {
			break
		}
		started++
		testutil.Eventually(t, 30*time.Second, func() error { return pending(id) })
	}
	if started != bound || status.Code(refused) != codes.ResourceExhausted || !strings.Contains(refused.Error(), "--max-runs") {
		t.Fatalf("alice started %d runs, then: %v; want %d, then RESOURCE_EXHAUSTED naming --max-runs", started, refused, bound)
	}

	// dev's run still gets its approval.
	const devRun = "dev-run"
	if _, err := c.orchestratorAs(t, "dev").StartRun(ctx, &xctv1.StartRunRequest{RunId: devRun, Goal: "deploy", Model: "func:gate"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error { return pending(devRun) })
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: devRun, Step: "1", Approve: true, Reason: "reviewed"}); err != nil {
		t.Fatalf("bob approves dev's step: %v", err)
	}
	if run := c.waitRun(t, "dev", devRun); run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || deployed.Load() != 1 {
		t.Fatalf("dev's run: %s (%s), %d deploys", run.GetStatus(), run.GetMessage(), deployed.Load())
	}

	// One of alice's runs ends: she may start another.
	if _, err := alice.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: "alice-0", Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	c.waitRun(t, "alice", "alice-0")
	testutil.Eventually(t, 30*time.Second, func() error {
		_, err := alice.StartRun(ctx, &xctv1.StartRunRequest{RunId: "alice-again", Goal: "deploy", Model: "func:gate"})
		return err
	})
}

// TestAttackCrewRunEscapesARuleOnItsModel: the policy denies writes by one
// model (run.model names it). A run on that model is denied; the same
// model as a crew's agent wrote the file, since a crew run's run.model was
// "crew:NAME" for every step, whichever model proposed it (on main the
// crew's write succeeded). Now run.model in a crew run is the model that
// proposed the step, and the write is denied as in a plain run.
func TestAttackCrewRunEscapesARuleOnItsModel(t *testing.T) {
	t.Parallel()
	policy := `rules:
  - {id: allow-all, effect: allow, tools: ["*"]}
  - id: no-writes-by-big
    effect: deny
    tools: ["fs.write"]
    when: 'run.model.startsWith("scripted:big.yaml")'
`
	crewFile := `crew: one-writer
agents:
  - name: writer
    description: writes
    profile:
      type: executor
      capabilities: [file_access]
      model: scripted:big.yaml#writer
      reliability_score: 0.9
    tools: [fs.write]
handoffs:
  entry: writer
`
	c := startBindCluster(t, withTools(t, "", policy))
	c.writeScript(t, "big.yaml", `name: big
steps:
  - next_step: {tool: fs.write, arguments: {path: notes.txt, content: "by big"}, goal: write}
  - done: true
    message: done
`)
	plain := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:big.yaml"})
	if got := stepErrors(plain); fmt.Sprint(got) != "[POLICY_DENIED]" {
		t.Fatalf("the plain run's steps: %v (%s: %s)", got, plain.GetStatus(), plain.GetMessage())
	}
	crewRun := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Crew: []byte(crewFile), CrewFile: "crew.yaml"})
	if got := stepErrors(crewRun); fmt.Sprint(got) != "[POLICY_DENIED]" {
		t.Errorf("the crew run's steps: %v (%s: %s), want the write denied as in the plain run", got, crewRun.GetStatus(), crewRun.GetMessage())
	}
	if body, ok := readWS(t, c.workspace, "notes.txt"); ok {
		t.Errorf("notes.txt written by the crew's agent on the denied model: %q", body)
	}

	// xct policy check judges the crew's chain as the validator did.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "alice"))
	var events []lctl.Event
	testutil.Eventually(t, 20*time.Second, func() error {
		resp, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: crewRun.GetRunId()})
		if err != nil {
			return err
		}
		events = events[:0]
		for _, e := range resp.GetEvents() {
			events = append(events, lctlpb.FromProto(e))
		}
		if n := len(events); n == 0 || events[n-1].Type != lctl.TypeRunFinished {
			return fmt.Errorf("%d events, the run's end not among them yet", n)
		}
		return nil
	})
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := validator.LoadPolicyFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	rechecked, err := validator.Recheck(set, nil, events)
	if err != nil {
		t.Fatal(err)
	}
	if len(rechecked) != 1 || rechecked[0].Changed() || rechecked[0].Now.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_DENY {
		t.Errorf("rechecked: %+v", rechecked)
	}
}

// TestAttackCancelReasonsBreakEveryonesListRuns: a cancel's reason went on
// the run's end as it was, unbounded (gRPC takes 16 MiB): alice cancelled
// three runs of her own with 6 MiB reasons, and every reader's ListRuns
// (dave's, an auditor) failed, its answer larger than a gRPC message (on
// main). Now a reason is valid UTF-8 of at most 4 KiB (INVALID_ARGUMENT
// otherwise, nothing cancelled), as a decision's; the model a run names is
// bounded too (and not echoed whole in the refusal).
func TestAttackCancelReasonsBreakEveryonesListRuns(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	c := startBindCluster(t, withProposer("gate", gateModel{gate: gate}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := c.orchestratorAs(t, "alice")
	huge := strings.Repeat("x", 6<<20)
	for i := range 3 {
		id := fmt.Sprintf("long-reason-%d", i)
		if _, err := alice.StartRun(ctx, &xctv1.StartRunRequest{RunId: id, Goal: "g", Model: "func:gate"}); err != nil {
			t.Fatal(err)
		}
		_, err := alice.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: huge})
		if status.Code(err) != codes.InvalidArgument || len(err.Error()) > 1024 {
			t.Errorf("cancel with a 6 MiB reason: %.200v, want INVALID_ARGUMENT (short)", err)
		}
	}
	for _, bad := range []string{strings.Repeat("é", 2049)} {
		if _, err := alice.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: "long-reason-0", Reason: bad}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("cancel with reason %.20q…: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	l, err := c.orchestratorAs(t, "dave").ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil || len(l.GetRuns()) != 3 {
		t.Fatalf("dave's ListRuns: %d runs, %v", len(l.GetRuns()), err)
	}
	for _, r := range l.GetRuns() {
		if r.GetStatus() != xctv1.RunStatus_RUN_STATUS_RUNNING {
			t.Errorf("run %s after a refused cancel: %s", r.GetRunId(), r.GetStatus())
		}
	}
	if _, err := alice.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: "long-reason-0", Reason: strings.Repeat("y", 4096)}); err != nil {
		t.Fatalf("cancel with a 4 KiB reason: %v", err)
	}
	_, err = alice.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "openai:" + strings.Repeat("m", 1<<20)})
	if status.Code(err) != codes.InvalidArgument || len(err.Error()) > 1024 {
		t.Errorf("a run on a 1 MiB model name: %.200v, want INVALID_ARGUMENT (short)", err)
	}
	close(gate)
}

// wordyModel finishes every run at once with a done message as long as a
// decision may be (wire.MaxDecisionBytes, less the JSON around it).
type wordyModel struct{}

func (wordyModel) Name() string { return "wordy" }
func (wordyModel) Close() error { return nil }
func (wordyModel) Propose(context.Context, *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	out, err := json.Marshal(map[string]any{"done": true, "message": strings.Repeat("w", wire.MaxDecisionBytes-64)})
	return &xctv1.ProposeResponse{Output: string(out)}, err
}

// TestAttackLongRunsBreakEveryonesListRuns: ListRuns gave each run whole:
// its goal (64 KiB), labels (64 of 1 KiB) and its end's message (the
// model's done message, up to 256 KiB). 48 such runs of alice's (a
// hostile model's words, and her own) made every reader's ListRuns of the
// default 100 larger than a gRPC message, and it failed (dave's, on main).
// A list is a summary now: its goal and message are cut at 1 KiB, labels
// longer than 1 KiB in all are left out (GetRun has them whole), and a
// limit above 1000 is 1000.
func TestAttackLongRunsBreakEveryonesListRuns(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, withProposer("wordy", wordyModel{}))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	alice := c.orchestratorAs(t, "alice")
	labels := map[string]string{}
	for i := range 64 {
		labels[fmt.Sprintf("l%02d", i)] = strings.Repeat("v", 1000)
	}
	goal := strings.Repeat("g", 64<<10)
	const runs = 48
	for i := range runs {
		if _, err := alice.StartRun(ctx, &xctv1.StartRunRequest{RunId: fmt.Sprintf("wordy-%02d", i), Goal: goal, Labels: labels, Model: "func:wordy"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range runs {
		c.waitRun(t, "alice", fmt.Sprintf("wordy-%02d", i))
	}
	dave := c.orchestratorAs(t, "dave")
	l, err := dave.ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil || len(l.GetRuns()) != runs {
		t.Fatalf("dave's ListRuns: %d runs, %.200v", len(l.GetRuns()), err)
	}
	for _, r := range l.GetRuns() {
		if len(r.GetGoal()) > 1100 || len(r.GetMessage()) > 1100 || len(r.GetLabels()) != 0 || !strings.HasPrefix(r.GetGoal(), "ggg") {
			t.Fatalf("run %s in the list: goal %d bytes, message %d, %d labels", r.GetRunId(), len(r.GetGoal()), len(r.GetMessage()), len(r.GetLabels()))
		}
	}
	if l, err := dave.ListRuns(ctx, &xctv1.ListRunsRequest{Limit: 1 << 30}); err != nil || len(l.GetRuns()) != runs {
		t.Fatalf("dave's ListRuns of all: %d runs, %.200v", len(l.GetRuns()), err)
	}
	got, err := dave.GetRun(ctx, &xctv1.GetRunRequest{RunId: "wordy-00"})
	if err != nil || got.GetRun().GetGoal() != goal || len(got.GetRun().GetLabels()) != 64 || len(got.GetRun().GetMessage()) < 200<<10 {
		t.Fatalf("GetRun: goal %d bytes, %d labels, message %d, %v", len(got.GetRun().GetGoal()), len(got.GetRun().GetLabels()), len(got.GetRun().GetMessage()), err)
	}
}

// bulkyModel proposes one deploy whose target is ~250 KiB, then stops.
type bulkyModel struct{}

func (bulkyModel) Name() string { return "bulky" }
func (bulkyModel) Close() error { return nil }
func (bulkyModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if len(req.GetHistory()) > 0 {
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "stop"}`}, nil
	}
	out, err := json.Marshal(map[string]any{"next_step": map[string]any{"tool": "test.deploy", "arguments": map[string]any{
		"target": strings.Repeat("t", 250<<10)}}})
	return &xctv1.ProposeResponse{Output: string(out)}, err
}

// TestAttackBulkyApprovalsBreakEveryonesApprovalList: alice's runs (within
// --max-runs) each wait for an approval of a deploy with ~250 KiB of
// arguments (the model's words). 70 of them made every unfiltered
// ListApprovals larger than a gRPC message: bob, the approver, could not
// list what waits for him, nor could the debugger's approvals page (on
// main). Now a list that would pass 8 MiB leaves the largest proposals'
// arguments out, decided ones first, each replaced by a note naming its
// size and saying to list the run's approvals; a run's own list has its
// pending approval whole, and bob decides it as before.
func TestAttackBulkyApprovalsBreakEveryonesApprovalList(t *testing.T) {
	t.Parallel()
	var deployed atomic.Int64
	c := startBindCluster(t, withProposer("bulky", bulkyModel{}), func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
	})
	// Each call has a minute of its own, each wait below its own bound.
	// One 120 s context for the whole test ran out at load ~25 with every
	// step within its bounds (the waits alone may take 120 s).
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(t.Context(), time.Minute) }
	alice, bob := c.orchestratorAs(t, "alice"), c.validatorAs(t, "bob")
	const runs = 70
	for i := range runs {
		ctx, cancel := call()
		_, err := alice.StartRun(ctx, &xctv1.StartRunRequest{RunId: fmt.Sprintf("bulky-%02d", i), Goal: "deploy", Model: "func:bulky"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		ctx, cancel := call()
		defer cancel()
		l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: fmt.Sprintf("bulky-%02d", runs-1)})
		if err != nil {
			return err
		}
		if len(l.GetApprovals()) != 1 {
			return fmt.Errorf("the last run's approvals: %d", len(l.GetApprovals()))
		}
		return nil
	})
	var list []*xctv1.Approval
	testutil.Eventually(t, 60*time.Second, func() error {
		ctx, cancel := call()
		defer cancel()
		l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{})
		if err != nil {
			return fmt.Errorf("bob's list of every pending approval: %w", err)
		}
		if list = l.GetApprovals(); len(list) != runs {
			return fmt.Errorf("%d pending approvals listed, want %d", len(list), runs)
		}
		return nil
	})
	left := 0
	for _, a := range list {
		target := a.GetProposal().GetArguments().GetFields()["target"].GetStringValue()
		switch {
		case len(target) == 250<<10:
		case strings.Contains(target, "list run "+a.GetRunId()+"'s approvals"):
			left++
		default:
			t.Fatalf("%s in the list: target %.100q", a.GetRunId(), target)
		}
	}
	if left == 0 || left == runs {
		t.Fatalf("%d of %d approvals' arguments left out of the list", left, runs)
	}
	ctx, cancel := call()
	defer cancel()
	one, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: "bulky-00"})
	if err != nil || len(one.GetApprovals()) != 1 || len(one.GetApprovals()[0].GetProposal().GetArguments().GetFields()["target"].GetStringValue()) != 250<<10 {
		t.Fatalf("bulky-00's own list: %v", err)
	}
	ctx, cancel = call()
	defer cancel()
	if _, err := bob.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: "bulky-00", Step: "1", Approve: true, Reason: "reviewed"}); err != nil {
		t.Fatal(err)
	}
	if r := c.waitRun(t, "bob", "bulky-00"); r.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || deployed.Load() != 1 {
		t.Fatalf("bulky-00: %s, %d deploys", r.GetStatus(), deployed.Load())
	}
}

func strAttr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// TestAttackOTLPAgentsBreakEveryonesChainList: alice (a submitter, who may
// export traces) exported four traces of 5000 agent spans each, every
// agent named anew with 1 KiB: each chain's summary listed its 5000
// agents, and every reader's ListChains of the default 100 was larger than
// a gRPC message (dave's failed on main). A list's summary now names at
// most 64 agents of at most 256 bytes; GetChain's names them all.
//
// Here the traces carry 2500 agents each, named with 2 KiB (the most a
// span's attribute keeps, lctl/otlp's maxValue): the same 19 MiB of names
// in the four summaries, past the 16 MiB message, from half the spans.
// The deadline covers the 10,000 spans' ingest under -race on a loaded
// two-core machine. When the tracer appended a trace's events one at a
// time, at load ~12 the test (then 20,000 spans) took 113 s once and ran
// out of the 120 s it had before once (session 12); at load ~15 each
// export took about 50 s (3m22s in all, session 14), and at load ~25 the
// 5 minutes it had then ran out in the second export (session 13). The
// tracer writes them in atomic batches now (session 15): with 20,000
// spans, 171 and 216 s under -race at load 16-24 against 219 s before at
// load 11-18, the machine's CPU being the bound.
func TestAttackOTLPAgentsBreakEveryonesChainList(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	exporter := coltracepb.NewTraceServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "alice"))
	const traces, agents, nameBytes = 4, 2500, 2000
	for tr := range traces {
		traceID := []byte{0x5e, 0xc0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, byte(tr)}
		now := uint64(time.Now().UnixNano())
		spans := make([]*tracepb.Span, agents)
		for i := range spans {
			id := make([]byte, 8)
			binary.BigEndian.PutUint64(id, uint64(i+1))
			spans[i] = &tracepb.Span{TraceId: traceID, SpanId: id, Name: "invoke_agent",
				StartTimeUnixNano: now + uint64(i), EndTimeUnixNano: now + uint64(i) + 10,
				Attributes: []*commonpb.KeyValue{strAttr("gen_ai.operation.name", "invoke_agent"),
					strAttr("gen_ai.agent.name", fmt.Sprintf("%06d%s", i, strings.Repeat("a", nameBytes)))}}
		}
		if _, err := exporter.Export(ctx, &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}); err != nil {
			t.Fatalf("export %d: %v", tr, err)
		}
	}
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dave"))
	var first string
	testutil.Eventually(t, 60*time.Second, func() error {
		l, err := tracer.ListChains(ctx, &lctlv1.ListChainsRequest{})
		if err != nil {
			return fmt.Errorf("dave's ListChains: %w", err)
		}
		if len(l.GetChains()) != traces {
			return fmt.Errorf("%d chains listed, want %d", len(l.GetChains()), traces)
		}
		for _, ch := range l.GetChains() {
			if n := len(ch.GetAgents()); n != 64 {
				return fmt.Errorf("chain %s lists %d agents, want 64 of its %d", ch.GetChainId(), n, agents)
			}
			for _, a := range ch.GetAgents() {
				if len(a) > 256 {
					t.Fatalf("an agent of %d bytes in the list", len(a))
				}
			}
		}
		first = l.GetChains()[0].GetChainId()
		return nil
	})
	// The chain's own summary names them all (once every span is on it).
	testutil.Eventually(t, 60*time.Second, func() error {
		got, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: first, PageSize: 1})
		if err != nil {
			return err
		}
		if n := len(got.GetSummary().GetAgents()); n != agents {
			return fmt.Errorf("GetChain %s: %d agents, want %d", first, n, agents)
		}
		return nil
	})
}
