package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
)

// Run ownership (docs/lifecycle.md). Every unfinished run has one key in
// the KV bucket XCT_RUN_OWNERS, named after the run, whose value names the
// orchestrator instance that runs its loop. The key is created with the
// run, renewed by its owner while it works (a heartbeat that changes the
// key's revision), handed over by a graceful stop (owner "") and deleted
// once the run's end is on its chain. Every change is conditional on the
// revision the writer read, so exactly one replica wins a claim. Another
// replica takes a run over when its key is released, or when the key has
// not changed for a whole lease as measured by its own clock (no clocks
// are compared across machines). The chain's single-writer append remains
// the last guard: a stale owner that missed losing its claim fails its
// next append and stops.

// OwnersBucket is the KV bucket of run owners.
const OwnersBucket = "XCT_RUN_OWNERS"

// errReleased is the cause of a run handed over by a stopping orchestrator;
// errOwnershipLost of one another replica took over. Neither ends the run.
var (
	errReleased      = errors.New("handed over: the orchestrator is stopping")
	errOwnershipLost = errors.New("another orchestrator took the run over")
)

// ownerRecord is the value of a run's key.
type ownerRecord struct {
	// Owner is the instance running the loop; "" when released.
	Owner string `json:"owner"`
	// ReleasedBy names the instance that released the run.
	ReleasedBy string `json:"released_by,omitempty"`
	// Cancel is a cancel asked for (CancelRun, cancel.go): every later
	// writer of the key carries it on, and no owner takes another step
	// of the run once it holds it; a takeover that finds it ends the run
	// instead of resuming it.
	Cancel *cancelRequest `json:"cancel,omitempty"`
	// CancelSeen names the owner that saw Cancel and stopped the run's
	// loop: from then on that owner starts no step (the CancelRun that
	// wrote Cancel waits for it).
	CancelSeen string `json:"cancel_seen,omitempty"`
	// At is when the record was written (for people; never compared).
	At time.Time `json:"at"`
}

// cancelRequest is a cancel recorded in a run's owner key: who asked and
// why.
type cancelRequest struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// cause is the run's cancellation cause the request gives.
func (c *cancelRequest) cause() errCancelled { return errCancelled{reason: c.Reason, by: c.By} }

// acked reports whether the record's owner saw its cancel.
func (rec ownerRecord) acked() bool {
	return rec.Cancel != nil && rec.Owner != "" && rec.CancelSeen == rec.Owner
}

func encodeOwner(rec ownerRecord) []byte {
	rec.At = time.Now().UTC()
	b, _ := json.Marshal(rec)
	return b
}

func decodeOwner(b []byte) (ownerRecord, bool) {
	var rec ownerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, false
	}
	return rec, true
}

// newInstance names this process: its host name (the pod's name in
// Kubernetes) and a random suffix, so a restart is a new instance.
func newInstance() string {
	host, _ := os.Hostname()
	host = strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			return c
		}
		return -1
	}, host)
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = "orchestrator"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// lease is a run's claim in the owners bucket, held by its loop.
type lease struct {
	mu  sync.Mutex
	rev uint64 // revision of the key as last written by this owner; 0: not held
	// cancel is the cancel the key holds, once this owner saw it (and
	// stopped the loop): every write of the key by this owner carries it.
	cancel *cancelRequest
}

// ownRecord is the key's value while this instance owns the run (under
// l.mu): the cancel it saw carried on, and acknowledged.
func (s *Service) ownRecord(l *lease) []byte {
	rec := ownerRecord{Owner: s.instance, Cancel: l.cancel}
	if l.cancel != nil {
		rec.CancelSeen = s.instance
	}
	return encodeOwner(rec)
}

// set records the revision of a claim just made.
func (l *lease) set(rev uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rev = rev
}

// openOwners binds to the owners bucket, which the admin made
// (internal/provision), and drops delete markers of runs that ended more
// than an hour ago.
func (s *Service) openOwners(ctx context.Context) error {
	js := s.events.JetStream()
	kv, err := js.KeyValue(ctx, OwnersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return jsguard.Missing("bucket", OwnersBucket)
	}
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", OwnersBucket, err)
	}
	s.owners = s.cfg.StoreHealth.KeyValue(kv)
	if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(time.Hour)); err != nil {
		s.log.Warn("could not purge old delete markers", "bucket", OwnersBucket, "err", err)
	}
	return nil
}

// claimNew makes this instance the owner of a new run. A key that exists
// means a run with this id is not finished.
func (s *Service) claimNew(ctx context.Context, id string) (uint64, error) {
	rev, err := s.owners.Create(ctx, id, encodeOwner(ownerRecord{Owner: s.instance}))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %s", ErrRunExists, id)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: claim run: %w", errLogLost, err)
	}
	return rev, nil
}

// kvTimeout bounds one operation on the owners bucket.
const kvTimeout = 10 * time.Second

// renew moves the run's key to a new revision, proving its owner is alive.
// It reports false when the claim was lost: another replica owns the run.
func (s *Service) renew(r *run) (ok bool, err error) {
	r.lease.mu.Lock()
	defer r.lease.mu.Unlock()
	if r.lease.rev == 0 {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	rev, err := s.owners.Update(ctx, r.id, s.ownRecord(&r.lease), r.lease.rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// A CancelRun writes the key with its owner kept: the owner is
		// still this instance, and the loop stops for the cancel.
		if ok, aerr := s.adoptLocked(ctx, r); ok || aerr != nil {
			return ok, aerr
		}
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		r.lease.rev = 0
		// A key another replica holds is a takeover. A key that is gone
		// was deleted by a takeover that found no chain yet: this run's
		// start was late (its process paused between claim and
		// run_started). Nobody else owns the run: claim it again, or
		// it would stay started with no owner, run by no one.
		if _, gerr := s.owners.Get(ctx, r.id); errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted) {
			if rev, cerr := s.owners.Create(ctx, r.id, encodeOwner(ownerRecord{Owner: s.instance})); cerr == nil {
				s.log.Warn("the run's owner key was deleted while its loop ran here (a takeover found no chain yet): claimed again", "run", r.id)
				r.lease.rev = rev
				return true, nil
			}
		}
		return false, nil
	}
	if err != nil {
		return true, err
	}
	r.lease.rev = rev
	return true, nil
}

// adoptLocked reads the run's key after a write of this owner's met
// another revision (under r.lease.mu). A key still naming this instance
// was written by a CancelRun, which keeps the owner: its revision is
// adopted, its cancel seen (the loop stops: stopFor) and acknowledged in
// the key. false (and no error) when another instance owns the key or it
// is gone.
func (s *Service) adoptLocked(ctx context.Context, r *run) (bool, error) {
	for range 5 {
		e, err := s.owners.Get(ctx, r.id)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		rec, ok := decodeOwner(e.Value())
		if !ok || rec.Owner != s.instance {
			return false, nil
		}
		r.lease.rev = e.Revision()
		if rec.Cancel != nil && r.lease.cancel == nil {
			if r.stopFor(rec.Cancel.cause()) {
				// The run's end was on its chain first: the cancel is not
				// acknowledged, the key goes with the run (finishLease),
				// and the CancelRun waiting says how the run ended.
				return true, nil
			}
			r.lease.cancel = rec.Cancel
		}
		if rec.CancelSeen == s.instance || r.lease.cancel == nil {
			return true, nil
		}
		rev, err := s.owners.Update(ctx, r.id, s.ownRecord(&r.lease), e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return true, err
		}
		r.lease.rev = rev
		return true, nil
	}
	return true, fmt.Errorf("the owner key of %s keeps changing", r.id)
}

// seeCancel acts on a cancel the watch saw written into the key of a run
// this instance owns (a CancelRun on any replica): the loop stops and the
// key says so (adoptLocked), which the CancelRun waits for.
func (s *Service) seeCancel(ctx context.Context, id string) {
	r := s.owner(id)
	if r == nil || r.left == nil {
		return // not a run's loop here (a rollback holds the key of an ended run)
	}
	r.lease.mu.Lock()
	defer r.lease.mu.Unlock()
	if r.lease.rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kvTimeout)
	defer cancel()
	if _, err := s.adoptLocked(ctx, r); err != nil {
		s.log.Warn("could not acknowledge the cancel of a run (its loop is stopped; the heartbeat tries again)", "run", id, "err", err)
	}
}

// handOver releases the run's key for another replica (owner "").
func (s *Service) handOver(r *run) error {
	r.lease.mu.Lock()
	defer r.lease.mu.Unlock()
	if r.lease.rev == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	_, err := s.owners.Update(ctx, r.id, encodeOwner(ownerRecord{ReleasedBy: s.instance, Cancel: r.lease.cancel}), r.lease.rev)
	r.lease.rev = 0
	if err != nil {
		return fmt.Errorf("release run %s: %w", r.id, err)
	}
	return nil
}

// disown deletes the key of a run whose end is on its chain.
func (s *Service) disown(id string, rev uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	if err := s.owners.Delete(ctx, id, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("delete owner of %s: %w", id, err)
	}
	return nil
}

// finishLease deletes the key of a run that ended.
func (s *Service) finishLease(r *run) {
	r.lease.mu.Lock()
	defer r.lease.mu.Unlock()
	if r.lease.rev == 0 {
		return
	}
	err := s.disown(r.id, r.lease.rev)
	if err != nil {
		// A CancelRun may have written the key (its owner kept) as the
		// run ended: the key is still this instance's, at a later revision.
		ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
		if e, gerr := s.owners.Get(ctx, r.id); gerr == nil && e.Revision() != r.lease.rev {
			if rec, ok := decodeOwner(e.Value()); ok && rec.Owner == s.instance {
				err = s.disown(r.id, e.Revision())
			}
		}
		cancel()
	}
	if err != nil {
		// Harmless: whoever claims it next finds the run ended and deletes it.
		s.log.Warn("run ended but its owner key stays", "run", r.id, "err", err)
	}
	r.lease.rev = 0
}

// heartbeat renews the claim of every run this process owns, a few times
// per lease, until ctx ends. A claim found lost stops its loop without
// writing anything more.
func (s *Service) heartbeat(ctx context.Context) {
	t := time.NewTicker(s.cfg.RunLease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, r := range s.activeRuns() {
			ok, err := s.renew(r)
			if err != nil {
				s.log.Warn("could not renew the claim of a run", "run", r.id, "err", err)
			}
			if !ok {
				s.log.Warn("run taken over by another orchestrator: stopping its loop here", "run", r.id)
				r.cancel(errOwnershipLost)
			}
		}
	}
}

func (s *Service) activeRuns() []*run {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*run, 0, len(s.active))
	for _, r := range s.active {
		out = append(out, r)
	}
	return out
}

// observed is what this process last saw of another owner's key.
type observed struct {
	rev   uint64
	rec   ownerRecord
	since time.Time // local, monotonic: when the revision was first seen
}

// watchOwners follows the owners bucket until ctx ends: a released run is
// claimed at once, a run whose key has not changed for a lease is claimed
// as expired. At start the watch delivers every key, so unfinished runs
// whose owner is gone are found without reading the event log.
func (s *Service) watchOwners(ctx context.Context) {
	w, err := s.owners.WatchAll(ctx)
	if err != nil {
		s.log.Error("cannot watch run owners: no takeovers by this orchestrator", "err", err)
		return
	}
	defer func() { _ = w.Stop() }()
	seen := map[string]*observed{}
	t := time.NewTicker(max(s.cfg.RunLease/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() == nil {
					s.log.Error("the watch of run owners ended: no takeovers by this orchestrator")
				}
				return
			}
			if e == nil {
				continue // every current key was delivered
			}
			if strings.HasPrefix(e.Key(), livePrefix) {
				continue // an index entry of the orphan search, not an owner
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(seen, e.Key())
				continue
			}
			rec, ok := decodeOwner(e.Value())
			if !ok {
				s.log.Warn("unreadable owner record", "run", e.Key())
				continue
			}
			if rec.Owner == "" {
				delete(seen, e.Key())
				go s.takeOver(ctx, e.Key(), e.Revision(), "released", rec)
				continue
			}
			if rec.Owner == s.instance && rec.Cancel != nil && rec.CancelSeen != s.instance {
				go s.seeCancel(ctx, e.Key()) // a CancelRun asks this owner to stop
			}
			if o := seen[e.Key()]; o == nil || o.rev != e.Revision() {
				seen[e.Key()] = &observed{rev: e.Revision(), rec: rec, since: time.Now()}
			}
		case <-t.C:
			for id, o := range seen {
				if time.Since(o.since) < s.cfg.RunLease || s.owns(id) {
					continue
				}
				o.since = time.Now() // try again after another lease at most
				go s.takeOver(ctx, id, o.rev, "lease_expired", o.rec)
			}
		}
	}
}

// takeOver claims a run released by, or expired at, its previous owner
// (its key at rev held prev) and continues it here. Losing the claim to
// another replica is normal and silent. When the run cannot be resumed,
// the claim is left to expire, so it is tried again later (here or
// elsewhere). A key holding a cancel is claimed with it, acknowledged:
// the run is ended, not resumed (resume).
//
// ctx bounds the claim (the watch's context: a stopping process claims
// nothing more); the run, once claimed, lives on its own.
func (s *Service) takeOver(ctx context.Context, id string, rev uint64, reason string, prev ownerRecord) {
	if !s.beginClaim(id) {
		return
	}
	defer s.endClaim(id)
	previous := prev.Owner
	if previous == "" {
		previous = prev.ReleasedBy
	}
	claim := ownerRecord{Owner: s.instance, Cancel: prev.Cancel}
	if prev.Cancel != nil {
		claim.CancelSeen = s.instance
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	newRev, err := s.owners.Update(cctx, id, encodeOwner(claim), rev)
	cancel()
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return // another replica was first, or the run ended meanwhile
	}
	if err != nil {
		s.log.Warn("could not claim a run", "run", id, "err", err)
		return
	}
	s.resumeClaimed(ctx, id, newRev, reason, previous, prev.Cancel)
}

// takeoverAttempts bounds the tries of one takeover; each is bounded by
// TakeoverTimeout.
const takeoverAttempts = 3

// resumeRetried resumes a run just claimed, trying again with backoff while
// the claim is still this instance's: a fault that makes one try time out
// (a stream leader moving, an executor restarting) does not leave the run
// to the claim's expiry. Then the claim expires and any replica, this one
// included, claims the run again.
func (s *Service) resumeRetried(ctx context.Context, id string, rev uint64, reason, previous string, cancelled *cancelRequest) error {
	wait := 200 * time.Millisecond
	var err error
	for attempt := 1; attempt <= takeoverAttempts; attempt++ {
		if err = s.resume(context.WithoutCancel(ctx), id, rev, reason, previous, cancelled); err == nil || errIsStopping(err) {
			return err
		}
		if attempt == takeoverAttempts || !s.stillClaimed(id, rev) {
			break
		}
		s.log.Warn("takeover failed; trying again", "run", id, "attempt", attempt, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait *= 2
	}
	return err
}

// stillClaimed reports whether the run's key is still at this instance's
// claim.
func (s *Service) stillClaimed(id string, rev uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TakeoverTimeout)
	defer cancel()
	e, err := s.owners.Get(ctx, id)
	return err == nil && e.Revision() == rev
}

// beginClaim marks a claim in progress; false when one is, when the run is
// already active here, or when this process is stopping.
func (s *Service) beginClaim(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || s.claiming[id] || s.active[id] != nil {
		return false
	}
	s.claiming[id] = true
	return true
}

func (s *Service) endClaim(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claiming, id)
}

// resumeClaimed resumes a run this process has just claimed (its owner key
// at rev). Stopping meanwhile records nothing, so the claim is given
// straight back; any other failure leaves the claim to expire.
func (s *Service) resumeClaimed(ctx context.Context, id string, rev uint64, reason, previous string, cancelled *cancelRequest) {
	err := s.resumeRetried(ctx, id, rev, reason, previous, cancelled)
	if errIsStopping(err) {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kvTimeout)
		_, err = s.owners.Update(gctx, id, encodeOwner(ownerRecord{ReleasedBy: s.instance, Cancel: cancelled}), rev)
		cancel()
		if err != nil {
			s.log.Warn("could not give back a claim while stopping; it will expire", "run", id, "err", err)
		}
		return
	}
	if err != nil {
		s.log.Error("claimed a run but could not resume it; the claim will expire", "run", id, "reason", reason, "err", err)
	}
}
