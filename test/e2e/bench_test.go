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

// noopProposer proposes bench.noop until the run has steps turns, then done.
// It decides from the context alone, like any model.
type noopProposer struct{ steps int }

func (p *noopProposer) Name() string { return "bench" }
func (p *noopProposer) Close() error { return nil }
func (p *noopProposer) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	n := len(req.GetHistory())
	if n >= p.steps {
		return &xctv1.ProposeResponse{Output: `{"done":true,"message":"ok"}`}, nil
	}
	return &xctv1.ProposeResponse{Output: fmt.Sprintf(`{"next_step":{"tool":"bench.noop","arguments":{"i":%d},"goal":"bench"}}`, n)}, nil
}

func benchCluster(b *testing.B, steps int) *cluster {
	return startCluster(b, func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{noopTool{}}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("noop", &noopProposer{steps: steps}))
	})
}

// runSteps runs one run of the proposer's steps and waits for its end.
func runSteps(b *testing.B, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "bench", Model: "func:noop", MaxSteps: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	stream, err := c.orch.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: resp.GetRun().GetRunId()})
	if err != nil {
		b.Fatal(err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if msg.GetEvent().GetType() == "run_finished" {
			if s := msg.GetEvent().GetData().AsMap()["status"]; s != "done" {
				b.Fatalf("run ended %v", s)
			}
			return
		}
	}
}

// BenchmarkGovernedStep: one step end to end through the embedded cluster —
// proposal parsed, validated over gRPC, executed over gRPC, four events
// durably appended — as ns per step in one run.
func BenchmarkGovernedStep(b *testing.B) {
	c := benchCluster(b, b.N)
	b.ResetTimer()
	runSteps(b, c)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkGovernedStepParallel64: 64 runs at once, b.N steps in all.
func BenchmarkGovernedStepParallel64(b *testing.B) {
	const runs = 64
	per := (b.N + runs - 1) / runs
	c := benchCluster(b, per)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runSteps(b, c)
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(per*runs)/b.Elapsed().Seconds(), "steps/s")
}
