package e2e

import (
	"context"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
	"time"
)

// slowTool outlives the orchestrator's call deadline: whether it acted is
// then unknown to the orchestrator.
type slowTool struct{}

func (slowTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{Name: "test.slow", Effect: xctv1.Effect_EFFECT_REVERSIBLE, InputSchema: `{"type":"object"}`}
}

func (slowTool) Invoke(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
	<-ctx.Done()
	return nil, nil
}

type repeatProposer struct{}

func (repeatProposer) Name() string { return "repeater" }
func (repeatProposer) Close() error { return nil }
func (repeatProposer) Propose(context.Context, *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	// Always the same action: after an unknown outcome it would act twice.
	return &xctv1.ProposeResponse{Output: `{"next_step":{"tool":"test.slow","arguments":{},"goal":"again"}}`}, nil
}

// A step whose outcome is unknown ends the run for a human decision; it is
// never followed by another step.
func TestUnknownOutcomeStopsTheRun(t *testing.T) {
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Orchestrator.CallTimeout = 300 * time.Millisecond
		o.ExtraTools = []executor.Tool{slowTool{}}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("repeat", repeatProposer{}))
	})
	run, events := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "func:repeat"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_FAILED || !strings.Contains(run.GetMessage(), "in doubt") || !strings.Contains(run.GetMessage(), "xct resolve") {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	if len(run.GetSteps()) != 1 {
		t.Fatalf("%d steps: the run went on after an unknown outcome", len(run.GetSteps()))
	}
	last := events[len(events)-1]
	if last.Data["status"] != "failed" {
		t.Fatalf("last event %v", last.Data)
	}
}
