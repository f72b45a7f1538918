package attack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/services/executor"
)

// signInOutside signs a principal in to the debugger with its own link,
// outside any browser (a client may send any Origin): the session cookie
// and the session's path.
func signInOutside(t *testing.T, ctx context.Context, base, token, chain string) (*http.Cookie, string) {
	t.Helper()
	_, code := debuggerLink(t, ctx, base, token, chain)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/login", strings.NewReader(url.Values{"code": {code}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := noRedirect().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "xct_debugger_session" {
			return ck, ck.Path
		}
	}
	t.Fatalf("sign-in outside a browser: %s, no session cookie in %v", resp.Status, resp.Cookies())
	return nil, ""
}

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// approveInPage approves a run's first step with the debugger's own
// Approve button, in the page the browser is on (#/approvals).
func approveInPage(t *testing.T, b *browser.Browser, runID, reason string) {
	t.Helper()
	card := fmt.Sprintf(`article.approval[data-run=%q][data-step="1"]`, runID)
	b.Until(t, "the pending step", "!!document.querySelector("+strconv.Quote(card)+")")
	b.Do(t, "focus the reason", chromedp.Focus(chromedp.CSS(card+` input[name="reason"]`)))
	b.Do(t, "type the reason", chromedp.KeyEvent(reason))
	b.Do(t, "approve", chromedp.Click(chromedp.CSS(card+" button.approve")))
	b.Until(t, "the decision", `!!document.querySelector('#decided p.decided') || [...document.querySelectorAll('[role=alert]')].length > 0`)
}

// TestAttackDebuggerSessionPlantedFromAnotherPort: bob (approver) is
// signed in to the debugger (plaintext, 127.0.0.1) with his own link.
// carol (operator) runs a server on another port of 127.0.0.1, which
// bob's browser visits. Cookies do not separate ports: on main,
//   - the sign-in hint (Path=/) went to carol's server, which used it on
//     her own sign-in to end bob's session;
//   - carol's server set a cookie of her own session for her session's
//     path (which she knows: she signed in herself) and sent bob's
//     browser there: the debugger served bob's browser as carol (login
//     CSRF), and the page offered bob the Cancel carol may use, which
//     cancelled alice's run in carol's name.
//
// Now a session is bound to a key only the debugger's origin holds (the
// sign-in's answer stores it in the page's localStorage; every API call
// sends it), so a cookie planted from another origin authenticates
// nothing; no cookie of the debugger's goes to another port; and only a
// page holding a session's key can end it.
func TestAttackDebuggerSessionPlantedFromAnotherPort(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	close(gate)
	var deployed atomic.Int64
	c := startBindCluster(t, withProposer("gate", gateModel{gate: gate}), func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
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
	own, _ := debuggerLink(t, ctx, base, c.creds.Token(t, "bob"), runID)
	b.Do(t, "bob opens his link", chromedp.Navigate(own))
	b.Until(t, "the sign-in page", `!!document.querySelector('#continue')`)
	b.Do(t, "bob continues", chromedp.Click(chromedp.CSS("#continue")))
	b.Until(t, "bob on the chain", `location.hash.split('?')[0] === '#/chain/`+runID+`' && document.querySelectorAll('g.node').length > 0`)
	home := browser.Eval[string](t, b, `location.pathname`)
	// The live stream (EventSource: the key in its query) is bob's too.
	b.Until(t, "the live stream open", `!!document.querySelector('#live-status.live-open')`)

	// carol's own session, made outside the browser.
	carol, carolHome := signInOutside(t, ctx, base, c.creds.Token(t, "carol"), runID)
	if carolHome == home || !strings.HasPrefix(carolHome, "/s/") {
		t.Fatalf("carol's session path %q (bob's %q)", carolHome, home)
	}

	// carol's server on another port of 127.0.0.1: /look keeps what the
	// browser sends; /plant sets carol's session cookie for her session's
	// path and sends the browser there.
	var mu sync.Mutex
	var got []*http.Cookie
	mux := http.NewServeMux()
	mux.HandleFunc("/look", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Cookies()...)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><title>done</title>`))
	})
	mux.HandleFunc("/plant", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "xct_debugger_session", Value: carol.Value, Path: carolHome, HttpOnly: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, base+carolHome+"#/chain/"+runID, http.StatusFound)
	})
	evil := httptest.NewServer(mux)
	defer evil.Close()
	if !strings.HasPrefix(evil.URL, "http://127.0.0.1:") {
		t.Fatalf("the other server is at %s", evil.URL)
	}

	// 1. What bob's browser sends the other port: nothing of the
	// debugger's. carol signs herself in again with it, as a hostile
	// client says whatever it likes of where it comes from.
	b.Do(t, "bob's browser on the other port", chromedp.Navigate(evil.URL+"/look"))
	b.Until(t, "the other page", `document.title === 'done'`)
	mu.Lock()
	stolen := append([]*http.Cookie(nil), got...)
	mu.Unlock()
	for _, ck := range stolen {
		if strings.HasPrefix(ck.Name, "xct_debugger") {
			t.Errorf("bob's browser sent the other port the debugger's cookie %s", ck.Name)
		}
	}
	_, code := debuggerLink(t, ctx, base, c.creds.Token(t, "carol"), runID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/login", strings.NewReader(url.Values{"code": {code}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for _, ck := range stolen {
		req.AddCookie(ck)
	}
	resp, err := noRedirect().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	b.Do(t, "back to bob's debugger", chromedp.Navigate(base+home+"#/chain/"+runID))
	b.Until(t, "bob's chain, or a sign-in form", `document.querySelectorAll('g.node').length > 0 || !!document.querySelector('#signin-token')`)
	if browser.Eval[bool](t, b, `!!document.querySelector('#signin-token')`) {
		t.Errorf("carol's sign-in with what bob's browser sent her port ended bob's session")
	}

	// 2. carol's cookie, planted from her port for her session's path.
	b.Do(t, "bob's browser sent through the planting page", chromedp.Navigate(evil.URL+"/plant"))
	b.Until(t, "the debugger at carol's path", `location.host === '`+tracerHost+`' && location.pathname === '`+carolHome+`' && `+
		`(!!document.querySelector('#cancel-run') || !!document.querySelector('#signin-token') || !!document.querySelector('[role=alert]'))`)
	if browser.Eval[bool](t, b, `!!document.querySelector('#cancel-run')`) {
		// The page serves bob as carol: what he does there is hers.
		b.Do(t, "bob's browser cancels", chromedp.Click(chromedp.CSS("#cancel-run")))
		b.Do(t, "focus the reason", chromedp.Focus(chromedp.CSS("#cancel-reason")))
		b.Do(t, "type it", chromedp.KeyEvent("planted"))
		b.Do(t, "confirm", chromedp.Click(chromedp.CSS("#cancel-confirm")))
		b.Until(t, "the cancellation", `!!document.querySelector('#cancel-result') || !!document.querySelector('[role=alert]')`)
		run := c.waitRun(t, "alice", runID)
		t.Fatalf("carol's cookie planted from another port made bob's browser act as carol: the page offered Cancel, and the run is %s (%s)",
			run.GetStatus(), run.GetMessage())
	}
	if !browser.Eval[bool](t, b, `!!document.querySelector('#signin-token')`) {
		t.Fatalf("the page at carol's path: %s", browser.Eval[string](t, b, `document.body.innerText`))
	}

	// bob's own approval, with his page's button, is his.
	b.Do(t, "bob's approvals", chromedp.Navigate(base+home+"#/approvals"))
	approveInPage(t, b, runID, "reviewed")
	l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: runID, All: true})
	if err != nil || len(l.GetApprovals()) != 1 {
		t.Fatalf("approvals: %v %v", l, err)
	}
	if a := l.GetApprovals()[0]; a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || a.GetDecidedBy() != "bob" || a.GetReason() != "reviewed" {
		t.Fatalf("bob's approval in his browser: %s by %q (%q): %s", a.GetState(), a.GetDecidedBy(), a.GetReason(), browser.Eval[string](t, b, `document.body.innerText`))
	}
	if run := c.waitRun(t, "bob", runID); deployed.Load() != 1 || run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("after bob's approval: %d deploys, run %s", deployed.Load(), run.GetStatus())
	}
}
