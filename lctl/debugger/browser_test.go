package debugger_test

// Browser tests: the real page (dist/, embedded) in Debian's headless
// Chromium against the real handler over chain files on 127.0.0.1. They
// skip without Chromium unless XCT_REQUIRE_BROWSER=1 (`make test`).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/debugger"
	"github.com/xct-dev/xct/lctl/lctltest"
)

const (
	xctRun   = "run-20240115-103000-4f2a9c1e"
	reviewV1 = "security-review-001"
	reviewV2 = "security-review-002"
)

// serveFiles serves chain files with the debugger on 127.0.0.1 and returns
// the page's URL.
func serveChainFiles(t *testing.T, paths ...string) string {
	t.Helper()
	return serveChainFilesWith(t, debugger.Options{}, paths...)
}

// serveChainFilesWith is serveChainFiles with options (a price table).
func serveChainFilesWith(t *testing.T, opts debugger.Options, paths ...string) string {
	t.Helper()
	src := debugger.NewFileSource(paths...)
	opts.Source, opts.Title, opts.LoadErrors = src, "browser test", src.LoadErrors()
	h, err := debugger.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	return srv.URL + "/"
}

func testdataChain(name string) string {
	return filepath.Join("..", "cli", "testdata", "chains", name)
}

// tabStateAt waits until the state panel shows seq and has finished loading.
func tabStateAt(t *testing.T, b *browser.Browser, seq int) {
	t.Helper()
	b.Until(t, fmt.Sprintf("the state at seq %d", seq),
		fmt.Sprintf(`document.querySelector('#state-seq')?.textContent === '%d' && !document.querySelector('section.state.busy')`, seq))
}

// tabSlider clicks the scrubber at a fraction of its width.
func tabSlider(t *testing.T, b *browser.Browser, frac float64) {
	t.Helper()
	box := browser.Eval[[]float64](t, b, `(() => { const r = document.querySelector('#scrubber').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`)
	// The thumb is about 16 px wide: its centre runs from 8 px to width-8 px.
	x := box[0] + 8 + frac*(box[2]-16)
	b.Do(t, "click the slider", chromedp.MouseClickXY(x, box[1]+box[3]/2))
}

func TestBrowserChainFlowStateAndScrubber(t *testing.T) {
	t.Parallel()
	// demo-agent's tokens at $1 in and $2 out per 1,000.
	prices := &analysis.Prices{Models: map[string]analysis.ModelPrice{"demo-agent": {InputPer1K: 1, OutputPer1K: 2}}}
	url := serveChainFilesWith(t, debugger.Options{Prices: prices}, testdataChain("xct-run.lctl.json"))
	b := browser.New(t, 3*time.Minute)
	art := browser.Artifacts(t)

	// One chain served: the page opens it.
	b.Do(t, "open the page", chromedp.Navigate(url))
	b.Until(t, "the flowchart", `document.querySelectorAll('g.node').length === 7`)
	if got := b.Text(t, "#chain-id"); got != xctRun {
		t.Fatalf("chain shown: %q", got)
	}

	// The denied step is marked in words, not only by color.
	denied := `g.node[data-status="denied"]`
	label := b.Attr(t, denied, "aria-label")
	if !strings.Contains(label, "denied") || !strings.Contains(label, "shell.exec") {
		t.Fatalf("denied node's label: %q", label)
	}
	if s := browser.Get(t, b, "read the status", chromedp.TextContent(chromedp.CSS(denied+" .n-status"))); !strings.Contains(s, "denied") {
		t.Fatalf("denied node's status text: %q", s)
	}

	// Click it: the state panel shows the step's proposal as of seq 14.
	b.Do(t, "click the denied node", chromedp.Click(chromedp.CSS(denied+" rect")))
	tabStateAt(t, b, 14)
	step := b.Text(t, "#state-step")
	for _, want := range []string{"Step 4", "shell.exec", "Restart the service", "no verdict yet"} {
		if !strings.Contains(step, want) {
			t.Fatalf("state at 14 lacks %q:\n%s", want, step)
		}
	}
	if pressed := b.Attr(t, denied, "aria-pressed"); pressed != "true" {
		t.Fatalf("the clicked node is not marked selected: aria-pressed=%q", pressed)
	}
	b.Screenshot(t, art, "debugger-chain")

	// Keyboard right (focus on the page, not a field): seq 15, the verdict
	// with its matched rule.
	b.Do(t, "focus the heading", chromedp.Click(chromedp.CSS("#chain-id")), chromedp.KeyEvent(kb.ArrowRight))
	tabStateAt(t, b, 15)
	verdict := b.Text(t, "#state-verdict")
	if !strings.Contains(verdict, "denied") || !strings.Contains(verdict, "builtin.catalog") {
		t.Fatalf("verdict at 15: %q", verdict)
	}

	// The slider: a click at its start selects the first event; arrows on
	// it step; the state follows (tokens so far come from step_end).
	tabSlider(t, b, 0)
	tabStateAt(t, b, 1)
	if got := b.Text(t, "#state-type"); got != "run_started" {
		t.Fatalf("event at seq 1: %q", got)
	}
	if got := b.Text(t, "#state-cost"); got != "—" {
		t.Fatalf("cost before any tokens: %q", got)
	}
	b.Do(t, "arrow right on the slider", chromedp.Focus(chromedp.CSS("#scrubber")),
		chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowRight))
	tabStateAt(t, b, 5)
	if got := b.Text(t, "#state-tokens"); !strings.HasPrefix(got, "495 ") {
		t.Fatalf("tokens at seq 5 (450 in + 45 out): %q", got)
	}
	// Cost so far: 450 × $1 + 45 × $2 per 1,000.
	if got := b.Text(t, "#state-cost"); got != "$0.540" {
		t.Fatalf("cost at seq 5: %q", got)
	}
	tabSlider(t, b, 1)
	tabStateAt(t, b, 22)
	if got := b.Text(t, "#state-type"); got != "run_finished" {
		t.Fatalf("event at seq 22: %q", got)
	}
	// The whole run: 2,750 in and 275 out.
	if got := b.Text(t, "#state-cost"); got != "$3.300" {
		t.Fatalf("cost at seq 22: %q", got)
	}

	// A row of the event list selects its event.
	b.Do(t, "click event 12", chromedp.Click(chromedp.CSS(`.ev-row[data-seq="12"]`)))
	tabStateAt(t, b, 12)
	if got := b.Text(t, "#state-type"); got != "error" {
		t.Fatalf("event at seq 12: %q", got)
	}
	// The URL names the selected seq, so the view can be linked.
	b.Until(t, "the seq in the URL", `location.hash.endsWith('?seq=12')`)

	// Cost and duration per agent, and the bottlenecks, are drawn.
	b.Until(t, "the charts", `document.querySelectorAll('#perf canvas').length >= 2 && document.querySelectorAll('.bottlenecks li').length > 0`)
	b.Screenshot(t, art, "debugger-state-at-12")
	b.Clean(t)
}

// holdHashchange, run before the page's own script, holds the next
// hashchange event once the test arms it (window.holdNextHashchange())
// until a 300 ms timer of the page (ChainView's write of the selected seq
// into the URL) has run after the arming: the order a loaded machine may
// give them, made certain. window.hashchangeReleased() says it went on.
const holdHashchange = `(() => {
  let armed = false, timerRan = false, held = null, released = false;
  const setTimeoutOf = window.setTimeout;
  window.setTimeout = function (fn, ms, ...rest) {
    if (ms === 300 && typeof fn === 'function') {
      const inner = fn;
      fn = function (...args) {
        try {
          return inner.apply(this, args);
        } finally {
          if (armed) {
            timerRan = true;
            if (held) { const e = held; held = null; released = true; dispatchEvent(e); }
          }
        }
      };
    }
    return setTimeoutOf.call(window, fn, ms, ...rest);
  };
  addEventListener('hashchange', (e) => {
    if (!armed || !e.isTrusted) return;
    if (timerRan) { released = true; return; }
    e.stopImmediatePropagation();
    held = new HashChangeEvent('hashchange', { oldURL: e.oldURL, newURL: e.newURL });
  }, true);
  window.holdNextHashchange = () => { armed = true; };
  window.hashchangeReleased = () => released;
})();`

// A link followed just after the selection changed selects what it names.
// The page writes the selected seq into the URL 300 ms after a change
// (replaceState). When that write ran after a link changed the URL but
// before the link's hashchange reached the page, it wrote over the link,
// and the page selected the old seq (on main: seq 2 here, not 4). The
// write now leaves a URL it did not expect alone.
func TestBrowserLinkBeatsTheSeqWrite(t *testing.T) {
	t.Parallel()
	url := serveChainFiles(t, testdataChain("xct-run.lctl.json"))
	b := browser.New(t, 3*time.Minute)
	b.OpenWith(t, "open the chain", url+"#/chain/"+xctRun, holdHashchange)
	b.Until(t, "the flowchart", `document.querySelectorAll('g.node').length === 7`)
	b.Until(t, "the URL naming the first seq", `location.hash.endsWith('?seq=1')`)
	tabStateAt(t, b, 1)
	// One step right (a write of seq 2 due in 300 ms), then a link to 4.
	browser.Eval[bool](t, b, `(() => {
  holdNextHashchange();
  dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight' }));
  location.hash = '#/chain/`+xctRun+`?seq=4';
  return true;
})()`)
	b.Until(t, "the link's hashchange to reach the page", `hashchangeReleased()`)
	b.Until(t, "the page to show the seq its URL names", `!document.querySelector('section.state.busy') &&
  document.querySelector('#state-seq')?.textContent === new URLSearchParams(location.hash.split('?')[1] || '').get('seq')`)
	if got, hash := b.Text(t, "#state-seq"), browser.Eval[string](t, b, `location.hash`); got != "4" || !strings.HasSuffix(hash, "?seq=4") {
		t.Fatalf("after the link to seq 4: seq %s selected, URL %s", got, hash)
	}
	b.Clean(t)
}

func TestBrowserDiffView(t *testing.T) {
	t.Parallel()
	url := serveChainFiles(t, testdataChain("review-v1.lctl.json"), testdataChain("review-v2.lctl.json"))
	var rep struct {
		Changed, Added, Removed int
		Differences             []json.RawMessage
	}
	resp, err := http.Get(url + "api/diff?a=" + reviewV1 + "&b=" + reviewV2)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if len(rep.Differences) == 0 {
		t.Fatal("the two review chains do not differ: nothing to show")
	}

	b := browser.New(t, 2*time.Minute)
	// Two chains: the list; pick both and compare.
	b.Do(t, "open the list", chromedp.Navigate(url))
	b.Until(t, "two chains listed", `document.querySelectorAll('table.chains tbody tr').length === 2`)
	b.Do(t, "pick both",
		chromedp.Click(chromedp.CSS(`input[aria-label="Pick `+reviewV1+` to compare"]`)),
		chromedp.Click(chromedp.CSS(`input[aria-label="Pick `+reviewV2+` to compare"]`)),
		chromedp.Click(chromedp.CSS("#compare")))
	b.Until(t, "the diff", `!!document.querySelector('#diff-summary')`)
	summary := b.Text(t, "#diff-summary")
	want := fmt.Sprintf("%d changed, %d only in v2, %d only in v1", rep.Changed, rep.Added, rep.Removed)
	if !strings.Contains(summary, want) {
		t.Fatalf("summary %q lacks %q", summary, want)
	}
	rows := browser.Eval[int](t, b, `document.querySelectorAll('table.diff tbody tr').length`)
	if rows != len(rep.Differences) {
		t.Fatalf("%d rows for %d differences", rows, len(rep.Differences))
	}
	// Each kind is named in words.
	kinds := browser.Eval[[]string](t, b, `[...document.querySelectorAll('table.diff .diff-kind')].map(e => e.textContent.trim())`)
	for _, k := range kinds {
		if !strings.HasSuffix(k, "changed") && !strings.HasSuffix(k, "only in v1") && !strings.HasSuffix(k, "only in v2") {
			t.Fatalf("difference kind %q is not in words", k)
		}
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-diff")
	b.Clean(t)
}

// xssPayloads go where agents and tools put text.
var xssPayloads = []string{
	`<img src=x onerror="window.__xss=1;alert(1)">`,
	`<script>window.__xss=2;alert(2)</script>`,
	`<svg onload="window.__xss=3;alert(3)"></svg>`,
	`"><iframe src="javascript:alert(4)"></iframe>`,
}

// writeChain seals events into a chain file.
func sealChain(t *testing.T, path, id string, events []lctl.Event) {
	t.Helper()
	prev := ""
	for i := range events {
		events[i].ChainID = id
		events[i].Seq = uint64(i + 1)
		if events[i].Timestamp == "" {
			events[i].Timestamp = lctl.FormatTime(time.Date(2026, 11, 21, 12, 0, i, 0, time.UTC))
		}
		if err := events[i].Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = events[i].Hash
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.NewFile(id, events).Encode(f, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBrowserToolOutputIsTextNotHTML(t *testing.T) {
	t.Parallel()
	p := xssPayloads
	path := filepath.Join(t.TempDir(), "xss.lctl.json")
	sealChain(t, path, "xss-run", []lctl.Event{
		{Type: "run_started", Agent: "orchestrator", Data: map[string]any{"run_id": "xss-run", "goal": p[0], "principal": "alice", "model": "m"}},
		{Type: "step_start", Agent: p[2], Data: map[string]any{"step": 1.0, "step_id": "s1", "tool": "fs.read", "intent": p[0], "arguments": map[string]any{"path": p[3]}}},
		{Type: "verdict", Agent: "validator", Data: map[string]any{"step": 1.0, "step_id": "s1", "tool": "fs.read", "decision": "allow", "reasons": []any{map[string]any{"rule_id": p[1], "message": p[2]}}}},
		{Type: "tool_call", Agent: "executor", Data: map[string]any{"step": 1.0, "step_id": "s1", "tool": "fs.read", "status": "success", "duration_ms": 3.0,
			"output": map[string]any{"content": p[0], "more": p[1]}}},
		{Type: "fact_added", Agent: p[2], Data: map[string]any{"id": "F1", "text": p[1], "confidence": 0.9, "source": p[3]}},
		{Type: "step_end", Agent: p[2], Data: map[string]any{"step": 1.0, "step_id": "s1", "outcome": "success", "duration_ms": 9.0, "tokens": map[string]any{"input": 10.0, "output": 2.0}}},
		{Type: "made_up_type", Agent: "plugin", Data: map[string]any{"html": p[3]}},
	})
	url := serveChainFiles(t, path)
	b := browser.New(t, 2*time.Minute)

	b.Do(t, "open the tool call", chromedp.Navigate(url+"#/chain/xss-run?seq=4"))
	tabStateAt(t, b, 4)
	b.Until(t, "the flowchart", `document.querySelectorAll('g.node').length > 0`)
	b.Until(t, "the confidence chart", `!!document.querySelector('#confidence .fact')`)
	// The payloads are on the page as text: in the tool output, the step,
	// the flowchart, the rules, the facts.
	body := browser.Eval[string](t, b, `document.body.innerText + '\n' + [...document.querySelectorAll('svg text')].map(e => e.textContent).join('\n')`)
	for _, want := range []string{`<img src=x onerror=\"window.__xss=1;alert(1)\">`, `<script>window.__xss=2;alert(2)</script>`, p[2], "<img src=x onerror"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page does not show %q as text", want)
		}
	}
	// The unknown event type is shown as raw data, its HTML as text.
	b.Do(t, "go to the unknown event", chromedp.Click(chromedp.CSS(`.ev-row[data-seq="7"]`)))
	tabStateAt(t, b, 7)
	if got := b.Text(t, "#state-type"); got != "made_up_type" {
		t.Fatalf("event 7: %q", got)
	}
	state := b.Text(t, "section.state")
	if !strings.Contains(state, "Unknown event type") || !strings.Contains(state, `<iframe src=\"javascript:alert(4)\"></iframe>`) {
		t.Fatalf("the unknown event is not shown as raw data:\n%s", state)
	}
	// The chain list shows the agents' names as text too.
	b.Do(t, "open the list", chromedp.Navigate(url+"#/?q=xss"))
	b.Until(t, "the list", `document.querySelectorAll('table.chains tbody tr').length === 1`)

	// Nothing ran: no element, attribute, global or dialog from a payload.
	type found struct {
		Elements int  `json:"elements"`
		Handlers int  `json:"handlers"`
		Global   bool `json:"global"`
	}
	injected := browser.Eval[found](t, b, `({
		elements: document.querySelectorAll('img, iframe, script:not([src]), body svg:not([aria-label]):not(.plot svg)').length,
		handlers: document.querySelectorAll('[onerror], [onload]').length,
		global: window.__xss !== undefined,
	})`)
	if injected.Elements != 0 || injected.Handlers != 0 || injected.Global {
		t.Fatalf("a payload became markup or ran: %+v", injected)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-xss")
	b.Clean(t)
}

func TestBrowserLoadErrorPage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "broken.lctl.json")
	if err := os.WriteFile(path, []byte(`{"lctl": "4.0", "chain": {"id": "x"}, "events": [ {"seq": 1, `), 0o600); err != nil {
		t.Fatal(err)
	}
	url := serveChainFiles(t, path)
	var info struct {
		LoadError *debugger.LoadError `json:"load_error"`
	}
	resp, err := http.Get(url + "api/info")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if info.LoadError == nil {
		t.Fatal("the server reports no load error for a broken file")
	}

	b := browser.New(t, time.Minute)
	b.Do(t, "open the page", chromedp.Navigate(url))
	b.Until(t, "the error page", `!!document.querySelector('#load-error-message')`)
	if got := b.Text(t, "#load-error-file"); !strings.Contains(got, "broken.lctl.json") {
		t.Fatalf("error page names %q", got)
	}
	if got := b.Text(t, "#load-error-message"); got != info.LoadError.Message || got == "" {
		t.Fatalf("error page says %q, the server %q", got, info.LoadError.Message)
	}
	if role := b.Attr(t, ".load-error .errorbox", "role"); role != "alert" {
		t.Fatalf("the error is not announced: role=%q", role)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-load-error")
	b.Clean(t)
}

func TestBrowserLargeChainScrubs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the 100,000-event chain is skipped")
	}
	const n = 100_000
	events := lctltest.Chain("big-run", n, lctltest.Options{Seal: true})
	path := filepath.Join(t.TempDir(), "big.lctl.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.NewFile("big-run", events).Encode(f, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	url := serveChainFiles(t, path)
	b := browser.New(t, 4*time.Minute)

	b.Do(t, "open the chain", chromedp.Navigate(url+"#/chain/big-run"))
	b.Until(t, "the flowchart", `document.querySelectorAll('g.node').length > 0`)
	if got := b.Text(t, "#last-seq"); got != strconv.Itoa(n) {
		t.Fatalf("last seq shown: %q", got)
	}
	typeAt := func(seq int) string { return events[seq-1].Type }

	// End on the slider: the last event.
	b.Do(t, "End on the slider", chromedp.Focus(chromedp.CSS("#scrubber")), chromedp.KeyEvent(kb.End))
	tabStateAt(t, b, n)
	if got := b.Text(t, "#state-type"); got != typeAt(n) {
		t.Fatalf("event %d: %q, want %q", n, got, typeAt(n))
	}

	// Drag across the slider: every position answers with the state at
	// the slider's value, and the last one is what the panel shows.
	for _, frac := range []float64{0.1, 0.35, 0.6, 0.5} {
		tabSlider(t, b, frac)
	}
	v := browser.Get(t, b, "read the slider", chromedp.Value(chromedp.CSS("#scrubber")))
	seq, err := strconv.Atoi(v)
	if err != nil || seq <= 1 || seq >= n {
		t.Fatalf("slider value %q after a click in its middle", v)
	}
	tabStateAt(t, b, seq)
	if got := b.Text(t, "#state-type"); got != typeAt(seq) {
		t.Fatalf("event %d: %q, want %q", seq, got, typeAt(seq))
	}
	// Arrow keys step one event at a time.
	b.Do(t, "arrow left twice", chromedp.KeyEvent(kb.ArrowLeft), chromedp.KeyEvent(kb.ArrowLeft))
	tabStateAt(t, b, seq-2)
	if got := b.Text(t, "#state-type"); got != typeAt(seq-2) {
		t.Fatalf("event %d: %q, want %q", seq-2, got, typeAt(seq-2))
	}
	// The flowchart moved to a page around the selection, and marks the
	// node that holds it; the event list draws only the rows in view.
	b.Until(t, "the selected node", fmt.Sprintf(`(() => { const n = document.querySelector('g.node[aria-pressed="true"]'); return n && +n.dataset.seq <= %d && +n.dataset.seq > %d; })()`, seq-2, seq-200))
	b.Until(t, "the selected row", fmt.Sprintf(`!!document.querySelector('.ev-row.selected[data-seq="%d"]')`, seq-2))
	rows := browser.Eval[int](t, b, `document.querySelectorAll('.ev-row').length`)
	if rows == 0 || rows > 100 {
		t.Fatalf("%d event rows in the DOM for %d events", rows, n)
	}
	if nodes := browser.Eval[int](t, b, `document.querySelectorAll('g.node').length`); nodes > 1000 {
		t.Fatalf("%d flowchart nodes drawn at once", nodes)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-large-chain")
	b.Clean(t)
}

// A chain with a gap in its seqs: the event list has one row per event,
// and a selection scrolls to the row of its seq, not to seq - first seq.
func TestBrowserEventListWithASeqGap(t *testing.T) {
	t.Parallel()
	all := lctltest.Chain("gap-run", 1500, lctltest.Options{})
	events := append(all[:50:50], all[550:]...) // seqs 51..550 are missing
	prev := ""
	for i := range events {
		if err := events[i].Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = events[i].Hash
	}
	url := serveChainFiles(t, writeChain(t, t.TempDir(), "gap.lctl.json", "gap-run", events))
	b := browser.New(t, 2*time.Minute)

	// inView: the row of seq is drawn, selected, and inside the list's box.
	inView := func(seq int) string {
		return fmt.Sprintf(`(() => {
			const r = document.querySelector('.ev-row.selected[data-seq="%d"]'), box = document.querySelector('.events');
			if (!r || !box) return false;
			const a = r.getBoundingClientRect(), c = box.getBoundingClientRect();
			return a.top >= c.top && a.bottom <= c.bottom;
		})()`, seq)
	}
	// Seq 600 is at position 99: a list placing rows at seq - 1 would
	// scroll to row 599 (seq 1100).
	b.Do(t, "open seq 600", chromedp.Navigate(url+"#/chain/gap-run?seq=600"))
	tabStateAt(t, b, 600)
	b.Until(t, "the row of seq 600 in view", inView(600))
	if got := browser.Eval[int](t, b, `document.querySelectorAll('.ev-row.selected').length`); got != 1 {
		t.Fatalf("%d rows selected", got)
	}
	// One row per event: the list is 1,000 rows tall, and the rows drawn
	// are the events in order, each once.
	if h := browser.Eval[int](t, b, `document.querySelector('.ev-spacer').offsetHeight`); h != 1000*26 {
		t.Fatalf("list height %d px for 1,000 rows", h)
	}
	b.Until(t, "every drawn row loaded", `![...document.querySelectorAll('.ev-row')].some(r => !r.dataset.seq)`)
	drawn := browser.Eval[[]int](t, b, `[...document.querySelectorAll('.ev-row')].map(r => +r.dataset.seq)`)
	for i := 1; i < len(drawn); i++ {
		if drawn[i] <= drawn[i-1] {
			t.Fatalf("rows out of order or repeated: %v", drawn)
		}
	}
	// Across the gap: seq 50 is the row just above 551.
	b.Do(t, "open seq 50", chromedp.Navigate(url+"#/chain/gap-run?seq=50"))
	tabStateAt(t, b, 50)
	b.Until(t, "the row of seq 50 in view", inView(50))
	next := browser.Eval[int](t, b, `+document.querySelector('.ev-row.selected').nextElementSibling.dataset.seq`)
	if next != 551 {
		t.Fatalf("the row after seq 50 is seq %d, want 551", next)
	}
	// Far past the gap, then a click on a row selects that row's seq.
	b.Do(t, "open seq 1450", chromedp.Navigate(url+"#/chain/gap-run?seq=1450"))
	tabStateAt(t, b, 1450)
	b.Until(t, "the row of seq 1450 in view", inView(1450))
	b.Do(t, "click seq 1448", chromedp.Click(chromedp.CSS(`.ev-row[data-seq="1448"]`)))
	tabStateAt(t, b, 1448)
	b.Until(t, "the row of seq 1448 selected", inView(1448))
	if got := b.Text(t, "#state-type"); got != events[len(events)-53].Type || events[len(events)-53].Seq != 1448 {
		t.Fatalf("event 1448: %q", got)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-seq-gap")
	b.Clean(t)
}

// growingChain is a chain that grows while the page shows it, as the
// tracer's chains do; every change hands out a new immutable view.
type growingChain struct {
	mu      sync.Mutex
	id      string
	events  []lctl.Event
	view    *debugger.Chain
	gone    bool
	changed chan struct{}
}

func newGrowingChain(id string, events []lctl.Event) *growingChain {
	g := &growingChain{id: id, changed: make(chan struct{})}
	g.append(events...)
	return g
}

// append adds events (sealed, after the last) and wakes the live streams.
func (g *growingChain) append(events ...lctl.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := ""
	if n := len(g.events); n > 0 {
		prev = g.events[n-1].Hash
	}
	for _, e := range events {
		e.ChainID, e.Seq = g.id, uint64(len(g.events)+1)
		if e.Timestamp == "" {
			e.Timestamp = lctl.FormatTime(time.Date(2026, 11, 21, 12, 0, len(g.events), 0, time.UTC))
		}
		if err := e.Seal(prev); err != nil {
			panic(err)
		}
		prev = e.Hash
		g.events = append(g.events, e)
	}
	tl := lctl.NewTimeline(g.id, lctl.DefaultSnapshotEvery)
	for _, e := range g.events {
		tl.Append(e)
	}
	g.view = &debugger.Chain{
		ChainInfo: debugger.ChainInfo{ID: g.id, Events: len(g.events), FirstTimestamp: g.events[0].Timestamp,
			LastTimestamp: g.events[len(g.events)-1].Timestamp, Live: true},
		Events: tl.Events(), Timeline: tl, Sorted: true,
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// remove makes the chain disappear.
func (g *growingChain) remove() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gone = true
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *growingChain) Mode() string { return "cluster" }

func (g *growingChain) Chains(context.Context) ([]debugger.ChainInfo, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone {
		return nil, nil
	}
	return []debugger.ChainInfo{g.view.ChainInfo}, nil
}

func (g *growingChain) Chain(_ context.Context, id string) (*debugger.Chain, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone || id != g.id {
		return nil, debugger.ErrChainNotFound
	}
	return g.view, nil
}

func (g *growingChain) Watch(string) (uint64, <-chan struct{}, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return uint64(len(g.events)), g.changed, false
}

func stepEvents(step float64, tool string) []lctl.Event {
	return []lctl.Event{
		{Type: "step_start", Agent: "planner", Data: map[string]any{"step": step, "step_id": fmt.Sprint("s", step), "tool": tool, "intent": "look"}},
		{Type: "verdict", Agent: "validator", Data: map[string]any{"step": step, "step_id": fmt.Sprint("s", step), "tool": tool, "decision": "allow"}},
		{Type: "tool_call", Agent: "executor", Data: map[string]any{"step": step, "step_id": fmt.Sprint("s", step), "tool": tool, "status": "success", "duration_ms": 2.0}},
		{Type: "step_end", Agent: "planner", Data: map[string]any{"step": step, "step_id": fmt.Sprint("s", step), "outcome": "success", "duration_ms": 5.0}},
	}
}

// A live chain: new events appear without a reload; a lost connection
// says so and resumes where it stopped; a chain that disappears says so.
func TestBrowserLiveReconnects(t *testing.T) {
	t.Parallel()
	g := newGrowingChain("live-run", append([]lctl.Event{
		{Type: "run_started", Agent: "orchestrator", Data: map[string]any{"run_id": "live-run", "goal": "watch", "principal": "alice", "model": "m"}},
	}, stepEvents(1, "fs.read")...))
	h, err := debugger.New(debugger.Options{Source: g, Title: "live"})
	if err != nil {
		t.Fatal(err)
	}
	// down makes the server refuse everything, as a restarting tracer does.
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, `{"error":{"code":"UNAVAILABLE","message":"restarting"}}`, http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	b := browser.New(t, 3*time.Minute)
	b.Do(t, "open the chain", chromedp.Navigate(srv.URL+"/#/chain/live-run"))
	b.Until(t, "the live stream", `document.querySelector('#live-status')?.textContent.includes('Live:')`)
	browser.Eval[int](t, b, `window.__sameDocument = 7`)

	g.append(stepEvents(2, "fs.list")...)
	b.Until(t, "the new events", `document.querySelector('#last-seq')?.textContent === '9'`)
	b.Until(t, "the new step", `document.querySelectorAll('g.node[data-status="ok"]').length >= 2 && !!document.querySelector('.ev-row[data-seq="9"]')`)

	// The server goes away: the page says so, and keeps trying.
	down.Store(true)
	srv.CloseClientConnections()
	b.Until(t, "the lost connection", `document.querySelector('#live-status')?.textContent.includes('Connection lost, reconnecting')`)
	b.Screenshot(t, browser.Artifacts(t), "debugger-reconnecting")
	// Events stored meanwhile arrive once it is back, without a gap.
	g.append(stepEvents(3, "grep")...)
	down.Store(false)
	b.Until(t, "the stream again", `document.querySelector('#live-status')?.textContent.includes('Live:')`)
	b.Until(t, "the events of the outage", `document.querySelector('#last-seq')?.textContent === '13' && !!document.querySelector('.ev-row[data-seq="13"]')`)
	b.Until(t, "the state at the end", `document.querySelector('#state-seq')?.textContent === '13'`)
	if got := b.Text(t, "#chain-events"); got != "13" {
		t.Fatalf("event count after the outage: %q (an event counted twice or lost?)", got)
	}

	// The chain disappears: the page says so and stops.
	g.remove()
	b.Until(t, "the chain gone", `document.querySelector('#live-status')?.textContent.includes('no longer exists')`)
	if browser.Eval[int](t, b, `window.__sameDocument ?? 0`) != 7 {
		t.Fatal("the page reloaded")
	}
	// The cut stream and the refused requests are the expected failures.
	b.Clean(t, "status of 503", "ERR_INCOMPLETE_CHUNKED_ENCODING")
}

// The built page keeps the server's Content-Security-Policy: no inline
// script or style, every script and stylesheet from the page's own assets.
// (The browser tests catch a violation at run time; this names it at once.)
func TestBuiltPageHasNothingInline(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("dist", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := strings.ToLower(string(raw))
	if strings.Contains(html, "<style") || strings.Contains(html, " style=") {
		t.Errorf("index.html has inline style:\n%s", raw)
	}
	scripts := strings.Split(html, "<script")[1:]
	if len(scripts) == 0 {
		t.Fatalf("index.html loads no script:\n%s", raw)
	}
	for _, s := range scripts {
		tag, body, _ := strings.Cut(s, ">")
		body, _, _ = strings.Cut(body, "</script")
		if !strings.Contains(tag, `src="./assets/`) || strings.TrimSpace(body) != "" {
			t.Errorf("inline or foreign script: <script%s>%s", tag, body)
		}
	}
	for _, attr := range []string{"onload=", "onerror=", "onclick=", "javascript:"} {
		if strings.Contains(html, attr) {
			t.Errorf("index.html has %q", attr)
		}
	}
}

// A server that wants a bearer token to read: the page asks for it once,
// keeps it for the tab and sends it on every call; a wrong one is refused
// and asked for again.
func TestBrowserAsksForAToken(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-token"
	src := debugger.NewFileSource(testdataChain("xct-run.lctl.json"))
	h, err := debugger.New(debugger.Options{Source: src, Title: "with auth", Authorize: func(r *http.Request, _ string) error {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			return debugger.ErrUnauthenticated
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	b := browser.New(t, 2*time.Minute)
	b.Do(t, "open the page", chromedp.Navigate(srv.URL+"/"))
	b.Until(t, "the sign-in form", `!!document.querySelector('#signin-token')`)
	b.Do(t, "a wrong token", chromedp.Focus(chromedp.CSS("#signin-token")), chromedp.KeyEvent("wrong"+kb.Enter))
	b.Until(t, "the refusal", `document.querySelector('main')?.textContent.includes('did not accept')`)
	b.Do(t, "the right token", chromedp.Focus(chromedp.CSS("#signin-token")))
	browser.Eval[bool](t, b, `(document.activeElement.select(), true)`)
	b.Do(t, "type it", chromedp.KeyEvent(secret+kb.Enter))
	b.Until(t, "the chain", `document.querySelectorAll('g.node').length === 7`)
	b.Until(t, "the state", `!!document.querySelector('#state-type') && !document.querySelector('section.state.busy')`)
	if got := browser.Eval[string](t, b, `sessionStorage.getItem('xct-debugger-token')`); got != secret {
		t.Fatalf("token kept for the tab: %q", got)
	}
	// The refused requests before the right token are the expected failures.
	b.Clean(t, "status of 401")
}

// The chain list's time filters: a chain matches when its last event is at
// or after "since" and its first at or before "until". The fields are
// local times; the instants are turned into local times in the page, so
// the test does not depend on the machine's time zone.
func TestBrowserChainListTimeFilters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	starts := map[string]time.Time{
		"early-run":  time.Date(2026, 1, 10, 10, 0, 0, 0, time.UTC),
		"middle-run": time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC),
		"late-run":   time.Date(2026, 6, 20, 8, 0, 0, 0, time.UTC),
	}
	var paths []string
	for id, t0 := range starts {
		var events []lctl.Event
		for i, typ := range []string{"run_started", "checkpoint", "run_finished"} {
			events = append(events, lctl.Event{Type: typ, Agent: "orchestrator", Timestamp: lctl.FormatTime(t0.Add(time.Duration(i) * time.Minute)),
				Data: map[string]any{"run_id": id, "status": "done"}})
		}
		p := filepath.Join(dir, id+".lctl.json")
		sealChain(t, p, id, events)
		paths = append(paths, p)
	}
	url := serveChainFiles(t, paths...)
	b := browser.New(t, 2*time.Minute)
	listed := func() string {
		return strings.Join(browser.Eval[[]string](t, b, `[...document.querySelectorAll('table.chains tbody tr input[aria-label^="Pick "]')].map(e => e.getAttribute('aria-label').split(' ')[1])`), ",")
	}
	// setTime puts an instant (or "" to clear) into a datetime-local field
	// as the local time it is in the page.
	setTime := func(name string, at time.Time) {
		iso := ""
		if !at.IsZero() {
			iso = at.Format(time.RFC3339)
		}
		browser.Eval[string](t, b, fmt.Sprintf(`(() => {
			const el = document.querySelector('input[name=%s]'), iso = %q;
			const p = (n) => String(n).padStart(2, '0');
			const d = new Date(iso);
			el.value = iso ? d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + 'T' + p(d.getHours()) + ':' + p(d.getMinutes()) : '';
			el.dispatchEvent(new Event('input', {bubbles: true}));
			return el.value;
		})()`, name, iso))
	}
	search := func(what, want string) {
		t.Helper()
		// Mark what shows now: the answer is a new table (or note).
		browser.Eval[int](t, b, `document.querySelectorAll('table.chains, p.empty').forEach(e => e.dataset.stale = '1'), 1`)
		b.Do(t, "search "+what, chromedp.Click(chromedp.CSS(`form.search button[type=submit]`)))
		if want == "" {
			b.Until(t, what+": nothing", `document.querySelector('p.empty:not([data-stale])')?.textContent.includes('No chain matches')`)
			return
		}
		b.Until(t, what, fmt.Sprintf(`document.querySelectorAll('table.chains:not([data-stale]) tbody tr').length === %d`, len(strings.Split(want, ","))))
		if got := listed(); got != want {
			t.Fatalf("%s: listed %s, want %s", what, got, want)
		}
	}

	b.Do(t, "open the list", chromedp.Navigate(url))
	b.Until(t, "three chains", `document.querySelectorAll('table.chains tbody tr').length === 3`)
	if got := listed(); got != "late-run,middle-run,early-run" {
		t.Fatalf("newest first: %s", got)
	}
	setTime("since", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	search("since March", "late-run,middle-run")
	setTime("until", time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	search("March only", "middle-run")
	// A chain that ends at the very minute "since" names still matches:
	// the bounds are inclusive.
	setTime("since", starts["middle-run"].Add(2*time.Minute))
	search("since the middle run's last minute", "middle-run")
	setTime("since", starts["middle-run"].Add(3*time.Minute))
	search("since after the middle run", "")
	// Since after until: nothing, and no error.
	setTime("since", time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	search("since after until", "")
	if n := browser.Eval[int](t, b, `document.querySelectorAll('[role=alert]').length`); n != 0 {
		t.Fatalf("%d errors shown for an empty range", n)
	}
	setTime("since", time.Time{})
	setTime("until", time.Date(2026, 1, 10, 10, 0, 0, 0, time.UTC))
	search("until the early run's first minute", "early-run")
	setTime("until", time.Time{})
	search("no bounds", "late-run,middle-run,early-run")
	b.Clean(t)
}

// Keyboard: Tab moves focus across the flowchart's nodes in the chain's
// order, Enter or Space selects the focused node.
func TestBrowserFlowchartKeyboard(t *testing.T) {
	t.Parallel()
	url := serveChainFiles(t, testdataChain("xct-run.lctl.json"))
	b := browser.New(t, 2*time.Minute)
	b.Do(t, "open the chain", chromedp.Navigate(url+"#/chain/"+xctRun+"?seq=22"))
	b.Until(t, "the flowchart", `document.querySelectorAll('g.node').length === 7`)
	tabStateAt(t, b, 22)
	seqs := browser.Eval[[]int](t, b, `[...document.querySelectorAll('g.node')].map(n => +n.dataset.seq)`)
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("nodes are not in the chain's order: %v", seqs)
		}
	}
	focused := func() int {
		return browser.Eval[int](t, b, `+(document.activeElement?.closest('g.node')?.dataset.seq ?? 0)`)
	}
	// Focus the first node, then Tab: the second, then the third.
	browser.Eval[int](t, b, fmt.Sprintf(`document.querySelector('g.node[data-seq="%d"]').focus(), 1`, seqs[0]))
	if got := focused(); got != seqs[0] {
		t.Fatalf("focus on node %d, want %d", got, seqs[0])
	}
	b.Do(t, "Tab", chromedp.KeyEvent(kb.Tab))
	if got := focused(); got != seqs[1] {
		t.Fatalf("after Tab, focus on node %d, want %d", got, seqs[1])
	}
	// Focus alone selects nothing; Enter does.
	if got := b.Text(t, "#state-seq"); got != "22" {
		t.Fatalf("focus changed the selection to %s", got)
	}
	b.Do(t, "Enter", chromedp.KeyEvent(kb.Enter))
	tabStateAt(t, b, seqs[1])
	b.Until(t, "the node marked selected", fmt.Sprintf(`document.querySelector('g.node[data-seq="%d"]')?.getAttribute('aria-pressed') === 'true'`, seqs[1]))
	b.Do(t, "Tab", chromedp.KeyEvent(kb.Tab))
	if got := focused(); got != seqs[2] {
		t.Fatalf("after a second Tab, focus on node %d, want %d", got, seqs[2])
	}
	b.Do(t, "Space", chromedp.KeyEvent(" "))
	tabStateAt(t, b, seqs[2])
	if n := browser.Eval[int](t, b, `document.querySelectorAll('g.node[aria-pressed="true"]').length`); n != 1 {
		t.Fatalf("%d nodes marked selected", n)
	}
	// The selection keeps the focus where it was (no jump to the top).
	if got := focused(); got != seqs[2] {
		t.Fatalf("after Space, focus on node %d, want %d", got, seqs[2])
	}
	b.Clean(t)
}

// A model's arguments and intent hold characters a browser does not show
// as themselves: a right-to-left override reorders what follows it, tag
// and zero-width characters show nothing. The page writes each as its
// escape (as xct approvals and the validator's previews do), in the JSON
// blocks (an approval's arguments are one) and in the text around them.
func TestBrowserShowsHiddenCharacters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hidden.lctl.json")
	sealChain(t, path, "hidden-run", []lctl.Event{
		{Type: "run_started", Agent: "orchestrator", Data: map[string]any{"run_id": "hidden-run", "goal": "g", "principal": "alice", "model": "m"}},
		{Type: "step_start", Agent: "orchestrator", Data: map[string]any{"step": 1.0, "step_id": "s1", "tool": "fs.write", "intent": "fix\u202eexe.txt",
			"arguments": map[string]any{"path": "config/app\u202elmay.yaml", "content": "a\u200bb\U000E0041c\u2028d"}}},
	})
	url := serveChainFiles(t, path)
	b := browser.New(t, 2*time.Minute)
	b.Do(t, "open the step", chromedp.Navigate(url+"#/chain/hidden-run?seq=2"))
	tabStateAt(t, b, 2)
	state := b.Text(t, "section.state")
	for _, raw := range []string{"\u202e", "\u200b", "\U000E0041", "\u2028"} {
		if strings.Contains(state, raw) {
			t.Errorf("the step's panel shows %q as it is:\n%s", raw, state)
		}
	}
	for _, want := range []string{`config/app\u202elmay.yaml`, `a\u200bb\U000e0041c\u2028d`} {
		if !strings.Contains(state, want) {
			t.Errorf("the step's panel does not show %s:\n%s", want, state)
		}
	}
	b.Clean(t)
}
