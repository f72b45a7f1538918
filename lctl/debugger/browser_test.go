package debugger_test

// Browser tests: the real page (dist/, embedded) in Debian's headless
// Chromium against the real handler over chain files on 127.0.0.1. They
// skip without Chromium unless XCT_REQUIRE_BROWSER=1 (`make test`).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/debugger"
	"github.com/xct-dev/xct/lctl/lctltest"
)

const (
	xctRun   = "run-20240115-103000-4f2a9c1e"
	reviewV1 = "security-review-001"
	reviewV2 = "security-review-002"
	// waitFor bounds every wait on the page: generous, for 2 loaded cores.
	waitFor = 60 * time.Second
)

// serveFiles serves chain files with the debugger on 127.0.0.1 and returns
// the page's URL.
func serveChainFiles(t *testing.T, paths ...string) string {
	t.Helper()
	src := debugger.NewFileSource(paths...)
	h, err := debugger.New(debugger.Options{Source: src, Title: "browser test", LoadErrors: src.LoadErrors()})
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

// run runs chromedp actions and fails the test on error.
func tabDo(t *testing.T, b *browser.Browser, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.Ctx, actions...); err != nil {
		t.Fatalf("%s: %v\nconsole: %q", what, err, b.Console())
	}
}

// get runs one chromedp action that returns a value.
func tabGet[T any](t *testing.T, b *browser.Browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(b.Ctx, a)
	if err != nil {
		t.Fatalf("%s: %v\nconsole: %q", what, err, b.Console())
	}
	return v
}

// eval evaluates JavaScript in the page.
func tabEval[T any](t *testing.T, b *browser.Browser, js string) T {
	t.Helper()
	return tabGet(t, b, "evaluate "+js, chromedp.Evaluate[T](js))
}

// until waits for a JavaScript condition on the page.
func tabUntil(t *testing.T, b *browser.Browser, what, js string) {
	t.Helper()
	tabGet(t, b, "wait for "+what, chromedp.Poll[bool]("!!("+js+")", chromedp.WithPollingTimeout(waitFor), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// text reads the text of the first element matching sel.
func tabText(t *testing.T, b *browser.Browser, sel string) string {
	t.Helper()
	return tabGet(t, b, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// attr reads an attribute of the first element matching sel.
func tabAttr(t *testing.T, b *browser.Browser, sel, name string) string {
	t.Helper()
	return tabGet(t, b, "read "+sel+" "+name, chromedp.AttributeValue(chromedp.CSS(sel), name)).Value
}

// stateAt waits until the state panel shows seq and has finished loading.
func tabStateAt(t *testing.T, b *browser.Browser, seq int) {
	t.Helper()
	tabUntil(t, b, fmt.Sprintf("the state at seq %d", seq),
		fmt.Sprintf(`document.querySelector('#state-seq')?.textContent === '%d' && !document.querySelector('section.state.busy')`, seq))
}

// tabClean fails the test when the page opened a dialog, threw, or logged
// an error or warning (a Content-Security-Policy violation among them).
func tabClean(t *testing.T, b *browser.Browser) {
	t.Helper()
	if d := b.Dialogs(); len(d) > 0 {
		t.Errorf("the page opened dialogs: %q", d)
	}
	if c := b.Console(); len(c) > 0 {
		t.Errorf("the page logged: %q", c)
	}
}

// sliderClick clicks the scrubber at a fraction of its width.
func tabSlider(t *testing.T, b *browser.Browser, frac float64) {
	t.Helper()
	box := tabEval[[]float64](t, b, `(() => { const r = document.querySelector('#scrubber').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`)
	// The thumb is about 16 px wide: its centre runs from 8 px to width-8 px.
	x := box[0] + 8 + frac*(box[2]-16)
	tabDo(t, b, "click the slider", chromedp.MouseClickXY(x, box[1]+box[3]/2))
}

func TestBrowserChainFlowStateAndScrubber(t *testing.T) {
	url := serveChainFiles(t, testdataChain("xct-run.lctl.json"))
	b := browser.New(t, 3*time.Minute)
	art := browser.Artifacts(t)

	// One chain served: the page opens it.
	tabDo(t, b, "open the page", chromedp.Navigate(url))
	tabUntil(t, b, "the flowchart", `document.querySelectorAll('g.node').length === 7`)
	if got := tabText(t, b, "#chain-id"); got != xctRun {
		t.Fatalf("chain shown: %q", got)
	}

	// The denied step is marked in words, not only by color.
	denied := `g.node[data-status="denied"]`
	label := tabAttr(t, b, denied, "aria-label")
	if !strings.Contains(label, "denied") || !strings.Contains(label, "shell.exec") {
		t.Fatalf("denied node's label: %q", label)
	}
	if s := tabGet(t, b, "read the status", chromedp.TextContent(chromedp.CSS(denied+" .n-status"))); !strings.Contains(s, "denied") {
		t.Fatalf("denied node's status text: %q", s)
	}

	// Click it: the state panel shows the step's proposal as of seq 14.
	tabDo(t, b, "click the denied node", chromedp.Click(chromedp.CSS(denied+" rect")))
	tabStateAt(t, b, 14)
	step := tabText(t, b, "#state-step")
	for _, want := range []string{"Step 4", "shell.exec", "Restart the service", "no verdict yet"} {
		if !strings.Contains(step, want) {
			t.Fatalf("state at 14 lacks %q:\n%s", want, step)
		}
	}
	if pressed := tabAttr(t, b, denied, "aria-pressed"); pressed != "true" {
		t.Fatalf("the clicked node is not marked selected: aria-pressed=%q", pressed)
	}
	b.Screenshot(t, art, "debugger-chain")

	// Keyboard right (focus on the page, not a field): seq 15, the verdict
	// with its matched rule.
	tabDo(t, b, "focus the heading", chromedp.Click(chromedp.CSS("#chain-id")), chromedp.KeyEvent(kb.ArrowRight))
	tabStateAt(t, b, 15)
	verdict := tabText(t, b, "#state-verdict")
	if !strings.Contains(verdict, "denied") || !strings.Contains(verdict, "builtin.catalog") {
		t.Fatalf("verdict at 15: %q", verdict)
	}

	// The slider: a click at its start selects the first event; arrows on
	// it step; the state follows (tokens so far come from step_end).
	tabSlider(t, b, 0)
	tabStateAt(t, b, 1)
	if got := tabText(t, b, "#state-type"); got != "run_started" {
		t.Fatalf("event at seq 1: %q", got)
	}
	tabDo(t, b, "arrow right on the slider", chromedp.Focus(chromedp.CSS("#scrubber")),
		chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowRight))
	tabStateAt(t, b, 5)
	if got := tabText(t, b, "#state-tokens"); !strings.HasPrefix(got, "495 ") {
		t.Fatalf("tokens at seq 5 (450 in + 45 out): %q", got)
	}
	tabSlider(t, b, 1)
	tabStateAt(t, b, 22)
	if got := tabText(t, b, "#state-type"); got != "run_finished" {
		t.Fatalf("event at seq 22: %q", got)
	}

	// A row of the event list selects its event.
	tabDo(t, b, "click event 12", chromedp.Click(chromedp.CSS(`.ev-row[data-seq="12"]`)))
	tabStateAt(t, b, 12)
	if got := tabText(t, b, "#state-type"); got != "error" {
		t.Fatalf("event at seq 12: %q", got)
	}
	// The URL names the selected seq, so the view can be linked.
	tabUntil(t, b, "the seq in the URL", `location.hash.endsWith('?seq=12')`)

	// Cost and duration per agent, and the bottlenecks, are drawn.
	tabUntil(t, b, "the charts", `document.querySelectorAll('#perf canvas').length >= 2 && document.querySelectorAll('.bottlenecks li').length > 0`)
	b.Screenshot(t, art, "debugger-state-at-12")
	tabClean(t, b)
}

func TestBrowserDiffView(t *testing.T) {
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
	resp.Body.Close()
	if len(rep.Differences) == 0 {
		t.Fatal("the two review chains do not differ: nothing to show")
	}

	b := browser.New(t, 2*time.Minute)
	// Two chains: the list; pick both and compare.
	tabDo(t, b, "open the list", chromedp.Navigate(url))
	tabUntil(t, b, "two chains listed", `document.querySelectorAll('table.chains tbody tr').length === 2`)
	tabDo(t, b, "pick both",
		chromedp.Click(chromedp.CSS(`input[aria-label="Pick `+reviewV1+` to compare"]`)),
		chromedp.Click(chromedp.CSS(`input[aria-label="Pick `+reviewV2+` to compare"]`)),
		chromedp.Click(chromedp.CSS("#compare")))
	tabUntil(t, b, "the diff", `!!document.querySelector('#diff-summary')`)
	summary := tabText(t, b, "#diff-summary")
	want := fmt.Sprintf("%d changed, %d only in v2, %d only in v1", rep.Changed, rep.Added, rep.Removed)
	if !strings.Contains(summary, want) {
		t.Fatalf("summary %q lacks %q", summary, want)
	}
	rows := tabEval[int](t, b, `document.querySelectorAll('table.diff tbody tr').length`)
	if rows != len(rep.Differences) {
		t.Fatalf("%d rows for %d differences", rows, len(rep.Differences))
	}
	// Each kind is named in words.
	kinds := tabEval[[]string](t, b, `[...document.querySelectorAll('table.diff .diff-kind')].map(e => e.textContent.trim())`)
	for _, k := range kinds {
		if !strings.HasSuffix(k, "changed") && !strings.HasSuffix(k, "only in v1") && !strings.HasSuffix(k, "only in v2") {
			t.Fatalf("difference kind %q is not in words", k)
		}
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-diff")
	tabClean(t, b)
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
	defer f.Close()
	if err := lctl.NewFile(id, events).Encode(f, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
}

func TestBrowserToolOutputIsTextNotHTML(t *testing.T) {
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

	tabDo(t, b, "open the tool call", chromedp.Navigate(url+"#/chain/xss-run?seq=4"))
	tabStateAt(t, b, 4)
	tabUntil(t, b, "the flowchart", `document.querySelectorAll('g.node').length > 0`)
	tabUntil(t, b, "the confidence chart", `!!document.querySelector('#confidence .fact')`)
	// The payloads are on the page as text: in the tool output, the step,
	// the flowchart, the rules, the facts.
	body := tabEval[string](t, b, `document.body.innerText + '\n' + [...document.querySelectorAll('svg text')].map(e => e.textContent).join('\n')`)
	for _, want := range []string{`<img src=x onerror=\"window.__xss=1;alert(1)\">`, `<script>window.__xss=2;alert(2)</script>`, p[2], "<img src=x onerror"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page does not show %q as text", want)
		}
	}
	// The unknown event type is shown as raw data, its HTML as text.
	tabDo(t, b, "go to the unknown event", chromedp.Click(chromedp.CSS(`.ev-row[data-seq="7"]`)))
	tabStateAt(t, b, 7)
	if got := tabText(t, b, "#state-type"); got != "made_up_type" {
		t.Fatalf("event 7: %q", got)
	}
	state := tabText(t, b, "section.state")
	if !strings.Contains(state, "Unknown event type") || !strings.Contains(state, `<iframe src=\"javascript:alert(4)\"></iframe>`) {
		t.Fatalf("the unknown event is not shown as raw data:\n%s", state)
	}
	// The chain list shows the agents' names as text too.
	tabDo(t, b, "open the list", chromedp.Navigate(url+"#/?q=xss"))
	tabUntil(t, b, "the list", `document.querySelectorAll('table.chains tbody tr').length === 1`)

	// Nothing ran: no element, attribute, global or dialog from a payload.
	type found struct {
		Elements int  `json:"elements"`
		Handlers int  `json:"handlers"`
		Global   bool `json:"global"`
	}
	injected := tabEval[found](t, b, `({
		elements: document.querySelectorAll('img, iframe, script:not([src]), body svg:not([aria-label]):not(.plot svg)').length,
		handlers: document.querySelectorAll('[onerror], [onload]').length,
		global: window.__xss !== undefined,
	})`)
	if injected.Elements != 0 || injected.Handlers != 0 || injected.Global {
		t.Fatalf("a payload became markup or ran: %+v", injected)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-xss")
	tabClean(t, b)
}

func TestBrowserLoadErrorPage(t *testing.T) {
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
	resp.Body.Close()
	if info.LoadError == nil {
		t.Fatal("the server reports no load error for a broken file")
	}

	b := browser.New(t, time.Minute)
	tabDo(t, b, "open the page", chromedp.Navigate(url))
	tabUntil(t, b, "the error page", `!!document.querySelector('#load-error-message')`)
	if got := tabText(t, b, "#load-error-file"); !strings.Contains(got, "broken.lctl.json") {
		t.Fatalf("error page names %q", got)
	}
	if got := tabText(t, b, "#load-error-message"); got != info.LoadError.Message || got == "" {
		t.Fatalf("error page says %q, the server %q", got, info.LoadError.Message)
	}
	if role := tabAttr(t, b, ".load-error .errorbox", "role"); role != "alert" {
		t.Fatalf("the error is not announced: role=%q", role)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-load-error")
	tabClean(t, b)
}

func TestBrowserLargeChainScrubs(t *testing.T) {
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
	f.Close()
	url := serveChainFiles(t, path)
	b := browser.New(t, 4*time.Minute)

	tabDo(t, b, "open the chain", chromedp.Navigate(url+"#/chain/big-run"))
	tabUntil(t, b, "the flowchart", `document.querySelectorAll('g.node').length > 0`)
	if got := tabText(t, b, "#last-seq"); got != strconv.Itoa(n) {
		t.Fatalf("last seq shown: %q", got)
	}
	typeAt := func(seq int) string { return events[seq-1].Type }

	// End on the slider: the last event.
	tabDo(t, b, "End on the slider", chromedp.Focus(chromedp.CSS("#scrubber")), chromedp.KeyEvent(kb.End))
	tabStateAt(t, b, n)
	if got := tabText(t, b, "#state-type"); got != typeAt(n) {
		t.Fatalf("event %d: %q, want %q", n, got, typeAt(n))
	}

	// Drag across the slider: every position answers with the state at
	// the slider's value, and the last one is what the panel shows.
	for _, frac := range []float64{0.1, 0.35, 0.6, 0.5} {
		tabSlider(t, b, frac)
	}
	v := tabGet(t, b, "read the slider", chromedp.Value(chromedp.CSS("#scrubber")))
	seq, err := strconv.Atoi(v)
	if err != nil || seq <= 1 || seq >= n {
		t.Fatalf("slider value %q after a click in its middle", v)
	}
	tabStateAt(t, b, seq)
	if got := tabText(t, b, "#state-type"); got != typeAt(seq) {
		t.Fatalf("event %d: %q, want %q", seq, got, typeAt(seq))
	}
	// Arrow keys step one event at a time.
	tabDo(t, b, "arrow left twice", chromedp.KeyEvent(kb.ArrowLeft), chromedp.KeyEvent(kb.ArrowLeft))
	tabStateAt(t, b, seq-2)
	if got := tabText(t, b, "#state-type"); got != typeAt(seq-2) {
		t.Fatalf("event %d: %q, want %q", seq-2, got, typeAt(seq-2))
	}
	// The flowchart moved to a page around the selection, and marks the
	// node that holds it; the event list draws only the rows in view.
	tabUntil(t, b, "the selected node", fmt.Sprintf(`(() => { const n = document.querySelector('g.node[aria-pressed="true"]'); return n && +n.dataset.seq <= %d && +n.dataset.seq > %d; })()`, seq-2, seq-200))
	tabUntil(t, b, "the selected row", fmt.Sprintf(`!!document.querySelector('.ev-row.selected[data-seq="%d"]')`, seq-2))
	rows := tabEval[int](t, b, `document.querySelectorAll('.ev-row').length`)
	if rows == 0 || rows > 100 {
		t.Fatalf("%d event rows in the DOM for %d events", rows, n)
	}
	if nodes := tabEval[int](t, b, `document.querySelectorAll('g.node').length`); nodes > 1000 {
		t.Fatalf("%d flowchart nodes drawn at once", nodes)
	}
	b.Screenshot(t, browser.Artifacts(t), "debugger-large-chain")
	tabClean(t, b)
}
