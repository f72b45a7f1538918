package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/jsguard"
)

// QuotaBucket is the KV bucket of the runs each principal has in progress
// across the cluster (--max-runs): one key per principal, a digest of its
// name, whose value lists its runs. It also holds each principal's open
// watches and the orchestrators' heartbeats (watchcount.go). Every change is a compare-and-set on
// the key's revision, so two orchestrators starting runs of one principal
// at once cannot both take its last place.
const QuotaBucket = "XCT_RUN_QUOTA"

// quotaRecord is a principal's runs in progress: run id to when it was
// counted (for people; never compared).
type quotaRecord struct {
	Principal string               `json:"principal"`
	Runs      map[string]time.Time `json:"runs"`
}

// quotaKey is the key of principal's record: names are any text, keys
// are not.
func quotaKey(principal string) string { return digestKey("p.", principal) }

func digestKey(prefix, name string) string {
	sum := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(sum[:20])
}

// quotaTries bounds the compare-and-set attempts of one change: each lost
// race means another orchestrator changed the record meanwhile (within
// one orchestrator the changes of a principal's record take turns,
// quotaLocks).
const quotaTries = 32

// quotaLocks serialize the changes one orchestrator makes to a principal's
// record (striped by the record's key): many starts of one principal at
// once would otherwise mostly lose their compare-and-sets to each other.
type quotaLocks [64]sync.Mutex

func (l *quotaLocks) lock(key string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	m := &l[h.Sum32()%uint32(len(l))]
	m.Lock()
	return m.Unlock
}

// quotaBackoff waits a little, more after each lost race, so that
// replicas racing for one record do not race again in step.
func quotaBackoff(ctx context.Context, try int) {
	d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(try, 6))) //nolint:gosec // jitter, not a secret
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (s *Service) openQuota(ctx context.Context) error {
	kv, err := s.events.JetStream().KeyValue(ctx, QuotaBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return jsguard.Missing("bucket", QuotaBucket)
	}
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", QuotaBucket, err)
	}
	s.quota = s.cfg.StoreHealth.KeyValue(kv)
	return nil
}

// bucketRecord is a principal's record in the quota bucket: its runs or
// its watches, under its name (a digest collision reads as no record).
type bucketRecord interface {
	owner() string
	// fresh makes the record empty and principal's.
	fresh(principal string)
	// made gives a record read without its map one.
	made()
}

func (r *quotaRecord) owner() string { return r.Principal }
func (r *quotaRecord) fresh(principal string) {
	*r = quotaRecord{Principal: principal, Runs: map[string]time.Time{}}
}
func (r *quotaRecord) made() {
	if r.Runs == nil {
		r.Runs = map[string]time.Time{}
	}
}

// getRecord reads principal's record at key and its revision (0: none
// yet). An unreadable record, or another's, is counted afresh.
func getRecord[R any, P interface {
	*R
	bucketRecord
}](ctx context.Context, kv jetstream.KeyValue, key, principal string) (R, uint64, error) {
	var rec R
	P(&rec).fresh(principal)
	entry, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, 0, nil
	}
	if err != nil {
		return rec, 0, err
	}
	if err := json.Unmarshal(entry.Value(), &rec); err != nil || P(&rec).owner() != principal {
		P(&rec).fresh(principal)
	}
	P(&rec).made()
	return rec, entry.Revision(), nil
}

// putRecord writes rec at key if the key is still at revision rev (0: not
// there yet); a lost compare-and-set is errQuotaRace.
func putRecord(ctx context.Context, kv jetstream.KeyValue, key string, rec any, rev uint64) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = kv.Create(ctx, key, b)
	} else {
		_, err = kv.Update(ctx, key, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return errQuotaRace
	}
	return err
}

var (
	// errQuotaRace is a compare-and-set lost to another writer.
	errQuotaRace = errors.New("the record changed meanwhile")
	// errQuotaBusy is quotaTries of them in a row.
	errQuotaBusy = errors.New("too many concurrent changes")
)

// changeRecord runs attempt, one read and compare-and-set of the record at
// key with kvTimeout, until it does not lose a race (errQuotaRace), at
// most quotaTries times (then errQuotaBusy). This orchestrator's changes of
// one key take turns.
func (s *Service) changeRecord(ctx context.Context, key string, attempt func(ctx context.Context) error) error {
	defer s.quotaLocks.lock(key)()
	for try := range quotaTries {
		err := func() error {
			kctx, cancel := context.WithTimeout(ctx, kvTimeout)
			defer cancel()
			return attempt(kctx)
		}()
		if !errors.Is(err, errQuotaRace) {
			return err
		}
		quotaBackoff(ctx, try)
	}
	return errQuotaBusy
}

// takeQuota counts run id among principal's runs in progress across the
// cluster, or refuses with RESOURCE_EXHAUSTED when it has limit already.
// It is called once the run's owner key exists (claimStart): a listed run
// whose owner key is gone has ended (or its start failed) and is dropped
// from the count, so a count left behind by a crash heals the next time
// the principal reaches the limit. It reports whether it added the run (a
// run already counted is left as it is).
func (s *Service) takeQuota(ctx context.Context, principal, id string, limit int) (bool, error) {
	if s.quota == nil {
		return false, nil
	}
	key := quotaKey(principal)
	added := false
	err := s.changeRecord(ctx, key, func(ctx context.Context) error {
		rec, rev, err := getRecord[quotaRecord](ctx, s.quota, key, principal)
		if err != nil {
			return fmt.Errorf("%w: read the runs of %s in progress: %w", errLogLost, principal, err)
		}
		if _, ok := rec.Runs[id]; ok {
			return nil
		}
		if len(rec.Runs) >= limit {
			s.pruneQuota(ctx, &rec)
		}
		if n := len(rec.Runs); n >= limit {
			return status.Errorf(codes.ResourceExhausted,
				"%s already has %d runs in progress in this cluster, the limit per principal (--max-runs): wait for one to end, or cancel one", principal, n)
		}
		rec.Runs[id] = time.Now().UTC()
		if err := putRecord(ctx, s.quota, key, rec, rev); err != nil {
			if errors.Is(err, errQuotaRace) {
				return err
			}
			return fmt.Errorf("%w: count the runs of %s in progress: %w", errLogLost, principal, err)
		}
		added = true
		return nil
	})
	if errors.Is(err, errQuotaBusy) {
		return false, status.Errorf(codes.Unavailable, "the runs of %s in progress changed too often to count; retry", principal)
	}
	return added, err
}

// pruneQuota drops from rec the runs whose owner key is gone: ended, or
// never started.
func (s *Service) pruneQuota(ctx context.Context, rec *quotaRecord) {
	ids := make([]string, 0, len(rec.Runs))
	for id := range rec.Runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if _, err := s.owners.Get(ctx, id); errors.Is(err, jetstream.ErrKeyNotFound) {
			delete(rec.Runs, id)
		}
	}
}

// giveQuota drops run id from principal's runs in progress (the run ended,
// or its start failed). A failure is logged: the next takeQuota at the
// limit drops it (its owner key is gone by then).
func (s *Service) giveQuota(principal, id string) {
	if s.quota == nil {
		return
	}
	key := quotaKey(principal)
	err := s.changeRecord(context.Background(), key, func(ctx context.Context) error {
		rec, rev, err := getRecord[quotaRecord](ctx, s.quota, key, principal)
		if err != nil {
			return err
		}
		if _, ok := rec.Runs[id]; !ok || rev == 0 {
			return nil
		}
		delete(rec.Runs, id)
		return putRecord(ctx, s.quota, key, rec, rev)
	})
	if err != nil {
		s.log.Warn("run ended but stays counted against its principal's --max-runs until the limit is next reached", "run", id, "err", err)
	}
}
