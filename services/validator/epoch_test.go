package validator_test

import (
	"context"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// swappingPolicy allows, and while judging installs next on svc: a reload
// that lands between the judgement and the signature.
type swappingPolicy struct {
	version string
	svc     **validator.Service
	next    validator.Policy
}

func (p *swappingPolicy) Version() string { return p.version }

func (p *swappingPolicy) Evaluate(context.Context, *validator.Input) (validator.Outcome, error) {
	if p.next != nil {
		if err := (*p.svc).SetPolicy(p.next); err != nil {
			return validator.Outcome{}, err
		}
	}
	return validator.Outcome{Decision: xctv1.VerdictDecision_VERDICT_DECISION_ALLOW}, nil
}

// TestNoSignatureUnderAReplacedPolicy: a policy reload that lands while a
// step is judged. The verdict's time is read when the judgement starts, and
// the epoch of the new policy when it is installed: on main the allow of
// the old policy was signed anyway, dated before the new epoch but by a
// policy no longer in force, so a check of it against the epoch would be
// the only thing keeping it out. Now the validator signs only under the
// policy in force when it signs: the allow comes back unsigned (the
// orchestrator asks again, under the new policy, before anything acts).
func TestNoSignatureUnderAReplacedPolicy(t *testing.T) {
	signer, _, err := verdict.NewPair(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := validator.NewWithCatalog(validator.Config{Signer: signer}, catalog.Static(testTools()...), nil)
	if err != nil {
		t.Fatal(err)
	}
	stricter := &swappingPolicy{version: "test:stricter"}
	if err := s.SetPolicy(&swappingPolicy{version: "test:old", svc: &s, next: stricter}); err != nil {
		t.Fatal(err)
	}
	req := benchRequest(t)
	req.StepId = wire.StepID(req.GetRun().GetRunId(), int(req.GetStep()), req.GetProposal().GetTool(), req.GetProposal().GetArguments())
	resp, err := s.Validate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	v := resp.GetVerdict()
	if v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW || v.GetPolicyVersion() != "test:old" {
		t.Fatalf("verdict %v, want the old policy's allow", v)
	}
	if v.GetSigned() != nil {
		t.Errorf("an allow judged by a policy replaced before it was signed was signed")
	}
	// Under the policy now in force, the same step is signed.
	resp, err = s.Validate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.GetVerdict(); v.GetPolicyVersion() != "test:stricter" || v.GetSigned() == nil {
		t.Errorf("the next verdict %v, want the new policy's, signed", v)
	}
}
