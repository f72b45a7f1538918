package validator

import (
	"context"
	"fmt"
	"slices"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// signer is the configured verdict signer: the given one, or the key file's.
func (c *Config) signer() (*verdict.Signer, error) {
	switch {
	case c.Signer != nil:
		return c.Signer, nil
	case c.VerdictKeyFile != "":
		return verdict.LoadSigner(c.VerdictKeyFile, c.VerdictTTL)
	}
	return nil, nil
}

// VerdictKeyID names the key allow verdicts are signed with ("" when they
// are not signed).
func (s *Service) VerdictKeyID() string {
	if s.signer == nil {
		return ""
	}
	return s.signer.KeyID()
}

// signable reports whether a Validate call may get a signed verdict: only
// XCT's own services (the orchestrator, which records the verdict on the
// run's chain before it executes) get one, and of them only the
// configured callers (--verdict-callers) when there are any: another
// service (the tracer) that was taken over must not be a way to act off
// the chain. Anyone else who may call Validate (an admin trying a policy)
// gets the same decision unsigned, so no executor acts on it: nothing runs
// that is not on a chain. A call with no authenticated principal is
// in-process (no gRPC server in front).
func (s *Service) signable(ctx context.Context) bool {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return true
	}
	if !p.Service {
		return false
	}
	if len(s.cfg.VerdictCallers) == 0 {
		return true
	}
	return slices.ContainsFunc(s.cfg.VerdictCallers, p.Is)
}

// approvalCaller refuses a service not among the configured verdict
// callers (when there are any) that opens or withdraws an approval: a
// taken-over tracer could otherwise open a step's approval before the
// orchestrator, with a preview of its own for the human to judge, or
// withdraw pending ones. Calls without a principal are in-process.
func (s *Service) approvalCaller(ctx context.Context) error {
	p, ok := auth.FromContext(ctx)
	if !ok || len(s.cfg.VerdictCallers) == 0 || slices.ContainsFunc(s.cfg.VerdictCallers, p.Is) {
		return nil
	}
	return fmt.Errorf("%w: not %s", ErrApprovalCaller, p.Name)
}

// sign binds an allow verdict to exactly its step: the validator signs the
// run, step number, step id, tool and canonical arguments digest, with an
// expiry. Nothing else is signed: only an allow lets a step act. A step id
// that is not the identity of the proposal at that step of that run gets
// no signature (no executor acts on it), and neither does anything when
// the validator has no key. args are the proposal's arguments as the
// policy saw them (nil: read from the proposal); tool is the catalog's
// descriptor the policy judged the step by, whose digest the grant binds
// (nil: no verdict is signed, for the executor would act on none).
// previewBase is the base digest of the preview a human approved the step
// by ("" for none): the grant binds it, and the executor acts only on the
// file the approver saw the diff against.
func (s *Service) sign(req *xctv1.ValidateRequest, args map[string]any, tool *xctv1.ToolDescriptor, previewBase string, v *xctv1.Verdict, now time.Time) {
	v.Signed = nil
	if v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		return
	}
	if s.signer == nil {
		s.log.Warn("allow verdict left unsigned: the validator has no verdict key (--verdict-key); executors will not act on it",
			"run_id", req.GetRun().GetRunId(), "step_id", req.GetStepId())
		return
	}
	p := req.GetProposal()
	runID := req.GetRun().GetRunId()
	if cur := s.policy.Load().version; cur != v.GetPolicyVersion() {
		// The policy was replaced while the step was judged: its epoch,
		// read after the replacement, would not revoke a grant signed
		// now under the old one. Unsigned, the orchestrator asks again
		// (under the new policy) before anything acts.
		s.log.Warn("allow verdict left unsigned: the policy it was judged by was replaced meanwhile",
			"run_id", runID, "step_id", req.GetStepId(), "judged_by", v.GetPolicyVersion(), "in_force", cur)
		return
	}
	if tool == nil || tool.GetName() != p.GetTool() {
		s.log.Error("allow verdict left unsigned: no catalog descriptor of the tool was judged", "run_id", runID, "tool", p.GetTool())
		return
	}
	// The arguments are encoded once: the step id and the digest are both
	// made from the same canonical form.
	if args == nil {
		args = p.GetArguments().AsMap()
	}
	canon, err := verdict.CanonicalArguments(args)
	if err != nil {
		s.log.Error("allow verdict left unsigned: arguments not canonicalizable", "run_id", runID, "err", err)
		return
	}
	if id, err := verdict.StepIDOf(runID, int(req.GetStep()), p.GetTool(), canon); err != nil || id != req.GetStepId() {
		s.log.Warn("allow verdict left unsigned: the step id is not the identity of this proposal at this step",
			"run_id", runID, "step", req.GetStep(), "step_id", req.GetStepId())
		return
	}
	digest := verdict.DigestOf(canon)
	sv, err := s.signer.Sign(&xctv1.VerdictGrant{
		RunId:           runID,
		Step:            req.GetStep(),
		StepId:          req.GetStepId(),
		Tool:            p.GetTool(),
		ArgumentsDigest: digest,
		PolicyVersion:   v.GetPolicyVersion(),
		SystemStep:      req.GetSystemStep() && wire.IsSystemTool(p.GetTool()),
		ToolDigest:      s.toolDigests.Of(tool),
		PreviewBase:     previewBase,
	}, now)
	if err != nil {
		s.log.Error("allow verdict left unsigned", "run_id", runID, "err", err)
		return
	}
	v.Signed = sv
}

// systemTool is the signal for a model that proposed a system tool: it is
// not in the model's catalog, whatever the policy says.
func systemTool(name string) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodeUnknownTool,
		"tool %s is the system's own: it is not in your catalog and cannot be proposed (rollbacks are an operator's action)", quoteName(name)),
		map[string]any{"tool": truncate(name, maxToolNameInMsg), "system_tool": true})
}
