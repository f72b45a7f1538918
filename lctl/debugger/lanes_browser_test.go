package debugger_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/xct-dev/xct/internal/testutil/browser"
)

// TestBrowserCrewLanes opens the crew demo's chain (lanes_test.go): a lane
// per agent with the agent's steps in it, the handoff edges labelled with
// their contract results, the refused handoff and the routing fallback on
// their steps, and the fact store at a chosen seq with F1's confidence.
func TestBrowserCrewLanes(t *testing.T) {
	t.Parallel()
	url := serveChainFiles(t, filepath.Join("testdata", "crew-demo.lctl.json"))
	b := browser.New(t, 3*time.Minute)
	art := browser.Artifacts(t)

	b.Do(t, "open the page", chromedp.Navigate(url))
	b.Until(t, "the flowchart", `document.querySelectorAll('g.node').length === 11`)

	// A lane per agent that takes steps, in order of appearance; the run's
	// own events (the orchestrator's, the system's checkpoints) share one.
	lanes := browser.Eval[[]string](t, b, `[...document.querySelectorAll('g.lane')].map((g) => g.dataset.lane + ':' + g.querySelector('.lane-type').textContent)`)
	if got := strings.Join(lanes, " "); got != "run:orchestrator, system code-analyzer:analyzer security-reviewer:reviewer fix-implementer:executor" {
		t.Fatalf("lanes: %s", got)
	}
	// Every node is drawn inside its agent's lane, and each crew agent's
	// lane holds its steps.
	misplaced := browser.Eval[[]string](t, b, `(() => {
		const band = (a) => document.querySelector('g.lane[data-lane="' + a + '"] rect').getBoundingClientRect();
		const out = [];
		for (const n of document.querySelectorAll('g.node')) {
			const r = n.querySelector('rect').getBoundingClientRect(), l = band(n.dataset.lane);
			if (r.left < l.left || r.right > l.right) out.push(n.dataset.node + ' outside ' + n.dataset.lane);
		}
		return out;
	})()`)
	if len(misplaced) > 0 {
		t.Fatalf("nodes outside their lane: %v", misplaced)
	}
	steps := browser.Eval[[]string](t, b, `[...document.querySelectorAll('g.node.kind-agent_step')].map((n) => n.dataset.node + ':' + n.dataset.lane)`)
	if got := strings.Join(steps, " "); got != "n3:code-analyzer n8:code-analyzer n14:code-analyzer n19:code-analyzer n27:security-reviewer n32:security-reviewer n40:fix-implementer" {
		t.Fatalf("steps by lane: %s", got)
	}

	// The handoff edges go from the handing step to the receiver's first
	// step, labelled with the contract results.
	edge := `g.edge-handoff[data-from="n19"][data-to="n27"]`
	if got := svgText(t, b, edge+" .edge-label"); got != "⇄ handoff to security-reviewer: contracts passed (2)" {
		t.Fatalf("handoff edge label: %q", got)
	}
	if got := b.Attr(t, edge, "data-contracts"); got != "code-analyzer output ✓ passed, security-reviewer input ✓ passed" {
		t.Fatalf("handoff edge contracts: %q", got)
	}
	if got := svgText(t, b, `g.edge-handoff[data-from="n32"][data-to="n40"] .edge-label`); !strings.Contains(got, "to fix-implementer: contracts passed") {
		t.Fatalf("second handoff edge: %q", got)
	}
	// The refused handoff is on its step, with the violation in its label.
	if got := svgText(t, b, `g.node[data-node="n8"] .n-handoff`); got != "⇄ refused: code-analyzer output ✗" {
		t.Fatalf("refused handoff line: %q", got)
	}
	if got := b.Attr(t, `g.node[data-node="n8"]`, "aria-label"); !strings.Contains(got, "handoff to security-reviewer refused") || !strings.Contains(got, "fact F1: missing required field source") {
		t.Fatalf("refused handoff's label: %q", got)
	}
	// The fixer's step, held by the crew's gate, was approved.
	if got := b.Attr(t, `g.node[data-node="n40"]`, "data-status"); got != "approved" {
		t.Fatalf("the fixer's step: %q", got)
	}
	// The fallback after the large model's rate limit is on the first step.
	if got := svgText(t, b, `g.node[data-node="n3"] .n-route`); got != "↪ analyzer-small after RATE_LIMITED" {
		t.Fatalf("routing line: %q", got)
	}
	if got := b.Attr(t, `g.node[data-node="n3"]`, "aria-label"); !strings.Contains(got, "routed to scripted:crew-demo.yaml#analyzer-small after scripted:crew-demo.yaml#analyzer-large failed RATE_LIMITED") {
		t.Fatalf("routing in the first step's label: %q", got)
	}

	// The reviewer's first step: F1 has decayed once (0.85 × 0.95).
	b.Do(t, "click the reviewer's first step", chromedp.Click(chromedp.CSS(`g.node[data-node="n27"] rect`)))
	tabStateAt(t, b, 27)
	f1 := `.fact-store tbody[data-fact="F1"]`
	if got := b.Text(t, f1+" .fact-conf"); got != "0.81 (decayed)" {
		t.Fatalf("F1's confidence at 27: %q", got)
	}
	if got := b.Text(t, f1+" .fact-assessed"); got != "code-analyzer 0.85" {
		t.Fatalf("F1 assessed by at 27: %q", got)
	}
	if got := b.Text(t, f1+" .fact-consensus"); got != "—" {
		t.Fatalf("F1's consensus at 27: %q", got)
	}
	// Two events on: the reviewer confirms it, by consensus.
	b.Do(t, "step to seq 29", chromedp.Click(chromedp.CSS("#chain-id")), chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowRight))
	tabStateAt(t, b, 29)
	if got := b.Text(t, f1+" .fact-conf"); got != "0.95" {
		t.Fatalf("F1's confidence at 29: %q", got)
	}
	if got := b.Text(t, f1+" .fact-assessed"); got != "code-analyzer 0.85, security-reviewer 0.95" {
		t.Fatalf("F1 assessed by at 29: %q", got)
	}
	if got := b.Text(t, f1+" .fact-consensus"); got != "score 0.90, agreement 0.90 (code-analyzer, security-reviewer; seq 29)" {
		t.Fatalf("F1's consensus at 29: %q", got)
	}
	b.Screenshot(t, art, "debugger-crew-lanes")

	// The routing decision (seq 2) selects the step it led to.
	b.Do(t, "select seq 2", chromedp.Navigate(url+"#/chain/"+crewChainID+"?seq=2"))
	tabStateAt(t, b, 2)
	if got := b.Attr(t, `g.node[aria-pressed="true"]`, "data-node"); got != "n3" {
		t.Fatalf("node selected at the routing decision: %q", got)
	}
	b.Clean(t)
}

// svgText is the text of an SVG element (which has no innerText).
func svgText(t *testing.T, b *browser.Browser, sel string) string {
	t.Helper()
	return browser.Eval[string](t, b, "(document.querySelector("+strconv.Quote(sel)+")?.textContent ?? '(none)')")
}
