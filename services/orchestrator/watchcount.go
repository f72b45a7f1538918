package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Watches counted across the cluster (--max-watches). Each principal's
// open WatchRun streams are listed in one record of the quota bucket
// (XCT_RUN_QUOTA, key w.<digest of the principal>): watch id to the
// orchestrator instance that serves it. A watch is added before it is
// served and removed when it ends, each a compare-and-set on the record's
// revision, so two replicas cannot both give a principal its last place,
// and a restart forgets nothing.
//
// A replica that dies with watches open cannot remove them. Each
// instance keeps a heartbeat key (i.<digest of the instance>), written
// every watchHeartbeat; a principal at its limit has the record pruned:
// the watches of an instance whose heartbeat is gone (a graceful stop
// deletes it) or was last written more than watchLease before the
// server's own now (read from the pruner's heartbeat just written: only
// the NATS server's clock is compared with itself), and this instance's
// own watches that it no longer serves (a removal that failed). So a dead
// replica's places come back within a lease of its death, once someone
// needs them.

// Lease of a watch's place: an instance whose heartbeat is older is dead.
const (
	watchLease     = 30 * time.Second
	watchHeartbeat = watchLease / 3
)

// watchRecord is a principal's open watches across the cluster.
type watchRecord struct {
	Principal string `json:"principal"`
	// Watches maps a watch id to the instance serving it.
	Watches map[string]string `json:"watches"`
}

// watchKey is the key of principal's record; instanceKey of an
// instance's heartbeat.
func watchKey(principal string) string   { return digestKey("w.", principal) }
func instanceKey(instance string) string { return digestKey("i.", instance) }

// newWatchID names one WatchRun stream.
func newWatchID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func (r *watchRecord) owner() string { return r.Principal }
func (r *watchRecord) fresh(principal string) {
	*r = watchRecord{Principal: principal, Watches: map[string]string{}}
}
func (r *watchRecord) made() {
	if r.Watches == nil {
		r.Watches = map[string]string{}
	}
}

// takeWatch counts watch id among principal's open watches across the
// cluster, or refuses with RESOURCE_EXHAUSTED when it has limit already
// (after pruning the watches of dead instances). The id must be in this
// instance's open set (watches.serving) before, so that a concurrent
// prune here does not take it for a leftover.
func (s *Service) takeWatch(ctx context.Context, principal, id string, limit int) error {
	if s.quota == nil {
		return nil
	}
	key := watchKey(principal)
	uncounted := func(err error) error {
		return status.Errorf(codes.Unavailable, "the open watches of %s could not be counted (%v); try again", principalName(principal), err)
	}
	err := s.changeRecord(ctx, key, func(ctx context.Context) error {
		rec, rev, err := getRecord[watchRecord](ctx, s.quota, key, principal)
		if err != nil {
			return uncounted(err)
		}
		if len(rec.Watches) >= limit {
			if err := s.pruneWatches(ctx, &rec); err != nil {
				return uncounted(err)
			}
		}
		if n := len(rec.Watches); n >= limit {
			return status.Errorf(codes.ResourceExhausted,
				"%s already has %d runs watched in this cluster, the limit per principal (--max-watches): close a watch first", principalName(principal), n)
		}
		rec.Watches[id] = s.instance
		if err := putRecord(ctx, s.quota, key, rec, rev); err != nil {
			if errors.Is(err, errQuotaRace) {
				return err
			}
			return uncounted(err)
		}
		return nil
	})
	if errors.Is(err, errQuotaBusy) {
		return status.Errorf(codes.Unavailable, "the open watches of %s changed too often to count; try again", principalName(principal))
	}
	return err
}

// giveWatch removes watch id from principal's open watches. A failure is
// logged: the next prune at the limit drops it (this instance no longer
// serves it).
func (s *Service) giveWatch(principal, id string) {
	if s.quota == nil {
		return
	}
	key := watchKey(principal)
	err := s.changeRecord(context.Background(), key, func(ctx context.Context) error {
		rec, rev, err := getRecord[watchRecord](ctx, s.quota, key, principal)
		if err != nil {
			return err
		}
		if _, ok := rec.Watches[id]; !ok || rev == 0 {
			return nil
		}
		delete(rec.Watches, id)
		return putRecord(ctx, s.quota, key, rec, rev)
	})
	if err != nil {
		s.log.Warn("watch ended but stays counted against its principal's --max-watches until the limit is next reached", "principal", principal, "err", err)
	}
}

// pruneWatches drops from rec the watches of dead instances and this
// instance's own that it no longer serves.
func (s *Service) pruneWatches(ctx context.Context, rec *watchRecord) error {
	// The server's now: this instance's heartbeat, written now.
	if _, err := s.quota.Put(ctx, instanceKey(s.instance), []byte(s.instance)); err != nil {
		return err
	}
	mine, err := s.quota.Get(ctx, instanceKey(s.instance))
	if err != nil {
		return err
	}
	now := mine.Created()
	instances := map[string]bool{}
	for _, inst := range rec.Watches {
		instances[inst] = true
	}
	names := make([]string, 0, len(instances))
	for inst := range instances {
		names = append(names, inst)
	}
	slices.Sort(names)
	dead := map[string]bool{}
	for _, inst := range names {
		if inst == s.instance {
			continue
		}
		hb, err := s.quota.Get(ctx, instanceKey(inst))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			dead[inst] = true
		case err != nil:
			return err
		case now.Sub(hb.Created()) > s.watchLease():
			dead[inst] = true
		}
	}
	for id, inst := range rec.Watches {
		if dead[inst] || inst == s.instance && !s.watches.isServing(id) {
			delete(rec.Watches, id)
		}
	}
	return nil
}

// watchLease is the lease of this service's watch places (a test's
// shorter one, or watchLease).
func (s *Service) watchLease() time.Duration {
	if s.watchLeaseForTest > 0 {
		return s.watchLeaseForTest
	}
	return watchLease
}

// watchHeartbeats writes this instance's heartbeat every watchHeartbeat
// until ctx ends, then deletes it: a stopped instance's watches are
// dropped at once by the next prune.
func (s *Service) watchHeartbeats(ctx context.Context) {
	if s.quota == nil {
		return
	}
	key := instanceKey(s.instance)
	beat := func() {
		bctx, cancel := context.WithTimeout(ctx, kvTimeout)
		defer cancel()
		if _, err := s.quota.Put(bctx, key, []byte(s.instance)); err != nil && ctx.Err() == nil {
			s.log.Warn("watch heartbeat not written: other replicas may count this one's watches as a dead replica's", "err", err)
		}
	}
	beat()
	t := time.NewTicker(min(watchHeartbeat, s.watchLease()/3))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
			defer cancel()
			if err := s.quota.Delete(dctx, key); err != nil {
				s.log.Warn("watch heartbeat not deleted at stop: this instance's watches are dropped a lease later", "err", err)
			}
			return
		case <-t.C:
			beat()
		}
	}
}
