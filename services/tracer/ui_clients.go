package tracer

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl/debugger"
)

// The debugger (lctl/debugger) knows nothing of XCT's services: the tracer
// gives it the validator's approvals and the orchestrator's Cancel through
// its small interfaces.

// validatorApprovals are the approvals of a validator, through its gRPC
// API: the same path `xct approve` takes.
type validatorApprovals struct {
	client xctv1.ValidatorServiceClient
}

var _ debugger.Approvals = validatorApprovals{}

// approvalJSON renders an approval for the page (protojson, lowerCamel).
var approvalJSON = protojson.MarshalOptions{UseProtoNames: false, EmitUnpopulated: false}

func approvalOf(a *xctv1.Approval) (debugger.Approval, error) {
	if a == nil {
		return debugger.Approval{}, nil
	}
	raw, err := approvalJSON.Marshal(a)
	if err != nil {
		return debugger.Approval{}, fmt.Errorf("encode approval: %w", err)
	}
	return debugger.Approval{RunID: a.GetRunId(), JSON: raw}, nil
}

// List implements debugger.Approvals.
func (v validatorApprovals) List(ctx context.Context, runID string, all bool) ([]debugger.Approval, error) {
	resp, err := v.client.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: runID, All: all})
	if err != nil {
		return nil, err
	}
	out := make([]debugger.Approval, 0, len(resp.GetApprovals()))
	for _, a := range resp.GetApprovals() {
		d, err := approvalOf(a)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Decide implements debugger.Approvals.
func (v validatorApprovals) Decide(ctx context.Context, d debugger.Decision) (debugger.Approval, error) {
	resp, err := v.client.DecideApproval(ctx, &xctv1.DecideApprovalRequest{
		RunId: d.RunID, Step: d.Step, Approve: d.Approve, Approver: d.Approver, Reason: d.Reason,
	})
	if err != nil {
		return debugger.Approval{}, err
	}
	return approvalOf(resp.GetApproval())
}

// orchestratorRuns cancels through an orchestrator's gRPC API: the same
// path `xct cancel` takes.
type orchestratorRuns struct {
	client xctv1.OrchestratorServiceClient
}

// Cancel implements debugger.Runs.
func (o orchestratorRuns) Cancel(ctx context.Context, runID, reason string) error {
	_, err := o.client.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: runID, Reason: reason})
	return err
}
