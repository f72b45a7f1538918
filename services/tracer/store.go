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
	facts    *factIndex  // the fact store at any seq (facts.go)
	n        int         // events stored
	last     *lctl.Event // the last event stored (nil: none)
	agents   []string    // every agent seen, in order of first appearance
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
// chain as it goes. A last line cut short by a crash is truncated away: its
// event was not acknowledged, so the stream delivers it again.
func (s *store) load() error {
	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return fmt.Errorf("create chain directory: %w", err)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("list chain directory: %w", err)
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
		c, err := s.loadFile(id, filepath.Join(s.dir, name))
		if err != nil {
			return err
		}
		chains[id] = c
	}
	s.mu.Lock()
	s.chains = chains
	s.loaded = true
	s.mu.Unlock()
	s.broadcast()
	return nil
}

func (s *store) loadFile(id, path string) (*chain, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open chain file: %w", err)
	}
	defer func() { _ = f.Close() }()
	c := s.newChain(id)
	r := bufio.NewReaderSize(f, 64<<10)
	var good int64 // offset just past the last complete line
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				s.log.Warn("truncating a chain file's incomplete last line", "chain_id", id, "line", lineNo, "bytes", len(line))
				if err := os.Truncate(path, good); err != nil {
					return nil, fmt.Errorf("truncate chain file %s: %w", path, err)
				}
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read chain file %s: %w", path, err)
		}
		good += int64(len(line))
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		e, err := lctl.DecodeEvent(line)
		if err != nil {
			c.fail(s.log, fmt.Sprintf("line %d of the stored chain does not decode: %v", lineNo, err))
			continue
		}
		if e.Seq <= c.lastSeq() {
			c.checkDuplicate(s.log, &e)
			continue
		}
		c.add(s.log, e, "")
	}
	return c, nil
}

// lastSeq returns the seq of the chain's last stored event (0 if none).
func (s *store) lastSeq(id string) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c := s.chains[id]; c != nil {
		return c.lastSeq()
	}
	return 0
}

// add stores e in memory after the chain's last event (the caller wrote it
// to the chain's file first) and checks that it links.
func (s *store) add(id string, e lctl.Event, computed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chainLocked(id).add(s.log, e, computed)
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
		last = c.lastSeq()
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

func (c *chain) lastSeq() uint64 {
	if c.last == nil {
		return 0
	}
	return c.last.Seq
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
	if c.last != nil {
		sum.lastTimestamp = c.last.Timestamp
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
	want := c.lastSeq() + 1
	prevHash := ""
	if c.last != nil {
		prevHash = c.last.Hash
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
	last := e
	c.last = &last
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

// batchFiles collects one batch's events per chain and makes them durable
// together before the batch is acknowledged: one write and one sync per
// chain file.
type batchFiles struct {
	dir   string
	bufs  map[string]*bytes.Buffer
	order []string // chains in the order they first appear in the batch
	// pending are the batch's events, in order, made visible by the caller
	// once their file is synced; last and hashes describe them.
	pending []pendingEvent
	last    map[string]uint64
	hashes  map[pendingKey]string
}

type pendingEvent struct {
	id       string
	event    lctl.Event
	computed string // e's hash as decoding computed it ("" if it did not)
}

type pendingKey struct {
	id  string
	seq uint64
}

func newBatchFiles(dir string) *batchFiles {
	return &batchFiles{dir: dir, bufs: map[string]*bytes.Buffer{}, last: map[string]uint64{}, hashes: map[pendingKey]string{}}
}

// add queues one event's line for the chain's file.
func (b *batchFiles) add(id string, line []byte, e lctl.Event, computed string) {
	buf := b.bufs[id]
	if buf == nil {
		buf = &bytes.Buffer{}
		b.bufs[id] = buf
		b.order = append(b.order, id)
	}
	buf.Write(line)
	buf.WriteByte('\n')
	b.pending = append(b.pending, pendingEvent{id, e, computed})
	b.last[id] = e.Seq
	b.hashes[pendingKey{id, e.Seq}] = e.Hash
}

// commit writes each chain's lines in one write and syncs the files, in
// parallel, so a batch that touched many chains costs about one sync. It
// returns the chains whose lines could not be written: their files are cut
// back to their previous size, so a file never holds half an event.
func (b *batchFiles) commit() (failed map[string]bool, err error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	failed = map[string]bool{}
	created := false
	for _, id := range b.order {
		wg.Go(func() {
			isNew, err := writeAndSync(filepath.Join(b.dir, id+chainFileExt), b.bufs[id].Bytes())
			mu.Lock()
			defer mu.Unlock()
			created = created || isNew
			if err != nil {
				errs = append(errs, fmt.Errorf("chain %s: %w", id, err))
				var we *writeError
				if errors.As(err, &we) {
					failed[id] = true
				}
			}
		})
	}
	wg.Wait()
	if created {
		if d, err := os.Open(b.dir); err == nil {
			if err := d.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("sync chain directory: %w", err))
			}
			_ = d.Close()
		}
	}
	return failed, errors.Join(errs...)
}

// writeError is a write that did not reach the file (as opposed to a sync
// that failed after it).
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// writeAndSync appends data to the file and syncs it. It reports whether
// the file was created.
func writeAndSync(path string, data []byte) (created bool, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return false, &writeError{fmt.Errorf("open chain file: %w", err)}
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return false, &writeError{fmt.Errorf("stat chain file: %w", err)}
	}
	if _, err := f.Write(data); err != nil {
		if terr := f.Truncate(info.Size()); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo partial write: %w", terr))
		}
		_ = f.Close()
		return info.Size() == 0, &writeError{fmt.Errorf("append to chain file: %w", err)}
	}
	err = f.Sync()
	if err != nil {
		err = fmt.Errorf("sync chain file: %w", err)
	}
	if cerr := f.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close chain file: %w", cerr))
	}
	return info.Size() == 0, err
}
