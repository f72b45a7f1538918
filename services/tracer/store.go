package tracer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// chainFileExt is the extension of a materialized chain: one JSON event a line.
const chainFileExt = ".jsonl"

// store is the tracer's index of materialized chains, backed by
// <dir>/<chain_id>.jsonl: every chain's summary, and the events of the
// chains read or written most recently, up to maxResident events in all;
// the others ("cold") are read back from their files when asked for. One
// goroutine (the consumer) writes and evicts; any number read.
type store struct {
	dir string
	log *slog.Logger
	// every is the snapshot interval of each chain's timeline.
	every int
	// maxResident bounds the events kept in memory (<= 0: no bound);
	// resident counts them.
	maxResident int
	resident    int
	// clock orders the chains' uses (chain.used).
	clock atomic.Uint64
	// hot is how long after its last write a chain is not evicted, so a
	// working set of chains being written that exceeds the bound does not
	// make every batch read chains back.
	hot time.Duration
	// warmMu makes one cold chain at a time read back.
	warmMu sync.Mutex

	mu      sync.RWMutex
	chains  map[string]*chain
	loaded  bool
	closed  bool
	changed chan struct{} // closed and replaced whenever chains advance
}

// chain is one materialized chain and what the tracer found checking it.
type chain struct {
	id string
	// timeline holds the events, in seq order with seqs strictly
	// increasing, the state after the last one and snapshots every N
	// events; nil (and facts too) while the chain is cold.
	timeline *lctl.Timeline
	facts    *factIndex // the fact store at any seq (facts.go)
	// used is the store's clock at the chain's last read or write.
	used atomic.Uint64
	// written is when the consumer last added events.
	written time.Time
	n       int      // events stored
	agents  []string // every agent seen, in order of first appearance
	// agentSet holds agents' names once there are more than a short list
	// searches cheaply: an OTLP trace may name thousands of agents.
	agentSet map[string]struct{}
	// lastSeq, lastHash and lastTimestamp are the last stored event's
	// (when n > 0).
	lastSeq       uint64
	lastHash      string
	lastTimestamp string
	// verifyErr names the first event at which the chain stopped checking
	// out ("" while it verifies).
	verifyErr      string
	lastTime       time.Time
	firstTimestamp string
}

// chainView is a consistent, read-only snapshot of a chain.
type chainView struct {
	summary  chainSummary
	events   []lctl.Event
	timeline *lctl.Timeline
	facts    factView
}

// chainSummary describes a chain without its events.
type chainSummary struct {
	id             string
	events         int
	firstTimestamp string
	lastTimestamp  string
	agents         []string
	verifyErr      string
	lastTime       time.Time
}

func newStore(dir string, log *slog.Logger, every, maxResident int) *store {
	return &store{dir: dir, log: log, every: every, maxResident: maxResident, hot: time.Minute, chains: map[string]*chain{}, changed: make(chan struct{})}
}

func (s *store) newChain(id string) *chain {
	return &chain{id: id, timeline: lctl.NewTimeline(id, s.every), facts: newFactIndex()}
}

// load reads every chain file of the directory into memory, checking each
// chain as it goes. The files are a cache of the stream: a last line cut
// short by a crash is truncated away (the stream delivers its event again),
// and a file with a line that does not decode is cut before that line and
// its chain listed in damaged, for the caller to read back from the stream.
func (s *store) load() (damaged []string, err error) {
	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return nil, fmt.Errorf("create chain directory: %w", err)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list chain directory: %w", err)
	}
	chains := map[string]*chain{}
	resident := 0
	for _, ent := range entries {
		name := ent.Name()
		if ent.IsDir() || !strings.HasSuffix(name, chainFileExt) {
			continue
		}
		id := strings.TrimSuffix(name, chainFileExt)
		if err := lctl.ValidateChainID(id); err != nil {
			s.log.Warn("ignoring file that is not a chain", "file", name, "err", err)
			continue
		}
		c, cut, err := s.loadFileTo(id, filepath.Join(s.dir, name), ^uint64(0), true)
		if err != nil {
			return nil, err
		}
		chains[id] = c
		if cut {
			damaged = append(damaged, id)
		}
		if s.maxResident > 0 && resident+c.n > s.maxResident && resident > 0 {
			c.timeline, c.facts = nil, nil // cold from the start
		} else {
			resident += c.n
		}
	}
	s.mu.Lock()
	s.resident = resident
	s.chains = chains
	s.loaded = true
	s.mu.Unlock()
	s.broadcast()
	return damaged, nil
}

// loadFileTo reads one chain file, its events through seq last; damaged
// reports that it was cut before a line that does not decode. Only with
// repair does it cut the file (at start); otherwise such a line is an
// error.
func (s *store) loadFileTo(id, path string, last uint64, repair bool) (c *chain, damaged bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("open chain file: %w", err)
	}
	defer func() { _ = f.Close() }()
	c = s.newChain(id)
	r := bufio.NewReaderSize(f, 64<<10)
	var good int64 // offset just past the last complete line
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 && repair {
				s.log.Warn("truncating a chain file's incomplete last line", "chain_id", id, "line", lineNo, "bytes", len(line))
				if err := os.Truncate(path, good); err != nil {
					return nil, false, fmt.Errorf("truncate chain file %s: %w", path, err)
				}
			}
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("read chain file %s: %w", path, err)
		}
		start := good
		good += int64(len(line))
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		e, computed, err := lctl.DecodeEventHashed(line)
		if err != nil && !repair {
			return nil, false, fmt.Errorf("chain file %s line %d: %w", path, lineNo, err)
		}
		if err != nil {
			s.log.Warn("cutting a chain file before a line that does not decode; reading the rest back from the stream",
				"chain_id", id, "line", lineNo, "err", err)
			if err := os.Truncate(path, start); err != nil {
				return nil, false, fmt.Errorf("truncate chain file %s: %w", path, err)
			}
			return c, true, nil
		}
		if e.Seq > last {
			break
		}
		if e.Seq <= c.lastSeq {
			c.checkDuplicate(s.log, &e)
			continue
		}
		c.add(s.log, e, computed)
	}
	return c, false, nil
}

// lastSeq returns the seq of the chain's last stored event (0 if none).
func (s *store) lastSeq(id string) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c := s.chains[id]; c != nil {
		return c.lastSeq
	}
	return 0
}

// addBatch stores a batch's events in memory after their chains' last
// events (the caller wrote them to the chain files first) and checks that
// they link; events of the failed chains are left out.
func (s *store) addBatch(pending []pendingEvent, failed map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		id  string
		c   *chain
		now = time.Now()
	)
	for i := range pending {
		p := &pending[i]
		if failed[p.id] {
			continue
		}
		if c == nil || p.id != id {
			id, c = p.id, s.chainLocked(p.id)
			if c.cold() {
				// The consumer warms a chain before it adds to it: this
				// is a fallback, reading the file under the lock.
				s.warmLocked(c)
			}
			c.used.Store(s.clock.Add(1))
			c.written = now
		}
		c.add(s.log, p.event, p.computed)
		if !c.cold() {
			s.resident++
		}
	}
}

// duplicate handles a redelivered event (seq already stored): it is skipped,
// but one that differs from the stored event marks the chain as forked.
func (s *store) duplicate(id string, e *lctl.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chains[id]; c != nil {
		if c.cold() {
			s.warmLocked(c)
		}
		c.checkDuplicate(s.log, e)
	}
}

// fail records a problem of a chain that is not tied to a stored event.
func (s *store) fail(id, problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chainLocked(id).fail(s.log, problem)
}

func (s *store) chainLocked(id string) *chain {
	c := s.chains[id]
	if c == nil {
		c = s.newChain(id)
		s.chains[id] = c
	}
	return c
}

// broadcast wakes everyone waiting for chains to advance.
func (s *store) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// close wakes every waiter for good.
func (s *store) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.changed)
	}
}

// watch returns the chain's last stored seq and a channel closed at the next
// change; closed reports that no change will come.
func (s *store) watch(id string) (last uint64, changed <-chan struct{}, closed bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c := s.chains[id]; c != nil {
		last = c.lastSeq
	}
	return last, s.changed, s.closed
}

// get returns a snapshot of a chain, reading it back from its file if it is
// cold.
func (s *store) get(id string) (chainView, error) {
	if err := lctl.ValidateChainID(id); err != nil {
		return chainView{}, err
	}
	s.mu.RLock()
	if !s.loaded {
		s.mu.RUnlock()
		return chainView{}, ErrNotReady
	}
	c := s.chains[id]
	if c == nil {
		s.mu.RUnlock()
		return chainView{}, fmt.Errorf("%w: %s", ErrChainNotFound, id)
	}
	if !c.cold() {
		v := s.viewLocked(c)
		s.mu.RUnlock()
		return v, nil
	}
	s.mu.RUnlock()
	return s.warm(id)
}

// viewLocked is the view of a warm chain (the lock held, for reading at
// least).
func (s *store) viewLocked(c *chain) chainView {
	c.used.Store(s.clock.Add(1))
	// Events are only ever appended, so the timeline's capped slice of the
	// current ones stays valid while the consumer goes on appending.
	return chainView{summary: c.summary(), events: c.timeline.Events(), timeline: c.timeline, facts: c.facts.view()}
}

func (c *chain) cold() bool { return c.timeline == nil }

// isCold reports whether the chain exists and is cold.
func (s *store) isCold(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.chains[id]
	return c != nil && c.cold()
}

// warm reads a cold chain's events back from its file, without holding the
// store's lock while it reads, and returns its view.
func (s *store) warm(id string) (chainView, error) {
	s.warmMu.Lock()
	defer s.warmMu.Unlock()
	s.mu.RLock()
	c := s.chains[id]
	cold, n, last := c.cold(), c.n, c.lastSeq
	s.mu.RUnlock()
	if cold {
		tl, facts, err := s.readBack(id, n, last)
		if err != nil {
			return chainView{}, err
		}
		s.mu.Lock()
		// Only the consumer adds events, and it warms a chain first.
		if c.cold() && c.n == n {
			c.timeline, c.facts = tl, facts
			s.resident += n
		}
		s.mu.Unlock()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c.cold() {
		return chainView{}, fmt.Errorf("chain %s was evicted again while read back", id)
	}
	return s.viewLocked(c), nil
}

// warmLocked reads a cold chain back with the lock held (a fallback: the
// consumer warms the chains it writes before it takes the lock).
func (s *store) warmLocked(c *chain) {
	tl, facts, err := s.readBack(c.id, c.n, c.lastSeq)
	if err != nil {
		// The file lost events the summary counts: start the chain's
		// events afresh rather than fail; the gap shows when it is checked.
		s.log.Error("read a cold chain back from its file", "chain_id", c.id, "err", err)
		c.fail(s.log, fmt.Sprintf("events 1 to %d could not be read back from the chain file: %v", c.lastSeq, err))
		c.timeline, c.facts, c.n = lctl.NewTimeline(c.id, s.every), newFactIndex(), 0
		return
	}
	c.timeline, c.facts = tl, facts
	s.resident += c.n
}

// readBack reads a chain's first n events (through seq last) from its file.
func (s *store) readBack(id string, n int, last uint64) (*lctl.Timeline, *factIndex, error) {
	c, _, err := s.loadFileTo(id, filepath.Join(s.dir, id+chainFileExt), last, false)
	if err != nil {
		return nil, nil, err
	}
	if c.n != n || c.lastSeq != last {
		return nil, nil, fmt.Errorf("chain file %s holds %d events through seq %d, %d through %d expected", id, c.n, c.lastSeq, n, last)
	}
	return c.timeline, c.facts, nil
}

// evict makes the least recently used chains cold until the events kept in
// memory are a tenth under the bound, keeping the most recently used one
// and the ones written to in the last s.hot whatever their size (the bound
// is on what is not being written). Called by the consumer.
func (s *store) evict() {
	if s.maxResident <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resident <= s.maxResident {
		return
	}
	var warm []*chain
	for _, c := range s.chains {
		if !c.cold() {
			warm = append(warm, c)
		}
	}
	sort.Slice(warm, func(i, j int) bool { return warm[i].used.Load() < warm[j].used.Load() })
	target := s.maxResident - s.maxResident/10
	now := time.Now()
	for _, c := range warm[:max(len(warm)-1, 0)] {
		if s.resident <= target {
			break
		}
		if now.Sub(c.written) < s.hot {
			continue
		}
		c.timeline, c.facts = nil, nil
		s.resident -= c.n
	}
}

// list returns up to limit summaries, newest last event first.
func (s *store) list(limit int) ([]chainSummary, error) {
	s.mu.RLock()
	if !s.loaded {
		s.mu.RUnlock()
		return nil, ErrNotReady
	}
	out := make([]chainSummary, 0, len(s.chains))
	for _, c := range s.chains {
		out = append(out, c.summary())
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].lastTime.Equal(out[j].lastTime) {
			return out[i].lastTime.After(out[j].lastTime)
		}
		return out[i].id < out[j].id
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (c *chain) summary() chainSummary {
	sum := chainSummary{
		id:             c.id,
		events:         c.n,
		agents:         append([]string(nil), c.agents...),
		verifyErr:      c.verifyErr,
		lastTime:       c.lastTime,
		firstTimestamp: c.firstTimestamp,
	}
	if c.n > 0 {
		sum.lastTimestamp = c.lastTimestamp
	}
	return sum
}

// add appends e, whose seq is past the chain's last, and checks it the way
// lctl.Verify does, one event at a time: the next seq, a prev_hash linking
// to the previous event and a hash matching the content. The first problem
// is kept on the chain; the event is stored either way, because the tracer
// shows what the stream holds.
// computed is the hash of e's content when the caller already has it
// ("": compute it here).
func (c *chain) add(log *slog.Logger, e lctl.Event, computed string) {
	want := c.lastSeq + 1
	prevHash := ""
	if c.n > 0 {
		prevHash = c.lastHash
	}
	problem := ""
	switch {
	case e.ChainID != "" && e.ChainID != c.id:
		problem = fmt.Sprintf("event %d: chain_id %q does not match the chain", e.Seq, e.ChainID)
	case e.Seq != want:
		problem = fmt.Sprintf("event %d: seq %d where %d was expected (events %d to %d are missing)", e.Seq, e.Seq, want, want, e.Seq-1)
	case e.Hash == "":
		problem = fmt.Sprintf("event %d: event has no hash", e.Seq)
	case e.PrevHash != prevHash:
		problem = fmt.Sprintf("event %d: prev_hash does not match the hash of event %d", e.Seq, want-1)
	default:
		h, err := computed, error(nil)
		if h == "" {
			h, err = e.ComputeHash()
		}
		if err != nil {
			problem = fmt.Sprintf("event %d: %v", e.Seq, err)
		} else if h != e.Hash {
			problem = fmt.Sprintf("event %d: content does not match its hash (the event was edited)", e.Seq)
		}
	}
	c.timeline.Append(e)
	c.facts.add(c.n, &e)
	if c.n == 0 {
		c.firstTimestamp = e.Timestamp
	}
	c.n++
	c.lastSeq, c.lastHash, c.lastTimestamp = e.Seq, e.Hash, e.Timestamp
	if e.Agent != "" {
		c.addAgent(e.Agent)
	}
	if t := e.Time(); !t.IsZero() {
		c.lastTime = t
	}
	if problem != "" {
		c.fail(log, problem)
	}
}

// checkDuplicate compares a second delivery of a stored seq with the stored
// event: the same event is a harmless redelivery, a different one a fork.
func (c *chain) checkDuplicate(log *slog.Logger, e *lctl.Event) {
	events := c.timeline.Events()
	i := sort.Search(len(events), func(i int) bool { return events[i].Seq >= e.Seq })
	if i < len(events) && events[i].Seq == e.Seq && events[i].Hash != e.Hash {
		c.fail(log, fmt.Sprintf("event %d: a second, different event %d was delivered (the chain was forked)", e.Seq, e.Seq))
	}
}

// fail records the chain's first problem and logs every one.
func (c *chain) fail(log *slog.Logger, problem string) {
	log.Warn("chain does not verify", "chain_id", c.id, "problem", problem)
	if c.verifyErr == "" {
		c.verifyErr = problem
	}
}

// addAgent appends an agent the chain has not named yet. A short list is
// searched; past agentListMax names a set answers, so a chain of n agents
// costs O(n), not O(n²), to build.
func (c *chain) addAgent(a string) {
	if c.agentSet != nil {
		if _, ok := c.agentSet[a]; ok {
			return
		}
		c.agentSet[a] = struct{}{}
		c.agents = append(c.agents, a)
		return
	}
	for _, x := range c.agents {
		if x == a {
			return
		}
	}
	c.agents = append(c.agents, a)
	if len(c.agents) > agentListMax {
		c.agentSet = make(map[string]struct{}, 2*len(c.agents))
		for _, x := range c.agents {
			c.agentSet[x] = struct{}{}
		}
	}
}

// agentListMax is the number of agents searched as a list.
const agentListMax = 16
