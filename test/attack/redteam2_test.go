package attack

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/executor"
)

// gateModel proposes one deploy once its gate opens, then finishes.
type gateModel struct {
	gate chan struct{}
}

func (p gateModel) Name() string { return "gate" }
func (p gateModel) Close() error { return nil }
func (p gateModel) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if len(req.GetHistory()) > 0 {
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "stop"}`}, nil
	}
	select {
	case <-p.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &xctv1.ProposeResponse{Output: `{"next_step": {"tool": "test.deploy", "arguments": {"target": "prod"}}}`}, nil
}

// TestAttackApprovalOpenedForAnother: a service identity (a taken-over
// tracer: the same role as the orchestrator) opens the approval of a run's
// next step before the orchestrator does, naming another principal as the
// run's; the run's own principal (admin, who holds approver too) then
// approves it: before, the orchestrator's request got that approval back
// unchanged and the irreversible step ran on its submitter's approval.
// Now the orchestrator's request is refused, nothing runs, and the run
// ends without the deploy.
func TestAttackApprovalOpenedForAnother(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	c := startBindCluster(t, withProposer("gate", gateModel{gate: gate}), func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deploys}}
	})
	deploys.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const runID = "run-foreign-approval"
	if _, err := c.orchestratorAs(t, "admin").StartRun(ctx, &xctv1.StartRunRequest{RunId: runID, Goal: "deploy", Model: "func:gate"}); err != nil {
		t.Fatal(err)
	}
	args, err := structpb.NewStruct(map[string]any{"target": "prod"})
	if err != nil {
		t.Fatal(err)
	}
	proposal := &xctv1.NextStep{Tool: "test.deploy", Arguments: args}
	attacker := c.validatorAs(t, grpcxtest.Service)
	if _, err := attacker.RequestApproval(ctx, &xctv1.RequestApprovalRequest{
		Run:      &xctv1.RunContext{RunId: runID, Principal: "nobody"},
		Step:     1,
		StepId:   wire.StepID(runID, 1, "test.deploy", args),
		Proposal: proposal,
		Preview:  &xctv1.Preview{Kind: "text", Content: "a dry run: changes nothing"},
	}); err != nil {
		t.Fatalf("the service's request: %v", err)
	}
	if _, err := c.validatorAs(t, "admin").DecideApproval(ctx, &xctv1.DecideApprovalRequest{
		RunId: runID, Step: "1", Approve: true, Reason: "a dry run",
	}); err != nil && status.Code(err) != codes.PermissionDenied {
		t.Fatalf("admin's decision: %v", err)
	}
	close(gate)
	run := c.waitRun(t, "admin", runID)
	if n := deploys.Load(); n != 0 {
		t.Errorf("the deploy ran %d times on the submitter's own approval", n)
	}
	if len(run.GetSteps()) == 0 {
		t.Fatalf("run %s: no step (%s)", run.GetStatus(), run.GetMessage())
	}
	st := run.GetSteps()[0]
	if st.GetState() != xctv1.StepState_STEP_STATE_DENIED || !strings.Contains(st.GetResponse().GetError().GetMessage(), "principal") {
		t.Errorf("step 1: %s %v, want denied for the approval's principal", st.GetState(), st.GetResponse().GetError())
	}
}

// deploys counts countingDeploy's invocations.
var deploys atomic.Int64

// countingDeploy is deployTool counting its invocations.
type countingDeploy struct{ n *atomic.Int64 }

func (countingDeploy) Descriptor() *xctv1.ToolDescriptor { return deployTool{}.Descriptor() }
func (d countingDeploy) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	d.n.Add(1)
	return deployTool{}.Invoke(ctx, args)
}
