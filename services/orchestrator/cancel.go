package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// outcomeCancelled is the step_end outcome of a step that was open when
// its run was cancelled: it did not run.
const outcomeCancelled = xctevent.OutcomeCancelled

// cancelCause is the cause a CancelRun request gives the run: who asked,
// and why.
func cancelCause(ctx context.Context, reason string) errCancelled {
	by := ""
	if p, ok := auth.FromContext(ctx); ok {
		by = p.Name
	}
	if reason == "" {
		reason = "cancelled by request"
	}
	return errCancelled{reason: reason, by: by}
}

// stopWaiting ends a step whose approval wait stopped with err. When the
// run was cancelled, the step is closed on the chain so it is not left
// open: its approval is withdrawn at the validator (deciding it afterwards
// is refused) and recorded as withdrawn (approval_decided), and its
// step_end says "cancelled". err is returned as it is: the run still ends
// as cancelled.
func (r *run) stopWaiting(st *openStep, err error) error {
	var c errCancelled
	if !errors.As(err, &c) || st.decided != "" {
		return err
	}
	decided, agent := r.withdraw(st, c)
	if rerr := r.record(agent, decided); rerr != nil {
		return rerr
	}
	st.decided = decided.Decision
	summary := c.Error()
	if decided.Decision != xctevent.ApprovalWithdrawn {
		summary += fmt.Sprintf(" (the approval was %s by %s before it could be withdrawn; the step did not run)", decided.Decision, decided.By)
	}
	r.stepResult(outcomeCancelled, summary)
	if rerr := r.record(st.agent, st.end(outcomeCancelled, summary)); rerr != nil {
		return rerr
	}
	return err
}

// withdraw withdraws the pending approval of a step that will not run
// (its run or rollback cancelled, or its orchestrator stopping, c says
// by whom) and returns the approval_decided to record, with its agent:
// withdrawn, or what the validator holds instead. The validator
// withdraws only a pending approval (a revision-checked write), so a
// human's decision stored first stands, and the chain records that
// decision, as the validator's entry says it, never a withdrawal the
// validator did not make. A validator that cannot be reached is asked
// again, briefly (withdrawing is idempotent); one still unreachable
// leaves the entry pending: the chain says withdrawn, and an approval
// granted later allows nothing (no one asks for the step again).
func (r *run) withdraw(st *openStep, c errCancelled) (xctevent.ApprovalDecided, string) {
	ev := xctevent.ApprovalDecided{Step: st.step, StepID: st.stepID, Decision: xctevent.ApprovalWithdrawn, By: c.by, Reason: c.reason}
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	var resp *xctv1.WithdrawApprovalResponse
	var err error
	// Withdrawing is idempotent at the validator: a validator that is not
	// reachable (restarting, say) is asked again, briefly, so its entry
	// is not left pending for an approver while the chain says withdrawn.
	for wait := withdrawRetry; ; wait *= 2 {
		resp, err = r.svc.validator.WithdrawApproval(ctx, &xctv1.WithdrawApprovalRequest{
			RunId: r.id, StepId: st.stepID, By: c.by, Reason: c.reason,
		})
		if status.Code(err) != codes.Unavailable || wait >= 8*withdrawRetry || sleepCtx(ctx, wait) != nil {
			break
		}
	}
	cancel()
	if err != nil {
		r.log.Warn("approval of a step that will not run could not be withdrawn at the validator", "run", r.id, "step", st.step, "err", err)
		return ev, agentOrchestrator
	}
	a := resp.GetApproval()
	decision := map[xctv1.ApprovalState]string{
		xctv1.ApprovalState_APPROVAL_STATE_APPROVED: xctevent.ApprovalApproved,
		xctv1.ApprovalState_APPROVAL_STATE_DENIED:   xctevent.ApprovalDenied,
		xctv1.ApprovalState_APPROVAL_STATE_EXPIRED:  xctevent.ApprovalExpired,
	}[a.GetState()]
	switch {
	case decision != "":
		// Decided before the withdrawal reached it: recorded as
		// decideApproval records a decision.
		ev.Decision, ev.By, ev.Reason = decision, a.GetDecidedBy(), a.GetReason()
		r.log.Info("approval decided before it could be withdrawn", "run", r.id, "step", st.step, "decision", decision, "by", a.GetDecidedBy())
		if ev.By != "" {
			return ev, ev.By
		}
		return ev, agentOrchestrator
	case a.GetState() == xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN && a.GetDecidedBy() != "":
		// Withdrawn already (an earlier attempt's answer lost): as stored.
		ev.By, ev.Reason = a.GetDecidedBy(), a.GetReason()
	}
	return ev, agentOrchestrator
}

// withdrawRetry is the first pause before a withdrawal the validator
// could not take is tried again (doubling; four tries in all, within the
// call timeout).
const withdrawRetry = 100 * time.Millisecond

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Error is how a cancelled run ends: "cancelled by carol: REASON".
func (e errCancelled) Error() string {
	if e.by == "" {
		return "cancelled: " + e.reason
	}
	return fmt.Sprintf("cancelled by %s: %s", e.by, e.reason)
}

// cancelledStep is the outcome of a step whose allow verdict is on the
// chain when its run is found cancelled, before this owner sent an
// attempt: no attempt starts now. A step that no attempt can have reached
// (proposed by this owner, none sent) did not run; one resumed after a
// takeover, or already attempted, may have acted through an earlier call,
// so its outcome is read from the executor's record (fenced: a call still
// in flight then cannot act; a call running waits for its outcome, within
// the settle timeout), never started again.
func (r *run) cancelledStep(st *openStep) (stepOutcome, error) {
	c, _ := r.cancelled()
	if !st.resumed && !st.attempted {
		return stepOutcome{outcome: outcomeCancelled, summary: c.Error() + " (the step did not run)"}, nil
	}
	wait := 50 * time.Millisecond
	until := time.Now().Add(r.svc.cfg.SettleTimeout)
	fence := r.fenceable(st)
	for {
		state, resp, err := r.readRecord(st.stepID, fence)
		switch state {
		case outcomeFinal:
			return r.outcomeOf(st, replay(resp.GetStep()), nil), nil
		case outcomeRunning, outcomeUnknown:
			if state == outcomeRunning {
				fence = false // a record was read: its absence later proves nothing
			}
			if time.Now().Before(until) {
				time.Sleep(wait)
				wait = min(wait*2, r.svc.cfg.SettlePoll)
				continue
			}
		}
		why := recordState(resp)
		if err != nil {
			why = status.Convert(err).Message()
		}
		doubt := wire.WithDetails(wire.Errorf(wire.CodeInDoubt, "step %d (%s) may have acted before its run was cancelled and its outcome is unknown (its record: %s); decide with: xct resolve %s %d --outcome succeeded|failed",
			st.step, st.stepID, why, r.id, st.step), map[string]any{"step_id": st.stepID, "outcome_unknown": true})
		if !st.doubtRecorded {
			if err := r.recordInDoubt(st, doubt, resp); err != nil {
				return stepOutcome{}, err
			}
		}
		return stepOutcome{outcome: xctevent.OutcomeError, summary: doubt.GetCode() + ": " + doubt.GetMessage(), inDoubt: doubt,
			record: &pending{agent: agentOrchestrator, ev: errorEvent(st.step, st.stepID, doubt)}}, nil
	}
}

// closeOpen ends the step a cancelled run's chain leaves open (a run taken
// over with a cancel in its owner key), starting nothing: an outcome on
// the chain gets its step_end; a step not allowed yet ends cancelled (a
// pending approval withdrawn); an allowed one is settled from the
// executor's record (cancelledStep). Errors are the log's.
func (r *run) closeOpen(st *openStep) error {
	c, _ := r.cancelled()
	if st.invalid {
		return r.finishInvalid(st)
	}
	r.startStep(st.stepID, st.ns.GetTool())
	defer r.endStep()
	res := stepOutcome{outcome: st.outcome, summary: st.summary, inDoubt: st.inDoubt}
	allowed := st.verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
	switch {
	case res.outcome != "":
	case !allowed && st.approvalRequested && st.decided == "":
		if err := r.stopWaiting(st, c); !errors.As(err, &c) {
			return err
		}
		return nil
	case !allowed:
		res = stepOutcome{outcome: outcomeCancelled, summary: c.Error() + " (the step did not run)"}
	default:
		var err error
		if res, err = r.cancelledStep(st); err != nil {
			return err
		}
	}
	_, err := r.endStepRecord(st, st.verdict, res)
	if errors.Is(err, errLogLost) || errors.Is(err, eventlog.ErrConflict) {
		return err
	}
	return nil
}

// CancelRun implements OrchestratorService. The cancel is recorded in the
// run's owner key (owners.go) before anything else, where every owner and
// every takeover reads it, and answered only once the run's owner stopped
// its loop for it (it then starts no step: no step_start, no Execute), or
// the run has ended: on the owner that is at once; on another replica the
// owner sees it through its watch of the bucket (or its heartbeat) and
// says so in the key; a dead owner's takeover claims the key with the
// cancel seen and records the end instead of resuming. A cancel that could
// not be recorded is answered UNAVAILABLE and changes nothing.
func (s *Service) CancelRun(ctx context.Context, req *xctv1.CancelRunRequest) (*xctv1.CancelRunResponse, error) {
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	id := req.GetRunId()
	cur, err := s.lookup(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := mayCancel(ctx, cur.GetPrincipal()); err != nil {
		return nil, err
	}
	c := cancelCause(ctx, req.GetReason())
	r := s.owner(id)
	if r != nil && r.left == nil {
		// A rollback of the ended run, here: it stops at its next undo
		// (rollback.go).
		r.cancel(c)
		return &xctv1.CancelRunResponse{Run: fitRun(cur)}, nil
	}
	if !live(cur.GetStatus()) && !s.runs.unrecordedEnd(id) {
		// (a run whose end this process could not append is live on its
		// chain: a takeover would continue it, so it is cancelled)
		return nil, toStatus(fmt.Errorf("%w: %s is %s", ErrRunFinished, id, cur.GetStatus()))
	}
	cr := &cancelRequest{By: c.by, Reason: c.reason, At: time.Now().UTC()}
	owned := false
	if r != nil {
		if owned, err = s.cancelOwned(r, cr); err != nil {
			return nil, status.Errorf(codes.Unavailable, "the cancel of run %s was not recorded (%v): nothing changed; ask again", id, err)
		}
	}
	if !owned {
		if err := s.requestCancel(ctx, id, cr); err != nil {
			return nil, err
		}
	}
	return s.cancelAnswer(ctx, id, cur)
}

// cancelOwned records a cancel in the key of a run this process owns and
// stops its loop. false: the run is not this process's any more (the
// bucket decides: requestCancel).
func (s *Service) cancelOwned(r *run, cr *cancelRequest) (bool, error) {
	r.lease.mu.Lock()
	defer r.lease.mu.Unlock()
	if r.lease.rev == 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	had := r.lease.cancel
	if had == nil {
		r.lease.cancel = cr
	}
	for range 5 {
		rev, err := s.owners.Update(ctx, r.id, s.ownRecord(&r.lease), r.lease.rev)
		if err == nil {
			r.lease.rev = rev
			r.stopFor(r.lease.cancel.cause())
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			r.lease.cancel = had
			return false, err
		}
		// Another CancelRun wrote the key: its cancel stands (adopted).
		r.lease.cancel = had
		if ok, err := s.adoptLocked(ctx, r); !ok || err != nil {
			return false, err
		}
		if r.lease.cancel == nil {
			r.lease.cancel = cr
		}
	}
	r.lease.cancel = had
	return false, fmt.Errorf("the owner key of %s keeps changing", r.id)
}

// requestCancel records a cancel in the key of a run this process does not
// own, keeping its owner, and waits until the owner saw it (or a takeover
// claimed it with it), or the key is gone (the run ended). A run without a
// key (its start's key deleted before its run_started landed, orphans.go)
// gets one, released with the cancel: a replica claims it at once.
func (s *Service) requestCancel(ctx context.Context, id string, cr *cancelRequest) error {
	recorded := false
	for range 10 {
		kctx, cancel := context.WithTimeout(ctx, kvTimeout)
		e, err := s.owners.Get(kctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			_, err = s.owners.Create(kctx, id, encodeOwner(ownerRecord{Cancel: cr}))
		case err == nil:
			rec, ok := decodeOwner(e.Value())
			switch {
			case !ok:
				err = fmt.Errorf("unreadable owner record of %s", id)
			case rec.Cancel != nil:
				// Asked already: this cancel waits for the same end.
			default:
				rec.Cancel, rec.CancelSeen = cr, ""
				_, err = s.owners.Update(kctx, id, encodeOwner(rec), e.Revision())
			}
		}
		cancel()
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // the key changed meanwhile (a renewal): read it again
		}
		if err != nil {
			return status.Errorf(codes.Unavailable, "the cancel of run %s was not recorded (%v): nothing changed; ask again", id, err)
		}
		recorded = true
		break
	}
	if !recorded {
		return status.Errorf(codes.Unavailable, "the cancel of run %s was not recorded: its owner key keeps changing; ask again", id)
	}
	return s.awaitCancelSeen(ctx, id)
}

// awaitCancelSeen waits until the key of run id says its owner saw the
// cancel, or is gone, within two leases and a takeover.
func (s *Service) awaitCancelSeen(ctx context.Context, id string) error {
	bound := 2*s.cfg.RunLease + s.cfg.TakeoverTimeout
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	w, err := s.owners.Watch(wctx, id)
	if err != nil {
		return status.Errorf(codes.Unavailable, "the cancel of run %s is recorded, but whether its owner stopped cannot be followed (%v): ask again to wait for it", id, err)
	}
	defer func() { _ = w.Stop() }()
	owner := ""
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return status.Errorf(codes.Unavailable, "the cancel of run %s is recorded and no other orchestrator will resume the run, but its owner %s has not confirmed it within %s (it may still finish a step it has begun): ask again to wait for it", id, owner, bound)
		case e, ok := <-w.Updates():
			if !ok {
				return status.Errorf(codes.Unavailable, "the cancel of run %s is recorded, but the watch of its owner ended: ask again to wait for it", id)
			}
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				return nil // the run's end is on its chain
			}
			rec, ok := decodeOwner(e.Value())
			if ok && rec.acked() {
				return nil
			}
			owner = rec.Owner
		}
	}
}

// cancelAnswer answers a CancelRun whose cancel took hold: the run as it
// is now, or, when its end was on its chain before the cancel (its own
// end racing it), FAILED_PRECONDITION saying how it ended.
func (s *Service) cancelAnswer(ctx context.Context, id string, cur *xctv1.Run) (*xctv1.CancelRunResponse, error) {
	now, err := s.lookup(ctx, id)
	if err != nil {
		return &xctv1.CancelRunResponse{Run: fitRun(cur)}, nil //nolint:nilerr // the cancel is recorded; the run read before is the answer
	}
	if ended(now) && now.GetStatus() != xctv1.RunStatus_RUN_STATUS_CANCELLED && !s.runs.unrecordedEnd(id) {
		return nil, toStatus(fmt.Errorf("%w: %s ended %s before the cancel took hold: %s", ErrRunFinished, id, now.GetStatus(), now.GetMessage()))
	}
	return &xctv1.CancelRunResponse{Run: fitRun(now)}, nil
}
