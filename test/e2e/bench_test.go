package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// noopTool is a read tool that does nothing: what a step costs is then the
// system's own work (validate, execute, events durably appended).
type noopTool struct{}

func (noopTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "bench.noop", Description: "does nothing", Effect: xctv1.Effect_EFFECT_READ, Idempotent: true,
		InputSchema: `{"type":"object","properties":{"i":{"type":"integer"}},"additionalProperties":false}`,
	}
}

func (noopTool) Invoke(context.Context, map[string]any) (any, *xctv1.Error) {
	return map[string]any{"ok": true}, nil
}

// noopProposer proposes bench.noop until the run has steps turns, then
// done. It decides from the context alone, like any model. Being asked with
// steps turns in the context means every step before is durably recorded, so
// finished is closed then: the benchmark waits without reading the log.
//
// It also times each step as the client of the loop sees it: from one
// proposal to the next of the same run (validated, executed, its events
// durably appended, the next context built).
type noopProposer struct {
	steps    int
	mu       sync.Mutex
	finished map[string]chan struct{}
	last     map[string]time.Time
	lat      []time.Duration
}

func newNoopProposer(steps int) *noopProposer {
	return &noopProposer{steps: steps, finished: map[string]chan struct{}{}, last: map[string]time.Time{}}
}

func (p *noopProposer) Name() string { return "bench" }
func (p *noopProposer) Close() error { return nil }

func (p *noopProposer) done(runID string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.finished[runID]
	if !ok {
		ch = make(chan struct{})
		p.finished[runID] = ch
	}
	return ch
}

func (p *noopProposer) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	now := time.Now()
	p.mu.Lock()
	if t, ok := p.last[req.GetRunId()]; ok {
		p.lat = append(p.lat, now.Sub(t))
	}
	p.last[req.GetRunId()] = now
	p.mu.Unlock()
	n := len(req.GetHistory())
	if n >= p.steps {
		close(p.done(req.GetRunId()))
		return &xctv1.ProposeResponse{Output: `{"done":true,"message":"ok"}`}, nil
	}
	return &xctv1.ProposeResponse{Output: fmt.Sprintf(`{"next_step":{"tool":"bench.noop","arguments":{"i":%d},"goal":"bench"}}`, n)}, nil
}

// quantile returns the q-quantile of the step latencies seen so far.
func (p *noopProposer) quantile(q float64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lat) == 0 {
		return 0
	}
	s := slices.Clone(p.lat)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// benchOpts are the knobs of one step benchmark.
type benchOpts struct {
	runs       int  // concurrent runs
	withTracer bool // the tracer consumes the stream during the measurement
	syncAlways bool // the JetStream store fsyncs every write (production durability)
}

// benchCluster starts the embedded cluster with the no-op tool.
func benchCluster(b *testing.B, p *noopProposer, o benchOpts) *cluster {
	// The collector as `xct dev` and `xct serve` set it.
	b.Cleanup(app.TuneGC(app.DefaultGCPercent))
	ns := testutil.RunJetStreamWith(b, natsembed.Config{SyncAlways: o.syncAlways})
	return startClusterOn(b, ns, func(cfg *app.Config, opts *app.Options) {
		if !o.withTracer {
			cfg.TracerListen = ""
		}
		// 256 runs start at once: one client is many agents here.
		cfg.Security.RateLimit = 0
		// A run takes as many steps as the benchmark needs, and its one
		// principal has all of the runs.
		cfg.Orchestrator.MaxStepsLimit = 1 << 30
		cfg.Orchestrator.MaxRuns = 1 << 20
		opts.ExtraTools = []executor.Tool{noopTool{}}
		opts.Orchestrator = append(opts.Orchestrator, orchestrator.WithProposer("noop", p))
	})
}

// runSteps runs one run of the proposer's steps and waits until its last
// step is recorded.
func runSteps(b *testing.B, c *cluster, p *noopProposer, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{RunId: id, Goal: "bench", Model: "func:noop", MaxSteps: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-p.done(id):
	case <-ctx.Done():
		b.Fatal("run did not finish")
	}
}

func benchSteps(b *testing.B, o benchOpts) {
	per := (b.N + o.runs - 1) / o.runs
	p := newNoopProposer(per)
	c := benchCluster(b, p, o)
	prof := startCPUShares()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range o.runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runSteps(b, c, p, fmt.Sprintf("bench-%d", i))
		}()
	}
	wg.Wait()
	b.StopTimer()
	steps := per * o.runs
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(p.quantile(0.50).Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(p.quantile(0.99).Microseconds())/1e3, "p99-ms")
	prof.report(b, steps)
}

// BenchmarkGovernedStep: one step end to end through the embedded cluster —
// the proposal parsed, validated over gRPC, executed over gRPC, its four
// events durably appended — in one run, with the tracer consuming the
// stream as it does in production.
func BenchmarkGovernedStep(b *testing.B) { benchSteps(b, benchOpts{runs: 1, withTracer: true}) }

// BenchmarkGovernedStepNoTracer: the same without the tracer, to show what
// the step itself costs and what consuming the stream costs.
func BenchmarkGovernedStepNoTracer(b *testing.B) { benchSteps(b, benchOpts{runs: 1}) }

// BenchmarkGovernedStepParallel64: 64 runs at once, b.N steps in all.
func BenchmarkGovernedStepParallel64(b *testing.B) {
	benchSteps(b, benchOpts{runs: 64, withTracer: true})
}

// BenchmarkGovernedStepParallel64NoTracer: 64 runs, no tracer.
func BenchmarkGovernedStepParallel64NoTracer(b *testing.B) { benchSteps(b, benchOpts{runs: 64}) }

// BenchmarkGovernedStepParallel256: 256 runs at once, b.N steps in all.
func BenchmarkGovernedStepParallel256(b *testing.B) {
	benchSteps(b, benchOpts{runs: 256, withTracer: true})
}

// The -SyncAlways variants run on a store that fsyncs every write before
// acknowledging it, the production durability setting; compare them with
// the floor's -syncalways.

func BenchmarkGovernedStepSyncAlways(b *testing.B) {
	benchSteps(b, benchOpts{runs: 1, withTracer: true, syncAlways: true})
}

func BenchmarkGovernedStepParallel64SyncAlways(b *testing.B) {
	benchSteps(b, benchOpts{runs: 64, withTracer: true, syncAlways: true})
}

func BenchmarkGovernedStepParallel256SyncAlways(b *testing.B) {
	benchSteps(b, benchOpts{runs: 256, withTracer: true, syncAlways: true})
}
