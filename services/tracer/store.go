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

	mu      sync.RWMutex
	chains  map[string]*chain
	loaded  bool
	closed  bool
	changed chan struct{} // closed and replaced whenever chains advance
}

// chain is one materialized chain and what the tracer found checking it.
type chain struct {
	id     string
	events []lctl.Event // in seq order, seqs strictly increasing
	agents []string     // every agent seen, in order of first appearance
	// verifyErr names the first event at which the chain stopped checking
	// out ("" while it verifies).
	verifyErr string
	lastTime  time.Time
}

// chainView is a consistent, read-only snapshot of a chain.
type chainView struct {
	summary chainSummary
	events  []lctl.Event
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

func newStore(dir string, log *slog.Logger) *store {
	return &store{dir: dir, log: log, chains: map[string]*chain{}, changed: make(chan struct{})}
}

// load reads every chain file of the directory into memory, checking each
// chain as it goes. A last line cut short by a crash is truncated away: its
// event was not acknowledged, so the stream delivers it again.
func (s *store) load() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
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
	defer f.Close()
	c := &chain{id: id}
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
		c.add(s.log, e)
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
func (s *store) add(id string, e lctl.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chainLocked(id).add(s.log, e)
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
		c = &chain{id: id}
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
	// Events are only ever appended, so a capped slice of the current
	// ones stays valid while the consumer goes on appending.
	n := len(c.events)
	return chainView{summary: c.summary(), events: c.events[:n:n]}, nil
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
	if len(c.events) == 0 {
		return 0
	}
	return c.events[len(c.events)-1].Seq
}

func (c *chain) summary() chainSummary {
	sum := chainSummary{
		id:        c.id,
		events:    len(c.events),
		agents:    append([]string(nil), c.agents...),
		verifyErr: c.verifyErr,
		lastTime:  c.lastTime,
	}
	if n := len(c.events); n > 0 {
		sum.firstTimestamp = c.events[0].Timestamp
		sum.lastTimestamp = c.events[n-1].Timestamp
	}
	return sum
}

// add appends e, whose seq is past the chain's last, and checks it the way
// lctl.Verify does, one event at a time: the next seq, a prev_hash linking
// to the previous event and a hash matching the content. The first problem
// is kept on the chain; the event is stored either way, because the tracer
// shows what the stream holds.
func (c *chain) add(log *slog.Logger, e lctl.Event) {
	want := c.lastSeq() + 1
	prevHash := ""
	if n := len(c.events); n > 0 {
		prevHash = c.events[n-1].Hash
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
		h, err := e.ComputeHash()
		if err != nil {
			problem = fmt.Sprintf("event %d: %v", e.Seq, err)
		} else if h != e.Hash {
			problem = fmt.Sprintf("event %d: content does not match its hash (the event was edited)", e.Seq)
		}
	}
	c.events = append(c.events, e)
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
	i := sort.Search(len(c.events), func(i int) bool { return c.events[i].Seq >= e.Seq })
	if i < len(c.events) && c.events[i].Seq == e.Seq && c.events[i].Hash != e.Hash {
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

// batchFiles appends events to chain files for one batch of messages and
// makes them durable together before the batch is acknowledged.
type batchFiles struct {
	dir     string
	files   map[string]*os.File
	sizes   map[string]int64
	created bool // a file was created: the directory must be synced too
}

func newBatchFiles(dir string) *batchFiles {
	return &batchFiles{dir: dir, files: map[string]*os.File{}, sizes: map[string]int64{}}
}

// append writes one line to the chain's file. On a failed write the file is
// cut back to its previous size, so it never holds half an event.
func (b *batchFiles) append(id string, line []byte) error {
	f, ok := b.files[id]
	if !ok {
		path := filepath.Join(b.dir, id+chainFileExt)
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("open chain file: %w", err)
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return fmt.Errorf("stat chain file: %w", err)
		}
		if info.Size() == 0 {
			b.created = true
		}
		b.files[id], b.sizes[id] = f, info.Size()
	}
	if _, err := f.Write(line); err != nil {
		if terr := f.Truncate(b.sizes[id]); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo partial write: %w", terr))
		}
		return fmt.Errorf("append to chain file %s: %w", id, err)
	}
	b.sizes[id] += int64(len(line))
	return nil
}

// commit syncs and closes every file written in the batch. The files are
// synced in parallel, so a batch that touched many chains costs about one
// sync.
func (b *batchFiles) commit() error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for id, f := range b.files {
		wg.Go(func() {
			err := f.Sync()
			if err != nil {
				err = fmt.Errorf("sync chain file %s: %w", id, err)
			}
			if cerr := f.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close chain file %s: %w", id, cerr))
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if b.created {
		if d, err := os.Open(b.dir); err == nil {
			if err := d.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("sync chain directory: %w", err))
			}
			d.Close()
		}
	}
	return errors.Join(errs...)
}
