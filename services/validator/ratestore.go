package validator

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/storehealth"
)

// RateBucket is the JetStream KV bucket where the validators count the
// calls under a policy's rate limits: one key per limit (and run, for a
// per-run limit), whose value is the calls in its window. Every change is
// a compare-and-set on the key's revision, so the replicas share one count
// and two of them racing for a limit's last call cannot both take it; the
// counts outlive any validator. The validator is its only reader and
// writer. Keys expire RateBucketTTL after their last write, when every
// call in them has left its window.
const RateBucket = "XCT_RATE_LIMITS"

// RateBucketTTL is how long a key of RateBucket outlives its last write
// (the bucket's TTL, made by internal/provision): the longest window, and
// an hour of slack for clocks.
const RateBucketTTL = maxRateWindow + time.Hour

// counter keeps the calls counted under rate limits: in this process
// (rateLimiter, for a validator without NATS: tests and policy checks) or
// in the cluster's KV bucket (rateStore).
type counter interface {
	// allow reports whether a call fits in every window of checks at now,
	// and counts it in all of them when take is set (all or none). A step
	// already counted fits. When it does not fit, it returns the limit that
	// refused and how long until a call leaves its window; err means the
	// count could not be read or kept (check names the limit): the call is
	// to be refused.
	allow(ctx context.Context, now time.Time, stepID string, checks []rateCheck, take bool) (refused *rateCheck, retryAfter time.Duration, err error)
}

func (l *rateLimiter) allow(_ context.Context, now time.Time, stepID string, checks []rateCheck, take bool) (*rateCheck, time.Duration, error) {
	refused, retry := l.allowLocal(now, stepID, checks, take)
	return refused, retry, nil
}

// rateStoreTimeout bounds the store's work for one proposal's limits.
const rateStoreTimeout = 5 * time.Second

// rateTries bounds the compare-and-set attempts on one key: each lost race
// means another validator changed the count meanwhile (within one
// validator the changes of a key take turns, rateLocks).
const rateTries = 32

// rateEntryBytes is one counted call in a record: when (Unix nanoseconds)
// and the step (the first 8 bytes of the SHA-256 of its id; 0 for a call
// without one), big-endian. A record is rateRecordVersion then entries.
const (
	rateEntryBytes    = 16
	rateRecordVersion = 1
)

// rateStore counts calls in the KV bucket RateBucket.
type rateStore struct {
	bucket atomic.Pointer[rateBucket] // nil until Start
	locks  [64]sync.Mutex

	// seen is the last record this validator read or wrote of each key,
	// with its revision: a take first tries its compare-and-set on it,
	// which succeeds only if the record is still that one, and reads the
	// key when it fails (another replica wrote meanwhile). A take that
	// the cached record would refuse, or find counted, reads first: only
	// an allow proven by the compare-and-set is decided on it.
	seenMu sync.Mutex
	seen   map[string]seenRecord

	// health is told the outcome of the counts' writes (set before bind;
	// nil: nobody).
	health *storehealth.Monitor
}

// seenRecord is a key's record at a revision.
type seenRecord struct {
	rev uint64
	es  []rateEntry
}

// maxSeen bounds the records kept in seen (one per window: a per-run
// limit has one per run); past it they are all dropped.
const maxSeen = 4096

func (st *rateStore) lastSeen(key string) (seenRecord, bool) {
	st.seenMu.Lock()
	defer st.seenMu.Unlock()
	r, ok := st.seen[key]
	return r, ok
}

// see records a key's record at rev (es is kept: the caller must not
// change it afterwards).
func (st *rateStore) see(key string, rev uint64, es []rateEntry) {
	st.seenMu.Lock()
	defer st.seenMu.Unlock()
	if st.seen == nil || len(st.seen) >= maxSeen {
		st.seen = make(map[string]seenRecord)
	}
	st.seen[key] = seenRecord{rev: rev, es: es}
}

func (st *rateStore) forget(key string) {
	st.seenMu.Lock()
	defer st.seenMu.Unlock()
	delete(st.seen, key)
}

// rateBucket is the bound bucket and how many calls one record may hold
// (the connection's largest message).
type rateBucket struct {
	kv       jetstream.KeyValue
	maxCalls int
}

// errRateStore wraps every failure to read or keep a count.
var errRateStore = errors.New("the rate limit count store")

// bind binds the bucket, which the admin made (internal/provision).
func (st *rateStore) bind(ctx context.Context, js jetstream.JetStream, maxPayload int64) error {
	kv, err := js.KeyValue(ctx, RateBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("rate limits bucket: %w", jsguard.Missing("bucket", RateBucket))
	}
	if err != nil {
		return fmt.Errorf("rate limits bucket: %w", err)
	}
	st.bucket.Store(&rateBucket{kv: st.health.KeyValue(kv), maxCalls: int(max(maxPayload-1024, rateEntryBytes)/rateEntryBytes) - 1})
	return nil
}

func (st *rateStore) lock(key string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	m := &st.locks[h.Sum32()%uint32(len(st.locks))]
	m.Lock()
	return m.Unlock
}

// rateKey is the bucket's key of a check: a digest of its window's name,
// which holds a tool pattern and a run id (any text).
func rateKey(c *rateCheck) string {
	sum := sha256.Sum256([]byte(c.key))
	scope := "g."
	switch c.scope {
	case "per_run":
		scope = "r."
	case "per_principal":
		scope = "p."
	}
	return scope + hex.EncodeToString(sum[:20])
}

// stepHash is what a record keeps of a step id: 0 for none.
func stepHash(stepID string) uint64 {
	if stepID == "" {
		return 0
	}
	sum := sha256.Sum256([]byte(stepID))
	return max(binary.BigEndian.Uint64(sum[:8]), 1)
}

// rateEntry is one counted call.
type rateEntry struct {
	at   int64 // Unix nanoseconds
	step uint64
}

func decodeRate(b []byte) ([]rateEntry, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != rateRecordVersion || (len(b)-1)%rateEntryBytes != 0 {
		return nil, fmt.Errorf("%w: a record is not one this validator writes (version %d, %d bytes)", errRateStore, b[0], len(b))
	}
	out := make([]rateEntry, 0, (len(b)-1)/rateEntryBytes)
	for p := b[1:]; len(p) > 0; p = p[rateEntryBytes:] {
		out = append(out, rateEntry{at: int64(binary.BigEndian.Uint64(p)), step: binary.BigEndian.Uint64(p[8:])}) //nolint:gosec // a time written as uint64
	}
	return out, nil
}

func encodeRate(es []rateEntry) []byte {
	b := make([]byte, 1, 1+len(es)*rateEntryBytes)
	b[0] = rateRecordVersion
	for _, e := range es {
		b = binary.BigEndian.AppendUint64(b, uint64(e.at)) //nolint:gosec // a time read back as int64
		b = binary.BigEndian.AppendUint64(b, e.step)
	}
	return b
}

// live drops the calls that left a window of span at now, in place, and
// reports whether step is among those left and the oldest left.
func live(es []rateEntry, now time.Time, span time.Duration, step uint64) (kept []rateEntry, counted bool, oldest int64) {
	cut := now.Add(-span).UnixNano()
	kept = es[:0]
	for _, e := range es {
		if e.at <= cut {
			continue
		}
		kept = append(kept, e)
		if step != 0 && e.step == step {
			counted = true
		}
		if oldest == 0 || e.at < oldest {
			oldest = e.at
		}
	}
	return kept, counted, oldest
}

// read reads a key's calls and its revision (0: none yet).
func (b *rateBucket) read(ctx context.Context, key string) ([]rateEntry, uint64, error) {
	entry, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w: read: %w", errRateStore, err)
	}
	es, err := decodeRate(entry.Value())
	return es, entry.Revision(), err
}

// write stores a key's calls if it is still at revision rev, and returns
// the new revision; a lost race is errRateRace.
func (b *rateBucket) write(ctx context.Context, key string, es []rateEntry, rev uint64) (uint64, error) {
	var err error
	var next uint64
	if rev == 0 {
		next, err = b.kv.Create(ctx, key, encodeRate(es))
	} else {
		next, err = b.kv.Update(ctx, key, encodeRate(es), rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errRateRace
	}
	if err != nil {
		return 0, fmt.Errorf("%w: write: %w", errRateStore, err)
	}
	return next, nil
}

var errRateRace = errors.New("the count changed meanwhile")

// rateBackoff waits a little, more after each lost race, so that replicas
// racing for one key do not race again in step.
func rateBackoff(ctx context.Context, try int) {
	d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(try, 6))) //nolint:gosec // jitter, not a secret
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (st *rateStore) allow(ctx context.Context, now time.Time, stepID string, checks []rateCheck, take bool) (*rateCheck, time.Duration, error) {
	if len(checks) == 0 {
		return nil, 0, nil
	}
	b := st.bucket.Load()
	if b == nil {
		return &checks[0], 0, fmt.Errorf("%w: not open yet", errRateStore)
	}
	ctx, cancel := context.WithTimeout(ctx, rateStoreTimeout)
	defer cancel()
	step := stepHash(stepID)
	if !take {
		for i := range checks {
			c := &checks[i]
			es, _, err := b.read(ctx, rateKey(c))
			if err != nil {
				return c, 0, err
			}
			es, counted, oldest := live(es, now, c.limit.window, step)
			if !counted && len(es) >= c.limit.n {
				return c, time.Unix(0, oldest).Add(c.limit.window).Sub(now), nil
			}
		}
		return nil, 0, nil
	}
	// Each limit is taken in turn; when one refuses (or fails), the calls
	// added to those before it are given back. Meanwhile they hold a place
	// a racing call could have had: a refusal too many, never a call too
	// many.
	var added []*rateCheck
	for i := range checks {
		c := &checks[i]
		took, retry, err := st.take(ctx, b, c, now, step)
		if err != nil || retry > 0 {
			st.giveBack(ctx, b, added, now, step)
			return c, retry, err
		}
		if took {
			added = append(added, c)
		}
	}
	return nil, 0, nil
}

// take counts a call under c unless its step is counted there already
// (took false). A full window is retryAfter > 0.
func (st *rateStore) take(ctx context.Context, b *rateBucket, c *rateCheck, now time.Time, step uint64) (took bool, retryAfter time.Duration, err error) {
	key := rateKey(c)
	defer st.lock(key)()
	entry := rateEntry{at: now.UnixNano(), step: step}
	// First on the record last seen: one round trip when no other
	// validator wrote the key since.
	if seen, ok := st.lastSeen(key); ok {
		es, counted, _ := live(slices.Clone(seen.es), now, c.limit.window, step)
		if !counted && len(es) < c.limit.n && len(es) < b.maxCalls {
			es = append(es, entry)
			if rev, err := b.write(ctx, key, es, seen.rev); err == nil {
				st.see(key, rev, es)
				return true, 0, nil
			}
			// Another wrote it meanwhile (or the write failed): read it.
			st.forget(key)
		}
	}
	for try := range rateTries {
		es, rev, err := b.read(ctx, key)
		if err != nil {
			return false, 0, err
		}
		es, counted, oldest := live(es, now, c.limit.window, step)
		if counted {
			st.see(key, rev, es)
			return false, 0, nil
		}
		if len(es) >= c.limit.n {
			st.see(key, rev, es)
			return false, max(time.Unix(0, oldest).Add(c.limit.window).Sub(now), time.Nanosecond), nil
		}
		if len(es) >= b.maxCalls {
			return false, 0, fmt.Errorf("%w: one record holds at most %d calls (the NATS server's max_payload), and this limit counts %d", errRateStore, b.maxCalls, c.limit.n)
		}
		es = append(es, entry)
		next, err := b.write(ctx, key, es, rev)
		if err == nil {
			st.see(key, next, es)
			return true, 0, nil
		}
		if !errors.Is(err, errRateRace) {
			return false, 0, err
		}
		rateBackoff(ctx, try)
	}
	return false, 0, fmt.Errorf("%w: the count changed too often to be kept", errRateStore)
}

// giveBack removes the call counted at now for step under each of checks.
// A failure leaves it counted until it leaves its window (a refusal too
// many, never a call too many).
func (st *rateStore) giveBack(ctx context.Context, b *rateBucket, checks []*rateCheck, now time.Time, step uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rateStoreTimeout)
	defer cancel()
	at := now.UnixNano()
	for _, c := range checks {
		key := rateKey(c)
		func() {
			defer st.lock(key)()
			st.forget(key)
			for try := range rateTries {
				es, rev, err := b.read(ctx, key)
				if err != nil || rev == 0 {
					return
				}
				i := 0
				for i < len(es) && (es[i].at != at || es[i].step != step) {
					i++
				}
				if i == len(es) {
					return
				}
				es = append(es[:i], es[i+1:]...)
				if _, err := b.write(ctx, key, es, rev); !errors.Is(err, errRateRace) {
					return
				}
				rateBackoff(ctx, try)
			}
		}()
	}
}
