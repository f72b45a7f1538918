package analysis

import (
	"testing"

	"github.com/xct-dev/xct/lctl/lctltest"
	"github.com/xct-dev/xct/lctl/text"
)

// BenchmarkEscapeHidden is the cost EscapeHidden adds to each replay line
// (lines of a generated workflow, rendered once).
func BenchmarkEscapeHidden(b *testing.B) {
	events := lctltest.Workflow("w", 10_000, lctltest.WorkflowOptions{})
	lines := make([][]byte, len(events))
	ascii := 0
	for i := range events {
		lines[i] = appendLineGeneral(nil, &events[i])
		if len(text.EscapeHidden(append([]byte(nil), lines[i]...), 0)) == len(lines[i]) {
			ascii++
		}
	}
	b.ResetTimer()
	for b.Loop() {
		for _, l := range lines {
			_ = text.EscapeHidden(l, 0)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/line")
}
