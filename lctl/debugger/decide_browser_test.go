package debugger_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/lctl/debugger"
)

// decisionsSeen is recordingApprovals whose decisions the test reads from
// a channel (the server calls Decide on its own goroutine).
type decisionsSeen struct {
	recordingApprovals
	seen chan debugger.Decision
}

func (d *decisionsSeen) Decide(ctx context.Context, dec debugger.Decision) (debugger.Approval, error) {
	d.seen <- dec
	return d.recordingApprovals.Decide(ctx, dec)
}

// Session 15 (resolve15), issue 11: the page decided the approval it
// showed by its step number, so another approval of the same number (an
// undo asked again after a withdrawal) could be the one decided. Now it
// sends the step id of the card clicked (main: "2").
func TestBrowserDecidesByStepID(t *testing.T) {
	rec := &decisionsSeen{seen: make(chan debugger.Decision, 1)}
	url := serveChainFilesWith(t, debugger.Options{Approvals: rec}, testdataChain("xct-run.lctl.json"))
	b := browser.New(t, 2*time.Minute)
	card := `article.approval[data-run="run-a"][data-step="2"]`
	b.Do(t, "open the approvals", chromedp.Navigate(url+"#/approvals"))
	b.Until(t, "the pending step", `!!document.querySelector('`+card+`')`)
	b.Do(t, "name the approver", chromedp.Focus(chromedp.CSS(card+` input[name="approver"]`)), chromedp.KeyEvent("bob"+kb.Tab))
	b.Do(t, "approve", chromedp.Click(chromedp.CSS(card+" button.approve")))
	select {
	case d := <-rec.seen:
		if d.Step != "s2" || d.RunID != "run-a" || !d.Approve {
			t.Fatalf("the page decided %+v, want run-a's approval of step id s2", d)
		}
	case <-time.After(time.Minute):
		t.Fatal("the page sent no decision")
	}
	b.Clean(t)
}
