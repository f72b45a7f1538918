package browser_test

import (
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xct-dev/xct/internal/testutil/browser"
)

// A page that replaces its document while a test waits on it: the wait
// goes on in the new document (chromedp's poll alone fails with the old
// document's context gone), and the condition is the new document's.
func TestUntilGoesOnAcrossANewDocument(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// The first load counts itself and loads the page again a little
		// later, while the test waits; the second marks itself as such.
		_, _ = w.Write([]byte(`<!doctype html><body><script>
const n = Number(sessionStorage.getItem("loads") || 0) + 1;
sessionStorage.setItem("loads", String(n));
if (n === 1) { setTimeout(() => location.reload(), 300); } else { document.body.dataset.loads = String(n); }
</script></body>`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	b := browser.New(t, time.Minute)
	b.Do(t, "open the page", chromedp.Navigate("http://"+ln.Addr().String()+"/"))
	b.Until(t, "the second document", `document.body?.dataset.loads === "2"`)
	if got := browser.Eval[string](t, b, `sessionStorage.getItem("loads")`); got != "2" {
		t.Fatalf("loads: %q", got)
	}
}

// A browser test leaves nothing in the temporary directory: not Chromium's
// singleton-socket directory (org.chromium.Chromium.*, which Chromium
// removes only on a clean exit, and the test kills it), not the profile,
// not a passing test's screenshots.
func TestBrowserLeavesNoTemporaryFiles(t *testing.T) {
	// Not t.TempDir: its path holds the test's name, too long a prefix for
	// Chromium's socket.
	tmp, err := os.MkdirTemp("", "xct-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	t.Run("browser", func(t *testing.T) {
		b := browser.New(t, time.Minute)
		b.Do(t, "open a page", chromedp.Navigate("about:blank"))
		b.Screenshot(t, browser.Artifacts(t), "blank")
	})
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
}
