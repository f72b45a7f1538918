// Package storehealth is what a process knows of JetStream's ability to
// store its writes. When a stream refuses a write for want of room (its
// max_bytes or max_msgs reached with discard new, the account's or the
// server's storage exhausted, the disk full), every step that writes there
// fails; a service that kept reporting SERVING would keep getting calls
// it can only fail, and its operator would see green. A Monitor is told
// the outcome of the services' writes (Wrote), holds the streams that
// cannot store, logs each once when it fills and once when it stores
// again, and tells its owner (internal/app), which reports NOT_SERVING
// on gRPC health while any stream is full.
//
// A full stream is cleared by the next write to it that succeeds, or by a
// probe asked every ProbeEvery while one is full, since a service that
// reports NOT_SERVING may get no calls to write with: a stream full at its
// own limit is probed with its info (room below max_bytes and max_msgs);
// one full for any other cause (the account's or the server's storage, a
// disk) when the account's store usage falls below what it was when the
// write failed (something was freed), or RetryAfter after the failure,
// whichever is first: the server shows no more than that, and a write
// that fails again marks it full again.
package storehealth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's error codes of a write refused for want of room.
const (
	// codeAccountResources: "resource limits exceeded for account".
	codeAccountResources = 10002
	// codeInsufficientResources: "insufficient resources" (the server's
	// max_file_store or max_memory_store reached).
	codeInsufficientResources = 10023
	// codeStorageResources: "insufficient storage resources available".
	codeStorageResources = 10047
	// codeStoreFailed: the store's own error ("maximum bytes exceeded",
	// "maximum messages exceeded", "no space left on device").
	codeStoreFailed = 10077
)

// The store's errors (in codeStoreFailed's description) that mean the
// stream reached its own limit.
var limitErrors = []string{"maximum bytes exceeded", "maximum messages exceeded"}

// noSpace is the file system's error for a full disk, as the server
// reports it.
const noSpace = "no space left on device"

// IsFull reports whether err is a write refused because the stream, the
// account, the server or the disk has no room: not a conflict, a
// permission, a timeout or a message too large.
func IsFull(err error) bool {
	full, _ := classify(err)
	return full
}

// classify reports whether err is a refusal for want of room, and
// whether it was the stream's own limit (max_bytes, max_msgs).
func classify(err error) (full, ownLimit bool) {
	if err == nil {
		return false, false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case codeAccountResources, codeInsufficientResources, codeStorageResources:
			return true, false
		case codeStoreFailed:
			d := strings.ToLower(apiErr.Description)
			for _, l := range limitErrors {
				if strings.Contains(d, l) {
					return true, true
				}
			}
			return strings.Contains(d, noSpace), false
		}
		return false, false
	}
	return strings.Contains(strings.ToLower(err.Error()), noSpace), false
}

// How often a full stream is probed, and how long a stream full for a
// reason its probe cannot see stays full without a write saying so.
const (
	ProbeEvery = 2 * time.Second
	RetryAfter = time.Minute
	probeLimit = 2 * time.Second
)

// Monitor holds the streams a process could not write to for want of
// room. The zero of *Monitor (nil) monitors nothing: services built
// without one (tests, tools) call Wrote on nil.
type Monitor struct {
	log      *slog.Logger
	js       jetstream.JetStream
	onChange func()

	// nfull is len(full), read without the lock on every write.
	nfull   atomic.Int32
	mu      sync.Mutex
	full    map[string]*fullness
	probing bool
	closed  chan struct{}
	once    sync.Once
}

// fullness is why a stream is full and what its probe compares.
type fullness struct {
	cause    error
	ownLimit bool
	since    time.Time
	// usage is the account's store usage when the write failed (0: not
	// known).
	usage uint64
}

// New returns a Monitor that logs to log, probes through js (nil: no
// probes, a write that succeeds clears) and calls onChange, from any
// goroutine, after a stream fills or stores again (it reads Err).
func New(log *slog.Logger, js jetstream.JetStream, onChange func()) *Monitor {
	return &Monitor{log: log, js: js, onChange: onChange, full: map[string]*fullness{}, closed: make(chan struct{})}
}

// Wrote records the outcome of a write to stream: a refusal for want of
// room marks it full (logged once, NOT_SERVING), a success clears it;
// any other error says nothing of its room and is ignored.
func (m *Monitor) Wrote(stream string, err error) {
	if m == nil || (err == nil && m.nfull.Load() == 0) {
		return
	}
	if err == nil {
		m.clear(stream, "a write succeeded")
		return
	}
	full, own := classify(err)
	if !full {
		return
	}
	m.mu.Lock()
	if _, ok := m.full[stream]; ok {
		m.mu.Unlock()
		return
	}
	f := &fullness{cause: err, ownLimit: own, since: time.Now()}
	m.full[stream] = f
	m.nfull.Store(int32(len(m.full))) //nolint:gosec // G115: a handful of streams
	startProbe := !m.probing && m.js != nil
	m.probing = m.probing || startProbe
	m.mu.Unlock()
	m.log.Error("NATS JetStream cannot store in stream "+stream+": reporting NOT_SERVING until it can (free space, raise the stream's max_bytes or the server's max_file_store)",
		"stream", stream, "cause", err)
	if !own && m.js != nil {
		ctx, cancel := context.WithTimeout(context.Background(), probeLimit)
		if ai, err := m.js.AccountInfo(ctx); err == nil {
			m.mu.Lock()
			f.usage = ai.Store
			m.mu.Unlock()
		}
		cancel()
	}
	m.changed()
	if startProbe {
		go m.probe()
	}
}

// clear marks stream as storing again, saying why.
func (m *Monitor) clear(stream, why string) {
	m.mu.Lock()
	f, ok := m.full[stream]
	if ok {
		delete(m.full, stream)
		m.nfull.Store(int32(len(m.full))) //nolint:gosec // G115: a handful of streams
	}
	m.mu.Unlock()
	if !ok {
		return
	}
	m.log.Info("NATS JetStream stores in stream "+stream+" again: "+why, "stream", stream, "full_for", time.Since(f.since).Round(time.Millisecond))
	m.changed()
}

func (m *Monitor) changed() {
	if m.onChange != nil {
		m.onChange()
	}
}

// Err says which streams cannot store and why; nil when every write
// stores.
func (m *Monitor) Err() error {
	if m == nil || m.nfull.Load() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.full))
	for s := range m.full {
		names = append(names, s)
	}
	sort.Strings(names)
	errs := make([]error, 0, len(names))
	for _, s := range names {
		errs = append(errs, fmt.Errorf("NATS stream %s cannot store: %w", s, m.full[s].cause))
	}
	return errors.Join(errs...)
}

// FullErr says which of streams cannot store and why (as Err does for
// all of them); nil when each stores, or m is nil. One atomic load while
// none is full.
func (m *Monitor) FullErr(streams ...string) error {
	if m == nil || m.nfull.Load() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, s := range streams {
		if f, ok := m.full[s]; ok {
			errs = append(errs, fmt.Errorf("NATS stream %s cannot store: %w", s, f.cause))
		}
	}
	return errors.Join(errs...)
}

// Close ends the probes.
func (m *Monitor) Close() {
	if m == nil {
		return
	}
	m.once.Do(func() { close(m.closed) })
}

// probe asks every ProbeEvery whether the full streams have room again,
// until none is full or Close.
func (m *Monitor) probe() {
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-m.closed:
			return
		case <-t.C:
		}
		m.mu.Lock()
		streams := make(map[string]fullness, len(m.full))
		for s, f := range m.full {
			streams[s] = *f
		}
		if len(streams) == 0 {
			m.probing = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		for s, f := range streams {
			if why := m.room(s, f); why != "" {
				m.clear(s, why)
			}
		}
	}
}

// room says why stream, full as f says, may store again ("" if not known).
func (m *Monitor) room(stream string, f fullness) string {
	ctx, cancel := context.WithTimeout(context.Background(), probeLimit)
	defer cancel()
	if f.ownLimit {
		st, err := m.js.Stream(ctx, stream)
		if err != nil {
			return ""
		}
		c, s := st.CachedInfo().Config, st.CachedInfo().State
		if (c.MaxBytes <= 0 || int64(s.Bytes) < c.MaxBytes) && (c.MaxMsgs <= 0 || int64(s.Msgs) < c.MaxMsgs) { //nolint:gosec // G115: sizes below 2^63
			return fmt.Sprintf("it holds %d bytes and %d messages, below its limits (%d, %d)", s.Bytes, s.Msgs, c.MaxBytes, c.MaxMsgs)
		}
		return ""
	}
	if ai, err := m.js.AccountInfo(ctx); err == nil && f.usage > 0 && ai.Store < f.usage {
		return fmt.Sprintf("the account's store went from %d to %d bytes", f.usage, ai.Store)
	}
	if time.Since(f.since) >= RetryAfter {
		return "no write said otherwise for " + RetryAfter.String() + ": letting writes try again"
	}
	return ""
}

// KeyValue returns kv with the outcome of every write told to m (kv
// itself when m is nil): a bucket is the stream KV_<bucket>.
func (m *Monitor) KeyValue(kv jetstream.KeyValue) jetstream.KeyValue {
	if m == nil {
		return kv
	}
	return &reportingKV{KeyValue: kv, m: m, stream: "KV_" + kv.Bucket()}
}

// reportingKV is a bucket whose writes are told to a Monitor.
type reportingKV struct {
	jetstream.KeyValue
	m      *Monitor
	stream string
}

func (k *reportingKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.KeyValue.Put(ctx, key, value)
	k.m.Wrote(k.stream, err)
	return rev, err
}

func (k *reportingKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	rev, err := k.KeyValue.PutString(ctx, key, value)
	k.m.Wrote(k.stream, err)
	return rev, err
}

func (k *reportingKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	k.m.Wrote(k.stream, err)
	return rev, err
}

func (k *reportingKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := k.KeyValue.Update(ctx, key, value, revision)
	k.m.Wrote(k.stream, err)
	return rev, err
}

func (k *reportingKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := k.KeyValue.Delete(ctx, key, opts...)
	k.m.Wrote(k.stream, err)
	return err
}

func (k *reportingKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := k.KeyValue.Purge(ctx, key, opts...)
	k.m.Wrote(k.stream, err)
	return err
}
