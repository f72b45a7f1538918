package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// typeInto replaces the value of an input the way a person does: focus,
// select all, type.
func typeInto(t *testing.T, b *browser.Browser, sel, text string) {
	t.Helper()
	b.Do(t, "focus "+sel, chromedp.Focus(chromedp.CSS(sel)))
	browser.Eval[bool](t, b, `(document.activeElement.select(), true)`)
	b.Do(t, "type into "+sel, chromedp.KeyEvent(text))
}

// signedIn is the script that stores token as the page's sign-in form does
// (for the tab: sessionStorage), for browser.OpenWith.
func signedIn(token string) string {
	return `sessionStorage.setItem('xct-debugger-token', ` + strconv.Quote(token) + `)`
}

// The debugger the tracer serves, in headless Chromium against the real
// cluster: a step that waits for a human is listed with its proposal; the
// page refuses to let the run's own principal approve (the validator's
// rule, reached through the page); another person approves it from the
// page and the tool runs; the chain view follows the run live, without a
// reload, to its end.
func TestDebuggerApprovesAndFollowsLive(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf(approvalPolicy, "1h")), 0o600); err != nil {
		t.Fatal(err)
	}
	tool := &deployTool{ledger: map[string]int{}}
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Validator.PolicyFile = policy
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
		o.ExtraTools = []executor.Tool{tool}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("deployer", &deployer{targets: []string{"blue", "green"}}))
	})
	v := c.validatorAs(t, "bob")
	url := "http://" + c.app.Tracer.HTTPAddr() + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	pending(t, v, id, 1)

	b := browser.New(t, 3*time.Minute)
	art := browser.Artifacts(t)
	card := fmt.Sprintf(`article.approval[data-run=%q][data-step="1"]`, id)
	// The page calls with the token kept for the tab (what its sign-in
	// form stores): first alice's, the run's principal.
	signIn := func(who string) {
		b.OpenWith(t, "signed in as "+who, url+"#/approvals", signedIn(c.creds.Token(t, who)))
	}
	signIn("alice")
	b.Do(t, "open the approvals", chromedp.Navigate(url+"#/approvals"))
	b.Until(t, "the pending step", "document.querySelector("+strconv.Quote(card)+")")
	text := b.Text(t, card)
	for _, want := range []string{"test.deploy", "deploys-need-a-human", "deploys need a human", `"target": "blue"`, "alice"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the approval card lacks %q:\n%s", want, text)
		}
	}
	b.Screenshot(t, art, "debugger-approvals")

	// The run's principal cannot approve its own step, from the page
	// either (signed in with her token, the page decides as her).
	b.Do(t, "approve as alice", chromedp.Click(chromedp.CSS(card+" button.approve")))
	b.Until(t, "the refusal", `[...document.querySelectorAll('[role=alert]')].some(e => e.textContent.includes('PERMISSION_DENIED'))`)
	if tool.count("blue") != 0 {
		t.Fatal("the step ran after a refused self-approval")
	}

	// Bob approves: the validator records it and the tool runs.
	signIn("bob")
	b.Until(t, "the pending step", "document.querySelector("+strconv.Quote(card)+")")
	typeInto(t, b, card+` input[name="reason"]`, "change ticket 42")
	b.Do(t, "approve as bob", chromedp.Click(chromedp.CSS(card+" button.approve")))
	b.Until(t, "the decision", `document.querySelector('#decided')?.textContent.includes('approved')`)
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := tool.count("blue"); n != 1 {
			return fmt.Errorf("blue deployed %d times", n)
		}
		return nil
	})
	all, err := v.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: id, All: true})
	if err != nil {
		t.Fatal(err)
	}
	var decided *xctv1.Approval
	for _, a := range all.GetApprovals() {
		if a.GetStep() == 1 {
			decided = a
		}
	}
	if decided.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || decided.GetDecidedBy() != "bob" || decided.GetReason() != "change ticket 42" {
		t.Fatalf("step 1's approval after the page's decision: %v", decided)
	}

	// Step 2 waits. Open the chain: it is live.
	pending(t, v, id, 2)
	b.Do(t, "open the chain", chromedp.Navigate(url+"#/chain/"+id))
	b.Until(t, "the live stream", `document.querySelector('#live-status')?.textContent.includes('Live:')`)
	b.Until(t, "the waiting step", `!!document.querySelector('g.node[data-status="needs_approval"]')`)
	before, err := strconv.Atoi(b.Text(t, "#last-seq"))
	if err != nil {
		t.Fatal(err)
	}
	// Mark this page: a reload would lose the mark.
	browser.Eval[int](t, b, `window.__sameDocument = 42`)

	// Bob denies step 2 (with xct's client path): the run ends, and the
	// open page shows the new events as they arrive.
	if _, err := v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "2", Approve: false, Approver: "bob", Reason: "not on a Friday"}); err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, id)
	last := events[len(events)-1]
	if int(last.Seq) <= before {
		t.Fatalf("no events after the denial: last seq %d, page had %d", last.Seq, before)
	}
	b.Until(t, "the run's end", fmt.Sprintf(`document.querySelector('#last-seq')?.textContent === '%d'`, last.Seq))
	b.Until(t, "the denied step", `!!document.querySelector('g.node[data-status="denied"]')`)
	// The view followed the end of the chain.
	b.Until(t, "the state at the end", fmt.Sprintf(`document.querySelector('#state-seq')?.textContent === '%d' && !document.querySelector('section.state.busy')`, last.Seq))
	if got := b.Text(t, "#state-type"); got != last.Type {
		t.Fatalf("state shows a %q event at the end, the chain a %q", got, last.Type)
	}
	if browser.Eval[int](t, b, `window.__sameDocument ?? 0`) != 42 {
		t.Fatal("the page reloaded to show the new events")
	}
	b.Screenshot(t, art, "debugger-live")
	// The refused self-approval is the one failed request.
	b.Clean(t, "status of 403")
}

// The debugger's Deny button against the real cluster, on a file write
// whose preview is a unified diff with markup in it: the card shows the
// diff as text (each line marked + or -, the markup literal, nothing of it
// run); deny without a reason is refused on the page; with one, the
// validator records the denial and the write never happens.
func TestDebuggerDeniesAFileWriteShowingItsDiff(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(writesNeedApproval), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Validator.PolicyFile = policy
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
	})
	const before = "<h1>old</h1>\nkeep\n"
	page := filepath.Join(c.workspace, "site", "index.html")
	if err := os.MkdirAll(filepath.Dir(page), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	c.writeScript(t, "w.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: site/index.html, content: "<h1>new</h1>\nkeep\n<img src=x onerror=\"window.__xss=1\">\n"}, goal: rewrite the page}
  - done: true
`)
	v := c.validatorAs(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	a := pending(t, v, id, 1)
	diff := a.GetPreview().GetContent()
	if a.GetPreview().GetKind() != "diff" || !strings.Contains(diff, `+<img src=x onerror="window.__xss=1">`) || !strings.Contains(diff, "-<h1>old</h1>") {
		t.Fatalf("the validator's preview is not the diff this test needs (%q):\n%s", a.GetPreview().GetKind(), diff)
	}

	url := "http://" + c.app.Tracer.HTTPAddr() + "/"
	b := browser.New(t, 3*time.Minute)
	b.OpenWith(t, "open the approvals as bob", url+"#/approvals", signedIn(c.creds.Token(t, "bob")))
	card := fmt.Sprintf(`article.approval[data-run=%q][data-step="1"]`, id)
	b.Until(t, "the pending write", "document.querySelector("+strconv.Quote(card+" pre.diff-text")+")")

	// The diff is the validator's, as text, line by line.
	shown := browser.Eval[string](t, b, `document.querySelector(`+strconv.Quote(card+" pre.diff-text")+`).textContent`)
	if strings.TrimRight(shown, "\n") != strings.TrimRight(diff, "\n") {
		t.Fatalf("the page shows the diff\n%s\nthe validator\n%s", shown, diff)
	}
	lines := func(class string) []string {
		return browser.Eval[[]string](t, b, `[...document.querySelectorAll(`+strconv.Quote(card+" pre.diff-text span.dl."+class)+`)].map(e => e.textContent.trimEnd())`)
	}
	if got := lines("add"); strings.Join(got, "|") != `+<h1>new</h1>|+<img src=x onerror="window.__xss=1">` {
		t.Fatalf("added lines: %q", got)
	}
	if got := lines("del"); strings.Join(got, "|") != "-<h1>old</h1>" {
		t.Fatalf("removed lines: %q", got)
	}
	if got := lines("hunk"); len(got) != 1 || !strings.HasPrefix(got[0], "@@ ") {
		t.Fatalf("hunk headers: %q", got)
	}
	type found struct {
		Elements int  `json:"elements"`
		Global   bool `json:"global"`
	}
	injected := browser.Eval[found](t, b, `({
		elements: document.querySelectorAll('main img, [onerror]').length + [...document.querySelectorAll('main h1')].filter(h => h.textContent === 'new' || h.textContent === 'old').length,
		global: window.__xss !== undefined,
	})`)
	if injected.Elements != 0 || injected.Global {
		t.Fatalf("the diff's markup became elements or ran: %+v", injected)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-approval-diff")

	// Deny without a reason: the page asks for one and sends nothing.
	b.Do(t, "deny without a reason", chromedp.Click(chromedp.CSS(card+" button.deny")))
	b.Until(t, "the request for a reason", "document.querySelector("+strconv.Quote(card+" [role=alert]")+")?.textContent.includes('Give a reason to deny')")
	if p := pending(t, v, id, 1); p.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("after a deny without a reason: %v", p.GetState())
	}

	// Deny with a reason: the validator records it, the step stops.
	typeInto(t, b, card+` input[name="reason"]`, "not the homepage")
	b.Do(t, "deny as bob", chromedp.Click(chromedp.CSS(card+" button.deny")))
	b.Until(t, "the decision", `document.querySelector('#decided')?.textContent.includes('denied')`)
	all, err := v.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: id, All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetApprovals()) != 1 {
		t.Fatalf("approvals of the run: %v", all.GetApprovals())
	}
	if d := all.GetApprovals()[0]; d.GetState() != xctv1.ApprovalState_APPROVAL_STATE_DENIED || d.GetDecidedBy() != "bob" || d.GetReason() != "not the homepage" {
		t.Fatalf("the approval after the page's denial: %v", d)
	}
	events := c.watch(t, ctx, id)
	var got []string
	for _, e := range events {
		if e.Type == lctl.TypeVerdict || e.Type == orchestrator.TypeApprovalDecided || e.Type == lctl.TypeToolCall || e.Type == lctl.TypeError {
			got = append(got, step(e)+" "+fmt.Sprint(e.Data["decision"]))
		}
	}
	want := []string{
		"verdict/validator needs_approval needs_approval",
		"approval_decided/bob denied",
		"verdict/validator deny deny",
		"error/validator APPROVAL_DENIED <nil>",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the run's decisions:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if raw, err := os.ReadFile(page); err != nil || string(raw) != before {
		t.Fatalf("the denied write happened: %q (%v)", raw, err)
	}
	b.Clean(t)
}
