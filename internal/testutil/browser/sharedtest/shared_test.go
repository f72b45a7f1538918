// Package sharedtest_test checks the Chromium that browser.Main shares
// between a package's browser tests: one process, a tab each in a browser
// context of its own (nothing of one test's storage or cookies reaches
// another's), the window of a Chromium of its own, and nothing left in
// TMPDIR when the tests are done.
package sharedtest_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xct-dev/xct/internal/testutil/browser"
)

func TestMain(m *testing.M) {
	// Chromium's profile, TMPDIR and the tests' own temporary files go
	// under a directory of this run's; after the tests it must be empty.
	tmp, err := os.MkdirTemp("", "xct-shared-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Setenv("TMPDIR", tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := browser.Main(m)
	left, err := os.ReadDir(tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	for _, e := range left {
		fmt.Fprintf(os.Stderr, "left behind in TMPDIR: %s\n", e.Name())
		code = 1
	}
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

// serve answers every path with an empty page on 127.0.0.1.
func serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><body>page</body>`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

// pid is the process of the Chromium b's tab is in.
func pid(t *testing.T, b *browser.Browser) int {
	t.Helper()
	c := chromedp.FromContext(b.Ctx)
	if c == nil || c.Browser == nil || c.Browser.Process() == nil {
		t.Fatal("the tab has no browser process")
	}
	return c.Browser.Process().Pid
}

// Two tabs of one test, on one origin: one Chromium, and what the first
// stores (localStorage, sessionStorage, a cookie) the second does not see.
// The window is as wide and high as a Chromium of its own makes it (the
// debugger's tests click at coordinates and take screenshots).
func TestSharedTabsKeepApart(t *testing.T) {
	url := serve(t)
	first := browser.New(t, time.Minute)
	second := browser.New(t, time.Minute)
	if a, b := pid(t, first), pid(t, second); a != b {
		t.Fatalf("two Chromium processes for one package: %d and %d", a, b)
	}
	first.Do(t, "open the page", chromedp.Navigate(url))
	_ = browser.Eval[string](t, first, `localStorage.setItem("k", "first"); sessionStorage.setItem("k", "first"); document.cookie = "k=first; path=/"; "set"`)
	if got := browser.Eval[string](t, first, `localStorage.getItem("k") + " " + document.cookie`); got != "first k=first" {
		t.Fatalf("the first tab's own storage: %q", got)
	}
	second.Do(t, "open the page", chromedp.Navigate(url))
	got := browser.Eval[[]any](t, second, `[localStorage.getItem("k"), sessionStorage.getItem("k"), document.cookie]`)
	if got[0] != nil || got[1] != nil || got[2] != "" {
		t.Fatalf("the second tab sees the first's storage and cookies: %q", got)
	}
	for _, b := range []*browser.Browser{first, second} {
		if size := browser.Eval[[]float64](t, b, `[window.outerWidth, window.outerHeight]`); size[0] != 1400 || size[1] != 1000 {
			t.Errorf("window %v, want 1400 x 1000", size)
		}
	}
	first.Clean(t)
	second.Clean(t)
}

// A later test's tab is in the same Chromium as an earlier one's, and sees
// nothing the earlier test stored.
func TestSharedLaterTestStartsClean(t *testing.T) {
	url := serve(t)
	var pids [2]int
	for i := range 2 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			b := browser.New(t, time.Minute)
			pids[i] = pid(t, b)
			b.Do(t, "open the page", chromedp.Navigate(url))
			if got := browser.Eval[any](t, b, `localStorage.getItem("k")`); got != nil {
				t.Fatalf("a new test's tab finds %q stored", got)
			}
			_ = browser.Eval[string](t, b, `localStorage.setItem("k", "test"); "set"`)
			b.Clean(t)
		})
	}
	if pids[0] != pids[1] {
		t.Fatalf("two Chromium processes for one package: %d and %d", pids[0], pids[1])
	}
}
