package validator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl/xctevent"
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

// ErrChainUnreadable means the run's chain, read before a human's
// decision is taken, could not be read: the decision is not taken.
var ErrChainUnreadable = errors.New("the run's chain cannot be read")

// chainLog is the event log a decision reads the run's chain from, bound
// on first use (by message gets, eventlog.Log.ReadChainFrom: the
// validator may not make consumers on the event log).
type chainLog struct {
	mu  sync.Mutex
	log *eventlog.Log
	// checked is, per pending approval a list read the chain of, the
	// last event it read there (no withdrawal up to it): the next list
	// reads the chain from the event after it. Chains only grow, and a
	// withdrawal comes after every event read before it was recorded.
	// Decisions do not use it: they read from where the approval was
	// opened, each time.
	checked map[string]uint64
}

// maxChecked bounds chainLog.checked: past it, no more places are kept
// until a list of every run drops those of approvals no longer pending.
const maxChecked = 1 << 16

func checkedKey(a *xctv1.Approval) string { return a.GetRunId() + "\x00" + a.GetStepId() }

// checkedTo returns the last event of a's chain a list read (0: none).
func (s *Service) checkedTo(a *xctv1.Approval) uint64 {
	s.chains.mu.Lock()
	defer s.chains.mu.Unlock()
	return s.chains.checked[checkedKey(a)]
}

// setChecked records seq as the last event of a's chain read without a
// withdrawal of a; seq 0 forgets it.
func (s *Service) setChecked(a *xctv1.Approval, seq uint64) {
	s.chains.mu.Lock()
	defer s.chains.mu.Unlock()
	k := checkedKey(a)
	if seq == 0 {
		delete(s.chains.checked, k)
		return
	}
	if s.chains.checked == nil {
		s.chains.checked = map[string]uint64{}
	}
	if _, ok := s.chains.checked[k]; ok || len(s.chains.checked) < maxChecked {
		s.chains.checked[k] = seq
	}
}

// keepChecked drops the places of every approval not in pending (a list
// of every run's approvals).
func (s *Service) keepChecked(pending map[string]bool) {
	s.chains.mu.Lock()
	defer s.chains.mu.Unlock()
	for k := range s.chains.checked {
		if !pending[k] {
			delete(s.chains.checked, k)
		}
	}
}

// chainLog returns the event log, nil for a validator without NATS.
func (s *Service) chainLog(ctx context.Context) (*eventlog.Log, error) {
	if s.nc == nil {
		return nil, nil
	}
	s.chains.mu.Lock()
	defer s.chains.mu.Unlock()
	if s.chains.log == nil {
		l, err := eventlog.Bind(ctx, s.nc)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrChainUnreadable, err)
		}
		s.chains.log = l
	}
	return s.chains.log, nil
}

// chainSeqNow is the seq of the last event of run runID's chain now, which
// an approval opened now records (opened_at_seq): whatever decides it is
// recorded after it. 0 when the run has no chain or it cannot be read
// (the approval's decision then reads the chain whole).
func (s *Service) chainSeqNow(ctx context.Context, runID string) uint64 {
	log, err := s.chainLog(ctx)
	if log == nil || err != nil {
		return 0
	}
	seq, err := log.LastSeq(ctx, runID)
	if err != nil {
		if !errors.Is(err, eventlog.ErrChainNotFound) {
			s.log.Warn("the run's chain could not be read when its approval was opened; deciding it will read the chain whole", "run_id", runID, "err", err)
		}
		return 0
	}
	return seq
}

// withdrawnOnChain reports how the run's chain says the approval of
// step a was withdrawn, or nil when it does not (no chain: a validator
// without NATS, or approvals opened without a run). The orchestrator
// records the withdrawal of a cancelled run's approval on the chain, and
// asks the validator to withdraw it too; a validator down longer than the
// orchestrator tries leaves its entry pending, which a decision would
// then take while the chain says withdrawn. So a decision looks at the
// chain first, read from the event the approval was opened after
// (opened_at_seq): the withdrawal is recorded after the orchestrator
// opened the approval and waited for it. The chain is read from JetStream
// each time, never from a copy a reader of the chain could have fed.
func (s *Service) withdrawnOnChain(ctx context.Context, a *xctv1.Approval) (*xctevent.ApprovalDecided, error) {
	d, _, err := s.withdrawnFrom(ctx, a, a.GetOpenedAtSeq())
	return d, err
}

// withdrawnFrom is withdrawnOnChain reading the chain from event from
// (at or after where the approval was opened), and the last event read
// (0: none). A chain that ends before from, when from is past where the
// approval was opened, has nothing new: not withdrawn.
func (s *Service) withdrawnFrom(ctx context.Context, a *xctv1.Approval, from uint64) (*xctevent.ApprovalDecided, uint64, error) {
	log, err := s.chainLog(ctx)
	if log == nil || err != nil {
		return nil, 0, err
	}
	events, err := log.ReadChainFrom(ctx, a.GetRunId(), from)
	if errors.Is(err, eventlog.ErrChainNotFound) && from == 0 {
		return nil, 0, nil
	}
	if errors.Is(err, eventlog.ErrEventNotFound) && from > a.GetOpenedAtSeq() && from > 1 {
		return nil, from - 1, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrChainUnreadable, err)
	}
	var withdrawn *xctevent.ApprovalDecided
	for i := range events {
		if events[i].Type != xctevent.TypeApprovalDecided {
			continue
		}
		if d, ok := xctevent.Parse(&events[i]).(xctevent.ApprovalDecided); ok && d.StepID == a.GetStepId() && d.Decision == xctevent.ApprovalWithdrawn {
			withdrawn = &d
		}
	}
	var last uint64
	if len(events) > 0 {
		last = events[len(events)-1].Seq
	}
	return withdrawn, last, nil
}

// withdrawAsChained makes a pending approval that the run's chain shows
// withdrawn withdrawn at the validator too (who and why as the chain
// says), and returns why it cannot be decided.
func (s *Service) withdrawAsChained(ctx context.Context, store *approvalStore, sa storedApproval, d *xctevent.ApprovalDecided) error {
	cur, err := s.withdrawChained(ctx, store, sa, d)
	if err != nil {
		return err
	}
	if derr := decidable(cur); derr != nil {
		return derr
	}
	return fmt.Errorf("%w: it changed while this decision was made; look again", ErrApprovalDecided)
}

// withdrawChained stores a pending approval as withdrawn as the run's
// chain says (d) and returns it. A conflict (the entry changed meanwhile)
// returns the entry as it is now.
func (s *Service) withdrawChained(ctx context.Context, store *approvalStore, sa storedApproval, d *xctevent.ApprovalDecided) (*xctv1.Approval, error) {
	w := proto.CloneOf(sa.a)
	w.State = xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN
	w.DecidedAt = timestamppb.New(s.now())
	w.DecidedBy = truncate(strings.TrimSpace(d.By), maxApproverBytes)
	w.Reason = truncate(strings.TrimSpace(d.Reason), maxDecisionReason)
	if err := store.update(ctx, w, sa.rev); err != nil {
		if errors.Is(err, errApprovalConflict) {
			cur, _, gerr := store.get(ctx, w.GetRunId(), w.GetStepId())
			return cur, gerr
		}
		return nil, err
	}
	s.log.Warn("approval withdrawn as the run's chain says (the orchestrator's withdrawal did not reach the validator)", "run_id", w.GetRunId(),
		"step", w.GetStep(), "step_id", w.GetStepId(), "by", w.GetDecidedBy())
	return w, nil
}
