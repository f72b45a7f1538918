package debugger_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/otlp"
)

// otlpChain converts an OpenTelemetry test trace (lctl/otlp/testdata) to a
// chain file, as the tracer's OTLP ingestion does.
func otlpChain(t *testing.T, name string) (string, string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "otlp", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	reqs, err := otlp.ReadJSONFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var chains []otlp.Chain
	for _, req := range reqs {
		cs, _, _, err := otlp.Convert(req.GetResourceSpans())
		if err != nil {
			t.Fatal(err)
		}
		chains = append(chains, cs...)
	}
	if len(chains) != 1 {
		t.Fatalf("%d chains in %s", len(chains), name)
	}
	out := filepath.Join(t.TempDir(), "otlp.lctl.json")
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.NewFile(chains[0].ID, chains[0].Events).Encode(w, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out, chains[0].ID
}

// A chain from another framework (OpenInference spans: an agent span
// holding a chain span holding model and tool spans) shows what it has:
// every span's step ends where its span ended (no step left pending, no
// dangling end node), model steps are titled with the model, and the
// state panel shows no XCT placeholders (step numbers, verdicts).
func TestBrowserOTLPChainShowsWhatItHas(t *testing.T) {
	t.Parallel()
	path, id := otlpChain(t, "openinference.json")
	url := serveChainFiles(t, path)
	b := browser.New(t, 3*time.Minute)
	b.Do(t, "open the chain", chromedp.Navigate(url+"#/chain/"+id))
	b.Until(t, "the flowchart", `document.querySelectorAll('g.node').length > 0`)

	nodes := browser.Eval[[]map[string]string](t, b, `[...document.querySelectorAll('g.node')].map(n => ({status: n.dataset.status, label: n.getAttribute('aria-label'), cls: n.getAttribute('class')}))`)
	var labels []string
	for _, n := range nodes {
		labels = append(labels, n["label"])
		if n["status"] == "pending" {
			t.Errorf("a node left pending: %s", n["label"])
		}
		if !strings.Contains(n["cls"], "kind-agent_step") {
			t.Errorf("a node that is no step (a dangling end?): %s %s", n["cls"], n["label"])
		}
	}
	joined := strings.Join(labels, "\n")
	if strings.Count(joined, "gpt-4o-mini") < 2 || !strings.Contains(joined, "research_agent") {
		t.Fatalf("node titles:\n%s", joined)
	}

	// The model step's state: its model, tokens and output, nothing XCT.
	if len(nodes) != 4 {
		t.Fatalf("%d nodes, want the 4 steps (agent, chain, 2 model calls):\n%s", len(nodes), joined)
	}
	// The page names its selection in the URL 300 ms after the chain loads
	// (ChainView's replaceSeq, history.replaceState). Before session 14
	// that rewrite could land between our navigation and its hashchange,
	// which then selected the first seq (TestBrowserLinkBeatsTheSeqWrite);
	// waiting for it keeps this test about what it checks.
	b.Until(t, "the URL naming the selected seq", `location.hash.includes('?seq=')`)
	b.Do(t, "select the first model call's end", chromedp.Navigate(url+"#/chain/"+id+"?seq=4"))
	b.Until(t, "the step", `document.querySelector('#state-step-title')?.textContent.includes('gpt-4o-mini')`)
	step := b.Text(t, "#state-step")
	for _, absent := range []string{"Step ?", "no verdict yet", "Verdict", "Proposal", "No result yet"} {
		if strings.Contains(step, absent) {
			t.Errorf("the step panel shows %q:\n%s", absent, step)
		}
	}
	for _, want := range []string{"gpt-4o-mini by researcher", "in 120 / out 40", "I will search the advisory database."} {
		if !strings.Contains(step, want) {
			t.Errorf("the step panel lacks %q:\n%s", want, step)
		}
	}
	// The selected seq's node is the innermost step (the model call), not
	// the agent span around it; the chain has no run status to show.
	b.Until(t, "the model call selected", `document.querySelector('g.node.selected')?.dataset.seq === '3'`)
	if got := b.Text(t, "#chain-status"); got != "—" {
		t.Errorf("status shown for a chain without one: %q", got)
	}
	b.Clean(t)
}
