package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/eventlog"
)

// A StartRun that failed halfway must not leave its run id unusable: a
// client that retries it (as UNAVAILABLE tells it to) gets the run, not
// ALREADY_EXISTS for a run that has no chain.

// claimStart claims a new run's owner key. A key that exists for a run
// with no chain is the leftover of a start that failed after its claim
// (its run_started was never appended): this instance's own leftover, or a
// released one, is taken over; another live instance's is a start in
// progress or one that failed there, which the caller may retry (it is
// cleared within a run lease, by the takeover that finds no chain).
func (s *Service) claimStart(ctx context.Context, id string) (uint64, error) {
	rev, err := s.claimNew(ctx, id)
	if err == nil || !errors.Is(err, ErrRunExists) {
		if err != nil {
			s.dropOwnLeftover(id) // the create may have landed unseen
		}
		return rev, err
	}
	kctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	entry, gerr := s.owners.Get(kctx, id)
	if errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return s.claimNew(ctx, id) // deleted meanwhile
	}
	if gerr != nil {
		return 0, fmt.Errorf("%w: read the owner of %s: %w", errLogLost, id, gerr)
	}
	if _, lerr := s.events.LastSeq(kctx, id); !errors.Is(lerr, eventlog.ErrChainNotFound) {
		if lerr != nil {
			return 0, fmt.Errorf("%w: read chain %s: %w", errLogLost, id, lerr)
		}
		return 0, err // a run with a chain: it exists
	}
	rec, _ := decodeOwner(entry.Value())
	if rec.Owner != "" && rec.Owner != s.instance {
		return 0, status.Errorf(codes.Unavailable,
			"run %s is claimed by orchestrator %s but has no chain yet: a start in progress there, or one that failed (cleared within %v); retry",
			id, rec.Owner, s.cfg.RunLease)
	}
	rev, uerr := s.owners.Update(kctx, id, encodeOwner(ownerRecord{Owner: s.instance}), entry.Revision())
	if uerr != nil {
		return 0, status.Errorf(codes.Unavailable, "run %s: its unfinished start could not be taken over (%v); retry", id, uerr)
	}
	s.log.Info("run start retried: took over the owner key its failed start left", "run", id)
	return rev, nil
}

// dropOwnLeftover deletes the run's owner key if it names this instance
// and the run is not running here: a claim whose answer was lost.
func (s *Service) dropOwnLeftover(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	entry, err := s.owners.Get(ctx, id)
	if err != nil {
		return
	}
	if rec, ok := decodeOwner(entry.Value()); ok && rec.Owner == s.instance {
		_ = s.owners.Delete(ctx, id, jetstream.LastRevision(entry.Revision()))
	}
}

// abandonStart deletes the owner key of a run whose start failed after its
// claim, at the revision the lease holds now: the heartbeat may have
// renewed it since the claim.
func (s *Service) abandonStart(r *run) {
	r.lease.mu.Lock()
	defer r.lease.mu.Unlock()
	if r.lease.rev == 0 {
		return
	}
	if err := s.disown(r.id, r.lease.rev); err != nil {
		s.log.Warn("run not started but its owner key stays (a retry takes it over)", "run", r.id, "err", err)
	}
	r.lease.rev = 0
}

// appendMayHaveLanded reports whether a failed append may have been
// stored all the same: the stream did not answer in time, or the
// connection broke after the write was sent. It was not when the stream
// refused it (another writer's event at its place, an error the stream
// answered with), when no stream received it (no responders), or when it
// was never sent (its deadline had passed).
func appendMayHaveLanded(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, eventlog.ErrConflict), errors.Is(err, eventlog.ErrNotSent), errors.As(err, &apiErr),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return false
	}
	return true
}

// resumeUnowned resumes the run whose chain r's start found, with the
// owner key r's claim holds: an ended run's key is deleted, a started one
// goes on here (a takeover, reason "unowned"). If it cannot be resumed
// now, the key is left to expire and a takeover tries again.
func (s *Service) resumeUnowned(ctx context.Context, r *run) {
	r.lease.mu.Lock()
	rev := r.lease.rev
	r.lease.rev = 0
	r.lease.mu.Unlock()
	if rev == 0 || !s.beginClaim(r.id) {
		return // a takeover here is at it already
	}
	defer s.endClaim(r.id)
	if err := s.resumeRetried(context.WithoutCancel(ctx), r.id, rev, "unowned", "", nil); err != nil {
		s.log.Warn("a run found on the chain without an owner could not be resumed now; its claim is left for a takeover", "run", r.id, "err", err)
	}
}
