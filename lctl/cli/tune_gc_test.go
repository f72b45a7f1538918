package cli_test

import (
	"runtime/debug"
	"testing"

	"github.com/xct-dev/xct/lctl/cli"
)

// A streamed command collects only near its memory limit (no GOGC
// collections on the way there), and puts the settings back after.
func TestTuneGCOnlyAtTheLimit(t *testing.T) {
	before := debug.SetGCPercent(73)
	defer debug.SetGCPercent(before)
	limit := debug.SetMemoryLimit(-1)
	restore := cli.TuneGC()
	percent := debug.SetGCPercent(-1)
	streamLimit := debug.SetMemoryLimit(-1)
	restore()
	if percent != -1 || streamLimit != 240<<20 {
		t.Errorf("while streaming: GOGC %d, limit %d; want off and 240 MiB", percent, streamLimit)
	}
	if p, l := debug.SetGCPercent(before), debug.SetMemoryLimit(-1); p != 73 || l != limit {
		t.Errorf("after: GOGC %d, limit %d; want 73 and %d", p, l, limit)
	}
}
