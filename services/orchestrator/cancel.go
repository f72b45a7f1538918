package orchestrator

import (
	"context"
	"errors"
	"fmt"

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
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	_, werr := r.svc.validator.WithdrawApproval(ctx, &xctv1.WithdrawApprovalRequest{
		RunId: r.id, StepId: st.stepID, By: c.by, Reason: c.reason,
	})
	cancel()
	if werr != nil {
		// The chain still says it is withdrawn, and the run is over: an
		// approval granted now allows nothing (no one asks for the step).
		r.log.Warn("approval of a cancelled run could not be withdrawn at the validator", "run", r.id, "step", st.step, "err", werr)
	}
	if rerr := r.record(agentOrchestrator, xctevent.ApprovalDecided{
		Step: st.step, StepID: st.stepID, Decision: xctevent.ApprovalWithdrawn, By: c.by, Reason: c.reason,
	}); rerr != nil {
		return rerr
	}
	st.decided = xctevent.ApprovalWithdrawn
	summary := c.Error()
	r.stepResult(outcomeCancelled, summary)
	if rerr := r.record(st.agent, st.end(outcomeCancelled, summary)); rerr != nil {
		return rerr
	}
	return err
}

// Error is how a cancelled run ends: "cancelled by carol: REASON".
func (e errCancelled) Error() string {
	if e.by == "" {
		return "cancelled: " + e.reason
	}
	return fmt.Sprintf("cancelled by %s: %s", e.by, e.reason)
}
