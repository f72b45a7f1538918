package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// A run started and not ended with no owner key is run by no orchestrator,
// and the owners watch (owners.go) cannot find it: nothing of it is in the
// bucket. It happens when a start's run_started lands after its append
// timed out and after a takeover that found no chain yet deleted its key
// (docs/lifecycle.md); a StartRun retry resumes it, but a client that
// never retries would leave it RUNNING for ever.
//
// So every run that may be live has an index entry: a key live.<run id>
// in the owners bucket (run ids have no dots, so no owner key is named
// so). StartRun writes it before the run's run_started, a takeover that
// finds no chain writes it again before deleting the owner key (so a run
// started by an orchestrator that wrote none is covered too), and it goes
// once the run's end is on its chain. Every OrphanScan each orchestrator
// lists the entries (O(live runs), never the chains of the stream) and
// reads the chain of each entry without an owner key: one whose run
// ended is a stale entry (its writer died between the end and the
// entry's removal) and is removed; one that has not ended, seen so with
// the same last event for a whole lease (a loop that runs without its
// key claims it again within a third of one: owners.go renew), is
// claimed with a conditional create, under the claim guard every
// takeover takes, and resumed (reason "unowned"). An entry whose chain
// does not exist yet is kept for liveForget (its run_started may still
// land): a stale entry costs a check, never a missed orphan.

// livePrefix starts the index entry of a run that may be live.
const livePrefix = "live."

// liveForget is how long an entry with no chain and no owner key is kept:
// far past any append still on its way.
const liveForget = time.Hour

// orphanSeen is a chain first seen started, unended and unowned.
type orphanSeen struct {
	seq   uint64    // its last event's seq then
	since time.Time // local, monotonic
}

// list writes the index entry of a run that may be live.
func (s *Service) list(ctx context.Context, id string) error {
	if _, err := s.owners.Put(ctx, livePrefix+id, []byte(s.instance)); err != nil {
		return fmt.Errorf("index run %s as live: %w", id, err)
	}
	return nil
}

// unlist removes the index entry of a run whose end is on its chain (or
// that never started). It is purged, not deleted: a delete marker would
// stay in the bucket, and every listing would read it. Failing leaves a
// stale entry, which the next search checks and removes.
func (s *Service) unlist(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	st, err := s.ownersStream(ctx)
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+OwnersBucket+"."+livePrefix+id))
	}
	if err != nil {
		s.log.Warn("could not remove a run's live index entry; the orphan search will", "run", id, "err", err)
	}
}

// ownersStream is the owners bucket's stream, for purging index entries.
func (s *Service) ownersStream(ctx context.Context) (jetstream.Stream, error) {
	s.ownersStreamMu.Lock()
	defer s.ownersStreamMu.Unlock()
	if s.ownersStreamH != nil {
		return s.ownersStreamH, nil
	}
	st, err := s.events.JetStream().Stream(ctx, "KV_"+OwnersBucket)
	if err != nil {
		return nil, err
	}
	s.ownersStreamH = st
	return st, nil
}

// orphanSearch is what one orchestrator's searches remember.
type orphanSearch struct {
	seen      map[string]orphanSeen // candidates: unended, unowned
	chainless map[string]time.Time  // entries without a chain: first seen so
}

func newOrphanSearch() *orphanSearch {
	return &orphanSearch{seen: map[string]orphanSeen{}, chainless: map[string]time.Time{}}
}

// scanOrphans searches for orphaned runs every OrphanScan until ctx ends.
func (s *Service) scanOrphans(ctx context.Context) {
	if s.cfg.OrphanScan <= 0 {
		return
	}
	o := newOrphanSearch()
	t := time.NewTicker(s.cfg.OrphanScan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.findOrphans(ctx, o); err != nil && ctx.Err() == nil {
			s.log.Warn("could not search the live runs for runs without an owner", "err", err)
		}
	}
}

// findOrphans is one search: entries seen unowned for a lease are
// claimed. Every read has its own deadline and the reads are made one
// after the other.
func (s *Service) findOrphans(ctx context.Context, o *orphanSearch) error {
	ids, err := s.liveEntries(ctx)
	if err != nil {
		return err
	}
	candidates := map[string]bool{}
	listed := map[string]bool{}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err // stopping: not logged
		}
		listed[id] = true
		if s.owns(id) || s.ownerKeyExists(ctx, id) {
			delete(o.chainless, id)
			continue
		}
		if r, ok := s.runs.summary(id); ok && ended(r) {
			s.unlist(id) // stale: its writer died before removing it
			continue
		}
		if s.maybeOrphan(ctx, id, o) {
			candidates[id] = true
		}
	}
	for id := range o.seen {
		if !candidates[id] {
			delete(o.seen, id)
		}
	}
	for id := range o.chainless {
		if !listed[id] {
			delete(o.chainless, id)
		}
	}
	return nil
}

// liveEntries lists the run ids of the index's entries.
func (s *Service) liveEntries(ctx context.Context) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	defer cancel()
	keys, err := s.owners.ListKeysFiltered(cctx, livePrefix+">")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the live runs: %w", err)
	}
	var ids []string
	for k := range keys.Keys() {
		ids = append(ids, strings.TrimPrefix(k, livePrefix))
	}
	return ids, nil
}

// ownerKeyExists reports whether a run has an owner key (true also when
// that cannot be read now: the next search looks again).
func (s *Service) ownerKeyExists(ctx context.Context, id string) bool {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	defer cancel()
	_, err := s.owners.Get(cctx, id)
	return !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted)
}

// maybeOrphan looks at the chain of one entry without an owner key:
// whether it is still a candidate (a run, started, not ended, not claimed
// now).
func (s *Service) maybeOrphan(ctx context.Context, id string, o *orphanSearch) bool {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	defer cancel()
	r, err := s.chainSummary(cctx, id)
	if errors.Is(err, eventlog.ErrChainNotFound) {
		// Its run_started may still land: kept for liveForget.
		first, ok := o.chainless[id]
		if !ok {
			o.chainless[id] = time.Now()
		} else if time.Since(first) >= liveForget {
			delete(o.chainless, id)
			s.unlist(id)
		}
		return false
	}
	delete(o.chainless, id)
	if err != nil {
		return false // unreadable now: the next search
	}
	if r == nil {
		s.unlist(id) // another LCTL writer's chain, not a run
		return false
	}
	if ended(r) {
		s.runs.putSummary(r, 0)
		s.unlist(id)
		return false
	}
	seen, ok := o.seen[id]
	if !ok || seen.seq != r.GetLastSeq() {
		o.seen[id] = orphanSeen{seq: r.GetLastSeq(), since: time.Now()}
		return true
	}
	if time.Since(seen.since) < s.cfg.RunLease {
		return true
	}
	// Seen unowned for a lease. Its ends may hide its end (a signed
	// checkpoint after run_finished, a rollback's events): read it whole.
	events, err := s.events.ReadChain(cctx, id)
	if err != nil || len(events) == 0 {
		return true
	}
	if r := runRecord(xctevent.Fold(events)); ended(r) {
		s.runs.putSummary(r, 0)
		s.unlist(id)
		return false
	}
	delete(o.seen, id)
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
	s.resumeClaimed(ctx, id, rev, "unowned", "", nil)
}
