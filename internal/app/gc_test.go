package app

import (
	"runtime/debug"
	"testing"
)

// Not parallel: the collector's target is the process's, and t.Setenv
// refuses parallel tests.
func TestTuneGC(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	restore := TuneGC(DefaultGCPercent)
	if got := debug.SetGCPercent(DefaultGCPercent); got != DefaultGCPercent {
		t.Fatalf("target %d after TuneGC(%d)", got, DefaultGCPercent)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("target %d after restore, want 100", got)
	}

	TuneGC(0)() // keeps Go's default
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("TuneGC(0) changed the target to %d", got)
	}

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	restore = TuneGC(DefaultGCPercent)
	if got := debug.SetGCPercent(150); got != 150 {
		t.Fatalf("GOGC=150 in the environment, target %d after TuneGC", got)
	}
	restore()
}
