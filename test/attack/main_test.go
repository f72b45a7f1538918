package attack

import (
	"os"
	"testing"

	"github.com/xct-dev/xct/internal/testutil/browser"
)

// The browser attacks share one Chromium, a tab each in a browser context
// of its own (browser.Main): nothing one stores reaches another.
func TestMain(m *testing.M) {
	os.Exit(browser.Main(m))
}
