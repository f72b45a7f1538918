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
	"time"

	"github.com/xct-dev/xct/lctl"
)

// chainFileExt is the extension of a materialized chain: one JSON event a line.
const chainFileExt = ".jsonl"

// store is the tracer's index of materialized chains: every chain's events
// in memory, backed by <dir>/<chain_id>.jsonl. One goroutine (the consumer)
// writes; any number read.
type store struct {
	dir string
	log *slog.Logger
	// every is the snapshot interval of each chain's timeline.
	every int

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
	// events.
	timeline *lctl.Timeline
	facts    *factIndex // the fact store at any seq (facts.go)
	n        int        // events stored
	agents   []string   // every agent seen, in order of first appearance
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

func newStore(dir string, log *slog.Logger, every int) *store {
	return &store{dir: dir, log: log, every: every, chains: map[string]*chain{}, changed: make(chan struct{})}
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
		c, cut, err := s.loadFile(id, filepath.Join(s.dir, name))
		if err != nil {
			return nil, err
		}
		chains[id] = c
		if cut {
			damaged = append(damaged, id)
		}
	}
	s.mu.Lock()
	s.chains = chains
	s.loaded = true
	s.mu.Unlock()
	s.broadcast()
	return damaged, nil
}

// loadFile reads one chain file; damaged reports that it was cut before a
// line that does not decode.
func (s *store) loadFile(id, path string) (c *chain, damaged bool, err error) {
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
			if len(line) > 0 {
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
		if err != nil {
			s.log.Warn("cutting a chain file before a line that does not decode; reading the rest back from the stream",
				"chain_id", id, "line", lineNo, "err", err)
			if err := os.Truncate(path, start); err != nil {
				return nil, false, fmt.Errorf("truncate chain file %s: %w", path, err)
			}
			return c, true, nil
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
		id string
		c  *chain
	)
	for i := range pending {
		p := &pending[i]
		if failed[p.id] {
			continue
		}
		if c == nil || p.id != id {
			id, c = p.id, s.chainLocked(p.id)
		}
		c.add(s.log, p.event, p.computed)
	}
}

// duplicate handles a redelivered event (seq already stored): it is skipped,
// but one that differs from the stored event marks the chain as forked.
func (s *store) duplicate(id string, e *lctl.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chains[id]; c != nil {
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

// get returns a snapshot of a chain.
func (s *store) get(id string) (chainView, error) {
	if err := lctl.ValidateChainID(id); err != nil {
		return chainView{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.loaded {
		return chainView{}, ErrNotReady
	}
	c := s.chains[id]
	if c == nil {
		return chainView{}, fmt.Errorf("%w: %s", ErrChainNotFound, id)
	}
	// Events are only ever appended, so the timeline's capped slice of the
	// current ones stays valid while the consumer goes on appending.
	return chainView{summary: c.summary(), events: c.timeline.Events(), timeline: c.timeline, facts: c.facts.view()}, nil
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
	if e.Agent != "" && !contains(c.agents, e.Agent) {
		c.agents = append(c.agents, e.Agent)
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
