package orchestrator

import (
	"errors"
	"fmt"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// One step, top to bottom: each stage appends its typed record (verdict,
// approval, tool_call or error, step_end) before the next stage runs. A
// step just proposed writes its step_start with its verdict, and its
// tool_call (or error) with its step_end, one message each (recordPack).
// A step resumed from another orchestrator's chain skips the stages its
// chain already holds.

// stepOutcome is what a step's outcome record said.
type stepOutcome struct {
	outcome, summary string
	inDoubt          *xctv1.Error // the step may have acted and no one knows
	// record is the outcome's event (tool_call or error) when it is not on
	// the chain yet: endStepRecord appends it with the step_end, in one
	// message, before the model is told anything.
	record *pending
}

// finishStep carries a started step through whatever is not yet on its
// chain: verdict, approval, execution, outcome, step_end.
func (r *run) finishStep(st *openStep) (iterationOutcome, error) {
	if st.invalid {
		return iterationOutcome{kind: outcomeInvalid}, r.finishInvalid(st)
	}
	r.startStep(st.stepID, st.ns.GetTool())
	defer r.endStep()

	verdict, verdictAgent, err := r.decideStep(st)
	if err != nil {
		return iterationOutcome{}, err
	}
	res := stepOutcome{outcome: st.outcome, summary: st.summary, inDoubt: st.inDoubt}
	switch {
	case res.outcome != "":
		// Recorded before a takeover.
	case verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW && r.crew != nil && crew.IsSystemTool(st.ns.GetTool()):
		// The crew's own tools are carried out here, never by the executor.
		if res, err = r.carrySystemTool(st); err != nil {
			return iterationOutcome{}, err
		}
	case verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		if res, err = r.actOnStep(st, verdict); err != nil {
			return iterationOutcome{}, err
		}
	default:
		if res, err = r.refuseStep(st, verdict, verdictAgent); err != nil {
			return iterationOutcome{}, err
		}
	}
	return r.endStepRecord(st, verdict, res)
}

// decideStep records the step's verdict (unless its chain has it) and, for
// a step that needs a human, waits for the approval and the verdict after
// it.
func (r *run) decideStep(st *openStep) (*xctv1.Verdict, string, error) {
	verdict, verdictAgent := st.verdict, st.verdictAgent
	if verdict == nil {
		verdict, verdictAgent = r.validate(st.step, st.stepID, st.ns)
		v := pending{agent: verdictAgent, ev: verdictEvent(st.step, st.stepID, st.ns.GetTool(), verdict)}
		var err error
		if st.start != nil {
			// The step_start and its verdict, durable together before
			// anything acts on the verdict.
			err = r.recordPack(*st.start, v)
			st.start = nil
		} else {
			err = r.record(v.agent, v.ev)
		}
		if err != nil {
			return nil, "", err
		}
	}
	if verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
		var err error
		if verdict, verdictAgent, err = r.awaitApproval(st, verdict); err != nil {
			return nil, "", r.stopWaiting(st, err)
		}
	}
	return verdict, verdictAgent, nil
}

// actOnStep runs an allowed step (its allow verdict is durable: only now
// may it act), settles an outcome it could not learn from the executor's
// record, and returns the tool_call or the error for endStepRecord to
// record with the step_end.
func (r *run) actOnStep(st *openStep, verdict *xctv1.Verdict) (stepOutcome, error) {
	if _, ok := r.cancelled(); ok {
		// Cancelled after the allow was recorded: no attempt starts now
		// (cancel.go).
		return r.cancelledStep(st)
	}
	var res *xctv1.ExecuteResponse
	var execErr *xctv1.Error
	if st.argsRedacted {
		res, execErr = r.recoverStep(st)
	} else {
		var err error
		if res, execErr, err = r.execute(st, verdict); err != nil {
			return stepOutcome{}, err
		}
	}
	if execErr == nil {
		execErr = res.GetResponse().GetError() // the tool's own error signal
	}
	execErr = provenNotExecuted(st, execErr)
	if execErr != nil && unknownOutcome(execErr) {
		// The step may have acted: learn its outcome from the executor's
		// record before the model is told anything.
		var err error
		if res, execErr, err = r.settleStep(st, verdict, execErr); err != nil {
			return stepOutcome{}, err
		}
		if execErr == nil {
			execErr = res.GetResponse().GetError()
		}
	}
	return r.outcomeOf(st, res, execErr), nil
}

// outcomeOf is the tool_call or error recording what a step's attempt
// did (execErr, or the tool's own error in res).
func (r *run) outcomeOf(st *openStep, res *xctv1.ExecuteResponse, execErr *xctv1.Error) stepOutcome {
	if execErr == nil {
		execErr = res.GetResponse().GetError()
	}
	if execErr == nil {
		f := res.GetResponse().GetSuccess().GetResult().GetStructValue().GetFields()
		return stepOutcome{outcome: xctevent.OutcomeSuccess, summary: successSummary(f["result_not_kept"].GetBoolValue(), f["reason"].GetStringValue()),
			record: &pending{agent: agentExecutor, ev: toolCallEvent(st.step, st.stepID, st.ns.GetTool(), st.args, res)}}
	}
	execErr = r.settleRepeatable(st.ns.GetTool(), execErr) // repeatable.go
	out := stepOutcome{outcome: xctevent.OutcomeError, summary: execErr.GetCode() + ": " + execErr.GetMessage(),
		record: &pending{agent: agentExecutor, ev: errorEvent(st.step, st.stepID, execErr)}}
	if unknownOutcome(execErr) {
		out.inDoubt = execErr
	}
	return out
}

// refuseStep makes the error of a step the validator (or a human) did not
// allow, recorded with the step_end (endStepRecord).
func (r *run) refuseStep(st *openStep, verdict *xctv1.Verdict, verdictAgent string) (stepOutcome, error) {
	e := verdict.GetError()
	if e == nil {
		e = wire.Errorf(wire.CodePolicyDenied, "the validator did not allow this step")
	}
	return stepOutcome{outcome: xctevent.OutcomeDenied, summary: e.GetCode() + ": " + e.GetMessage(),
		record: &pending{agent: verdictAgent, ev: errorEvent(st.step, st.stepID, e)}}, nil
}

// endStepRecord records the step's end and says whether the run goes on:
// not after a budget that cannot recover, nor after a step in doubt.
func (r *run) endStepRecord(st *openStep, verdict *xctv1.Verdict, res stepOutcome) (iterationOutcome, error) {
	end := pending{agent: st.agent, ev: st.end(res.outcome, res.summary)}
	if res.record != nil {
		// The outcome and the step_end in one message: the model learns
		// the outcome only from the chain, after both are durable.
		at := r.writer.Seq() + 1 // the outcome's seq
		if err := r.recordPack(*res.record, end); err != nil {
			return iterationOutcome{}, err
		}
		r.stepResultAt(res.outcome, res.summary, at)
	} else {
		r.stepResult(res.outcome, res.summary)
		if err := r.record(end.agent, end.ev); err != nil {
			return iterationOutcome{}, err
		}
	}
	if err := r.crewCheckpoint(); err != nil { // crew.go
		return iterationOutcome{}, err
	}
	if verdict.GetEndsRun() {
		// A budget that cannot recover: the model was told, the run ends.
		return iterationOutcome{}, fmt.Errorf("%s", verdict.GetError().GetMessage())
	}
	if res.inDoubt != nil {
		// The step may have acted. Going on could let the model propose it
		// again as a new step and act twice: a human decides first.
		return iterationOutcome{}, errors.New(inDoubtMessage(r.id, st.step, st.stepID, res.inDoubt))
	}
	return iterationOutcome{kind: outcomeStep, message: res.outcome}, nil
}

// successSummary is a step_end's output_summary for a tool that succeeded:
// "ok", or, when the executor could not keep its result (docs/events.md,
// "A result not kept"), that it succeeded and why its result is not there.
func successSummary(notKept bool, reason string) string {
	if notKept {
		return "ok, result not kept: " + reason
	}
	return "ok"
}
