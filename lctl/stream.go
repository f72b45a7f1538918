package lctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Streaming: a chain file read one event at a time, for files too large to
// hold. The reader finds each element of the events array (a scan for
// brackets and strings, nothing decoded; in files of one event per line,
// the newlines), hands batches of them to a decoder on every core and
// gives them to the caller in file order, never holding more than a few
// batches. It reads the files XCT writes and any
// file in the same layout (lctl and chain before events); for anything it
// would have to report or convert (an error, a warning, a key given twice,
// chain after events) it stops with ErrStreamUnsupported, and the caller
// reads the file with Decode, which says exactly what Decode always said.

// ErrStreamUnsupported says the file needs Decode: something in it is
// reported or converted (a warning, an error), or laid out so that a
// stream cannot read it (the chain id after the events).
var ErrStreamUnsupported = errors.New("lctl: the file needs a full read")

// ErrStop, returned by a Stream callback, ends the stream early without an
// error (replay --to-seq stops reading at its seq).
var ErrStop = errors.New("lctl: stop")

// StreamOptions tune Stream.
type StreamOptions struct {
	// ChainID names the chain when the file does not (as DecodeOptions).
	ChainID string
	// Workers decode in parallel; 0 uses GOMAXPROCS.
	Workers int
	// Hash asks every event's hash to be computed as it is decoded
	// (StreamEvent.Computed), on the decoding cores: what verify needs.
	Hash bool
	// SkipHashes leaves the events' hash and prev_hash empty (they are
	// still checked to be strings): what replay and the analyses need
	// without the cost of two strings per event.
	SkipHashes bool
	// Fields streams each event's data as fields (Event.Get, Lookup,
	// RangeData, DataMap) instead of a map in Data, which stays nil: a
	// caller that reads data only through those saves a map per event.
	// The fields lie in an array the stream reuses once the callback has
	// returned: an event kept past its callback is copied with Own or
	// OwnInto (a plain copy would share the array), or its data dropped
	// (DropData).
	Fields bool
	// Line, when set, renders each event on the decoding cores
	// (StreamEvent.Line): the per-event work of a caller that prints
	// every event, done in parallel. It must only read the event.
	Line func(dst []byte, e *Event) []byte
	// Data, when set, says which events' data the caller reads, by type:
	// the data of an event of any other type is checked as it would be
	// decoded (so what the stream accepts and gives way on is the same)
	// but not decoded, and reading it panics (Get, Str, RangeData, ...:
	// the caller was wrong about what it reads). Not with Hash, whose
	// Not with Line, which may read any event's. With Hash, whose hashes
	// need the data, it holds until a decoding core meets an event that
	// carries a hash: that event is decoded again in full, and that core
	// decodes every event's data from then on (a chain either carries
	// hashes or not; verify of a chain without them reads a few types).
	// A command that reads a few types saves most of the decoding of the
	// others.
	Data func(typ string) bool
	// Unread (with Fields; not with Hash) names per type the member of
	// the data the caller never reads, or two separated by a comma ("intent,step_id";
	// "" for none), nor Line when set: a string, object or array value
	// of it is checked as it would be decoded but not kept (a step's
	// intent is most of a step_start's bytes; a step's id, new at each
	// step, was copied and put in the decoder's tables), and reading the
	// member panics. Naming more than two panics.
	Unread func(typ string) string
	// Map reads a file of one event per line through a read-only mapping
	// of it rather than into buffers, and the events' strings and data
	// point into the mapping instead of being copied: the kernel copies
	// nothing, and the heap does not grow by the events' bytes (its
	// fresh pages are a tenth of a command's CPU). The mapping is never
	// unmapped; the pages of the events passed are given back as the
	// stream goes (a string kept past its callback reads its page again
	// from the page cache). For a process that reads a file no one
	// truncates or rewrites while it runs (lctl): reading a page of a
	// file cut shorter faults (SIGBUS), which the stream's decoders
	// return as ErrFileChanged and the caller's goroutine must recover
	// itself (debug.SetPanicOnFault and MappedFault, as lctl's cli
	// does), and a string read after its bytes were rewritten shows the
	// new bytes.
	Map bool
}

// StreamHeader is what a file says before its events.
type StreamHeader struct {
	LCTL    string
	ChainID string
	// Warnings are the header's (a file without a version, a chain given as
	// a string, a chain id taken from the options).
	Warnings []string
}

// StreamEvent is one event as the stream hands it over.
type StreamEvent struct {
	Event
	// Computed is the hash of the event's content (ComputeHash), when
	// StreamOptions.Hash asked for it and the event carries a hash;
	// HashErr says why it could not be.
	Computed string
	HashErr  error
	// Time is the parsed timestamp (ParseTime), TimeOK whether it parsed;
	// parsed on the decoding cores.
	Time   time.Time
	TimeOK bool
	// Line is StreamOptions.Line's rendering of the event, with a
	// newline. The lines of consecutive events of a batch lie one after
	// the other in one array, which is never reused: Line may be kept,
	// and a kept line extended over the next (its capacity reaches past
	// it).
	Line []byte
}

// streamBatch is a run of consecutive events of the file.
type streamBatch struct {
	raw    []byte   // a read buffer of the file, which holds the events
	buf    *readBuf // raw's buffer, released once the events are decoded
	starts []int32  // where each event starts in raw
	ends   []int32  // and ends
	idx    []int32  // the array of starts, ends and lineSplit (recycled)
	// lineSplit lists the events found as lines, not scanned: one of them
	// that the fast reader cannot take is not an event to decode the slow
	// way but a file to read in full.
	lineSplit []int32
	events    []StreamEvent
	slab      []dataField // the events' data fields (Fields), recycled with them
	// mapped says raw lies in a mapping of the file that is never
	// unmapped (StreamOptions.Map): the events' strings point into it.
	mapped bool
	err    error
	done   chan struct{}
	// records says its events were cut as records of lines
	// (readRecords), the first starting at the file's offset recordAt:
	// an error decoding them is the scanner's to decide from there.
	records  bool
	recordAt int64
}

// batchEvents is how many events a batch carries; batchBytes bounds its
// bytes.
const (
	batchEvents = 512
	batchBytes  = 1 << 20
)

// Stream reads a JSON chain file and calls fn with each event in file order
// (the pointer is valid only during the call; copy what you keep). header
// is called once, before the first event. It returns ErrStreamUnsupported
// when the file must be read with Decode (see above), and fn's error, except
// ErrStop, which ends the stream without one.
func Stream(r io.Reader, opts StreamOptions, header func(*StreamHeader) error, fn func(*StreamEvent) error) error {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	sc := &scanner{r: r, cur: getReadBuf(readSize)}
	sc.buf = sc.cur.b[:0]
	h, err := sc.header(opts)
	if err != nil {
		return err
	}
	if err := header(h); err != nil {
		return err
	}

	if pr, ok := r.(positionalReader); ok {
		var done bool
		sc, done, err = streamChunked(pr, sc, opts, workers, fn)
		if done {
			return err
		}
	}
	return streamPipeline(sc, opts, workers, fn)
}

// newStreamBatch returns an empty batch for up to n events.
func newStreamBatch(n int) *streamBatch {
	// Where the batch's events start and end, and which were found as
	// lines: one array.
	var idx []int32
	if p, _ := indexArrays.Get().(*[]int32); p != nil && len(*p) == 3*n {
		idx = *p
	} else {
		idx = make([]int32, 3*n)
	}
	return &streamBatch{
		starts: idx[:0:n], ends: idx[n : n : 2*n],
		lineSplit: idx[2*n : 2*n : 3*n], idx: idx, done: make(chan struct{}),
	}
}

// newStreamParser returns a decoding core's parser.
func newStreamParser(opts StreamOptions) *fastParser {
	p := newFastParser()
	p.skipHashes = opts.SkipHashes && !opts.Hash
	p.fields = opts.Fields
	if opts.Fields && opts.Line == nil {
		p.copySmall = true
		p.dataFor = opts.Data
	}
	if opts.Fields && !opts.Hash {
		p.unreadFor = opts.Unread
	}
	return p
}

// streamPipeline reads the rest of the file from sc: one goroutine finds
// the events, every core decodes batches of them, the caller's goroutine
// applies them in file order.
func streamPipeline(sc *scanner, opts StreamOptions, workers int, fn func(*StreamEvent) error) error {
	work := make(chan *streamBatch, workers*2)
	ordered := make(chan *streamBatch, workers*3)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			p := newStreamParser(opts)
			for b := range work {
				b.decode(p, opts.Hash, opts.Line)
				close(b.done)
			}
		})
	}
	// The splitter: finds events and batches them.
	var splitErr error
	go func() {
		defer close(ordered)
		defer close(work)
		defer func() { sc.cur.release() }()
		for {
			b := newStreamBatch(batchEvents)
			more, err := sc.fill(b)
			// The events before a problem are handed over first: replay
			// --to-seq of a file cut after its seq still works.
			if err != nil {
				splitErr = err
				more = false
			}
			if len(b.ends) > 0 {
				select {
				case ordered <- b:
				case <-quit:
					return
				}
				select {
				case work <- b:
				case <-quit:
					close(b.done)
					return
				}
			}
			if !more {
				return
			}
		}
	}()
	stop := func() {
		close(quit)
		for b := range ordered { // let the splitter and workers finish
			<-b.done
		}
		wg.Wait()
	}
	for b := range ordered {
		<-b.done
		if b.err != nil {
			stop()
			return b.err
		}
		for i := range b.events {
			if err := fn(&b.events[i]); err != nil {
				stop()
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		b.recycle()
	}
	wg.Wait()
	return splitErr
}

// decode decodes the batch's events.
func (b *streamBatch) decode(p *fastParser, hash bool, line func([]byte, *Event) []byte) {
	// The events' strings are copies: the bytes can be read into again.
	defer func() {
		b.raw = nil
		b.buf.release()
		b.buf = nil
	}()
	b.events = getEvents(len(b.ends))
	p.alias = b.mapped
	if p.fields {
		// One array for the batch's data members, not one allocation per
		// event, reused once the caller has seen the batch (recycle).
		p.slab = getSlab(len(b.ends) * 6)
	}
	// The batch's timestamps, short strings and composite values in one
	// array (not reused: an event kept past its callback keeps its
	// timestamp), sized from the previous batch's (an eighth more): grown
	// from a timestamp's worth per event it was replaced and copied on
	// most batches.
	per := max(p.arenaBytes+p.arenaBytes/8, 24)
	if p.alias {
		// Only what is not taken from the mapping (escaped strings, odd
		// timestamps): often nothing.
		per = p.arenaBytes + p.arenaBytes/8
	}
	p.arena = make([]byte, 0, len(b.ends)*per)
	p.arenaFull = 0
	nextLine := 0
	for i, end := range b.ends {
		raw := b.raw[b.starts[i]:end]
		se := &b.events[i]
		*se = StreamEvent{}
		e := &se.Event
		err := p.fastEventInto(e, raw)
		if hash && err == nil && p.dataFor != nil && e.Hash != "" {
			// Its hash needs its data, which may have been skipped: read
			// again in full, as every event from here on (Data says).
			p.dataFor = nil
			*e = Event{}
			err = p.fastEventInto(e, raw)
		}
		line := nextLine < len(b.lineSplit) && int(b.lineSplit[nextLine]) == i
		if line {
			nextLine++
		}
		if err != nil && line {
			b.err = ErrStreamUnsupported
			return
		}
		if err != nil {
			// Input that is not UTF-8 is Decode's to report.
			if !utf8.Valid(raw) {
				b.err = ErrStreamUnsupported
				return
			}
			var warns []string
			*e, warns, err = decodeFileEvent(raw)
			if err != nil || len(warns) > 0 {
				b.err = ErrStreamUnsupported
				return
			}
			err = errUnsure // the hash the full way, below
		}
		if p.skipHashes {
			e.Hash, e.PrevHash = "", ""
		}
		if e.Timestamp != "" {
			if p.stamp != nil && unsafe.StringData(e.Timestamp) == p.stamp { //nolint:gosec // two addresses compared, nothing read through them
				se.Time, se.TimeOK = p.stampTime, true // stampOfSecond's
			} else {
				se.Time, se.TimeOK = p.times.parse(e.Timestamp)
			}
		}
		p.stamp = nil
		if p.fields {
			e.setTime(se.Time, se.TimeOK)
		}
		if hash && e.Hash != "" {
			// Only an event that carries a hash has it checked (an
			// unsealed one's would be computed the full way, for nothing).
			// On a copy: hashing the full way makes the data's map (DataMap),
			// which a streamed event does not carry.
			c := *e
			if err == nil {
				se.Computed, se.HashErr = p.computedHash(&c)
			} else {
				se.Computed, se.HashErr = c.ComputeHash()
			}
		}
	}
	b.slab = p.slab
	if len(b.events) > 0 {
		p.arenaBytes = (p.arenaFull+len(p.arena))/len(b.events) + 1
	}
	p.slab, p.arena = nil, nil
	if line != nil {
		// The lines in one array sized from the previous batch's (an
		// eighth more): grown by append from nothing it was copied and
		// cleared some ten times over (a tenth of replay's CPU).
		per := p.lineBytes
		if per == 0 {
			per = 128
		}
		out := make([]byte, 0, len(b.events)*(per+per/8))
		if cap(p.lineEnds) < len(b.events) {
			p.lineEnds = make([]int, len(b.events))
		}
		ends := p.lineEnds[:len(b.events)]
		for i := range b.events {
			out = line(out, &b.events[i].Event)
			out = append(out, '\n')
			ends[i] = len(out)
		}
		if len(b.events) > 0 {
			p.lineBytes = len(out)/len(b.events) + 1
		}
		start := 0
		for i := range b.events {
			// Not capped: a caller may join consecutive lines (Line says).
			b.events[i].Line = out[start:ends[i]]
			start = ends[i]
		}
	}
	b.raw = nil
}

// The batches' event arrays are reused once the caller has seen them: a
// stream of a million events allocates a few, not two thousand. The
// callback's event is valid only during the call, as Stream says; a copy
// of it shares nothing with the array.
var eventArrays = sync.Pool{New: func() any { return new([]StreamEvent) }}

func getEvents(n int) []StreamEvent {
	p := eventArrays.Get().(*[]StreamEvent)
	if cap(*p) < n {
		return make([]StreamEvent, n)
	}
	return (*p)[:n]
}

// The batches' arrays of where their events lie, reused as the event
// arrays are (some 6 KB a batch, 12 MB on a million events otherwise).
var indexArrays sync.Pool

// The batches' arrays of data fields, reused as the event arrays are.
var slabs = sync.Pool{New: func() any { return new([]dataField) }}

func getSlab(n int) []dataField {
	p := slabs.Get().(*[]dataField)
	if cap(*p) < n {
		return make([]dataField, 0, n)
	}
	return (*p)[:0]
}

// recycle hands the batch's arrays back for the next batches.
func (b *streamBatch) recycle() {
	if b.idx != nil {
		idx := b.idx
		indexArrays.Put(&idx)
		b.idx, b.starts, b.ends, b.lineSplit = nil, nil, nil, nil
	}
	if b.slab != nil {
		sl := b.slab
		slabs.Put(&sl)
		b.slab = nil
	}
	if b.events != nil {
		ev := b.events
		eventArrays.Put(&ev)
		b.events = nil
	}
}

// readBuf is a buffer the file is read into, shared by the scanner and
// the batches found in it, and reused once none of them needs it: a
// million events are read through a handful of buffers, not 90 new ones.
type readBuf struct {
	b    []byte
	refs atomic.Int32
}

var readBufs = keep{pool: sync.Pool{New: func() any { return &readBuf{b: make([]byte, 0, readSize)} }}, spare: spares(8)}

// getReadBuf returns a buffer of at least n bytes' capacity with one
// reference (the caller's).
func getReadBuf(n int) *readBuf {
	var rb *readBuf
	if n <= readSize {
		rb = readBufs.Get().(*readBuf)
	} else {
		rb = &readBuf{b: make([]byte, 0, n)}
	}
	rb.refs.Store(1)
	return rb
}

// release drops a reference; the last one returns the buffer to the pool.
func (rb *readBuf) release() {
	if rb == nil || rb.refs.Add(-1) != 0 {
		return
	}
	if cap(rb.b) == readSize {
		rb.b = rb.b[:0]
		readBufs.Put(rb)
	}
}

// hold makes the batch keep rb until its events are decoded.
func (b *streamBatch) hold(rb *readBuf) {
	if b.buf == nil {
		rb.refs.Add(1)
		b.buf = rb
	}
}

// scanner reads the file's bytes and finds the values in them.
type scanner struct {
	r io.Reader
	// cur is the read buffer buf lies in; the scanner holds one reference
	// to it, each batch found in it another.
	cur *readBuf
	buf []byte // unread bytes are buf[pos:]
	pos int
	eof bool
	// inEvents is true between the events' [ and ].
	inEvents, first bool
	// unread is true when the next event's separator was read but not
	// the event (a batch ended before it).
	unread bool
	// lineMode splits events at newlines (checkLines); lineChecks counts
	// the events seen to end their line (-1: one did not).
	lineMode   bool
	lineChecks int
}

// readSize is how much of the file each read asks for.
const readSize = 1 << 20

// more reads more of the file; false at its end. Reads append to the
// buffer; when it is full, the unread bytes move to a new one. Batches
// point into the buffers they were found in, and bytes once read are never
// written again.
func (s *scanner) more() (bool, error) {
	if s.eof {
		return false, nil
	}
	if cap(s.buf)-len(s.buf) < readSize/16 {
		tail := s.buf[s.pos:]
		nb := getReadBuf(max(readSize, 2*len(tail)))
		s.buf = append(nb.b[:0], tail...)
		s.pos = 0
		s.cur.release()
		s.cur = nb
	}
	// Reading past the end of what was read leaves what batches point to
	// as it is.
	n, err := io.ReadAtLeast(s.r, s.buf[len(s.buf):cap(s.buf)], 1)
	s.buf = s.buf[:len(s.buf)+n]
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		s.eof = true
		return n > 0, nil
	}
	if err != nil {
		return false, fmt.Errorf("read chain: %w", err)
	}
	return true, nil
}

// skipSpace moves past white space, reading as needed; false at the end
// of the file.
func (s *scanner) skipSpace() (bool, error) {
	for {
		for s.pos < len(s.buf) {
			switch s.buf[s.pos] {
			case ' ', '\n', '\r', '\t':
				s.pos++
				continue
			}
			return true, nil
		}
		ok, err := s.more()
		if err != nil || !ok {
			return false, err
		}
	}
}

// valueEnd returns the end (exclusive, an offset in buf) of the JSON value
// that starts at buf[pos], reading as needed. Only strings and brackets are
// looked at; the decoder checks the rest.
func (s *scanner) valueEnd() (int, error) {
	for {
		end, st := scanValue(s.buf[s.pos:])
		switch st {
		case scanComplete:
			return s.pos + end, nil
		case scanBad:
			return 0, ErrStreamUnsupported
		}
		ok, err := s.more()
		if err != nil {
			return 0, err
		}
		if !ok {
			if st == scanScalarAtEnd {
				return len(s.buf), nil
			}
			return 0, ErrStreamUnsupported // truncated: Decode says where
		}
	}
}

const (
	scanComplete = iota
	scanIncomplete
	scanScalarAtEnd // a number or literal that runs to the end of b
	scanBad
)

// scanValue finds the end of the value at the start of b.
func scanValue(b []byte) (int, int) {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			j := i + 1
			for {
				k := bytes.IndexByte(b[j:], '"')
				if k < 0 {
					return 0, scanIncomplete
				}
				j += k
				// An odd number of backslashes before it escapes it.
				bs := 0
				for x := j - 1; x > i && b[x] == '\\'; x-- {
					bs++
				}
				if bs%2 == 0 {
					break
				}
				j++
			}
			i = j
			if depth == 0 {
				return i + 1, scanComplete
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, scanComplete // ends a scalar
			}
			depth--
			if depth == 0 {
				return i + 1, scanComplete
			}
		case ',', ' ', '\n', '\r', '\t', ':':
			if depth == 0 {
				if i == 0 {
					return 0, scanBad
				}
				return i, scanComplete // ends a scalar
			}
		}
	}
	if depth == 0 && len(b) > 0 {
		return 0, scanScalarAtEnd
	}
	return 0, scanIncomplete
}

// header reads the top level up to the events' [ and checks it as Decode
// does.
func (s *scanner) header(opts StreamOptions) (*StreamHeader, error) {
	ok, err := s.skipSpace()
	if err != nil {
		return nil, err
	}
	if !ok || s.buf[s.pos] != '{' {
		return nil, ErrStreamUnsupported
	}
	s.pos++
	d := &rawDoc{top: map[string]json.RawMessage{}}
	for {
		ok, err := s.skipSpace()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, ErrStreamUnsupported
		}
		if s.buf[s.pos] == ',' && len(d.keys) > 0 {
			s.pos++
			if _, err := s.skipSpace(); err != nil {
				return nil, err
			}
		}
		if s.pos >= len(s.buf) || s.buf[s.pos] != '"' {
			return nil, ErrStreamUnsupported
		}
		end, err := s.valueEnd()
		if err != nil {
			return nil, err
		}
		var key string
		if err := json.Unmarshal(s.buf[s.pos:end], &key); err != nil {
			return nil, ErrStreamUnsupported
		}
		s.pos = end
		if ok, err := s.skipSpace(); err != nil || !ok || s.buf[s.pos] != ':' {
			return nil, ErrStreamUnsupported
		}
		s.pos++
		if ok, err := s.skipSpace(); err != nil || !ok {
			return nil, ErrStreamUnsupported
		}
		if _, dup := d.top[key]; dup {
			return nil, ErrStreamUnsupported
		}
		if key == "events" {
			if s.buf[s.pos] != '[' {
				return nil, ErrStreamUnsupported
			}
			s.pos++
			d.hasEvents = true
			break
		}
		end, err = s.valueEnd()
		if err != nil {
			return nil, err
		}
		v := append(json.RawMessage(nil), s.buf[s.pos:end]...)
		if !json.Valid(v) || !utf8.Valid(v) {
			return nil, ErrStreamUnsupported
		}
		d.top[key] = v
		d.keys = append(d.keys, key)
		s.pos = end
	}
	// Only the spec's header keys may come before the events: other
	// sections there (state, extras) send the file to the full read, which
	// is rare and keeps this simple; after the events they are fine.
	for _, k := range d.keys {
		if k != "lctl" && k != "chain" {
			return nil, ErrStreamUnsupported
		}
	}
	f, err := d.file(DecodeOptions{ChainID: opts.ChainID})
	if err != nil {
		return nil, ErrStreamUnsupported
	}
	s.inEvents, s.first = true, true
	return &StreamHeader{LCTL: f.LCTL, ChainID: f.Chain.ID, Warnings: f.Warnings}, nil
}

// fill adds the next events to b; false when the events have ended (the
// rest of the file checked). A batch's events all lie in one read buffer:
// an event that needs a refill starts the next batch.
func (s *scanner) fill(b *streamBatch) (bool, error) {
	for len(b.ends) < cap(b.ends) && (len(b.ends) == 0 || int(b.ends[len(b.ends)-1]-b.starts[0]) < batchBytes) {
		if len(b.ends) > 0 && !s.localSpace() {
			return true, nil
		}
		ok, err := s.skipSpace()
		if err != nil {
			return false, err
		}
		if !ok {
			return false, ErrStreamUnsupported
		}
		c := s.buf[s.pos]
		if c == ']' && !s.unread {
			s.pos++
			return false, s.trailer()
		}
		if !s.first && !s.unread {
			if c != ',' {
				return false, ErrStreamUnsupported
			}
			s.pos++
			if len(b.ends) > 0 && !s.localSpace() {
				s.unread = true
				return true, nil
			}
			if ok, err := s.skipSpace(); err != nil || !ok {
				return false, ErrStreamUnsupported
			}
		}
		if s.buf[s.pos] != '{' {
			return false, ErrStreamUnsupported
		}
		if s.lineMode {
			if n := lineEvent(s.buf[s.pos:]); n > 0 {
				if len(b.ends) == 0 {
					b.raw = s.buf
					b.hold(s.cur)
				}
				b.starts = append(b.starts, int32(s.pos))
				b.ends = append(b.ends, int32(s.pos+n))
				b.lineSplit = append(b.lineSplit, int32(len(b.ends)-1))
				s.pos += n
				s.unread, s.first = false, false
				continue
			}
		}
		if len(b.ends) > 0 {
			end, st := scanValue(s.buf[s.pos:])
			if st != scanComplete {
				s.unread, s.first = true, false
				return true, nil
			}
			b.starts = append(b.starts, int32(s.pos))
			b.ends = append(b.ends, int32(s.pos+end))
			s.pos += end
			s.unread, s.first = false, false
			s.checkLines()
			continue
		}
		end, err := s.valueEnd()
		if err != nil {
			return false, err
		}
		b.raw = s.buf
		b.hold(s.cur)
		b.starts = append(b.starts, int32(s.pos))
		b.ends = append(b.ends, int32(end))
		s.pos = end
		s.unread, s.first = false, false
		s.checkLines()
	}
	return true, nil
}

// linesToTrust is how many events must each end their line before the
// scanner takes every line for one event.
const linesToTrust = 3

// checkLines notes whether the event just scanned ended its line (only
// white space or a comma before the newline): files that hold one event
// per line (what lctlgen and most writers of big chains write) are then
// split at newlines, without scanning each event's bytes. A newline cannot
// be inside a JSON string, so a line that starts with { and ends with } is
// one event or is not valid; the decoder checks which, and a line that is
// not exactly one event makes the whole file be read in full.
func (s *scanner) checkLines() {
	if s.lineMode || s.lineChecks < 0 {
		return
	}
	for _, c := range s.buf[s.pos:] {
		switch c {
		case ' ', '\t', '\r', ',':
			continue
		case '\n':
			if s.lineChecks++; s.lineChecks >= linesToTrust {
				s.lineMode = true
			}
			return
		}
		break
	}
	s.lineChecks = -1 // not one event per line: scan every event
}

// lineEvent returns the length of the event at the start of b (which is
// '{') when it is alone on its line: up to the last '}' before the newline,
// after which only white space and a comma come. -1 otherwise, and for a
// line that ends in "]}".
func lineEvent(b []byte) int {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return -1
	}
	j := nl
	trim := func() {
		for j > 0 && (b[j-1] == ' ' || b[j-1] == '\r' || b[j-1] == '\t') {
			j--
		}
	}
	trim()
	if j > 0 && b[j-1] == ',' {
		j--
		trim()
	}
	// "]}" is how the last event of a file often ends its line (the
	// events' bracket and the file's brace after it): scan such a line.
	if j < 2 || b[j-1] != '}' || b[j-2] == ']' {
		return -1
	}
	return j
}

// localSpace moves past white space in the bytes already read; false when
// they end before anything else.
func (s *scanner) localSpace() bool {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\n', '\r', '\t':
			s.pos++
			continue
		}
		return true
	}
	return false
}

// trailer checks what follows the events: more top-level members (state,
// extra sections; their content is not used by a stream, only checked to
// be JSON) and the closing brace.
func (s *scanner) trailer() error {
	for {
		ok, err := s.skipSpace()
		if err != nil {
			return err
		}
		if !ok {
			return ErrStreamUnsupported
		}
		switch s.buf[s.pos] {
		case '}':
			s.pos++
			ok, err := s.skipSpace()
			if err != nil {
				return err
			}
			if ok {
				return ErrStreamUnsupported // data after the object
			}
			return nil
		case ',':
			s.pos++
		default:
			return ErrStreamUnsupported
		}
		if ok, err := s.skipSpace(); err != nil || !ok || s.buf[s.pos] != '"' {
			return ErrStreamUnsupported
		}
		end, err := s.valueEnd()
		if err != nil {
			return err
		}
		var key string
		if err := json.Unmarshal(s.buf[s.pos:end], &key); err != nil {
			return ErrStreamUnsupported
		}
		switch key {
		case "lctl", "chain", "events":
			return ErrStreamUnsupported // a duplicate: Decode says so
		}
		s.pos = end
		if ok, err := s.skipSpace(); err != nil || !ok || s.buf[s.pos] != ':' {
			return ErrStreamUnsupported
		}
		s.pos++
		if ok, err := s.skipSpace(); err != nil || !ok {
			return ErrStreamUnsupported
		}
		end, err = s.valueEnd()
		if err != nil {
			return err
		}
		if !json.Valid(s.buf[s.pos:end]) || !utf8.Valid(s.buf[s.pos:end]) {
			return ErrStreamUnsupported
		}
		if key == "state" {
			var st map[string]any
			if json.Unmarshal(s.buf[s.pos:end], &st) != nil {
				return ErrStreamUnsupported
			}
		}
		s.pos = end
	}
}
