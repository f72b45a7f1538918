// Package browser starts Debian's headless Chromium for tests that drive a
// real page (the visual debugger), through the DevTools protocol
// (chromedp). It records what the page did that a test must be able to
// deny: JavaScript dialogs, uncaught exceptions, and console and browser log
// errors such as Content-Security-Policy violations.
//
// Without Chromium the tests skip, saying why; with XCT_REQUIRE_BROWSER=1
// (set by `make test`, whose test-deps target installs the chromium
// package) they fail instead.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// DefaultPath is where Debian's chromium package puts the browser.
const DefaultPath = "/usr/bin/chromium"

// Browser is one headless Chromium with one tab.
type Browser struct {
	// Ctx drives the tab: pass it to chromedp.Run.
	Ctx context.Context

	mu      sync.Mutex
	dialogs []string
	console []string
}

// executable finds Chromium: XCT_CHROMIUM, DefaultPath, then the PATH.
func executable() (string, error) {
	if p := os.Getenv("XCT_CHROMIUM"); p != "" {
		return p, nil
	}
	if _, err := os.Stat(DefaultPath); err == nil {
		return DefaultPath, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium at %s or on the PATH (install the Debian package chromium, or run `make test-deps`)", DefaultPath)
}

// chromiumTmp is a TMPDIR for one Chromium, removed when the test ends,
// after the browser is stopped. Chromium puts its profile's singleton socket
// in a directory of its own under TMPDIR (org.chromium.Chromium.*) and
// removes it only when it exits cleanly: a test kills it. The directory is
// not t.TempDir, whose path holds the test's name: a Unix socket's path has
// at most 107 bytes, and Chromium refuses to start with a longer one.
func chromiumTmp(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "xct-chromium-")
	if err != nil {
		t.Fatalf("chromium's TMPDIR: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(d); err != nil {
			t.Errorf("chromium's TMPDIR: %v", err)
		}
	})
	return d
}

// flags are Chromium's options, a browser per test or shared alike. The
// machine's network is closed: everything that would call out is off.
func flags(exe, profile, tmp string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 1000),
		chromedp.Env("TMPDIR=" + tmp),
	}
}

// shared is the one Chromium of a package whose TestMain runs Main: its
// browser tests each get a tab in a browser context of their own, not a
// Chromium of their own (starting one costs ~2 CPU-seconds on CI's
// machine, more than most of these tests' pages).
var shared struct {
	mu   sync.Mutex
	on   bool            // Main runs the package's tests
	ctx  context.Context // the browser's first tab; nil until a test needs it
	err  error           // why it did not start
	dirs []string        // its profile and TMPDIR, removed by Main
	stop func()
}

// Main runs a package's tests (m.Run) with one Chromium shared by its
// browser tests, started when the first of them calls New and stopped
// when the tests are done, and returns m.Run's code. Each test's tab is in
// a browser context of its own (Chromium's incognito profile: its own
// cookies, storage and cache, disposed of when the test ends) and in a
// window of its own, so tests may run in parallel and none sees another's
// state; a test's dialogs and console are its tab's. Without Main every
// test starts its own Chromium.
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.on = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.stop != nil {
		shared.stop()
	}
	for _, d := range shared.dirs {
		if err := os.RemoveAll(d); err != nil && code == 0 {
			fmt.Fprintf(os.Stderr, "browser: %v\n", err)
			code = 1
		}
	}
	shared.on, shared.ctx, shared.stop, shared.dirs = false, nil, nil, nil
	return code
}

// sharedBrowser is the shared Chromium's first tab, started on first use;
// ok is false when the package did not ask for one (no Main).
func sharedBrowser(exe string) (ctx context.Context, ok bool, err error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.on {
		return nil, false, nil
	}
	if shared.ctx != nil || shared.err != nil {
		return shared.ctx, true, shared.err
	}
	// Not t.TempDir: the browser outlives the test that starts it. The
	// TMPDIR's path is short for Chromium's socket (see chromiumTmp).
	for range 2 {
		d, err := os.MkdirTemp("", "xct-chromium-")
		if err != nil {
			shared.err = fmt.Errorf("chromium's directories: %w", err)
			return nil, true, shared.err
		}
		shared.dirs = append(shared.dirs, d)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), flags(exe, shared.dirs[0], shared.dirs[1])...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	shared.stop = func() {
		cancelBrowser()
		cancelAlloc()
	}
	if err := chromedp.Do(bctx); err != nil {
		shared.err = fmt.Errorf("start %s: %w", exe, err)
		return nil, true, shared.err
	}
	shared.ctx = bctx
	return bctx, true, nil
}

// New starts Chromium for the test and stops it when the test ends (or,
// in a package whose TestMain runs Main, opens a tab in the package's
// Chromium, in a browser context of its own, and closes both when the
// test ends). The tab's context ends after timeout.
func New(t testing.TB, timeout time.Duration) *Browser {
	t.Helper()
	exe, err := executable()
	if err != nil {
		if os.Getenv("XCT_REQUIRE_BROWSER") == "1" {
			t.Fatalf("%v; XCT_REQUIRE_BROWSER=1 requires it", err)
		}
		t.Skipf("browser test skipped: %v", err)
	}
	var tctx context.Context
	var stop func()
	if bctx, ok, err := sharedBrowser(exe); err != nil {
		t.Fatal(err)
	} else if ok {
		// The profile is new for every test: an incognito browser context.
		c, cancelTab := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
		tctx, stop = c, cancelTab
	} else {
		// The profile is new for every test.
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), flags(exe, t.TempDir(), chromiumTmp(t))...)
		c, cancelTab := chromedp.NewContext(actx)
		tctx, stop = c, func() {
			cancelTab()
			cancelAlloc()
		}
	}
	ctx, cancelTimeout := context.WithTimeout(tctx, timeout)
	stopAll := stop
	stop = func() {
		cancelTimeout()
		stopAll()
	}
	if err := chromedp.Do(ctx); err != nil {
		stop()
		t.Fatalf("start %s: %v", exe, err)
	}
	b := &Browser{Ctx: ctx}
	// Subscribe before the first page loads, so nothing is missed.
	messages := chromedp.Console(ctx)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				b.mu.Lock()
				b.console = append(b.console, consoleLine(m))
				b.mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, string(ev.Type)+": "+ev.Message)
			b.mu.Unlock()
			// Dismiss it, so the page does not hang on it.
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	return b
}

// consoleLine is how Console shows m: its type and text, and where it came
// from when the browser says (a failed request's URL, without its query,
// which may hold a token), so a failure names the request that failed.
func consoleLine(m chromedp.ConsoleMessage) string {
	line := string(m.Type) + ": " + m.Text
	if where, _, _ := strings.Cut(m.URL, "?"); where != "" {
		line += " (" + where + ")"
	}
	return line
}

// Dialogs lists the JavaScript dialogs (alert, confirm, prompt) the page
// opened.
func (b *Browser) Dialogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

// Console lists the page's console errors and warnings, its uncaught
// exceptions and the browser log's warnings and errors (a
// Content-Security-Policy violation is one).
func (b *Browser) Console() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

// Artifacts is the directory screenshots go to: $XCT_ARTIFACTS, or a new
// temporary directory that outlives the test only when the test fails (its
// path is logged then); a passing test's screenshots are removed with it.
func Artifacts(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("XCT_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o750); err != nil { //nolint:gosec // the directory the person running the tests chose
			t.Fatalf("artifacts: %v", err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "xct-artifacts-")
	if err != nil {
		t.Fatalf("artifacts: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("artifacts kept: %s", d)
			return
		}
		if err := os.RemoveAll(d); err != nil {
			t.Errorf("artifacts: %v", err)
		}
	})
	return d
}

// Screenshot saves the whole page as dir/name.png.
func (b *Browser) Screenshot(t testing.TB, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o600); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	t.Logf("screenshot: %s", p)
}

// waitFor bounds Until: generous, for a loaded 2-core machine.
const waitFor = 60 * time.Second

// Do runs actions on the tab and fails the test on error.
func (b *Browser) Do(t testing.TB, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.Ctx, actions...); err != nil {
		t.Fatalf("%s: %v\nconsole: %q", what, err, b.Console())
	}
}

// OpenWith opens url (reloading it when the tab shows it already) with
// script run in the new document before any of the page's own, and forgets
// the script afterwards. A sign-in stored in sessionStorage this way is there
// for the page's first request: setting it from the page after it loaded
// races the requests the page makes without it (a 401 in the log when the
// answer wins).
func (b *Browser) OpenWith(t testing.TB, what, url, script string) {
	t.Helper()
	added := Get(t, b, what+" (add the script)", func(ctx context.Context, tg *chromedp.Target) (page.AddScriptToEvaluateOnNewDocumentResult, error) {
		return cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script})
	})
	b.Do(t, what, chromedp.Navigate(url), chromedp.Reload())
	Get(t, b, what+" (forget the script)", func(ctx context.Context, tg *chromedp.Target) (cdp.Empty, error) {
		return cdp.Call(ctx, tg, page.RemoveScriptToEvaluateOnNewDocument, page.RemoveScriptToEvaluateOnNewDocumentParams(added))
	})
}

// Get runs one action that returns a value and fails the test on error.
func Get[T any](t testing.TB, b *Browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(b.Ctx, a)
	if err != nil {
		t.Fatalf("%s: %v\nconsole: %q", what, err, b.Console())
	}
	return v
}

// Eval evaluates JavaScript in the page.
func Eval[T any](t testing.TB, b *Browser, js string) T {
	t.Helper()
	return Get(t, b, "evaluate "+js, chromedp.Evaluate[T](js))
}

// Until waits until a JavaScript condition holds on the page. A wait whose
// document went away under it (the page was loading a new one: chromedp's
// poll runs in one document's JavaScript context and does not survive it)
// starts again in the new document, within the same bound; any other error
// fails the test. A test that must see no reload says so itself.
func (b *Browser) Until(t testing.TB, what, js string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		_, err := chromedp.Run(b.Ctx, chromedp.Poll[bool]("!!("+js+")",
			chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(50*time.Millisecond)))
		if err == nil {
			return
		}
		if !documentGone(err) || time.Now().After(deadline) {
			t.Fatalf("wait for %s: %v\nconsole: %q", what, err, b.Console())
		}
		// The next document's context is announced by an event the tab
		// handles on its own goroutine: give it a moment, not a busy loop.
		select {
		case <-b.Ctx.Done():
			t.Fatalf("wait for %s: %v", what, b.Ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// documentGone reports whether err is the DevTools protocol saying that the
// JavaScript context a call ran in, or was sent to, is gone: the document
// was replaced while the call waited, or just before it was sent.
func documentGone(err error) bool {
	var e *cdproto.Error
	if !errors.As(err, &e) {
		return false
	}
	return strings.Contains(e.Message, "Cannot find context with specified id") ||
		strings.Contains(e.Message, "Execution context was destroyed") ||
		strings.Contains(e.Message, "Inspected target navigated or closed")
}

// Text reads the rendered text of the first element matching a CSS
// selector.
func (b *Browser) Text(t testing.TB, sel string) string {
	t.Helper()
	return Get(t, b, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// Attr reads an attribute of the first element matching a CSS selector.
func (b *Browser) Attr(t testing.TB, sel, name string) string {
	t.Helper()
	return Get(t, b, "read "+sel+" "+name, chromedp.AttributeValue(chromedp.CSS(sel), name)).Value
}

// Clean fails the test when the page opened a dialog, threw, or logged an
// error or warning (a Content-Security-Policy violation among them), except
// messages that contain one of expected (a request the test made fail on
// purpose is logged by the browser).
func (b *Browser) Clean(t testing.TB, expected ...string) {
	t.Helper()
	if d := b.Dialogs(); len(d) > 0 {
		t.Errorf("the page opened dialogs: %q", d)
	}
	var unexpected []string
	for _, m := range b.Console() {
		ok := false
		for _, e := range expected {
			ok = ok || strings.Contains(m, e)
		}
		if !ok {
			unexpected = append(unexpected, m)
		}
	}
	if len(unexpected) > 0 {
		t.Errorf("the page logged: %q", unexpected)
	}
}
