package orchestrator

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// signedVerdict returns the validator's signed allow to execute a step
// with. A verdict just given carries it. An allow read back from the chain
// (a step resumed after a takeover) does not, since signatures are not
// recorded: then the executor is asked first what it recorded under the
// step id (a step that already ran is replayed, never run again), and
// otherwise the validator is asked again and its new verdict recorded. A
// validator that no longer allows the step refuses it.
func (r *run) signedVerdict(st *openStep, v *xctv1.Verdict) (*xctv1.SignedVerdict, *xctv1.ExecuteResponse, *xctv1.Error) {
	if sv := v.GetSigned(); sv != nil {
		return sv, nil, nil
	}
	step, stepID, ns := st.step, st.stepID, st.ns
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	resp, err := r.svc.executor.GetStep(ctx, &xctv1.GetStepRequest{StepId: stepID})
	cancel()
	// earlier says an attempt of this step may already have acted (its
	// record is pending or in doubt): then no fresh verdict means no new
	// attempt, not "not executed". unseen says the executor had no record
	// of the step when asked, which proves nothing about a call made
	// before the takeover that is still on its way (its sender paused,
	// a slow network): it may arrive after a refusal here, and act.
	earlier, unseen := "", false
	switch {
	case err == nil:
		rec := resp.GetStep()
		switch rec.GetState() {
		case xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED, xctv1.StepRecordState_STEP_RECORD_STATE_FAILED:
			return nil, &xctv1.ExecuteResponse{Response: rec.GetResponse(), Duration: rec.GetDuration(), Replayed: true, Attempt: rec.GetAttempt()}, nil
		case xctv1.StepRecordState_STEP_RECORD_STATE_PENDING, xctv1.StepRecordState_STEP_RECORD_STATE_IN_DOUBT:
			earlier = recordState(resp)
		}
		// Pending, in doubt or released for a retry: the executor decides
		// what a new Execute does, with a fresh verdict.
	case status.Code(err) != codes.NotFound:
		return nil, nil, wire.WithDetails(wire.Errorf(wire.CodeExecutorUnavailable, "the executor could not say what became of step %d: %s", step, status.Convert(err).Message()),
			map[string]any{"outcome_unknown": true})
	default:
		unseen = true
	}
	refuse := func(e *xctv1.Error) (*xctv1.SignedVerdict, *xctv1.ExecuteResponse, *xctv1.Error) {
		if unseen {
			res, e := r.fenceRefused(st, e)
			return nil, res, e
		}
		return nil, nil, stillInDoubt(step, earlier, e)
	}
	fresh, agent := r.validate(step, stepID, ns)
	if rerr := r.record(agent, verdictEvent(step, stepID, ns.GetTool(), fresh)); rerr != nil {
		r.log.Warn("fresh verdict not recorded; the step is not executed", "run", r.id, "step", step, "err", rerr)
		return refuse(wire.Errorf(wire.CodeExecutorUnavailable, "step %d was not executed: its new verdict could not be recorded", step))
	}
	// A doubt recorded before this verdict is not the step's doubt any
	// more (a decision names the step_in_doubt it settles, and this
	// verdict starts another attempt, a human's retry or the step's
	// resumption): if this attempt leaves it in doubt, that is recorded
	// anew.
	st.doubtRecorded = false
	if fresh.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW || fresh.GetSigned() == nil {
		e := fresh.GetError()
		if e == nil {
			e = wire.Errorf(wire.CodePolicyDenied, "the validator gave no signed allow for step %d, so it was not executed", step)
		}
		return refuse(e)
	}
	return fresh.GetSigned(), nil, nil
}

// fenceRefused is the outcome of a step refused a new attempt (e says
// why) whose executor had no record of it when asked: e holds only once
// no earlier call can act any more, which the fence proves (GetStep with
// fence records the step as not executed, so a call still on its way
// replays that instead of acting). If a record appeared meanwhile, the
// step's outcome is the record's: its result when final, still in doubt
// otherwise (the settle loop reads it again). A step too old to be fenced
// (its record could have expired) stays in doubt.
func (r *run) fenceRefused(st *openStep, e *xctv1.Error) (*xctv1.ExecuteResponse, *xctv1.Error) {
	if !r.fenceable(st) {
		return nil, stillInDoubt(st.step, "unknown (none now, and one could have outlived the step retention)", e)
	}
	state, resp, err := r.readRecord(st.stepID, true)
	switch {
	case state == outcomeFinal && recordNotExecuted(resp.GetStep()):
		return nil, e // proven: nothing acted, and nothing will
	case state == outcomeFinal:
		return replay(resp.GetStep()), nil
	case state == outcomeRetry:
		// A human released the step for another attempt meanwhile, and
		// the attempt is refused: the refusal ends it (signedVerdict's
		// rule for a step released for a retry).
		return nil, e
	case err != nil:
		return nil, stillInDoubt(st.step, "unknown (not readable: "+status.Convert(err).Message()+")", e)
	}
	return nil, stillInDoubt(st.step, recordState(resp), e)
}

// rejudge asks the validator to judge a step again after the executor
// refused its verdict because the verdict's policy was replaced after it
// was signed (a reload while the step was on its way: policyReplaced).
// That refusal comes before the call claims the step, so the call did not
// act, and the policy in force decides whether an attempt starts. The new
// verdict is recorded (the chain shows both). An allow returns its grant
// for one more call, with the same step id (the executor's record keeps
// it to one attempt). A policy that wants a human for a step no attempt
// of which can have acted (st.attempted: the call just refused was its
// only one) is waited for like any step's first verdict: the verdict
// after the approval decides. Anything else (a deny, a human wanted for
// a step an earlier attempt of which may have acted, the validator down,
// the verdict not recorded, the approval denied or expired) is the
// step's refusal, which holds only once no other call can act: the step
// is fenced first (fenceRefused), and a record found there decides
// instead. The error is for a run that must stop while it waits
// (cancelled, handed over, the log lost).
func (r *run) rejudge(st *openStep) (*xctv1.SignedVerdict, *xctv1.ExecuteResponse, *xctv1.Error, error) {
	r.log.Warn("the executor refused the step's verdict: its policy was replaced since; asking the validator again", "run", r.id, "step", st.step, "step_id", st.stepID)
	judge := r.validate
	if st.system {
		judge = r.validateSystem // a rollback's undo is judged as such
	}
	fresh, agent := judge(st.step, st.stepID, st.ns)
	ev := verdictEvent(st.step, st.stepID, st.ns.GetTool(), fresh)
	ev.Rejudged = true // the allow before it did not act (xctevent.Step.Attempted)
	if err := r.record(agent, ev); err != nil {
		r.log.Warn("new verdict not recorded; the step is not executed", "run", r.id, "step", st.step, "err", err)
		res, e := r.fenceRefused(st, wire.Errorf(wire.CodeExecutorUnavailable,
			"step %d was not executed: its verdict's policy was replaced, and its new verdict could not be recorded", st.step))
		return nil, res, e, nil
	}
	st.doubtRecorded = false // another attempt's verdict (signedVerdict says why)
	if fresh.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL && !st.system && !st.attempted {
		// (an undo's approval is the rollback's own: awaitUndoApproval)
		final, _, err := r.awaitApproval(st, fresh)
		if err != nil {
			return nil, nil, nil, r.stopWaiting(st, err)
		}
		fresh = final
	}
	if fresh.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW && fresh.GetSigned() != nil {
		return fresh.GetSigned(), nil, nil, nil
	}
	e := fresh.GetError()
	if e == nil {
		e = wire.Errorf(wire.CodePolicyDenied, "the validator gave no signed allow for step %d under the policy in force, so it was not executed", st.step)
	}
	res, e := r.fenceRefused(st, e)
	return nil, res, e, nil
}

// policyReplaced reports whether an Execute was refused because its
// verdict's policy was replaced after it was signed: the executor's
// FAILED_PRECONDITION with its detail (verdict.ReplacedDetail), read as
// data, never from the message.
func policyReplaced(err error) bool {
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if e, ok := d.(*xctv1.Error); ok {
			if replaced, _ := e.GetDetails().AsMap()[verdict.ReplacedDetail].(bool); replaced {
				return true
			}
		}
	}
	return false
}

// recordNotExecuted reports whether a record proves its step did not act:
// a fence, or a resolution that said so (the executor's NotExecuted).
func recordNotExecuted(rec *xctv1.StepRecord) bool {
	if rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_FAILED {
		return false
	}
	v, _ := rec.GetResponse().GetError().GetDetails().AsMap()["not_executed"].(bool)
	return v
}

// stillInDoubt is why a new attempt of a step did not start (e), said
// truthfully: when an earlier attempt may have acted (earlier names its
// record's state), the step's outcome is still unknown, and the run must
// not tell the model "not executed" (it would propose it again). Without
// an earlier attempt, e is the outcome as it is.
func stillInDoubt(step int, earlier string, e *xctv1.Error) *xctv1.Error {
	if earlier == "" {
		return e
	}
	return wire.WithDetails(wire.Errorf(wire.CodeInDoubt, "step %d may have acted in an earlier attempt (its record is %s), and no new attempt started: %s",
		step, earlier, e.GetMessage()), map[string]any{"outcome_unknown": true, "not_started": e.GetCode()})
}

// modelCatalog is the executor's catalog without the system's own tools:
// what a model is shown.
func modelCatalog(tools []*xctv1.ToolDescriptor) []*xctv1.ToolDescriptor {
	out := make([]*xctv1.ToolDescriptor, 0, len(tools))
	for _, t := range tools {
		if !wire.IsSystemTool(t.GetName()) {
			out = append(out, t)
		}
	}
	return out
}

// validateSystem is validate for a system step (a rollback's undo, asked
// for by an operator): the validator judges it as such, and signs it so
// that the executor runs the system tool. Only RollbackRun calls it.
func (r *run) validateSystem(step int, stepID string, ns *xctv1.NextStep) (*xctv1.Verdict, string) {
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	defer cancel()
	resp, err := r.svc.validator.Validate(ctx, &xctv1.ValidateRequest{
		Run:        r.runContext(step),
		Step:       int32(step),
		StepId:     stepID,
		Proposal:   ns,
		SystemStep: true,
	})
	if err == nil && resp.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED {
		return resp.GetVerdict(), agentValidator
	}
	reason := "the validator returned no decision"
	if err != nil {
		reason = "the validator could not be reached: " + status.Convert(err).Message()
	}
	r.log.Warn("validator unavailable: denying", "run", r.id, "step", step, "err", err)
	return failClosed(reason), agentOrchestrator
}
