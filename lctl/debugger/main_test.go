package debugger_test

import (
	"os"
	"testing"

	"github.com/xct-dev/xct/internal/testutil/browser"
)

// The tests run in parallel (each with its own handler, server, files and
// tab; no package-level state is changed) and the browser tests share one
// Chromium, a tab each in a browser context of its own (browser.Main).
func TestMain(m *testing.M) {
	os.Exit(browser.Main(m))
}
