package wire_test

import (
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// BenchmarkStepIDOf: the id of the benchmark's proposal (one integer
// argument), as the orchestrator makes it at every step.
func BenchmarkStepIDOf(b *testing.B) {
	args := map[string]any{"i": 7.0}
	b.ReportAllocs()
	for b.Loop() {
		if wire.StepIDOf("bench-12", 41, "bench.noop", args) == "" {
			b.Fatal("no id")
		}
	}
}
