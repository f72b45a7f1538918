package analysis

import (
	"testing"

	"github.com/xct-dev/xct/lctl/lctltest"
)

// BenchmarkAppendLine renders replay's line of each event of a workflow
// as a stream reads it (data as fields), the form replay renders.
func BenchmarkAppendLine(b *testing.B) {
	t := &testing.T{}
	events := streamedForms(t, lctltest.Workflow("w", 20_000, lctltest.WorkflowOptions{}))
	buf := make([]byte, 0, 1<<20)
	b.ResetTimer()
	for range b.N {
		buf = buf[:0]
		for i := range events {
			buf = AppendLine(buf, &events[i])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/line")
}
