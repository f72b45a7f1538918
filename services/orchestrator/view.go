package orchestrator

import (
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
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
	switch x := xctevent.Parse(e).(type) {
	case xctevent.StepStart:
		decision := ""
		if x.Raw != nil {
			decision = *x.Raw
		} else {
			decision = string(wire.EncodeNextStep(x.Tool, x.Arguments, x.Intent, x.Confidence))
		}
		t.open = &xctv1.Turn{Decision: decision}
		t.turns = append(t.turns, t.open)
	case xctevent.ToolCall:
		if t.open != nil {
			t.open.Response = string(wire.EncodeSuccess(x.Output))
		}
	case xctevent.Error:
		if t.open != nil {
			// From the recorded fields to the model's JSON: no proto between.
			t.open.Response = string(wire.EncodeErrorFields(wire.ErrorFields{
				Code: x.Code, Message: x.Message, Category: x.Category, Type: x.ErrType,
				SuggestedAction: x.SuggestedAction, Recoverable: x.Recoverable, Details: x.Details,
			}))
		}
	case xctevent.StepEnd:
		t.open = nil
	}
}

// history returns the turns so far. The slice is shared; callers must not
// modify it.
func (t *transcript) history() []*xctv1.Turn { return t.turns }

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
	ts := timestamppb.New(e.Time())
	r.LastSeq = e.Seq
	r.UpdatedAt = ts
	cur := func(step int) *xctv1.Step {
		if n := len(r.Steps); n > 0 && r.Steps[n-1].GetNumber() == int32(step) {
			return r.Steps[n-1]
		}
		return nil
	}
	switch x := xctevent.Parse(e).(type) {
	case xctevent.RunStarted:
		r.RunId, r.Goal, r.Model, r.Principal = x.RunID, x.Goal, x.Model, x.Principal
		r.Status = xctv1.RunStatus_RUN_STATUS_RUNNING
		r.CreatedAt = ts
		if x.Labels != nil {
			r.Labels = x.Labels
		}
	case xctevent.StepStart:
		st := &xctv1.Step{Number: int32(x.Step), StepId: x.StepID, State: xctv1.StepState_STEP_STATE_PROPOSED}
		if x.Invalid() {
			st.State = xctv1.StepState_STEP_STATE_INVALID
		} else {
			sargs, _ := structpb.NewStruct(x.Arguments)
			st.Proposal = &xctv1.NextStep{Tool: x.Tool, Arguments: sargs, Goal: x.Intent, Confidence: x.Confidence}
		}
		r.Steps = append(r.Steps, st)
	case xctevent.Verdict:
		if st := cur(x.Step); st != nil {
			st.Verdict = verdictOf(x)
			switch st.Verdict.GetDecision() {
			case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
				st.State = xctv1.StepState_STEP_STATE_ALLOWED
			case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
				st.State = xctv1.StepState_STEP_STATE_NEEDS_APPROVAL
			default:
				st.State = xctv1.StepState_STEP_STATE_DENIED
			}
		}
	case xctevent.ToolCall:
		if st := cur(x.Step); st != nil {
			st.State = xctv1.StepState_STEP_STATE_SUCCEEDED
			st.Response, _ = wire.SuccessResponse(x.Output)
		}
		settled(r)
	case xctevent.Error:
		if st := cur(x.Step); st != nil {
			st.Response = wire.ErrorResponse(errorSignal(x))
			if st.State == xctv1.StepState_STEP_STATE_ALLOWED || st.State == xctv1.StepState_STEP_STATE_IN_DOUBT {
				st.State = xctv1.StepState_STEP_STATE_FAILED
			}
		}
		settled(r)
	case xctevent.StepInDoubt:
		if st := cur(x.Step); st != nil {
			st.State = xctv1.StepState_STEP_STATE_IN_DOUBT
		}
		r.Status = xctv1.RunStatus_RUN_STATUS_IN_DOUBT
	case xctevent.ApprovalRequested:
		r.Status = xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL
	case xctevent.ApprovalDecided:
		r.Status = xctv1.RunStatus_RUN_STATUS_RUNNING
	case xctevent.StepEnd:
		if st := cur(x.Step); st != nil && x.Outcome == xctevent.OutcomeCancelled {
			st.State = xctv1.StepState_STEP_STATE_CANCELLED
		}
		if x.Tokens != nil {
			r.InputTokens += x.Tokens.Input
			r.OutputTokens += x.Tokens.Output
		}
	case xctevent.RunFinished:
		r.Message = x.Message
		if _, ok := e.Data["tokens"].(map[string]any); ok {
			// The run's own totals: authoritative, and all a summary read
			// from the chain's ends has.
			r.InputTokens, r.OutputTokens = x.Tokens.Input, x.Tokens.Output
		}
		switch x.Status {
		case xctevent.StatusDone:
			r.Status = xctv1.RunStatus_RUN_STATUS_DONE
		case xctevent.StatusCancelled:
			r.Status = xctv1.RunStatus_RUN_STATUS_CANCELLED
		default:
			r.Status = xctv1.RunStatus_RUN_STATUS_FAILED
		}
	}
}
