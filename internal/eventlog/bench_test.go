package eventlog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
)

// BenchmarkAppend appends step-sized events to one chain at a time, and to
// 64 chains at once (the orchestrator's shape under load), on the embedded
// server: what one acknowledged append costs the client and the server.
func BenchmarkAppend(b *testing.B) {
	for _, chains := range []int{1, 64} {
		b.Run(fmt.Sprintf("chains-%d", chains), func(b *testing.B) {
			s := testutil.RunJetStream(b)
			l, err := eventlog.Open(context.Background(), testutil.Connect(b, s))
			if err != nil {
				b.Fatal(err)
			}
			data := map[string]any{"step": 3, "step_id": "s-0123456789abcdef", "tool": "bench.noop", "outcome": "success"}
			per := (b.N + chains - 1) / chains
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range chains {
				w, err := l.NewChainWriter(fmt.Sprintf("bench-%d", c))
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if _, err := w.Append(context.Background(), "step_end", "orchestrator", data); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
