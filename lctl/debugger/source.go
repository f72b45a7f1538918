package debugger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/xct-dev/xct/lctl"
)

// ErrChainNotFound is returned by a Source for a chain it does not have.
var ErrChainNotFound = errors.New("chain not found")

// ErrUnavailable is returned by a Source that cannot answer yet (a tracer
// still loading its chains).
var ErrUnavailable = errors.New("chains are not available yet")

// Source is where the debugger's chains come from: chain files (FileSource)
// or the tracer's live store.
type Source interface {
	// Mode is "file" or "cluster".
	Mode() string
	// Chains describes every chain.
	Chains(ctx context.Context) ([]ChainInfo, error)
	// Chain returns a consistent view of one chain, or ErrChainNotFound.
	Chain(ctx context.Context, id string) (*Chain, error)
	// Watch returns the chain's last stored seq and a channel closed at the
	// next change of any chain; closed reports that no change will ever
	// come (a file, or a source that shut down).
	Watch(id string) (last uint64, changed <-chan struct{}, closed bool)
}

// ChainInfo describes a chain without its events.
type ChainInfo struct {
	ID             string
	Events         int
	FirstTimestamp string
	LastTimestamp  string
	Agents         []string
	// VerifyError is the first problem of the chain's hash chain ("" when
	// it verifies), when VerifyKnown.
	VerifyError string
	VerifyKnown bool
	// Live chains may still grow.
	Live bool
}

// Chain is a consistent view of a chain: its events and its timeline.
type Chain struct {
	ChainInfo
	// Events in chain order; the slice must not be modified.
	Events []lctl.Event
	// Timeline holds the same events with snapshots of their state.
	Timeline *lctl.Timeline
	// Sorted is true when seqs strictly increase along Events.
	Sorted bool
	// Warnings say what reading the chain had to assume or convert.
	Warnings []string
}

// LoadError is a chain file that could not be read.
type LoadError struct {
	File    string `json:"file"`
	Message string `json:"message"`
}

// FileSource serves chain files: every file is read once, in full, when
// the source is built.
type FileSource struct {
	chains []*Chain // in the order the files were given
	errs   []LoadError
}

// maxFileBytes bounds a chain file.
const maxFileBytes = lctl.MaxFileBytes

// NewFileSource reads the chain files. A file that cannot be read or does
// not parse is not an error: it is reported by LoadErrors (and through
// /api/info), and the other files are served. Two files naming the same
// chain are served as ID and ID-2 (and so on), so two versions of one run
// can be compared.
func NewFileSource(paths ...string) *FileSource {
	fs := &FileSource{}
	taken := map[string]bool{}
	for _, p := range paths {
		c, err := LoadChainFile(p)
		if err != nil {
			fs.errs = append(fs.errs, LoadError{File: p, Message: err.Error()})
			continue
		}
		id := c.ID
		for i := 2; taken[id]; i++ {
			id = fmt.Sprintf("%s-%d", c.ID, i)
			if len(id) > 128 {
				id = fmt.Sprintf("chain-%d", i)
			}
		}
		taken[id] = true
		if id != c.ID {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s names chain %s, already served by another file: served as %s", p, c.ID, id))
			c.ID = id
			c.Timeline = timelineOf(id, c.Events)
		}
		fs.chains = append(fs.chains, c)
	}
	return fs
}

// LoadChainFile reads one chain file (JSON or YAML, by extension or by its
// first character) the way lctl's commands do: tolerantly, keeping unknown
// event types, and noting in Warnings what it had to convert and where the
// events are out of order.
func LoadChainFile(path string) (*Chain, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open chain file: %w", err)
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(raw) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileBytes)
	}
	file, err := lctl.Decode(bytes.NewReader(raw), lctl.FormatOf(path, raw), lctl.DecodeOptions{ChainID: lctl.ChainIDForPath(path)})
	if err != nil {
		return nil, err
	}
	id := file.Chain.ID
	if err := lctl.ValidateChainID(id); err != nil {
		id = lctl.ChainIDForPath(path)
		file.Warnings = append(file.Warnings, fmt.Sprintf("the chain id %q cannot be used in a URL; served as %s", file.Chain.ID, id))
	}
	c := &Chain{
		ChainInfo: ChainInfo{ID: id, Events: len(file.Events)},
		Events:    file.Events,
		Timeline:  timelineOf(id, file.Events),
		Sorted:    true,
		Warnings:  append([]string(nil), file.Warnings...),
	}
	seen := map[string]bool{}
	for i := range file.Events {
		e := &file.Events[i]
		if i > 0 && e.Seq <= file.Events[i-1].Seq {
			c.Sorted = false
		}
		if e.Agent != "" && !seen[e.Agent] {
			seen[e.Agent] = true
			c.Agents = append(c.Agents, e.Agent)
		}
	}
	if n := len(file.Events); n > 0 {
		c.FirstTimestamp, c.LastTimestamp = file.Events[0].Timestamp, file.Events[n-1].Timestamp
	}
	problems := lctl.CheckSequence(id, file.Events)
	for i, p := range problems {
		if i == 10 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%d more problems with the order of events", len(problems)-10))
			break
		}
		c.Warnings = append(c.Warnings, p.Message)
	}
	return c, nil
}

func timelineOf(id string, events []lctl.Event) *lctl.Timeline {
	t := lctl.NewTimeline(id, lctl.DefaultSnapshotEvery)
	for _, e := range events {
		t.Append(e)
	}
	return t
}

// LoadErrors lists the files that could not be read.
func (s *FileSource) LoadErrors() []LoadError { return append([]LoadError(nil), s.errs...) }

// Loaded returns the chains read, in the order of the files.
func (s *FileSource) Loaded() []*Chain { return append([]*Chain(nil), s.chains...) }

// Mode implements Source.
func (s *FileSource) Mode() string { return "file" }

// Chains implements Source.
func (s *FileSource) Chains(context.Context) ([]ChainInfo, error) {
	out := make([]ChainInfo, len(s.chains))
	for i, c := range s.chains {
		out[i] = c.ChainInfo
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastTimestamp > out[j].LastTimestamp })
	return out, nil
}

// Chain implements Source.
func (s *FileSource) Chain(_ context.Context, id string) (*Chain, error) {
	for _, c := range s.chains {
		if c.ID == id {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrChainNotFound, id)
}

// closedCh is a channel that is always closed.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Watch implements Source: files never change.
func (s *FileSource) Watch(string) (uint64, <-chan struct{}, bool) { return 0, closedCh, true }
