package cli

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// Commands on a chain file read it as a stream when they can: one event at
// a time, decoded on every core, never all of it in memory, and (replay
// --to-seq) only up to the seq asked for. That is every JSON file whose
// events are in order (seq 1, 2, 3, ...; timestamps that parse and never go
// back; no event of another chain) and that reads without a warning. For
// anything else (YAML, stdin, a warning, a problem to report) streamChain
// says errNoStream and the command reads the whole file as it always did,
// so its output, warnings and errors are those of the full read.

// errNoStream says: read the chain the full way.
var errNoStream = errors.New("the chain is read in full")

// streamed is what a stream learned of the chain besides its events.
type streamed struct {
	label    string
	id       string
	warnings []string
	events   int
	lastSeq  uint64
}

// data turns it into the chainData reportInput takes.
func (s *streamed) data() *chainData {
	return &chainData{label: s.label, id: s.id, warnings: s.warnings}
}

// streamChain reads the chain file o event by event: header with the
// chain's id before the first event, fn with each event in order (ErrStop
// ends the stream). hash computes each event's hash on the decoding cores;
// line, when set, renders each event there (StreamEvent.Line).
//
// data, when set, names the types whose data fn reads
// (lctl.StreamOptions.Data); fn must read no other event's data. Neither
// fn nor line may read the members c.unread names
// (lctl.StreamOptions.Unread).
func (c *cmdContext) streamChain(o operand, hash bool, line func([]byte, *lctl.Event) []byte, data func(typ string) bool, header func(id string), fn func(e *lctl.StreamEvent) error) (_ *streamed, err error) {
	path := o.file
	if o.chain != "" || path == "" || path == "-" || c.env.getenv("LCTL_NO_STREAM") != "" {
		return nil, errNoStream
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return nil, errNoStream
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, errNoStream // the full read reports it
	}
	defer func() { _ = f.Close() }()
	streamReads.Add(1)
	if c.env.TuneGC && os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// Kept after a stream: what is left of the command (its
		// report, confidence's timeline) and the process end soon, and
		// the collector the restored settings started there marked what
		// the command keeps for nothing (confidence three times, stats
		// once). Put back for the full read, which needs the collector.
		restore := tuneGC()
		defer func() {
			if err != nil {
				restore()
			}
		}()
	}
	id := lctl.ChainIDForPath(path)
	st := &streamed{label: path}
	var prev time.Time
	hasPrev := false
	err = lctl.Stream(f, lctl.StreamOptions{ChainID: id, Hash: hash, SkipHashes: !hash, Fields: true, Line: line, Data: data, Unread: c.unread, Map: c.env.MapFiles}, func(h *lctl.StreamHeader) error {
		st.id, st.warnings = h.ChainID, h.Warnings
		header(h.ChainID)
		return nil
	}, func(e *lctl.StreamEvent) error {
		// What CheckSequence would report makes the command read the
		// chain in full, where the report says it all.
		if e.Seq != uint64(st.events)+1 || (e.ChainID != "" && st.id != "" && e.ChainID != st.id) {
			return errNoStream
		}
		if e.Timestamp != "" {
			if !e.TimeOK || (hasPrev && e.Time.Before(prev)) {
				return errNoStream
			}
			prev, hasPrev = e.Time, true
		}
		if err := fn(e); err != nil {
			return err
		}
		st.events++
		st.lastSeq = e.Seq
		return nil
	})
	if err != nil {
		// Unsupported, a problem to report, a read error: the full read
		// says what it is.
		return nil, errNoStream
	}
	return st, nil
}

// streamReads and fullReads count the files read as a stream and in full
// (readFile): the tests' way to tell which read a command took.
var streamReads, fullReads atomic.Int64

// streamMemory is the memory a streamed command lets the heap grow to
// before it collects: what it keeps (the state, the aggregates) is a
// fraction of it, the rest is the events passing through.
const streamMemory = 240 << 20

// tuneGC makes the collector run only when the heap nears streamMemory
// rather than each time it doubles: a stream makes garbage at the rate it
// reads and keeps little, so most collections would scan the same live
// state for nothing (it saved a fifth of the CPU on a million events).
// Until session 15 it ran at five times the live heap too (GOGC 400): two
// collections of `stats` on the 1M file, three of `replay`, whose
// marking and write barriers cost more than the pages the heap now grows
// into (peak RSS ~110 and ~190 MiB). A heap that stays near the limit
// (a chain whose kept state is as large) is collected as often as it was
// before, the limit ruling either way. It returns what puts the settings
// back.
func tuneGC() func() {
	limit := debug.SetMemoryLimit(streamMemory)
	percent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}
}
