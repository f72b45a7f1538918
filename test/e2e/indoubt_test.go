package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// slowTool outlives the orchestrator's call deadline (its own is 1s):
// whether it acted is then unknown to the orchestrator until its record
// says.
// With commit, it commits its effect first: then it runs to its own end
// even when its caller goes away.
type slowTool struct {
	name   string
	commit bool
	calls  *atomic.Int64
}

func (t slowTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{Name: t.name, Effect: xctv1.Effect_EFFECT_REVERSIBLE, InputSchema: `{"type":"object"}`,
		Timeout: durationpb.New(time.Second)}
}

func (t slowTool) Invoke(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
	if t.commit {
		if e := executor.Commit(ctx); e != nil {
			return nil, e
		}
	}
	t.calls.Add(1)
	<-ctx.Done()
	return map[string]any{"slow": "done"}, nil
}

// onceProposer proposes the slow step, then finishes: a second call of the
// tool could only come from the system guessing.
type onceProposer struct{ tool string }

func (onceProposer) Name() string { return "once" }
func (onceProposer) Close() error { return nil }
func (p onceProposer) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if len(req.GetHistory()) > 0 {
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "told: ` + strings.ReplaceAll(req.GetHistory()[0].GetResponse(), `"`, `'`) + `"}`}, nil
	}
	return &xctv1.ProposeResponse{Output: `{"next_step":{"tool":"` + p.tool + `","arguments":{},"goal":"once"}}`}, nil
}

// A step whose call outlives the orchestrator's deadline is not guessed.
// A tool that committed its effect runs to its end: the run shows
// IN_DOUBT (a step_in_doubt event) until the executor's record has the
// outcome, and the model is told that outcome. A tool that had not
// committed is stopped with its call, and the executor's record proves it
// did not act (a fence): the model is told "not executed". Each tool ran
// once, and no step was proposed twice.
func TestUnknownOutcomeWaitsForTheRecord(t *testing.T) {
	t.Parallel()
	var committed, uncommitted atomic.Int64
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Orchestrator.CallTimeout = 300 * time.Millisecond
		cfg.Orchestrator.SettleTimeout = 100 * time.Millisecond
		cfg.Orchestrator.SettlePoll = 100 * time.Millisecond
		cfg.Executor.StepGrace = 200 * time.Millisecond
		o.ExtraTools = []executor.Tool{slowTool{name: "test.committed", commit: true, calls: &committed}, slowTool{name: "test.uncommitted", calls: &uncommitted}}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("committed", onceProposer{"test.committed"}),
			orchestrator.WithProposer("uncommitted", onceProposer{"test.uncommitted"}))
	})
	types := func(events []lctl.Event) string {
		var out []string
		for _, e := range events {
			out = append(out, e.Type)
		}
		return strings.Join(out, " ")
	}

	run, events := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "func:committed"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || !strings.Contains(run.GetMessage(), "'status':'success'") {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	if got := types(events); !strings.Contains(got, "verdict "+orchestrator.TypeStepInDoubt+" tool_call step_end") {
		t.Fatalf("events: %s", got)
	}
	if len(run.GetSteps()) != 1 || run.GetSteps()[0].GetState() != xctv1.StepState_STEP_STATE_SUCCEEDED || committed.Load() != 1 {
		t.Fatalf("steps %v, tool calls %d", run.GetSteps(), committed.Load())
	}

	run, events = c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "func:uncommitted"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || !strings.Contains(run.GetMessage(), "'not_executed':true") {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	if got := types(events); !strings.Contains(got, "verdict error step_end") {
		t.Fatalf("events: %s", got)
	}
	if len(run.GetSteps()) != 1 || uncommitted.Load() != 1 {
		t.Fatalf("steps %v, tool calls %d", run.GetSteps(), uncommitted.Load())
	}
}
