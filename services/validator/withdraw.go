package validator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// ErrApprovalWithdrawn means the approval's run was cancelled while it
// waited: there is nothing left to decide.
var ErrApprovalWithdrawn = fmt.Errorf("%w: it was withdrawn", ErrApprovalDecided)

// withdrawnError is why a withdrawn approval cannot be decided.
func withdrawnError(a *xctv1.Approval) error {
	return fmt.Errorf("%w when run %s was cancelled by %s at %s (%s); nothing will run",
		ErrApprovalWithdrawn, a.GetRunId(), a.GetDecidedBy(), a.GetDecidedAt().AsTime().UTC().Format(time.RFC3339), a.GetReason())
}

// WithdrawApproval marks a step's pending approval withdrawn: the
// orchestrator stopped waiting for it because the run was cancelled. Only
// XCT's services call it (the authorization table). It is idempotent: an
// approval already decided, expired or withdrawn is returned as stored.
func (s *Service) WithdrawApproval(ctx context.Context, req *xctv1.WithdrawApprovalRequest) (*xctv1.WithdrawApprovalResponse, error) {
	store := s.approvals.Load()
	if store == nil {
		return nil, approvalStatus(ErrApprovalsUnavailable)
	}
	if err := s.approvalCaller(ctx); err != nil {
		return nil, approvalStatus(err)
	}
	switch {
	case !validKeyToken(req.GetRunId()):
		return nil, approvalStatus(ErrBadRunID)
	case !validKeyToken(req.GetStepId()):
		return nil, approvalStatus(ErrBadStepID)
	}
	by := truncate(strings.TrimSpace(req.GetBy()), maxApproverBytes)
	reason := truncate(strings.TrimSpace(req.GetReason()), maxDecisionReason)
	for attempt := 0; attempt < 5; attempt++ {
		a, rev, err := store.get(ctx, req.GetRunId(), req.GetStepId())
		if err != nil {
			return nil, approvalStatus(err)
		}
		if a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
			return &xctv1.WithdrawApprovalResponse{Approval: a}, nil
		}
		w := proto.CloneOf(a)
		w.State = xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN
		w.DecidedAt = timestamppb.New(s.now())
		w.DecidedBy = by
		w.Reason = reason
		err = store.update(ctx, w, rev)
		if errors.Is(err, errApprovalConflict) {
			continue // decided meanwhile: look again
		}
		if err != nil {
			return nil, approvalStatus(err)
		}
		s.log.Info("approval withdrawn", "run_id", a.GetRunId(), "step", a.GetStep(), "step_id", a.GetStepId(), "by", by, "reason", s.redactor.Load().Text(reason))
		return &xctv1.WithdrawApprovalResponse{Approval: w}, nil
	}
	return nil, approvalStatus(fmt.Errorf("%w: it kept changing while it was withdrawn", ErrApprovalDecided))
}
