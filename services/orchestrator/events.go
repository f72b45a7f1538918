package orchestrator

import (
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// The typed events (lctl/xctevent) are XCT's event model; this file is the
// orchestrator's edge between them and its protos, both ways.

// XCT's event types, as the orchestrator's tests and callers name them.
const (
	TypeApprovalRequested = xctevent.TypeApprovalRequested
	TypeApprovalDecided   = xctevent.TypeApprovalDecided
	TypeStepInDoubt       = xctevent.TypeStepInDoubt
	TypeRunReleased       = xctevent.TypeRunReleased
	TypeRunResumed        = xctevent.TypeRunResumed
	TypeRollbackStarted   = xctevent.TypeRollbackStarted
	TypeRollbackFinished  = xctevent.TypeRollbackFinished
)

// errorEvent is the error event of an error signal at a step.
func errorEvent(step int, stepID string, e *xctv1.Error) xctevent.Error {
	x := xctevent.Error{
		Step: step, StepID: stepID, Code: e.GetCode(), Category: e.GetCategory(), ErrType: e.GetType(),
		Message: e.GetMessage(), Recoverable: e.GetRecoverable(), SuggestedAction: e.GetSuggestedAction(),
	}
	if e.GetDetails() != nil {
		x.Details = e.GetDetails().AsMap()
	}
	return x
}

// errorSignal reads an error event back into an error signal.
func errorSignal(x xctevent.Error) *xctv1.Error {
	e := &xctv1.Error{
		Code: x.Code, Message: x.Message, Category: x.Category, Type: x.ErrType,
		SuggestedAction: x.SuggestedAction, Recoverable: x.Recoverable,
	}
	if len(x.Details) > 0 {
		e.Details, _ = structpb.NewStruct(x.Details)
	}
	return e
}

// verdictEvent is the verdict event of a verdict at a step.
func verdictEvent(step int, stepID, tool string, v *xctv1.Verdict) xctevent.Verdict {
	x := xctevent.Verdict{
		Step: step, StepID: stepID, Tool: tool, Decision: decisionName(v.GetDecision()),
		Reasons: reasonsOf(v.GetReasons()), PolicyVersion: v.GetPolicyVersion(),
		EvaluatedAt: lctl.FormatTime(v.GetEvaluatedAt().AsTime()), Code: v.GetError().GetCode(), EndsRun: v.GetEndsRun(),
	}
	for _, sv := range v.GetShadow() {
		x.Shadow = append(x.Shadow, xctevent.ShadowVerdict{PolicyVersion: sv.GetPolicyVersion(), Decision: decisionName(sv.GetDecision()), Reasons: reasonsOf(sv.GetReasons())})
	}
	return x
}

func reasonsOf(rs []*xctv1.Reason) []xctevent.Reason {
	out := make([]xctevent.Reason, 0, len(rs))
	for _, r := range rs {
		out = append(out, xctevent.Reason{RuleID: r.GetRuleId(), Message: r.GetMessage()})
	}
	return out
}

// verdictOf reads a verdict event back (without its error, which the
// step's error event carries).
func verdictOf(x xctevent.Verdict) *xctv1.Verdict {
	v := &xctv1.Verdict{PolicyVersion: x.PolicyVersion}
	switch x.Decision {
	case xctevent.DecisionAllow:
		v.Decision = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
	case xctevent.DecisionNeedsApproval:
		v.Decision = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL
	default:
		v.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
	}
	if t, err := time.Parse(time.RFC3339Nano, x.EvaluatedAt); err == nil {
		v.EvaluatedAt = timestamppb.New(t)
	}
	for _, r := range x.Reasons {
		v.Reasons = append(v.Reasons, &xctv1.Reason{RuleId: r.RuleID, Message: r.Message})
	}
	return v
}

func decisionName(d xctv1.VerdictDecision) string {
	switch d {
	case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		return xctevent.DecisionAllow
	case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
		return xctevent.DecisionNeedsApproval
	}
	return xctevent.DecisionDeny
}

// proposalOf reads a step_start's proposal back.
func proposalOf(s xctevent.StepStart) *xctv1.NextStep {
	sargs, err := structpb.NewStruct(s.Arguments)
	if err != nil || sargs == nil {
		sargs = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	return &xctv1.NextStep{Tool: s.Tool, Arguments: sargs, Goal: s.Intent, Confidence: s.Confidence}
}

// durationMS is a duration in the events' milliseconds (microsecond
// precision).
func durationMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// end is the step_end of a step with its outcome.
func (st *openStep) end(outcome, summary string) xctevent.StepEnd {
	tokens := st.tokens
	return xctevent.StepEnd{
		Step: st.step, StepID: st.stepID, Outcome: outcome, OutputSummary: summary,
		DurationMS: durationMS(time.Since(st.started)), Tokens: &tokens,
	}
}

// toolCallEvent is the tool_call of a step that succeeded.
func toolCallEvent(step int, stepID, tool string, args map[string]any, res *xctv1.ExecuteResponse) xctevent.ToolCall {
	if args == nil {
		args = map[string]any{}
	}
	return xctevent.ToolCall{
		Step: step, StepID: stepID, Tool: tool, Input: args,
		Output:     res.GetResponse().GetSuccess().GetResult().AsInterface(),
		DurationMS: durationMS(res.GetDuration().AsDuration()), Status: xctevent.ToolCallSuccess,
	}
}
