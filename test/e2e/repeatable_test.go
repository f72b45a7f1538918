package e2e

import (
	"context"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// hungLookup is a read-only, idempotent tool whose server did not answer
// in time, as an MCP tool reports it: TIMEOUT, outcome unknown.
type hungLookup struct{}

func (hungLookup) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{Name: "test.lookup", Effect: xctv1.Effect_EFFECT_READ, Idempotent: true, InputSchema: `{"type":"object"}`}
}

func (hungLookup) Invoke(context.Context, map[string]any) (any, *xctv1.Error) {
	return nil, wire.WithDetails(wire.Errorf(wire.CodeTimeout, "MCP server docs did not answer within the step's deadline"),
		map[string]any{"server": "docs", "outcome_unknown": true})
}

// A read-only, idempotent tool that timed out is an error signal the model
// reacts to, not the end of the run: the run, the chain and the
// executor's record agree that the step failed, and nothing is in doubt.
func TestTimeoutOfARepeatableToolIsAnError(t *testing.T) {
	t.Parallel()
	p := &hookProposer{before: func(int) {}, output: func(turn int) string {
		if turn == 0 {
			return `{"next_step":{"tool":"test.lookup","arguments":{},"goal":"look it up"}}`
		}
		return `{"done":true,"message":"gave up on the lookup"}`
	}}
	c := startCluster(t, func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{hungLookup{}}
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("lookup", p))
	})
	run, events := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "func:lookup"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || strings.Contains(run.GetMessage(), "resolve") {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	var errs []*lctl.Event
	for i := range events {
		if events[i].Type == lctl.TypeError {
			errs = append(errs, &events[i])
		}
	}
	if len(errs) != 1 {
		t.Fatalf("%d error events", len(errs))
	}
	d := errs[0].Data
	details, _ := d["details"].(map[string]any)
	if d["code"] != "TIMEOUT" || details["outcome_unknown"] != false || details["repeatable"] != true {
		t.Fatalf("error event %v", d)
	}
	st := run.GetSteps()[0]
	if st.GetState() != xctv1.StepState_STEP_STATE_FAILED || st.GetResponse().GetError().GetCode() != "TIMEOUT" {
		t.Fatalf("step %v", st)
	}
}
