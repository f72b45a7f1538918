package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
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
type noopProposer struct {
	steps    int
	mu       sync.Mutex
	finished map[string]chan struct{}
}

func newNoopProposer(steps int) *noopProposer {
	return &noopProposer{steps: steps, finished: map[string]chan struct{}{}}
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
	n := len(req.GetHistory())
	if n >= p.steps {
		close(p.done(req.GetRunId()))
		return &xctv1.ProposeResponse{Output: `{"done":true,"message":"ok"}`}, nil
	}
	return &xctv1.ProposeResponse{Output: fmt.Sprintf(`{"next_step":{"tool":"bench.noop","arguments":{"i":%d},"goal":"bench"}}`, n)}, nil
}

// benchCluster starts the embedded cluster with the no-op tool; withTracer
// says whether the tracer consumes the stream during the measurement.
func benchCluster(b *testing.B, p *noopProposer, withTracer bool) *cluster {
	return startCluster(b, func(cfg *app.Config, o *app.Options) {
		if !withTracer {
			cfg.TracerListen = ""
		}
		o.ExtraTools = []executor.Tool{noopTool{}}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("noop", p))
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

func benchSteps(b *testing.B, runs int, withTracer bool) {
	per := (b.N + runs - 1) / runs
	p := newNoopProposer(per)
	c := benchCluster(b, p, withTracer)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runSteps(b, c, p, fmt.Sprintf("bench-%d", i))
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(per*runs)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkGovernedStep: one step end to end through the embedded cluster —
// the proposal parsed, validated over gRPC, executed over gRPC, its four
// events durably appended — in one run, with the tracer consuming the
// stream as it does in production.
func BenchmarkGovernedStep(b *testing.B) { benchSteps(b, 1, true) }

// BenchmarkGovernedStepNoTracer: the same without the tracer, to show what
// the step itself costs and what consuming the stream costs.
func BenchmarkGovernedStepNoTracer(b *testing.B) { benchSteps(b, 1, false) }

// BenchmarkGovernedStepParallel64: 64 runs at once, b.N steps in all.
func BenchmarkGovernedStepParallel64(b *testing.B) { benchSteps(b, 64, true) }

// BenchmarkGovernedStepParallel64NoTracer: 64 runs, no tracer.
func BenchmarkGovernedStepParallel64NoTracer(b *testing.B) { benchSteps(b, 64, false) }
