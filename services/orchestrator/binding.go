package orchestrator

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// signedVerdict returns the validator's signed allow to execute a step
// with. A verdict just given carries it. An allow read back from the chain
// (a step resumed after a takeover) does not, since signatures are not
// recorded: then the executor is asked first what it recorded under the
// step id (a step that already ran is replayed, never run again), and
// otherwise the validator is asked again and its new verdict recorded. A
// validator that no longer allows the step refuses it.
func (r *run) signedVerdict(step int, stepID string, ns *xctv1.NextStep, v *xctv1.Verdict) (*xctv1.SignedVerdict, *xctv1.ExecuteResponse, *xctv1.Error) {
	if sv := v.GetSigned(); sv != nil {
		return sv, nil, nil
	}
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	resp, err := r.svc.executor.GetStep(ctx, &xctv1.GetStepRequest{StepId: stepID})
	cancel()
	// earlier says an attempt of this step may already have acted (its
	// record is pending or in doubt): then no fresh verdict means no new
	// attempt, not "not executed".
	earlier := ""
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
	}
	fresh, agent := r.validate(step, stepID, ns)
	if rerr := r.record(agent, verdictEvent(step, stepID, ns.GetTool(), fresh)); rerr != nil {
		r.log.Warn("fresh verdict not recorded; the step is not executed", "run", r.id, "step", step, "err", rerr)
		return nil, nil, stillInDoubt(step, earlier, wire.Errorf(wire.CodeExecutorUnavailable, "step %d was not executed: its new verdict could not be recorded", step))
	}
	if fresh.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW || fresh.GetSigned() == nil {
		e := fresh.GetError()
		if e == nil {
			e = wire.Errorf(wire.CodePolicyDenied, "the validator gave no signed allow for step %d, so it was not executed", step)
		}
		return nil, nil, stillInDoubt(step, earlier, e)
	}
	return fresh.GetSigned(), nil, nil
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
