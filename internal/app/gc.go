package app

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the collector's target for a server process: the
// heap may grow to five times what is live before a collection. A step
// makes ~120 KB of short-lived garbage and keeps little, so at Go's
// default (100) the collector scans the same small live heap again and
// again; at 400 it spends about a third as much CPU, 11-12% of all the CPU
// of a governed step (docs/performance.md, "The collector"). What is live
// is small and bounded (the tracer's resident events are capped), and a
// memory limit (GOMEMLIMIT, set from the container's limit in
// deploy/k8s) makes the collector run earlier when memory is short.
const DefaultGCPercent = 400

// TuneGC sets the collector's target to percent for a server process and
// returns what puts the previous one back. GOGC in the environment wins
// (an operator's explicit choice); percent <= 0 keeps Go's default.
func TuneGC(percent int) (restore func()) {
	if percent <= 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(percent)
	return func() { debug.SetGCPercent(prev) }
}
