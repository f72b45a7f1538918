package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil/browser"
)

// TestDebuggerDrawsALiveCrewRun opens the crew demo's run in the tracer's
// page while the fixer's step waits for a human: the lanes and the
// handoffs with their contract results are drawn from the live chain, the
// fixer's step waits in its lane; bob approves and the page follows the
// run to its end, with F1's confidence at the fixer's step in the state
// panel.
func TestDebuggerDrawsALiveCrewRun(t *testing.T) {
	t.Parallel()
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, v, a := startCrewDemo(t, ctx, c)

	url := "http://" + c.app.Tracer.HTTPAddr() + "/"
	b := browser.New(t, 3*time.Minute)
	b.OpenWith(t, "open the chain", url+"#/chain/"+id, signedIn(c.creds.Token(t, "bob")))
	b.Until(t, "the live stream", `document.querySelector('#live-status')?.textContent.includes('Live:')`)
	b.Until(t, "the fixer waiting in its lane", `!!document.querySelector('g.node[data-lane="fix-implementer"][data-status="needs_approval"]')`)
	lanes := browser.Eval[[]string](t, b, `[...document.querySelectorAll('g.lane')].map((g) => g.dataset.lane)`)
	if got := strings.Join(lanes, " "); got != "run code-analyzer security-reviewer fix-implementer" {
		t.Fatalf("lanes: %s", got)
	}
	handoffs := browser.Eval[[]string](t, b, `[...document.querySelectorAll('g.edge-handoff')].map((g) => g.querySelector('.edge-label').textContent + ' | ' + g.dataset.contracts)`)
	want := []string{
		"⇄ handoff to security-reviewer: contracts passed (2) | code-analyzer output ✓ passed, security-reviewer input ✓ passed",
		"⇄ handoff to fix-implementer: contracts passed (2) | security-reviewer output ✓ passed, fix-implementer input ✓ passed",
	}
	if strings.Join(handoffs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("handoff edges:\n%s", strings.Join(handoffs, "\n"))
	}
	refused := browser.Eval[string](t, b, `document.querySelector('g.node[data-lane="code-analyzer"] .n-handoff.st-error')?.textContent ?? ''`)
	if refused != "⇄ refused: code-analyzer output ✗" {
		t.Fatalf("the refused handoff: %q", refused)
	}

	// Bob approves (through the validator, as xct approve does): the page
	// follows the run to its end.
	if _, err := v.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: a.GetStepId(), Approve: true, Reason: "read the diff"}); err != nil {
		t.Fatal(err)
	}
	b.Until(t, "the fixer's step approved", `!!document.querySelector('g.node[data-lane="fix-implementer"][data-status="approved"]')`)
	b.Until(t, "the run's end", `[...document.querySelectorAll('g.node[data-lane="run"]')].some((n) => n.getAttribute('aria-label').includes('run done'))`)

	// The fixer's step: F1 after two hops (0.95 × 0.95).
	seq := b.Attr(t, `g.node[data-lane="fix-implementer"]`, "data-seq")
	b.Do(t, "click the fixer's step", chromedp.Click(chromedp.CSS(`g.node[data-lane="fix-implementer"] rect`)))
	b.Until(t, "the state at the fixer's step", `document.querySelector('#state-seq')?.textContent === `+strconv.Quote(seq)+` && !document.querySelector('section.state.busy')`)
	if got := b.Text(t, `#state-type`); got != "step_start" {
		t.Fatalf("the event at the fixer's step: %q", got)
	}
	if got := b.Text(t, `.fact-store tbody[data-fact="F1"] .fact-conf`); got != "0.90 (decayed)" {
		t.Fatalf("F1 at the fixer's step: %q", got)
	}
	if got := b.Text(t, `.fact-store tbody[data-fact="F1"] .fact-assessed`); got != "code-analyzer 0.85, security-reviewer 0.95" {
		t.Fatalf("F1 assessed by: %q", got)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-live-crew")
	b.Clean(t)
}
