package wire_test

import (
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// BenchmarkParseDecision: a model's next step as the governed step's
// benchmark proposes it, and one with a few string arguments.
func BenchmarkParseDecision(b *testing.B) {
	for _, c := range []struct{ name, in string }{
		{"small", `{"next_step":{"tool":"bench.noop","arguments":{"i":7},"goal":"bench"}}`},
		{"write", `{"next_step":{"tool":"fs.write","arguments":{"path":"notes/today.md","content":"# Today\n\n- read the report\n- answer the mail\n","mode":"create"},"goal":"write the day's notes","confidence":0.9}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			raw := []byte(c.in)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := wire.ParseDecision(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
