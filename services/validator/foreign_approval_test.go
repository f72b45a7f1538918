package validator_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/services/validator"
)

// TestApprovalOfAnotherPrincipal: RequestApproval takes the run's
// principal, who may not decide the approval, from its caller (XCT's
// services name it). An approval opened first by another service for the
// run's next step, naming someone else, was returned unchanged to the
// orchestrator's own request, and the run's principal could then approve
// its own step, which Validate allowed (four eyes, two of them the
// submitter's). Now a second request naming another principal is refused,
// and Validate allows a step only on an approval for the run's principal.
func TestApprovalOfAnotherPrincipal(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	ctx := context.Background()
	req := configWrite(t, 1, "config/app.yaml") // run-1, principal alice
	forged := proto.CloneOf(req.GetRun())
	forged.Principal = "mallory"
	if _, err := a.s.RequestApproval(ctx, &xctv1.RequestApprovalRequest{
		Run: forged, Step: req.GetStep(), StepId: req.GetStepId(), Proposal: req.GetProposal(),
	}); err != nil {
		t.Fatalf("the first request: %v", err)
	}
	// The orchestrator's own request for the same step.
	_, err := a.s.RequestApproval(ctx, &xctv1.RequestApprovalRequest{
		Run: req.GetRun(), Step: req.GetStep(), StepId: req.GetStepId(), Proposal: req.GetProposal(),
	})
	wantCode(t, err, codes.FailedPrecondition, "mallory")
	// alice, an approver too, approves "mallory's" step: her own.
	if _, err := a.decide("run-1", "1", true, "alice", "looks fine"); err != nil {
		t.Logf("alice's decision: %v", err)
	}
	resp, err := a.s.Validate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetVerdict().GetDecision(); d == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Errorf("the step was allowed on an approval opened for another principal and decided by the run's own: %v", resp.GetVerdict())
	}
}

// TestApprovalCallers: with --verdict-callers, only those services open
// or withdraw approvals (a taken-over tracer could otherwise open a
// step's approval first, with a preview of its own for the human to
// judge, or withdraw pending ones); others get PERMISSION_DENIED.
func TestApprovalCallers(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	s, err := validator.New(validator.Config{PolicyFile: a.path, Replicas: 1, VerdictCallers: []string{"service:orchestrator"}}, a.nc, nil, validator.WithClock(a.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	svc := func(name string) context.Context {
		return auth.NewContext(context.Background(), auth.Principal{Name: name, Roles: []string{auth.RoleService}, Service: true})
	}
	req := configWrite(t, 1, "config/app.yaml")
	ask := &xctv1.RequestApprovalRequest{Run: req.GetRun(), Step: req.GetStep(), StepId: req.GetStepId(), Proposal: req.GetProposal(),
		Preview: &xctv1.Preview{Kind: "diff", Content: "+harmless\n", BaseDigest: "absent"}}
	_, err = s.RequestApproval(svc("service:tracer"), ask)
	wantCode(t, err, codes.PermissionDenied, "service:tracer")
	if list := a.list(t, "run-1", true); len(list) != 0 {
		t.Fatalf("the tracer's request opened %v", list)
	}
	if _, err := s.RequestApproval(svc("service:orchestrator"), ask); err != nil {
		t.Fatalf("the orchestrator's request: %v", err)
	}
	_, err = s.WithdrawApproval(svc("service:tracer"), &xctv1.WithdrawApprovalRequest{RunId: "run-1", StepId: req.GetStepId(), By: "x", Reason: "y"})
	wantCode(t, err, codes.PermissionDenied, "service:tracer")
	if list := a.list(t, "run-1", false); len(list) != 1 {
		t.Fatalf("pending after the tracer's withdrawal: %v", list)
	}
	if _, err := s.WithdrawApproval(svc("service:orchestrator"), &xctv1.WithdrawApprovalRequest{RunId: "run-1", StepId: req.GetStepId(), By: "x", Reason: "y"}); err != nil {
		t.Fatalf("the orchestrator's withdrawal: %v", err)
	}
}

// TestApprovalRepublishedByAnotherStream: the approvals bucket is written
// by the validator only (NATS permissions), but a stream's republish is
// the server's own publish, which no permission sees: a stream another
// service made first (the orchestrator makes its run owners bucket when
// it is missing, with settings of its choosing) could republish what that
// service writes into $KV.XCT_APPROVALS, and an "approved" approval
// written so let Validate allow the step no human approved. Validate now
// allows on an approval only while no stream republishes into the
// approvals.
func TestApprovalRepublishedByAnotherStream(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	ctx := context.Background()
	req := configWrite(t, 1, "config/app.yaml")
	pending := a.request(t, req, nil)
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_OWNERS_MADE_FIRST", Subjects: []string{"owners.>"},
		RePublish: &jetstream.RePublish{Source: "owners.>", Destination: "$KV." + validator.ApprovalsBucket + ".>"}}); err != nil {
		t.Fatal(err)
	}
	forged := proto.CloneOf(pending)
	forged.State, forged.DecidedBy, forged.Reason = xctv1.ApprovalState_APPROVAL_STATE_APPROVED, "bob", "looks fine"
	raw, err := protojson.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "owners."+req.GetRun().GetRunId()+"."+req.GetStepId(), raw); err != nil {
		t.Fatal(err)
	}
	if got := a.list(t, "run-1", true); len(got) != 1 || got[0].GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("the republished approval is not the stored one: %v", got)
	}
	resp, err := a.s.Validate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetVerdict().GetDecision(); d == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Errorf("the step was allowed on an approval another stream republished: %v", resp.GetVerdict())
	}
}
