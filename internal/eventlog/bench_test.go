package eventlog_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// BenchmarkAppendBatch appends writes of n events with AppendBatch, on
// LCTL_OTEL (atomic batches, as provisioned) and on LCTL (which does not
// allow them: one acknowledged append per event), on the embedded
// server: where a batch, whose staging costs a file store of its own on
// a one-replica file-stored stream, pays for itself.
func BenchmarkAppendBatch(b *testing.B) {
	for _, n := range []int{4, 16, 64, 1000} {
		for _, stream := range []string{"atomic", "one-at-a-time"} {
			b.Run(fmt.Sprintf("events=%d/%s", n, stream), func(b *testing.B) {
				s := testutil.RunJetStream(b)
				l, err := eventlog.Open(context.Background(), testutil.Connect(b, s))
				if err != nil {
					b.Fatal(err)
				}
				id := "otel-0123456789abcdef0123456789abcdef"
				if stream != "atomic" {
					id = "bench-batch"
				}
				w, err := l.NewChainWriter(id)
				if err != nil {
					b.Fatal(err)
				}
				at := time.Now()
				written := 0
				for b.Loop() {
					d := make([]eventlog.Draft, n)
					for i := range d {
						d[i] = eventlog.Draft{Time: at, Type: "tool_call", Agent: "agent",
							Data: map[string]any{"tool": "fs.read", "otel": map[string]any{"span_id": "0123456789abcdef"}, "status": "success"}}
					}
					if _, err := w.AppendBatch(context.Background(), d); err != nil {
						b.Fatal(err)
					}
					written += n
				}
				b.ReportMetric(float64(written)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkReadChainFrom reads a run's chain whose events are spread among
// another chain's (each written in turn), as a decision about a step does
// (the executor's ResolveStep, the validator's DecideApproval): whole, one
// get per event (ReadChainByGets, what both did before session 16), or
// from an event near its end (ReadChainFrom: a few gets to find it, then
// one per event after it).
func BenchmarkReadChainFrom(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		s := testutil.RunJetStream(b)
		nc := testutil.Connect(b, s)
		l, err := eventlog.Open(context.Background(), nc)
		if err != nil {
			b.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		writeChains(b, js, n, "run-a", "run-b")
		for _, mode := range []string{"whole", "last-4"} {
			b.Run(fmt.Sprintf("events=%d/%s", n, mode), func(b *testing.B) {
				from, want := uint64(1), n
				if mode != "whole" {
					from, want = uint64(n-3), 4
				}
				b.ReportAllocs()
				for b.Loop() {
					got, err := l.ReadChainFrom(context.Background(), "run-a", from)
					if err != nil || len(got) != want {
						b.Fatalf("%d events, %v", len(got), err)
					}
				}
			})
		}
	}
}

// BenchmarkAppendPack writes a step's events in pairs from 64 chains at
// once, on the embedded server: each pair as two acknowledged appends
// (today's step), or as one pack (AppendPackWithin: one message, one
// acknowledgement; session 19's shape c). An op is one pair; cpu-us/pair
// is the process's CPU (client, server, store) per pair.
func BenchmarkAppendPack(b *testing.B) {
	for _, mode := range []string{"two-appends", "one-pack"} {
		b.Run(mode, func(b *testing.B) {
			const chains = 64
			s := testutil.RunJetStream(b)
			l, err := eventlog.Open(context.Background(), testutil.Connect(b, s))
			if err != nil {
				b.Fatal(err)
			}
			pair := func() []eventlog.Draft {
				return []eventlog.Draft{
					{Type: "step_start", Agent: "orchestrator", Data: map[string]any{"step": 3, "step_id": "s-0123456789abcdef", "tool": "bench.noop", "intent": "bench", "arguments": map[string]any{"i": 3}}},
					{Type: "verdict", Agent: "validator", Data: map[string]any{"step": 3, "step_id": "s-0123456789abcdef", "tool": "bench.noop", "decision": "allow", "reasons": []any{}, "policy_version": "v1"}},
				}
			}
			per := (b.N + chains - 1) / chains
			b.ReportAllocs()
			before, calls := cpuTime(b), syscallsNow(b)
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range chains {
				w, err := l.NewChainWriter(fmt.Sprintf("bench-%d", c))
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					for range per {
						d := pair()
						if mode == "one-pack" {
							if _, err := w.AppendPackWithin(5*time.Second, d); err != nil {
								b.Error(err)
								return
							}
							continue
						}
						for _, e := range d {
							if _, err := w.AppendWithin(5*time.Second, e.Type, e.Agent, e.Data); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(per*chains), "cpu-us/pair")
			b.ReportMetric(float64(syscallsNow(b)-calls)/float64(per*chains), "syscalls/pair")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// syscallsNow is the process's read and write system calls so far
// (/proc/self/io: syscr + syscw): a group of writes that leaves in one
// socket write, and its acknowledgements read in one, makes fewer.
func syscallsNow(tb testing.TB) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
	}
	return n
}
