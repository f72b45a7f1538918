package validator

import (
	"errors"
	"fmt"
	"math"
	"strings"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/wire"
)

// A crew run's proposal (ValidateRequest.crew, docs/crews.md) is judged
// by the same pipeline with two additions: before the catalog, the crew
// file's word on the agent's tools (a tool not listed for the proposing
// agent is TOOL_NOT_ALLOWED; the crew's system tools are judged with
// their own descriptors, not refused as the system's); after the policy,
// the crew's confidence gate in place of the policy's, on the lowest of
// the proposal's confidence and the facts it relies on:
//
//	>= proceed         proceed
//	warn .. proceed    proceed, with reason builtin.crew.confidence.warn
//	verify .. warn     verification: denied with VERIFICATION_REQUIRED
//	                   naming the reviewer to hand to (details.verifier);
//	                   needs approval when the agent has no reviewer
//	< verify           needs approval (a human reviews): not a plain deny
//
// A policy's deny stays a deny, and its approval stays an approval. The
// policy's rules see the crew as the CEL variables crew.name, crew.agent,
// crew.agent_type, crew.handed_by ("" outside a crew run) and crew.handoff_path
// (empty outside one).
const (
	reasonCrewTools      = "builtin.crew.tools"
	reasonCrewConfidence = "builtin.crew."
)

// Errors of a malformed crew context (InvalidArgument).
var (
	errCrewNoAgent    = errors.New("crew context: no agent")
	errCrewThresholds = errors.New("crew context: thresholds must be numbers in [0, 1] with verify < warn < proceed")
	errCrewFact       = errors.New("crew context: a fact the proposal relies on has no id")
)

// checkCrew checks a request's crew context, when it has one.
func checkCrew(cc *xctv1.CrewContext) error {
	if cc == nil {
		return nil
	}
	if cc.GetAgent() == "" {
		return errCrewNoAgent
	}
	if th := cc.GetThresholds(); th != nil {
		for _, x := range []float64{th.GetProceed(), th.GetWarn(), th.GetVerify()} {
			if math.IsNaN(x) || x < 0 || x > 1 {
				return errCrewThresholds
			}
		}
		if !(th.GetVerify() < th.GetWarn() && th.GetWarn() < th.GetProceed()) {
			return errCrewThresholds
		}
	}
	for _, f := range cc.GetReliesOn() {
		if f.GetId() == "" {
			return errCrewFact
		}
	}
	return nil
}

// toolNotAllowed is the signal for a tool the crew file does not give the
// proposing agent.
func toolNotAllowed(cc *xctv1.CrewContext, name string) *xctv1.Error {
	tools := cc.GetTools()
	list := make([]any, len(tools))
	for i, t := range tools {
		list[i] = t
	}
	return wire.WithDetails(wire.Errorf(wire.CodeToolNotAllowed,
		"agent %s of crew %s may not propose tool %s; its tools: %s", cc.GetAgent(), cc.GetCrew(), quoteName(name), strings.Join(tools, ", ")),
		map[string]any{"tool": truncate(name, maxToolNameInMsg), "agent": cc.GetAgent(), "tools": list})
}

// crewThresholds are the context's thresholds, the spec's when it gives
// none.
func crewThresholds(cc *xctv1.CrewContext) crew.Thresholds {
	th := cc.GetThresholds()
	if th == nil {
		return crew.SpecThresholds
	}
	return crew.Thresholds{Proceed: th.GetProceed(), Warn: th.GetWarn(), Verify: th.GetVerify()}
}

// crewGate applies the crew's confidence gate to the policy's outcome.
func crewGate(in *Input, out Outcome) Outcome {
	cc := in.Crew
	facts := make([]crew.FactConfidence, len(cc.GetReliesOn()))
	for i, f := range cc.GetReliesOn() {
		facts[i] = crew.FactConfidence{ID: f.GetId(), Confidence: f.GetConfidence()}
	}
	var proposal *float64
	if p := in.Proposal; p != nil && p.Confidence != nil {
		c := p.GetConfidence()
		proposal = &c
	}
	th := crewThresholds(cc)
	if f := out.ConfidenceFloor; f != nil {
		th = crew.Thresholds{Proceed: max(th.Proceed, f.Proceed), Warn: max(th.Warn, f.Warn), Verify: max(th.Verify, f.Verify)}
	}
	g := crew.GateOn(th, proposal, facts, cc.GetVerifier())
	if g.Action == crew.GateProceed {
		return out
	}
	reason := &xctv1.Reason{RuleId: reasonCrewConfidence + g.RuleID, Message: g.Reason}
	out.Reasons = append(out.Reasons, reason)
	details := map[string]any{"gate": g.Action, "subject": g.Subject}
	if g.Confidence != nil && !math.IsNaN(*g.Confidence) && !math.IsInf(*g.Confidence, 0) {
		details["confidence"] = *g.Confidence
	}
	const (
		allow    = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
		approval = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL
		deny     = xctv1.VerdictDecision_VERDICT_DECISION_DENY
	)
	switch {
	case g.Action == crew.GateWarn:
		// Proceeds: the reason is the warning on the chain.
	case out.Decision == deny:
		// The policy's deny is stronger than any gate.
	case g.Action == crew.GateVerify && g.Verifier != "":
		out.Decision, out.Code, out.EndsRun, out.ApprovalTTL = deny, wire.CodeVerification, false, 0
		out.Message = fmt.Sprintf("%s; hand off to %s (xct.handoff) to have it verified, or propose a step that does not rely on it", g.Reason, g.Verifier)
		details["verifier"] = g.Verifier
		out.Details = details
	case out.Decision == allow || out.Decision == approval:
		if out.Decision == approval && out.Message != "" {
			out.Message += "; " + g.Reason
		} else {
			out.Message = fmt.Sprintf("tool %s needs a human's approval: %s", quoteName(in.Tool.GetName()), g.Reason)
		}
		out.Decision, out.Code = approval, wire.CodeApprovalRequired
		if out.Details == nil {
			out.Details = map[string]any{}
		}
		for k, v := range details {
			out.Details[k] = v
		}
	}
	return out
}
