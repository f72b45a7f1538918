package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/lctl/xctevent"
)

// A run started and not ended with no owner key is run by no orchestrator,
// and the owners watch (owners.go) cannot find it: nothing of it is in the
// bucket. It happens when a start's run_started lands after its append
// timed out and after a takeover that found no chain yet deleted its key
// (docs/lifecycle.md); a StartRun retry resumes it, but a client that
// never retries would leave it RUNNING for ever. So every OrphanScan each
// orchestrator lists the chains (per-subject counts, no events read) and
// the owner keys, and a chain that is a run, has no key and has not ended,
// seen so with the same last event for a whole lease (a loop that runs
// without its key claims it again within a third of one: owners.go
// renew), is claimed with a conditional create, under the claim guard
// every takeover takes, and resumed (reason "unowned").

// orphanSeen is a chain first seen started, unended and unowned.
type orphanSeen struct {
	seq   uint64    // its last event's seq then
	since time.Time // local, monotonic
}

// scanOrphans searches for orphaned runs every OrphanScan until ctx ends.
func (s *Service) scanOrphans(ctx context.Context) {
	if s.cfg.OrphanScan <= 0 {
		return
	}
	seen := map[string]orphanSeen{}
	notRuns := map[string]bool{} // chains of other LCTL writers
	t := time.NewTicker(s.cfg.OrphanScan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.findOrphans(ctx, seen, notRuns); err != nil && ctx.Err() == nil {
			s.log.Warn("could not search the event log for runs without an owner", "err", err)
		}
	}
}

// findOrphans is one search: chains seen unowned for a lease are claimed.
// Every read has its own deadline and the reads are made one after the
// other: a log of many chains costs time, not a burst.
func (s *Service) findOrphans(ctx context.Context, seen map[string]orphanSeen, notRuns map[string]bool) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	chains, err := s.events.Chains(cctx)
	cancel()
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	cctx, cancel = context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	defer cancel()
	keys, err := s.owners.ListKeys(cctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return err
	}
	if err == nil {
		for k := range keys.Keys() {
			owned[k] = true
		}
	}
	candidates := map[string]bool{}
	for id := range chains {
		if ctx.Err() != nil {
			return nil
		}
		if owned[id] || notRuns[id] || s.owns(id) {
			continue
		}
		if r, ok := s.runs.summary(id); ok && ended(r) {
			continue
		}
		if s.maybeOrphan(ctx, id, seen, notRuns) {
			candidates[id] = true
		}
	}
	for id := range seen {
		if !candidates[id] {
			delete(seen, id)
		}
	}
	return nil
}

// maybeOrphan looks at one chain without an owner key: whether it is still
// a candidate (a run, started, not ended, not claimed now).
func (s *Service) maybeOrphan(ctx context.Context, id string, seen map[string]orphanSeen, notRuns map[string]bool) bool {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	defer cancel()
	r, err := s.chainSummary(cctx, id)
	if err != nil {
		return false // gone, or unreadable now: the next search
	}
	if r == nil {
		notRuns[id] = true
		return false
	}
	if ended(r) {
		s.runs.putSummary(r)
		return false
	}
	o, ok := seen[id]
	if !ok || o.seq != r.GetLastSeq() {
		seen[id] = orphanSeen{seq: r.GetLastSeq(), since: time.Now()}
		return true
	}
	if time.Since(o.since) < s.cfg.RunLease {
		return true
	}
	// Seen unowned for a lease. Its ends may hide its end (a signed
	// checkpoint after run_finished, a rollback's events): read it whole.
	events, err := s.events.ReadChain(cctx, id)
	if err != nil || len(events) == 0 {
		return true
	}
	if r := runRecord(xctevent.Fold(events)); ended(r) {
		s.runs.putSummary(r)
		return false
	}
	delete(seen, id)
	go s.adoptOrphan(ctx, id)
	return false
}

// adoptOrphan claims a run found started, unended and unowned, and resumes
// it here (resume reads its chain again, under the claim: a run that ended
// meanwhile only loses the key).
func (s *Service) adoptOrphan(ctx context.Context, id string) {
	if !s.beginClaim(id) {
		return
	}
	defer s.endClaim(id)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	rev, err := s.owners.Create(cctx, id, encodeOwner(ownerRecord{Owner: s.instance}))
	cancel()
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			s.log.Warn("could not claim a run found without an owner", "run", id, "err", err)
		}
		return // owned again meanwhile, or tried at the next search
	}
	s.log.Warn("found a run started and not ended that no orchestrator owned: taking it over", "run", id)
	s.resumeClaimed(ctx, id, rev, "unowned", "")
}
