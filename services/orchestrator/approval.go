package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// ApprovalsBucket is the KV bucket where the validator keeps approvals; the
// orchestrator only watches it.
const ApprovalsBucket = "XCT_APPROVALS"

// awaitApproval handles a needs-approval verdict: it opens the approval at
// the validator, records that the step waits, waits for a human (or the
// expiry, or a cancellation), records the decision, and asks the validator
// again — the validator, not this process, turns a granted approval into an
// allow. It returns the final verdict, already recorded.
//
// A step resumed from another orchestrator's chain enters where that chain
// stops: its approval is asked for again (the validator returns the one it
// holds for the step id), approval_requested is not recorded twice, and a
// decision already on the chain is not waited for again.
func (r *run) awaitApproval(st *openStep, v *xctv1.Verdict) (*xctv1.Verdict, string, error) {
	step, stepID, ns := st.step, st.stepID, st.ns
	if st.decided == "" {
		var unavailable errApprovalUnavailable
		err := r.waitApproval(st, v)
		if errors.As(err, &unavailable) {
			deny := failClosed(unavailable.reason)
			return deny, agentOrchestrator, r.record(agentOrchestrator, verdictEvent(step, stepID, ns.GetTool(), deny))
		}
		if err != nil {
			return nil, "", err
		}
	}
	if st.decided == xctevent.ApprovalExpired {
		final := &xctv1.Verdict{
			Decision:      xctv1.VerdictDecision_VERDICT_DECISION_DENY,
			Reasons:       []*xctv1.Reason{{RuleId: "approval", Message: "no one decided before the approval expired"}},
			PolicyVersion: v.GetPolicyVersion(),
			EvaluatedAt:   nowpb(),
			Error:         wire.Errorf(wire.CodeApprovalExpired, "the step needed a human approval and none was given before %s", lctl.FormatTime(st.approvalExpires)),
		}
		return final, agentOrchestrator, r.record(agentOrchestrator, verdictEvent(step, stepID, ns.GetTool(), final))
	}
	return r.revalidate(step, stepID, ns)
}

// waitApproval opens the step's approval (or finds it open), records that
// the step waits, waits for the decision and records it in st.decided. A
// policy that no longer wants a human, or an approval that cannot be
// opened, is recorded as the final verdict and ends the wait: st.verdict
// and st.decided tell which.
func (r *run) waitApproval(st *openStep, v *xctv1.Verdict) error {
	step, stepID, ns := st.step, st.stepID, st.ns
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	sent := r.redactPreview(r.preview(ns))
	resp, err := r.svc.validator.RequestApproval(ctx, &xctv1.RequestApprovalRequest{
		Run: r.runContext(step), Step: int32(step), StepId: stepID, Proposal: ns, Verdict: v,
		Preview: sent, Crew: r.crewContext(ns),
	})
	cancel()
	if status.Code(err) == codes.FailedPrecondition {
		// The policy changed between the verdict and the request and no
		// longer wants a human: ask for a verdict again.
		st.decided = "unneeded"
		return nil
	}
	if err != nil {
		return errApprovalUnavailable{fmt.Sprintf("the approval could not be opened: %v", err)}
	}
	a := resp.GetApproval()
	st.approvalExpires = a.GetExpiresAt().AsTime()
	// Also on a resumed step: its digest is a secret of the step again.
	base := r.chainBase(a.GetPreview(), sent)
	if st.approvalRequested {
		r.log.Info("step still waits for approval", "run", r.id, "step", step, "tool", ns.GetTool(), "expires_at", st.approvalExpires)
		return r.decideApproval(st, a)
	}
	requested := xctevent.ApprovalRequested{
		Step: step, StepID: stepID, Tool: ns.GetTool(), RequestedBy: a.GetRequestedBy(),
		ExpiresAt: lctl.FormatTime(a.GetExpiresAt().AsTime()),
	}
	if p := a.GetPreview(); p != nil {
		requested.Preview = &xctevent.Preview{Kind: p.GetKind(), Content: p.GetContent(), Base: base}
	}
	if err := r.record(agentOrchestrator, requested); err != nil {
		return err
	}
	st.approvalRequested = true
	r.log.Info("step waits for approval", "run", r.id, "step", step, "tool", ns.GetTool(), "expires_at", a.GetExpiresAt().AsTime())
	return r.decideApproval(st, a)
}

// decideApproval waits for the decision of an open approval and records it.
func (r *run) decideApproval(st *openStep, a *xctv1.Approval) error {
	decided, err := r.waitForDecision(a)
	if err != nil {
		return err
	}
	by := decided.GetDecidedBy()
	if by == "" {
		by = agentOrchestrator
	}
	decision := map[xctv1.ApprovalState]string{
		xctv1.ApprovalState_APPROVAL_STATE_APPROVED: xctevent.ApprovalApproved,
		xctv1.ApprovalState_APPROVAL_STATE_DENIED:   xctevent.ApprovalDenied,
	}[decided.GetState()]
	if decision == "" {
		decision = xctevent.ApprovalExpired
	}
	if err := r.record(by, xctevent.ApprovalDecided{
		Step: st.step, StepID: st.stepID, Decision: decision, By: decided.GetDecidedBy(), Reason: decided.GetReason(),
	}); err != nil {
		return err
	}
	st.decided = decision
	return nil
}

// errApprovalUnavailable: the approval could not be opened; the step is
// denied (fail closed).
type errApprovalUnavailable struct{ reason string }

func (e errApprovalUnavailable) Error() string { return e.reason }

// revalidate asks the validator again after an approval was decided and
// records its verdict. A validator that still wants a human is refused,
// not waited on in a loop.
func (r *run) revalidate(step int, stepID string, ns *xctv1.NextStep) (*xctv1.Verdict, string, error) {
	final, agent := r.validate(step, stepID, ns)
	if final.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
		final.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
		final.Error = wire.Errorf(wire.CodeApprovalRequired, "the step still needs an approval after a decision was recorded")
	}
	return final, agent, r.record(agent, verdictEvent(step, stepID, ns.GetTool(), final))
}

// preview asks the executor for a dry run of the step, for the approver.
// A tool without one, or an executor that cannot answer, gives none: the
// approver then decides from the proposal alone.
func (r *run) preview(ns *xctv1.NextStep) *xctv1.Preview {
	ctx, cancel := context.WithTimeout(context.Background(), r.svc.cfg.CallTimeout)
	defer cancel()
	resp, err := r.svc.executor.PreviewStep(ctx, &xctv1.PreviewStepRequest{Tool: ns.GetTool(), Arguments: ns.GetArguments()})
	if err != nil {
		r.log.Warn("no preview for the approver", "run", r.id, "tool", ns.GetTool(), "err", err)
		return nil
	}
	return resp.GetPreview()
}

// waitForDecision watches the approval's KV entry until it is decided, it
// expires, or the run is cancelled.
func (r *run) waitForDecision(a *xctv1.Approval) (*xctv1.Approval, error) {
	key := a.GetRunId() + "." + a.GetStepId()
	kv, err := r.svc.events.JetStream().KeyValue(r.ctx, ApprovalsBucket)
	if err != nil {
		return nil, r.cancelledOr(fmt.Errorf("%w: approvals bucket: %w", errLogLost, err))
	}
	watcher, err := kv.Watch(r.ctx, key)
	if err != nil {
		return nil, r.cancelledOr(fmt.Errorf("%w: watch approval: %w", errLogLost, err))
	}
	defer func() { _ = watcher.Stop() }()
	// expires_at is the validator's clock, which may be behind this
	// orchestrator's: at this one's deadline the validator is asked (see
	// expiredAtValidator), and the wait goes on while it still holds the
	// approval pending. Recording "expired" by this clock alone told the
	// chain the step was denied while the validator went on taking the
	// approver's decision.
	expiry := time.NewTimer(time.Until(a.GetExpiresAt().AsTime()))
	defer expiry.Stop()
	again := 250 * time.Millisecond
	for {
		select {
		case <-r.ctx.Done():
			return nil, context.Cause(r.ctx)
		case <-r.release:
			// Handed over: the next owner waits for the same approval.
			return nil, errReleased
		case <-expiry.C:
			if cur, ok := r.expiredAtValidator(a); ok {
				return cur, nil
			}
			expiry.Reset(again)
			again = min(2*again, r.svc.cfg.SettlePoll)
		case entry, ok := <-watcher.Updates():
			if !ok {
				// The watch ends when the run's context does (it was
				// made with it): a cancel can close it before the
				// select sees the context done.
				return nil, r.cancelledOr(fmt.Errorf("%w: approval watch ended", errLogLost))
			}
			if entry == nil || entry.Operation() != jetstream.KeyValuePut {
				continue
			}
			if cur, ok := decodeApproval(entry.Value()); ok && decidedState(cur.GetState()) {
				return cur, nil
			}
		}
	}
}

// expiredAtValidator asks the validator for the approval a once this
// orchestrator's clock is past its expires_at: the validator marks an
// approval whose time has passed by its own clock EXPIRED when it lists
// it, so the answer is decided (a decision stored just before the
// deadline, or the expiry) or still pending (the validator's clock is
// behind this one). ok is false while it is pending or the validator
// cannot be asked: the caller waits and asks again, since the approver
// may still be told yes. An approval no decision can come to any more
// (withdrawn, or gone from the validator) ends the wait as not given.
func (r *run) expiredAtValidator(a *xctv1.Approval) (*xctv1.Approval, bool) {
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	defer cancel()
	resp, err := r.svc.validator.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: a.GetRunId(), All: true})
	if err != nil {
		r.log.Warn("the approval's time is past on this clock, and the validator cannot say whether it expired; asking again",
			"run", r.id, "step_id", a.GetStepId(), "expires_at", a.GetExpiresAt().AsTime(), "err", err)
		return nil, false
	}
	for _, cur := range resp.GetApprovals() {
		if cur.GetStepId() != a.GetStepId() {
			continue
		}
		if cur.GetState() == xctv1.ApprovalState_APPROVAL_STATE_PENDING {
			r.log.Info("the approval's time is past on this clock, not yet on the validator's: waiting on",
				"run", r.id, "step_id", a.GetStepId(), "expires_at", a.GetExpiresAt().AsTime())
			return nil, false
		}
		if decidedState(cur.GetState()) {
			return cur, true // decided, or expired by the validator's clock
		}
		break // withdrawn: no decision will come
	}
	// Withdrawn, or gone from the validator: no decision can come to it.
	return &xctv1.Approval{State: xctv1.ApprovalState_APPROVAL_STATE_EXPIRED}, true
}

// cancelledOr returns the run's cancellation when it was cancelled (a call
// that failed because of it must not read as a lost log), err otherwise.
func (r *run) cancelledOr(err error) error {
	if cause := context.Cause(r.ctx); cause != nil {
		return cause
	}
	return err
}

func decodeApproval(raw []byte) (*xctv1.Approval, bool) {
	a := &xctv1.Approval{}
	if err := protojson.Unmarshal(raw, a); err != nil {
		return nil, false
	}
	return a, true
}

func decidedState(s xctv1.ApprovalState) bool {
	return s == xctv1.ApprovalState_APPROVAL_STATE_APPROVED || s == xctv1.ApprovalState_APPROVAL_STATE_DENIED || s == xctv1.ApprovalState_APPROVAL_STATE_EXPIRED
}

// failClosed is the verdict when the validator cannot be asked.
func failClosed(reason string) *xctv1.Verdict {
	return &xctv1.Verdict{
		Decision:    xctv1.VerdictDecision_VERDICT_DECISION_DENY,
		Reasons:     []*xctv1.Reason{{RuleId: "orchestrator.fail-closed", Message: reason}},
		EvaluatedAt: nowpb(),
		Error:       wire.Errorf(wire.CodeValidatorUnavailable, "%s; the step was not executed", reason),
	}
}
