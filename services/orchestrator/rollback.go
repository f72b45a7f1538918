package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Rollback events and the undo tool (docs/events.md).
const (
	undoTool = "xct.undo"
)

// errRollbackStopped is how a stopping orchestrator ends its rollbacks
// (Service.Stop): an undo waiting for a human ends as a cancelled one
// does, an undo executing finishes and is recorded, no further undo
// starts, and the caller is answered UNAVAILABLE, to roll back again on
// another replica.
var errRollbackStopped = errors.New("the orchestrator stopped: roll back again")

// rollbackStopped reports whether the orchestrator running the rollback
// stopped it.
func (r *run) rollbackStopped() bool { return errors.Is(context.Cause(r.ctx), errRollbackStopped) }

// RollbackRun implements OrchestratorService.
func (s *Service) RollbackRun(ctx context.Context, req *xctv1.RollbackRunRequest) (*xctv1.RollbackRunResponse, error) {
	id := req.GetRunId()
	cur, err := s.lookup(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if r := s.owner(id); r != nil {
		// A run whose end is on its chain (a watcher saw it) leaves the
		// active set a moment later: wait for that, not refuse.
		if !ended(cur) || r.left == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "run %s is still running: cancel it first", id)
		}
		select {
		case <-r.left:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if !ended(cur) {
		return nil, status.Errorf(codes.FailedPrecondition, "run %s has not ended (%s): it may be owned by another orchestrator", id, cur.GetStatus())
	}
	principal, roles, err := actingPrincipal(ctx, req.GetPrincipal())
	if err != nil {
		return nil, err
	}
	tools, err := s.toolCatalog(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	effects := map[string]xctv1.Effect{}
	for _, t := range tools {
		effects[t.GetName()] = t.GetEffect()
	}

	writer, err := s.events.ResumeChainWriter(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	rctx, rcancel := context.WithCancelCause(context.Background())
	defer rcancel(nil)
	r := &run{
		runSpec: runSpec{id: id, principal: principal, roles: roles, labels: cur.GetLabels(), model: cur.GetModel(), started: time.Now()},
		svc:     s, log: s.log, writer: writer, ctx: rctx, cancel: rcancel, done: make(chan struct{}),
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil, status.Errorf(codes.Unavailable, "the orchestrator is stopping: nothing was undone; roll back again (another replica takes it)")
	}
	if _, busy := s.active[id]; busy {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "run %s is busy", id)
	}
	s.active[id] = r
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		close(r.done) // a stopping orchestrator waits for it (Stop)
	}()
	// One rollback of a run at a time in the cluster: it holds the run's
	// owner key while it runs (renewed by the heartbeat, as a run's; a
	// crashed rollback's key is taken over after a lease and, the run
	// having ended, deleted). The check above sees this process's runs
	// only: another replica's rollback of the same run, waiting for an
	// undo's approval, was joined by a second one beside it.
	rev, err := s.claimNew(ctx, id)
	if errors.Is(err, ErrRunExists) {
		return nil, status.Errorf(codes.FailedPrecondition,
			"run %s is being rolled back by another orchestrator (or its owner key outlived its end, cleared within %v): try again when that is done", id, s.cfg.RunLease)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	r.lease.set(rev)
	defer s.finishLease(r)
	// A rollback is among its principal's runs in progress (--max-runs,
	// across the cluster) until it returns: an undo waiting for a human
	// holds a consumer on the approvals' stream, whose bound everyone's
	// waits share, as a run waiting for one does. Counted under the run's
	// id, whose owner key the rollback holds (a crashed rollback's count
	// is dropped once its key is gone, as a run's).
	counted, err := s.takeQuota(ctx, principal, id, s.cfg.MaxRuns)
	if err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			return nil, status.Errorf(codes.ResourceExhausted, "%s (rollbacks count among them); nothing was undone", status.Convert(err).Message())
		}
		return nil, toStatus(err)
	}
	if counted {
		defer s.giveQuota(principal, id)
	}

	// Undo steps of an earlier rollback whose outcome the chain does not
	// hold, or holds as unknown: their records say what they did.
	settled, fresh, err := r.settleUndos(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	cur = fresh // the chain as it is now (a cached view may lag another replica's rollback)
	// What to undo: succeeded steps after to_step that changed something and
	// were not undone by an earlier rollback, newest first.
	undone := map[string]bool{}
	for _, st := range cur.GetSteps() {
		if st.GetProposal().GetTool() == undoTool && st.GetState() == xctv1.StepState_STEP_STATE_SUCCEEDED {
			if sid, ok := st.GetProposal().GetArguments().AsMap()["step_id"].(string); ok {
				undone[sid] = true
			}
		}
	}
	var undoneBefore []int32 // targets an undo settled above had undone
	for _, st := range cur.GetSteps() {
		if settled[st.GetStepId()] && !undone[st.GetStepId()] && st.GetNumber() > req.GetToStep() {
			undoneBefore = append(undoneBefore, st.GetNumber())
		}
		if settled[st.GetStepId()] {
			undone[st.GetStepId()] = true
		}
	}
	slices.Reverse(undoneBefore)
	var targets []*xctv1.Step
	var irreversible []string
	for _, st := range cur.GetSteps() {
		tool := st.GetProposal().GetTool()
		if st.GetNumber() <= req.GetToStep() || st.GetState() != xctv1.StepState_STEP_STATE_SUCCEEDED || tool == undoTool || undone[st.GetStepId()] {
			continue
		}
		switch effects[tool] {
		case xctv1.Effect_EFFECT_READ:
			continue // nothing to undo
		case xctv1.Effect_EFFECT_REVERSIBLE:
			targets = append(targets, st)
		default:
			irreversible = append(irreversible, fmt.Sprintf("step %d (%s)", st.GetNumber(), tool))
		}
	}
	if len(irreversible) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "run %s cannot be rolled back past %s: irreversible; nothing was undone (use --to-step to roll back only the steps after it)",
			id, strings.Join(irreversible, ", "))
	}
	slices.Reverse(targets)

	if r.rollbackStopped() {
		return nil, status.Errorf(codes.Unavailable, "the orchestrator stopped before run %s's rollback started: nothing was undone; roll back again", id)
	}
	numbers := make([]int, 0, len(targets))
	for _, st := range targets {
		numbers = append(numbers, int(st.GetNumber()))
	}
	if err := r.record(principal, xctevent.RollbackStarted{Principal: principal, ToStep: int(req.GetToStep()), Steps: numbers}); err != nil {
		return nil, toStatus(err)
	}
	resp := &xctv1.RollbackRunResponse{Status: xctevent.StatusDone, Undone: undoneBefore}
	r.startRollbackSpan()
	defer func() { r.endRunSpan(resp.GetStatus(), resp.GetMessage()) }()
	next := 1 // undo steps continue the run's step numbers
	if n := len(cur.GetSteps()); n > 0 {
		next = int(cur.GetSteps()[n-1].GetNumber()) + 1
	}
	stopped := false // the rollback ended because the orchestrator stopped
	for _, st := range targets {
		if cause := context.Cause(r.ctx); cause != nil {
			// Stopped (Stop) or cancelled (CancelRun): an undo that
			// finished is recorded; none starts now.
			stopped = r.rollbackStopped()
			resp.Status, resp.Message = xctevent.StatusFailed, fmt.Sprintf("the rollback was %v (before the undo of step %d)", cause, st.GetNumber())
			if stopped {
				resp.Message = fmt.Sprintf("the orchestrator stopped before the undo of step %d: roll back again", st.GetNumber())
			}
			break
		}
		if msg, err := r.undoStep(next, st); err != nil {
			return nil, toStatus(err)
		} else if msg != "" {
			stopped = r.rollbackStopped()
			resp.Status, resp.Message = xctevent.StatusFailed, msg
			break
		}
		resp.Undone = append(resp.Undone, st.GetNumber())
		next++
	}
	undoneNums := make([]int, 0, len(resp.GetUndone()))
	for _, n := range resp.GetUndone() {
		undoneNums = append(undoneNums, int(n))
	}
	if err := r.record(principal, xctevent.RollbackFinished{Status: resp.GetStatus(), Message: resp.GetMessage(), Undone: undoneNums}); err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("rollback", "run", id, "principal", principal, "status", resp.GetStatus(), "undone", len(resp.GetUndone()))
	if stopped {
		// Its end is on the chain: the caller may retry on another
		// replica, which undoes what is left.
		return nil, status.Errorf(codes.Unavailable, "run %s: %s (undone before it stopped: %v)", id, resp.GetMessage(), resp.GetUndone())
	}
	return resp, nil
}

// undoStep runs one governed undo step. It returns a message when the undo
// was refused or failed (the rollback stops there), an error when the log
// could not be written.
//
// The undo names the actions of the target's compensation (as the
// executor's preview of xct.undo lists them): the validator judges each as
// the fs tool it amounts to (a restore under config/ as a write there),
// and the executor acts only on a compensation that is those actions. An
// undo that needs a human waits for one, as a step of the run would.
func (r *run) undoStep(step int, target *xctv1.Step) (string, error) {
	args, err := structpb.NewStruct(map[string]any{"step_id": target.GetStepId(), "actions": r.undoActions(target.GetStepId())})
	if err != nil {
		return "", err
	}
	ns := &xctv1.NextStep{Tool: undoTool, Arguments: args, Goal: fmt.Sprintf("roll back step %d (%s)", target.GetNumber(), target.GetProposal().GetTool())}
	stepID := wire.StepID(r.id, step, undoTool, args)
	started := time.Now()
	if err := r.record(r.principal, xctevent.StepStart{
		Step: step, StepID: stepID, Intent: ns.GetGoal(), InputSummary: undoTool + " step=" + fmt.Sprint(target.GetNumber()),
		Tool: undoTool, Arguments: args.AsMap(),
	}); err != nil {
		return "", err
	}
	r.startStep(stepID, undoTool)
	defer r.endStep()
	verdict, agent := r.validateSystem(step, stepID, ns)
	if err := r.record(agent, verdictEvent(step, stepID, undoTool, verdict)); err != nil {
		return "", err
	}
	if verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
		if verdict, agent, err = r.awaitUndoApproval(&openStep{step: step, stepID: stepID, ns: ns}, verdict); err != nil {
			return "", err
		}
	}
	end := func(outcome, summary string) error {
		r.stepResult(outcome, summary)
		return r.record(r.principal, xctevent.StepEnd{
			Step: step, StepID: stepID, Outcome: outcome, OutputSummary: summary, DurationMS: durationMS(time.Since(started)),
		})
	}
	if verdict.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		e := verdict.GetError()
		if e == nil {
			e = wire.Errorf(wire.CodePolicyDenied, "the validator did not allow the undo")
		}
		msg := fmt.Sprintf("undo of step %d refused: %s: %s", target.GetNumber(), e.GetCode(), e.GetMessage())
		if err := r.record(agent, errorEvent(step, stepID, e)); err != nil {
			return "", err
		}
		return msg, end(xctevent.OutcomeDenied, msg)
	}
	ost := &openStep{step: step, stepID: stepID, ns: ns, started: started, system: true}
	res, execErr, err := r.execute(ost, verdict) // (an undo's rejudge never waits: err is nil)
	if err != nil {
		return "", err
	}
	if execErr == nil && res.GetResponse().GetError() != nil {
		execErr = res.GetResponse().GetError()
	}
	if execErr != nil && unknownOutcome(execErr) {
		// The undo may have acted: its record says, if it can yet (else
		// the error stays unknown on the chain, and the next rollback
		// settles it before undoing anything: settleUndos).
		if state, resp, _ := r.readRecord(stepID, r.fenceable(ost)); state == outcomeFinal {
			res, execErr = replay(resp.GetStep()), resp.GetStep().GetResponse().GetError()
		}
	}
	if execErr != nil {
		msg := fmt.Sprintf("undo of step %d failed: %s: %s", target.GetNumber(), execErr.GetCode(), execErr.GetMessage())
		if err := r.record(agentExecutor, errorEvent(step, stepID, execErr)); err != nil {
			return "", err
		}
		return msg, end(xctevent.OutcomeError, msg)
	}
	if err := r.record(agentExecutor, toolCallEvent(step, stepID, undoTool, args.AsMap(), res)); err != nil {
		return "", err
	}
	return "", end(xctevent.OutcomeSuccess, "ok")
}

// undoActions are the actions of the compensation of step id, as the
// executor's preview of xct.undo lists them. None when it lists none or
// cannot be asked: the validator then judges no action, and the executor
// refuses the undo unless the step's compensation has none either (its
// refusal says why: no record, no compensation, ...).
func (r *run) undoActions(id string) []any {
	args, err := structpb.NewStruct(map[string]any{"step_id": id})
	if err != nil {
		return []any{}
	}
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	defer cancel()
	resp, err := r.svc.executor.PreviewStep(ctx, &xctv1.PreviewStepRequest{Tool: undoTool, Arguments: args})
	var actions []any
	if err == nil && resp.GetPreview().GetKind() == undoPreviewKind {
		err = json.Unmarshal([]byte(resp.GetPreview().GetContent()), &actions)
	}
	if err != nil || actions == nil {
		r.log.Warn("the undo's actions could not be listed", "run", r.id, "step_id", id, "err", err)
		return []any{}
	}
	return actions
}

// undoPreviewKind is the kind of xct.undo's preview (the executor's
// UndoPreviewKind): a JSON array of the compensation's actions.
const undoPreviewKind = "undo"

// awaitUndoApproval waits for the human an undo needs (as awaitApproval
// does for a step of the run) and asks the validator again, as for a
// system step. A rollback cancelled while it waits ends the undo denied.
func (r *run) awaitUndoApproval(st *openStep, v *xctv1.Verdict) (*xctv1.Verdict, string, error) {
	deny := func(rule, msg string, code wire.Code) (*xctv1.Verdict, string, error) {
		final := &xctv1.Verdict{
			Decision:      xctv1.VerdictDecision_VERDICT_DECISION_DENY,
			Reasons:       []*xctv1.Reason{{RuleId: rule, Message: msg}},
			PolicyVersion: v.GetPolicyVersion(),
			EvaluatedAt:   nowpb(),
			Error:         wire.Errorf(code, "%s", msg),
		}
		return final, agentOrchestrator, r.record(agentOrchestrator, verdictEvent(st.step, st.stepID, undoTool, final))
	}
	var unavailable errApprovalUnavailable
	err := r.waitApproval(st, v)
	switch {
	case errors.As(err, &unavailable):
		f := failClosed(unavailable.reason)
		return f, agentOrchestrator, r.record(agentOrchestrator, verdictEvent(st.step, st.stepID, undoTool, f))
	case err != nil && context.Cause(r.ctx) != nil:
		// Cancelled (CancelRun), or its orchestrator stopping (Stop): the
		// approval is withdrawn, as a cancelled run's is, so no one
		// decides an undo that will not run.
		cause := context.Cause(r.ctx)
		rule, why := "orchestrator.cancelled", fmt.Sprintf("the rollback was cancelled while the undo waited for a human: %v", cause)
		var c errCancelled
		withdraw := errors.As(cause, &c)
		if errors.Is(cause, errRollbackStopped) {
			withdraw, c = true, errCancelled{by: agentOrchestrator, reason: cause.Error()}
			rule, why = "orchestrator.stopped", "the orchestrator stopped while the undo waited for a human: roll back again"
		}
		if withdraw && st.approvalRequested {
			decided, agent := r.withdraw(st, c) // cancel.go
			if rerr := r.record(agent, decided); rerr != nil {
				return nil, "", rerr
			}
			if decided.Decision != xctevent.ApprovalWithdrawn {
				why += fmt.Sprintf(" (the approval was %s by %s before it could be withdrawn; the undo did not run)", decided.Decision, decided.By)
			}
		}
		return deny(rule, why, wire.CodeApprovalRequired)
	case err != nil:
		return nil, "", err
	case st.decided == xctevent.ApprovalExpired:
		return deny("approval", "the undo needed a human approval and none was given before "+lctl.FormatTime(st.approvalExpires), wire.CodeApprovalExpired)
	}
	final, agent := r.validateSystem(st.step, st.stepID, st.ns)
	if final.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
		final.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
		final.Error = wire.Errorf(wire.CodeApprovalRequired, "the undo still needs an approval after a decision was recorded")
	}
	return final, agent, r.record(agent, verdictEvent(st.step, st.stepID, undoTool, final))
}

// settleUndos reads the run's chain as it is now and settles the undo
// steps of earlier rollbacks that may have acted without the chain saying
// so: an undo step with no outcome (its orchestrator stopped or lost the
// event log after, or before, calling the executor) and one whose error
// left its outcome unknown (its call failed in flight). The executor's
// record of each says what became of it; a fence proves that an undo
// which never reached the executor did not act, and never will. An open
// undo step gets its outcome and step_end on the chain. It returns the
// step ids of the targets a settled undo had undone, and the run as its
// chain was read (before those events). An undo whose record does not say
// yet (still running, in doubt, unreadable) refuses the rollback: undoing
// its target again could act twice, or fail on what the first undo did.
func (r *run) settleUndos(ctx context.Context) (map[string]bool, *xctv1.Run, error) {
	events, err := r.svc.events.ReadChain(ctx, r.id)
	if err != nil {
		return nil, nil, err
	}
	if uint64(len(events)) != r.writer.Seq() {
		return nil, nil, status.Errorf(codes.Aborted, "run %s changed while it was read (%d events, last seq %d); retry the rollback", r.id, len(events), r.writer.Seq())
	}
	view := xctevent.Fold(events)
	fresh := runRecord(view)
	settled := map[string]bool{}
	for _, st := range view.Steps {
		if st.Start.Tool != undoTool || !st.Attempted() || st.Result != nil {
			continue
		}
		open := st.Error == nil
		if !open && !unknownOutcome(errorSignal(*st.Error)) {
			continue
		}
		target, _ := st.Start.Arguments["step_id"].(string)
		ost := &openStep{step: st.Number(), stepID: st.Start.StepID, started: st.At}
		state, resp, rerr := r.readRecord(ost.stepID, r.fenceable(ost))
		if state != outcomeFinal {
			why := recordState(resp)
			if rerr != nil {
				why = "unreadable: " + status.Convert(rerr).Message()
			}
			if st.DoubtSeq == 0 && (state == outcomeDoubtful || status.Code(rerr) == codes.NotFound) {
				// Only a human can settle it: the chain says so, which
				// is what xct resolve's decision is bound to.
				ost.ns = &xctv1.NextStep{Tool: undoTool}
				doubt := wire.Errorf(wire.CodeInDoubt, "undo step %d (of step %s) may have acted, and its record is %s", st.Number(), target, why)
				if err := r.recordInDoubt(ost, doubt, resp); err != nil {
					return nil, nil, err
				}
			}
			return nil, nil, status.Errorf(codes.FailedPrecondition,
				"undo step %d of an earlier rollback (of step %s) may have acted, and its record does not say yet (%s): nothing was undone now; "+
					"retry once the record has the undo's outcome, or settle it with xct resolve %s %d", st.Number(), target, why, r.id, st.Number())
		}
		res := replay(resp.GetStep())
		if resp.GetStep().GetState() == xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED {
			settled[target] = true
		}
		if !open {
			continue // its error is on the chain; the record's outcome counts above
		}
		outcome, summary := xctevent.OutcomeSuccess, "ok"
		if e := res.GetResponse().GetError(); e != nil {
			outcome, summary = xctevent.OutcomeError, e.GetCode()+": "+e.GetMessage()
			err = r.record(agentExecutor, errorEvent(st.Number(), ost.stepID, e))
		} else {
			err = r.record(agentExecutor, toolCallEvent(st.Number(), ost.stepID, undoTool, st.Start.Arguments, res))
		}
		if err == nil {
			err = r.record(r.principal, xctevent.StepEnd{Step: st.Number(), StepID: ost.stepID, Outcome: outcome, OutputSummary: summary,
				DurationMS: durationMS(time.Since(st.At))})
		}
		if err != nil {
			return nil, nil, err
		}
		r.log.Info("undo of an earlier rollback settled from its record", "run", r.id, "step", st.Number(), "outcome", outcome)
	}
	return settled, fresh, nil
}
