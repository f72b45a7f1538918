package orchestrator

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
)

// This file derives everything the orchestrator knows about a run from the
// run's chain: the model's context (transcript) and the run record (runView).
// Both are folds over events, so a restarted or different orchestrator
// rebuilds exactly the same view by replaying the chain.

// transcript is the model's context: one turn per step, the model's output
// and the system's answer, in model-facing JSON.
type transcript struct {
	turns []*xctv1.Turn
	open  *xctv1.Turn // the current step's turn until its response arrives
}

func (t *transcript) apply(e *lctl.Event) {
	d := e.Data
	switch e.Type {
	case lctl.TypeStepStart:
		decision, ok := d["raw"].(string)
		if !ok {
			args, _ := d["arguments"].(map[string]any)
			if args == nil {
				args = map[string]any{}
			}
			step := map[string]any{"tool": d["tool"], "arguments": args, "goal": d["intent"]}
			if c, ok := d["confidence"]; ok {
				step["confidence"] = c
			}
			b, _ := json.Marshal(map[string]any{"next_step": step})
			decision = string(b)
		}
		t.open = &xctv1.Turn{Decision: decision}
		t.turns = append(t.turns, t.open)
	case lctl.TypeToolCall:
		if t.open != nil {
			b, _ := json.Marshal(map[string]any{"status": "success", "result": d["output"]})
			t.open.Response = string(b)
		}
	case lctl.TypeError:
		if t.open != nil {
			b, _ := json.Marshal(wire.ErrorJSON(errorFromData(d)))
			t.open.Response = string(b)
		}
	case lctl.TypeStepEnd:
		t.open = nil
	}
}

// history returns the turns so far. The slice is shared; callers must not
// modify it.
func (t *transcript) history() []*xctv1.Turn { return t.turns }

// errorFromData reads an error event's payload back into an error signal.
func errorFromData(d map[string]any) *xctv1.Error {
	e := &xctv1.Error{
		Code:            str(d, "code"),
		Message:         str(d, "message"),
		Category:        str(d, "category"),
		Type:            str(d, "type"),
		SuggestedAction: str(d, "suggested_action"),
	}
	e.Recoverable, _ = d["recoverable"].(bool)
	if det, ok := d["details"].(map[string]any); ok && len(det) > 0 {
		e.Details, _ = structpb.NewStruct(det)
	}
	return e
}

// errorData is the payload of an error event.
func errorData(step int, stepID string, e *xctv1.Error) map[string]any {
	d := map[string]any{
		"step":             step,
		"step_id":          stepID,
		"code":             e.GetCode(),
		"category":         e.GetCategory(),
		"type":             e.GetType(),
		"message":          e.GetMessage(),
		"recoverable":      e.GetRecoverable(),
		"suggested_action": e.GetSuggestedAction(),
	}
	if e.GetDetails() != nil {
		d["details"] = e.GetDetails().AsMap()
	}
	return d
}

func str(d map[string]any, k string) string {
	s, _ := d[k].(string)
	return s
}

func num(d map[string]any, k string) int64 {
	switch v := d[k].(type) {
	case float64:
		return int64(v)
	case int:
		return int64(v)
	case int64:
		return v
	}
	return 0
}

// runView folds a chain into its run record.
// settled: a run waiting on a step in doubt runs again once the step's
// outcome is on the chain.
func settled(r *xctv1.Run) {
	if r.Status == xctv1.RunStatus_RUN_STATUS_IN_DOUBT {
		r.Status = xctv1.RunStatus_RUN_STATUS_RUNNING
	}
}

func applyRunEvent(r *xctv1.Run, e *lctl.Event) {
	if e.Seq <= r.GetLastSeq() {
		return // already applied (a replay after a live append)
	}
	d := e.Data
	ts := timestamppb.New(e.Time())
	r.LastSeq = e.Seq
	r.UpdatedAt = ts
	cur := func() *xctv1.Step {
		if n := len(r.Steps); n > 0 && r.Steps[n-1].GetNumber() == int32(num(d, "step")) {
			return r.Steps[n-1]
		}
		return nil
	}
	switch e.Type {
	case lctl.TypeRunStarted:
		r.RunId = str(d, "run_id")
		r.Goal = str(d, "goal")
		r.Model = str(d, "model")
		r.Principal = str(d, "principal")
		r.Status = xctv1.RunStatus_RUN_STATUS_RUNNING
		r.CreatedAt = ts
		if labels, ok := d["labels"].(map[string]any); ok {
			r.Labels = map[string]string{}
			for k, v := range labels {
				r.Labels[k], _ = v.(string)
			}
		}
	case lctl.TypeStepStart:
		st := &xctv1.Step{Number: int32(num(d, "step")), StepId: str(d, "step_id"), State: xctv1.StepState_STEP_STATE_PROPOSED}
		if _, invalid := d["raw"]; invalid {
			st.State = xctv1.StepState_STEP_STATE_INVALID
		} else {
			args, _ := d["arguments"].(map[string]any)
			sargs, _ := structpb.NewStruct(args)
			st.Proposal = &xctv1.NextStep{Tool: str(d, "tool"), Arguments: sargs, Goal: str(d, "intent")}
			if c, ok := d["confidence"].(float64); ok {
				st.Proposal.Confidence = &c
			}
		}
		r.Steps = append(r.Steps, st)
	case lctl.TypeVerdict:
		if st := cur(); st != nil {
			st.Verdict = verdictFromData(d)
			switch st.Verdict.GetDecision() {
			case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
				st.State = xctv1.StepState_STEP_STATE_ALLOWED
			case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
				st.State = xctv1.StepState_STEP_STATE_NEEDS_APPROVAL
			default:
				st.State = xctv1.StepState_STEP_STATE_DENIED
			}
		}
	case lctl.TypeToolCall:
		if st := cur(); st != nil {
			st.State = xctv1.StepState_STEP_STATE_SUCCEEDED
			st.Response, _ = wire.SuccessResponse(d["output"])
		}
		settled(r)
	case lctl.TypeError:
		if st := cur(); st != nil {
			st.Response = wire.ErrorResponse(errorFromData(d))
			if st.State == xctv1.StepState_STEP_STATE_ALLOWED || st.State == xctv1.StepState_STEP_STATE_IN_DOUBT {
				st.State = xctv1.StepState_STEP_STATE_FAILED
			}
		}
		settled(r)
	case TypeStepInDoubt:
		if st := cur(); st != nil {
			st.State = xctv1.StepState_STEP_STATE_IN_DOUBT
		}
		r.Status = xctv1.RunStatus_RUN_STATUS_IN_DOUBT
	case TypeApprovalRequested:
		r.Status = xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL
	case TypeApprovalDecided:
		r.Status = xctv1.RunStatus_RUN_STATUS_RUNNING
	case lctl.TypeStepEnd:
		if st := cur(); st != nil && str(d, "outcome") == outcomeCancelled {
			st.State = xctv1.StepState_STEP_STATE_CANCELLED
		}
		if tok, ok := d["tokens"].(map[string]any); ok {
			r.InputTokens += num(tok, "input")
			r.OutputTokens += num(tok, "output")
		}
	case lctl.TypeRunFinished:
		r.Message = str(d, "message")
		if tok, ok := d["tokens"].(map[string]any); ok {
			// The run's own totals: authoritative, and all a summary read
			// from the chain's ends has.
			r.InputTokens, r.OutputTokens = num(tok, "input"), num(tok, "output")
		}
		switch str(d, "status") {
		case "done":
			r.Status = xctv1.RunStatus_RUN_STATUS_DONE
		case "cancelled":
			r.Status = xctv1.RunStatus_RUN_STATUS_CANCELLED
		default:
			r.Status = xctv1.RunStatus_RUN_STATUS_FAILED
		}
	}
}

func verdictFromData(d map[string]any) *xctv1.Verdict {
	v := &xctv1.Verdict{PolicyVersion: str(d, "policy_version")}
	switch str(d, "decision") {
	case "allow":
		v.Decision = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
	case "needs_approval":
		v.Decision = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL
	default:
		v.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
	}
	if t, err := time.Parse(time.RFC3339Nano, str(d, "evaluated_at")); err == nil {
		v.EvaluatedAt = timestamppb.New(t)
	}
	if reasons, ok := d["reasons"].([]any); ok {
		for _, r := range reasons {
			if m, ok := r.(map[string]any); ok {
				v.Reasons = append(v.Reasons, &xctv1.Reason{RuleId: str(m, "rule_id"), Message: str(m, "message")})
			}
		}
	}
	return v
}

// verdictData is the payload of a verdict event.
func verdictData(step int, stepID, tool string, v *xctv1.Verdict) map[string]any {
	decision := decisionName(v.GetDecision())
	reasons := make([]any, 0, len(v.GetReasons()))
	for _, r := range v.GetReasons() {
		reasons = append(reasons, map[string]any{"rule_id": r.GetRuleId(), "message": r.GetMessage()})
	}
	d := map[string]any{
		"step":           step,
		"step_id":        stepID,
		"tool":           tool,
		"decision":       decision,
		"reasons":        reasons,
		"policy_version": v.GetPolicyVersion(),
		"evaluated_at":   lctl.FormatTime(v.GetEvaluatedAt().AsTime()),
	}
	if v.GetError() != nil {
		d["code"] = v.GetError().GetCode()
	}
	if v.GetEndsRun() {
		d["ends_run"] = true
	}
	if len(v.GetShadow()) > 0 {
		shadow := make([]any, 0, len(v.GetShadow()))
		for _, sv := range v.GetShadow() {
			rs := make([]any, 0, len(sv.GetReasons()))
			for _, r := range sv.GetReasons() {
				rs = append(rs, map[string]any{"rule_id": r.GetRuleId(), "message": r.GetMessage()})
			}
			shadow = append(shadow, map[string]any{"policy_version": sv.GetPolicyVersion(), "decision": decisionName(sv.GetDecision()), "reasons": rs})
		}
		d["shadow"] = shadow
	}
	return d
}

func decisionName(d xctv1.VerdictDecision) string {
	switch d {
	case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		return "allow"
	case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
		return "needs_approval"
	}
	return "deny"
}
