package debugger_test

import (
	"context"
	"strings"
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
	t.Parallel()
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

// crewApprovals is recordingApprovals listing a crew run's pending step
// (its member and hand-overs named with markup and a hidden character, as
// a crew's config may hold), a crew run's entry agent before any hand-over,
// and a run without a crew.
type crewApprovals struct{ recordingApprovals }

func (c *crewApprovals) List(ctx context.Context, runID string, all bool) ([]debugger.Approval, error) {
	return []debugger.Approval{
		approvalJSON(map[string]any{"runId": "run-a", "step": 2, "stepId": "s2", "state": "APPROVAL_STATE_PENDING",
			"requestedAt": "1970-01-01T00:00:00Z", "requestedBy": "alice", "proposal": map[string]any{"tool": "fs.write"},
			"crew": "audit-and-post", "agent": "poster" + xssPayloads[0],
			"handoffPath": []string{"auditor\u202e", "poster" + xssPayloads[0]}}),
		approvalJSON(map[string]any{"runId": "run-c", "step": 4, "stepId": "s4", "state": "APPROVAL_STATE_PENDING",
			"requestedAt": "1970-01-01T00:00:00Z", "requestedBy": "alice", "proposal": map[string]any{"tool": "fs.write"},
			"crew": "solo-crew", "agent": "lead", "handoffPath": []string{"lead"}}),
		approvalJSON(map[string]any{"runId": "run-b", "step": 3, "stepId": "s3", "state": "APPROVAL_STATE_PENDING",
			"requestedAt": "1970-01-01T00:00:00Z", "requestedBy": "alice", "proposal": map[string]any{"tool": "fs.write"}}),
	}, nil
}

// Session 20 (ui20), issue 16: the approvals page showed the run's
// principal only, not which crew member proposed the step nor the
// hand-overs that gave it control (xct approvals and GET /api/approvals
// had them since b9741f3). The crew run's card now names both, as text
// (markup stays text, a hidden character shows as its escape); a run
// without a crew shows neither (main: no such rows).
func TestBrowserApprovalNamesTheCrewMember(t *testing.T) {
	t.Parallel()
	url := serveChainFilesWith(t, debugger.Options{Approvals: &crewApprovals{}}, testdataChain("xct-run.lctl.json"))
	b := browser.New(t, 2*time.Minute)
	crewCard, soloCard := `article.approval[data-run="run-a"][data-step="2"]`, `article.approval[data-run="run-b"][data-step="3"]`
	b.Do(t, "open the approvals", chromedp.Navigate(url+"#/approvals"))
	b.Until(t, "both cards", `!!document.querySelector('`+crewCard+`') && !!document.querySelector('`+soloCard+`')`)
	text := func(sel string) string {
		return browser.Eval[string](t, b, `document.querySelector('`+sel+`')?.textContent ?? '(no such element)'`)
	}
	if got, want := text(crewCard+" dd.crew-member"), "poster"+xssPayloads[0]+" (crew audit-and-post)"; got != want {
		t.Errorf("crew member %q, want %q", got, want)
	}
	if got, want := text(crewCard+" dd.handoff-path"), `auditor\u202e → poster`+xssPayloads[0]; got != want {
		t.Errorf("handed over %q, want %q", got, want)
	}
	// The entry agent's own step: no hand-over yet.
	entryCard := `article.approval[data-run="run-c"][data-step="4"]`
	if got, want := text(entryCard+" dd.crew-member"), "lead (crew solo-crew)"; got != want {
		t.Errorf("crew member %q, want %q", got, want)
	}
	if got, want := text(entryCard+" dd.handoff-path"), "none (lead holds control from the start)"; got != want {
		t.Errorf("handed over %q, want %q", got, want)
	}
	// The names are text: no element made of them, no script of theirs run.
	if n := browser.Eval[int](t, b, `document.querySelectorAll('article.approval img, article.approval script').length`); n != 0 {
		t.Errorf("%d elements made of a name", n)
	}
	if x := browser.Eval[bool](t, b, `window.__xss !== undefined`); x {
		t.Error("a name's script ran")
	}
	if n := browser.Eval[int](t, b, `document.querySelectorAll('`+soloCard+` dd.crew-member, `+soloCard+` dd.handoff-path').length`); n != 0 {
		t.Errorf("a run without a crew shows %d crew rows", n)
	}
	if s := text(soloCard + " dl.kv"); strings.Contains(s, "Crew member") || strings.Contains(s, "Handed over") {
		t.Errorf("a run without a crew shows crew rows:\n%s", s)
	}
	b.Clean(t)
}
