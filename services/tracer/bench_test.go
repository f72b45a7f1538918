package tracer_test

import (
	"context"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
	"github.com/xct-dev/xct/services/tracer"
)

// BenchmarkIngest measures how fast the tracer materializes a backlog from
// JetStream: 20 chains of 5,000 sealed events are on the stream before it
// starts; each iteration is a fresh tracer (new data dir, new durable
// consumer) reading all of them: decode, check the hash chain, append to the
// chain file (synced every second, not per batch), ack, apply to the
// chain's timeline.
func BenchmarkIngest(b *testing.B) { benchIngest(b, tracer.Config{}, 1) }

// BenchmarkIngestPacked is BenchmarkIngest with the events two to a stream
// message (eventlog's packs, as a step's [step_start, verdict] and
// [tool_call, step_end] would be written): half the deliveries and acks.
func BenchmarkIngestPacked(b *testing.B) { benchIngest(b, tracer.Config{}, 2) }

// BenchmarkIngestBounded is BenchmarkIngest with at most 10,000 events in
// memory (-tracer-max-resident-events), the chains evicted as soon as
// they are not the one being written (as if written long ago): MB-heap
// shows what the bound saves.
func BenchmarkIngestBounded(b *testing.B) {
	benchIngest(b, tracer.Config{MaxResidentEvents: 10_000}, 1)
}

func benchIngest(b *testing.B, cfg tracer.Config, pack int) {
	const chains, perChain = 20, 5000
	// The collector as `xct serve` sets it (GOGC in the environment wins).
	b.Cleanup(app.TuneGC(app.DefaultGCPercent))
	e := newEnv(b)
	ctx := context.Background()
	ids := publishBacklogPacked(b, e, "bench", chains, perChain, pack)
	js := e.log.JetStream()
	b.ResetTimer()
	var cpu time.Duration // the process's CPU time while timed: tracer and NATS server
	var heap int64        // bytes of heap the last ingest added (collected before and after)
	for b.Loop() {
		b.StopTimer()
		e.dataDir = b.TempDir()
		if err := js.DeleteConsumer(ctx, eventlog.StreamName, tracer.ConsumerName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			b.Fatal(err)
		}
		heap0 := heapInUse()
		b.StartTimer()
		c0 := processCPU()
		tr := e.startTracerWith(b, cfg)
		if cfg.MaxResidentEvents > 0 {
			tracer.EvictWrittenChains(tr.svc)
		}
		for _, id := range ids {
			tr.waitFor(b, id, perChain)
		}
		cpu += processCPU() - c0
		b.StopTimer()
		heap = heapInUse() - heap0
		tr.stop()
		b.StartTimer()
	}
	events := float64(chains*perChain) * float64(b.N)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	// On a shared machine the wall-clock rate depends on the load; CPU per
	// event does not: 2 cores / (CPU per event) is the rate on an idle one.
	b.ReportMetric(float64(cpu.Microseconds())/events, "cpu-µs/event")
	b.ReportMetric(float64(heap)/(1<<20), "MB-heap")
}

// heapInUse collects garbage and returns the bytes of heap in use. (A
// stopped tracer stays reachable from its test's cleanup until the end.)
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplayChainToSeq is ReplayChain near the end of a 100,000-event
// chain in the tracer, summary view, with snapshots every 1000 events
// (the default) and without.
func BenchmarkReplayChainToSeq(b *testing.B) {
	const n = 100_000
	events := lctltest.Chain("big", n, lctltest.Options{})
	for _, every := range []int{lctl.DefaultSnapshotEvery, -1} {
		tl := lctl.NewTimeline("big", every)
		for _, ev := range events {
			tl.Append(ev)
		}
		name := "with-snapshots"
		if every < 0 {
			name = "without-snapshots"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if s := tl.StateAt(n - 77); s.Seq != n-77 {
					b.Fatal(s.Seq)
				}
			}
		})
	}
}
