package orchestrator

import (
	"maps"

	"google.golang.org/protobuf/proto"
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

func (t *transcript) apply(e *lctl.Event) { t.applyParsed(xctevent.Parse(e)) }

// applyParsed folds an event given parsed (xctevent.Parse).
func (t *transcript) applyParsed(ev xctevent.Event) {
	switch x := ev.(type) {
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

// runRecord is the run record (GetRun, ListRuns, WatchRun) of a run's
// view: a projection of the one fold of XCT's events (xctevent.Run).
func runRecord(v *xctevent.Run) *xctv1.Run {
	r := &xctv1.Run{
		RunId: v.Started.RunID, Goal: v.Started.Goal, Model: v.Started.Model, Principal: v.Started.Principal,
		Labels: maps.Clone(v.Started.Labels), LastSeq: v.LastSeq,
		InputTokens: v.Tokens.Input, OutputTokens: v.Tokens.Output,
	}
	if v.HasStarted {
		r.CreatedAt = timestamppb.New(v.StartedAt)
	}
	if !v.UpdatedAt.IsZero() {
		r.UpdatedAt = timestamppb.New(v.UpdatedAt)
	}
	switch v.Status {
	case xctevent.StatusRunning:
		r.Status = xctv1.RunStatus_RUN_STATUS_RUNNING
	case xctevent.StatusWaitingApproval:
		r.Status = xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL
	case xctevent.StatusInDoubt:
		r.Status = xctv1.RunStatus_RUN_STATUS_IN_DOUBT
	case xctevent.StatusDone:
		r.Status = xctv1.RunStatus_RUN_STATUS_DONE
	case xctevent.StatusCancelled:
		r.Status = xctv1.RunStatus_RUN_STATUS_CANCELLED
	case xctevent.StatusFailed:
		r.Status = xctv1.RunStatus_RUN_STATUS_FAILED
	}
	if v.Finished != nil {
		r.Message = v.Finished.Message
	}
	r.Steps = make([]*xctv1.Step, 0, len(v.Steps))
	for _, st := range v.Steps {
		r.Steps = append(r.Steps, stepRecord(st))
	}
	return r
}

// stepRecord is one step of the run record.
func stepRecord(st *xctevent.Step) *xctv1.Step {
	out := &xctv1.Step{Number: int32(st.Number()), StepId: st.Start.StepID, State: xctv1.StepState_STEP_STATE_PROPOSED, InDoubtSeq: st.DoubtSeq}
	if st.Start.Invalid() {
		out.State = xctv1.StepState_STEP_STATE_INVALID
	} else {
		sargs, _ := structpb.NewStruct(st.Start.Arguments)
		out.Proposal = &xctv1.NextStep{Tool: st.Start.Tool, Arguments: sargs, Goal: st.Start.Intent}
		if c := st.Start.Confidence; c != nil {
			out.Proposal.Confidence = proto.Float64(*c)
		}
	}
	if v := st.Verdict(); v != nil {
		out.Verdict = verdictOf(*v)
		switch {
		case st.Attempted():
			// (a later verdict that refused a new attempt does not undo
			// the allowed one: it may have acted)
			out.State = xctv1.StepState_STEP_STATE_ALLOWED
		case out.Verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
			out.State = xctv1.StepState_STEP_STATE_NEEDS_APPROVAL
		default:
			out.State = xctv1.StepState_STEP_STATE_DENIED
		}
	}
	switch {
	case st.Result != nil:
		out.State = xctv1.StepState_STEP_STATE_SUCCEEDED
		out.Response, _ = wire.SuccessResponse(st.Result.Output)
	case st.Error != nil:
		out.Response = wire.ErrorResponse(errorSignal(*st.Error))
		if st.Attempted() {
			out.State = xctv1.StepState_STEP_STATE_FAILED
		}
	case st.InDoubt:
		out.State = xctv1.StepState_STEP_STATE_IN_DOUBT
	}
	if st.End != nil && st.End.Outcome == xctevent.OutcomeCancelled {
		out.State = xctv1.StepState_STEP_STATE_CANCELLED
	}
	return out
}
