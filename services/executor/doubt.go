package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// A human's decision about a step (ResolveStep) settles a doubt the run's
// chain shows: the orchestrator, the chain's one writer, records
// step_in_doubt when it cannot learn a step's outcome and waits for a
// decision. A step waiting for its approval, executing, or settled is not
// in doubt on its chain, so no decision is taken for it, whatever the
// executor's record or anyone's clock says; and a decision names the
// step_in_doubt it settles, so it cannot stand for a later attempt's
// doubt (a new step_in_doubt after the attempt's verdict).

// chainReader reads a run's chain (eventlog.Log: by message gets, since
// the executor may not make consumers on the event log).
type chainReader interface {
	ReadChainByGets(ctx context.Context, chainID string) ([]lctl.Event, error)
	ReadChainFrom(ctx context.Context, chainID string, from uint64) ([]lctl.Event, error)
}

// chains is the event log the executor reads runs' chains from, bound on
// first use (the stream may be made after the executor starts).
type chains struct {
	mu  sync.Mutex
	log chainReader
}

// reader returns the event log, or nil for an executor without NATS
// (unit tests: step records in memory, no chains).
func (s *Service) chainReader(ctx context.Context) (chainReader, error) {
	s.chains.mu.Lock()
	defer s.chains.mu.Unlock()
	if s.chains.log != nil || s.nc == nil {
		return s.chains.log, nil
	}
	l, err := eventlog.Bind(ctx, s.nc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrChainUnreadable, err)
	}
	s.chains.log = l
	return l, nil
}

// chainDoubt is the seq of the step_in_doubt of step stepID that run
// runID's chain leaves unsettled: ErrNotInDoubt when the chain does not
// show the step in doubt now. named is the step_in_doubt the decision
// names (0: none named): the chain is read from it on, not whole, since
// what settles or supersedes that doubt can only come after it (a
// verdict for another attempt, the step's outcome or end, another
// step_in_doubt); a decision about a step of a long run reads the few
// events after its doubt, not the run. A decision naming another event
// reads the chain whole, to say where the step is.
func chainDoubt(ctx context.Context, chains chainReader, runID, stepID string, named uint64) (uint64, error) {
	view, err := chainView(ctx, chains, runID, stepID, named)
	if err != nil {
		return 0, err
	}
	for i := len(view.Steps) - 1; i >= 0; i-- {
		st := view.Steps[i]
		if st.Start.StepID != stepID {
			continue
		}
		if st.DoubtSeq == 0 {
			return 0, fmt.Errorf("%w: run %s's chain does not show step %d (%s) in doubt now (%s): a decision settles a step in doubt, "+
				"not one waiting for its verdict or approval, executing, or settled", ErrNotInDoubt, runID, st.Number(), stepID, chainState(st))
		}
		return st.DoubtSeq, nil
	}
	return 0, fmt.Errorf("%w: run %s's chain has no step %s", ErrNotInDoubt, runID, stepID)
}

// chainView folds what run runID's chain says of step stepID: from the
// step_in_doubt named on, when it is the step's (the step it is about
// stands for the step_start before it, which is not read: the
// orchestrator, the chain's one writer, records a step_in_doubt with the
// number and id of its step); else, or with none named, the whole chain,
// whose fold says where the step is for the refusal.
func chainView(ctx context.Context, chains chainReader, runID, stepID string, named uint64) (*xctevent.Run, error) {
	if named != 0 {
		events, err := chains.ReadChainFrom(ctx, runID, named)
		if err == nil {
			if x, ok := xctevent.Parse(&events[0]).(xctevent.StepInDoubt); ok && x.StepID == stepID {
				view := &xctevent.Run{Steps: []*xctevent.Step{{Start: xctevent.StepStart{Step: x.Step, StepID: x.StepID}}}}
				for i := range events {
					view.Apply(&events[i])
				}
				return view, nil
			}
		} else if !errors.Is(err, eventlog.ErrEventNotFound) {
			return nil, chainError(runID, err)
		}
	}
	events, err := chains.ReadChainByGets(ctx, runID)
	if err != nil {
		return nil, chainError(runID, err)
	}
	return xctevent.Fold(events), nil
}

// chainError is why a run's chain could not be read for a decision.
func chainError(runID string, err error) error {
	var bad *lctl.VerifyError
	switch {
	case errors.Is(err, eventlog.ErrChainNotFound):
		return fmt.Errorf("%w: there is no run %s", ErrNotInDoubt, runID)
	case errors.As(err, &bad):
		return fmt.Errorf("%w: run %s's chain does not verify: %w", ErrChainUnreadable, runID, err)
	}
	return fmt.Errorf("%w: %w", ErrChainUnreadable, err)
}

// chainState says where a step not in doubt is, as its chain tells.
func chainState(st *xctevent.Step) string {
	switch {
	case st.Ended():
		return "ended " + st.End.Outcome
	case st.Result != nil || st.Error != nil:
		return "its outcome recorded"
	case st.Requested != nil && st.Decided == nil:
		return "waiting for its approval"
	case st.Attempted():
		return "allowed, executing"
	}
	return "not yet allowed"
}

// mayRelease refuses (ErrSelfRelease) a retry of step stepID of run runID
// by who, when a human approved the step and who is the principal the
// approval was asked for (the run's, or the one rolling it back for an
// undo) or a name that looks like it (auth.LookAlike). The validator
// counts an approval for its step id again when the step is proposed
// again, so a retry is another run of the step on the one approval: the
// two-person rule that keeps that principal from approving keeps it from
// releasing. Another operator decides. A step no human approved is as
// the policy allows it, and its run's principal may release it. An
// executor without chains (no NATS) checks nothing.
func (s *Service) mayRelease(ctx context.Context, runID, stepID, who string) error {
	chains, err := s.chainReader(ctx)
	if err != nil || chains == nil {
		return err
	}
	view, err := chainView(ctx, chains, runID, stepID, 0)
	if err != nil {
		return err
	}
	for _, st := range view.Steps {
		if st.Start.StepID != stepID || st.Decided == nil || st.Decided.Decision != xctevent.ApprovalApproved {
			continue
		}
		asked := []string{view.Started.Principal}
		if st.Requested != nil {
			asked = append(asked, st.Requested.RequestedBy)
		}
		for _, p := range asked {
			if p != "" && auth.LookAlike(who, p) {
				return fmt.Errorf("%w: step %d (%s) of run %s was approved by %s on a request for %s; another operator decides whether it runs again",
					ErrSelfRelease, st.Number(), stepID, runID, st.Decided.By, p)
			}
		}
	}
	return nil
}
