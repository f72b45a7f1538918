package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
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
