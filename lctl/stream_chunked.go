package lctl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Reading a file of one event per line on every core. Once the first
// batch has shown the file to hold one event per line (the scanner's line
// mode) and the reader can be read at offsets (a file), the rest is cut
// into chunks of a quarter of a megabyte at fixed offsets, and each core
// reads its chunk itself (pread), finds the lines in it and decodes them: the
// kernel's copy of the file and the finding of lines, which one goroutine
// did for all, are shared by every core, and a batch goes from the file
// to the applying goroutine with one handover instead of three.
//
// A chunk holds the lines that start inside it (a line starts after a
// newline); the one that runs past its end is read on. Only lines of one
// shape are taken this way: white space, an object, white space, a comma,
// white space, the newline (what every event but the last is in such a
// file). The first line of another shape (the last event, the closing
// bracket, an event over several lines) ends the chunks; the scanner
// goes on from its start as it always did, with the comma before it read.
// So the events handed over, and whether the file needs a full read, are
// exactly what the scanner alone finds: each line taken is one object the
// decoder reads whole (or the file is read in full), followed by the
// comma the scanner would have read.

// positionalReader is a reader that can also be read at offsets: a file.
type positionalReader interface {
	io.Reader
	io.ReaderAt
	io.Seeker
}

// Chunks: chunkBytes of the file each, read with chunkSlack more so the
// line across the end is usually read at once. Variables for the tests.
var (
	chunkBytes  int64 = readSize/4 - chunkSlack - 1
	chunkSlack  int64 = 4 << 10
	firstBatch        = batchEvents // events read by the scanner before chunks
	chunkEvents       = batchEvents // events per decoded batch of a chunk
)

// chunksRead counts the chunks read (for the tests: the path was taken).
var chunksRead atomic.Int64

// sizeOf is the size of the file r reads, when it tells.
func sizeOf(r positionalReader) (int64, bool) {
	switch v := r.(type) {
	case interface{ Stat() (fs.FileInfo, error) }:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0, false
		}
		return fi.Size(), true
	case interface{ Size() int64 }:
		return v.Size(), true
	}
	return 0, false
}

// streamChunked reads the first batch with sc and, when the file is one
// event per line, the rest in chunks on every core (above). done says the
// stream has ended (err is its result); otherwise the caller goes on
// reading with the scanner it returns, as Stream always did.
func streamChunked(r positionalReader, sc *scanner, opts StreamOptions, workers int, fn func(*StreamEvent) error) (*scanner, bool, error) {
	size, ok := sizeOf(r)
	if !ok {
		return sc, false, nil
	}
	b := newStreamBatch(firstBatch)
	more, err := sc.fill(b)
	if len(b.ends) > 0 {
		b.decode(newStreamParser(opts), opts.Hash, opts.Line)
		if b.err != nil {
			sc.cur.release()
			return nil, true, b.err
		}
		for i := range b.events {
			if ferr := fn(&b.events[i]); ferr != nil {
				sc.cur.release()
				if errors.Is(ferr, ErrStop) {
					return nil, true, nil
				}
				return nil, true, ferr
			}
		}
		b.recycle()
	}
	if err != nil || !more {
		sc.cur.release()
		return nil, true, err
	}
	// An indented file (json.dump's indent) ends its events with a line
	// of their own, which checkLines takes for one event per line: looked
	// at first.
	next, layout, ok := sc.recordAfterEvent()
	if !ok {
		if next, ok = sc.lineAfterEvent(); !ok {
			return sc, false, nil
		}
	}
	at, err := r.Seek(0, io.SeekCurrent)
	if err != nil {
		return sc, false, nil //nolint:nilerr // not a file to read at offsets: the scanner goes on
	}
	start := at - int64(len(sc.buf)) + int64(next)
	sc.cur.release()
	var m []byte
	if opts.Map && layout == nil {
		m = mapFile(r, size)
	}
	resume, done, err := readChunks(r, m, start, size, opts, workers, layout, fn)
	if done {
		return nil, true, err
	}
	// The scanner goes on at the line that ended the chunks, the comma
	// before it read.
	rest := &scanner{r: io.NewSectionReader(r, resume, math.MaxInt64-resume), cur: getReadBuf(readSize),
		inEvents: true, unread: true, lineMode: layout == nil, lineChecks: linesToTrust}
	rest.buf = rest.cur.b[:0]
	return rest, false, nil
}

// lineAfterEvent returns where the next line starts when the scanner
// stands right after an event that the rest of its line follows with a
// comma (white space around it), in line mode.
func (s *scanner) lineAfterEvent() (int, bool) {
	if !s.lineMode || s.unread || s.first {
		return 0, false
	}
	i := s.pos
	comma := false
	for ; i < len(s.buf); i++ {
		switch s.buf[i] {
		case ' ', '\t', '\r':
		case ',':
			if comma {
				return 0, false
			}
			comma = true
		case '\n':
			return i + 1, comma
		default:
			return 0, false
		}
	}
	return 0, false
}

// recordAfterEvent is lineAfterEvent for a file indented as Python's
// json.dump(indent=N) writes it: the event before the scanner ended with a
// line of its indent and "}", a comma ends that line, and the next line is
// the indent and "{" alone. It returns where that line starts and the
// indent.
func (s *scanner) recordAfterEvent() (int, *recordLayout, bool) {
	if s.unread || s.first || s.pos < 1 || s.pos > len(s.buf) || s.buf[s.pos-1] != '}' {
		return 0, nil, false
	}
	b := s.buf
	if nl := bytes.LastIndexByte(b[:s.pos-1], '\n'); nl >= 0 {
		indent := b[nl+1 : s.pos-1]
		if len(bytes.Trim(indent, " \t")) != 0 {
			return s.jointAfterEvent()
		}
		i := s.pos
		if i >= len(b) || b[i] != ',' {
			return 0, nil, false
		}
		i = lineEnd(b, i+1)
		if i < 0 || !startLine(b[i:], indent) {
			return 0, nil, false
		}
		return i, newIndentLayout(bytes.Clone(indent)), true
	}
	return s.jointAfterEvent()
}

// jointAfterEvent is recordAfterEvent for events on one line, as
// json.dump writes them without indent: after the event before the
// scanner, white space, one comma, white space (the joint) and the next
// event, whose first bytes every event is taken to start with.
func (s *scanner) jointAfterEvent() (int, *recordLayout, bool) {
	if s.lineMode {
		// Events on lines of their own, two of them on this one: the
		// lines' chunks, not records that would not end.
		return 0, nil, false
	}
	b := s.buf
	i := s.pos
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	if i >= len(b) || b[i] != ',' {
		return 0, nil, false
	}
	i++
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	const firstBytes = 7 // `{"seq":`, `{"agent`
	if i+firstBytes > len(b) || b[i] != '{' || b[i+1] != '"' || bytes.ContainsAny(b[i:i+firstBytes], "\n\r\\") {
		return 0, nil, false
	}
	return i, newJointLayout(bytes.Clone(b[s.pos:i]), bytes.Clone(b[i:i+firstBytes])), true
}

// lineEnd returns where the line after b[i:] starts when what is left of
// the line at i is its end ("\n" or "\r\n"); -1 otherwise.
func lineEnd(b []byte, i int) int {
	if i < len(b) && b[i] == '\r' {
		i++
	}
	if i < len(b) && b[i] == '\n' {
		return i + 1
	}
	return -1
}

// startLine says whether l starts with a record's first line: the indent,
// "{", the line's end.
func startLine(l, indent []byte) bool {
	return len(l) > len(indent) && bytes.HasPrefix(l, indent) && l[len(indent)] == '{' && lineEnd(l, len(indent)+1) >= 0
}

// fileChunk is a chunk of the file and, once read, its events.
type fileChunk struct {
	index      int64 // its place among the chunks, from 0
	start, end int64 // the lines starting in [start, end) are its
	first      bool  // start is a line's start (the first chunk)
	// begin is where its first record starts (records; -1: none).
	begin   int64
	batches []*streamBatch
	// next is where the line after its last one starts (-1: no line
	// starts in it); stopped says that line is not an event with a comma
	// and ends the chunks.
	next    int64
	stopped bool
	err     error
	// decoded, when set, is called after each batch is decoded
	// (chunkApplier.decoded); started and applied say how far the
	// applying has gone: the chunk's start checked, its first batches.
	decoded func(*fileChunk)
	started bool
	applied int
}

// readChunks streams the events of the lines from start on, in chunks
// read on every core. done says the stream has ended (err is its
// result); otherwise the scanner goes on at resume.
// m, when set, is the file mapped (StreamOptions.Map): the chunks are
// its bytes, not read.
//
// Each chunk's events are handed to fn by the goroutine that decoded
// them, while they are in its core's cache: after each batch it decodes,
// a decoding goroutine applies what it has decoded of the chunk next in
// file order, when that chunk is its own, and then of its later chunks
// as each becomes next. Until session 19 a goroutine of its own (the
// caller's) applied every chunk: its reads of the events another core
// had just written (a chunk's events, fields, lines and bytes are about
// a megabyte, twice this machine's second-level cache) were most of its
// cycles. fn is called one event at a time, in file order, each call
// after the previous one has returned, but not on the caller's
// goroutine: a panic in it (a mapped file's fault) or its
// runtime.Goexit is recovered there and raised again on the caller's
// goroutine once every decoder has stopped.
func readChunks(r io.ReaderAt, m []byte, start, size int64, opts StreamOptions, workers int, layout *recordLayout, fn func(*StreamEvent) error) (resume int64, done bool, err error) {
	n := int64(1) // the chunks: from start, chunkBytes each, at least one
	if size > start {
		n = (size - start + chunkBytes - 1) / chunkBytes
	}
	a := &chunkApplier{m: m, layout: layout, fn: fn, n: n, resume: start, window: chunkWindow(workers)}
	a.wake = sync.NewCond(&a.mu)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			if m != nil {
				// A file cut shorter while it is read faults here:
				// an error, not the process's end (c.readMapped,
				// chunkApplier.guard).
				debug.SetPanicOnFault(true)
			}
			p := newStreamParser(opts)
			w := &chunkWorker{a: a}
			for {
				k, ok := w.take()
				if !ok {
					return
				}
				at := start + k*chunkBytes
				c := &fileChunk{index: k, start: at, end: at + chunkBytes, first: k == 0, decoded: w.decoded}
				switch {
				case layout != nil:
					c.readRecords(r, p, opts, layout)
				case m != nil:
					c.readMapped(m, p, opts)
				default:
					c.read(r, nil, p, opts)
				}
				w.own = append(w.own, c)
			}
		})
	}
	wg.Wait()
	if a.exited {
		runtime.Goexit()
	}
	if a.panicked != nil {
		panic(a.panicked)
	}
	return a.resume, a.done, a.err
}

// chunkWindow is how many chunks may be taken and not yet applied: the
// decoders wait for the chunk next in order rather than run further
// ahead of it (memory), as the ordered queue of chunks bounded them
// before.
func chunkWindow(workers int) int64 { return 4 * int64(max(workers, 1)) }

// chunkApplier hands the chunks' events to fn in file order, on the
// decoding goroutines (readChunks).
type chunkApplier struct {
	m      []byte
	layout *recordLayout
	fn     func(*StreamEvent) error
	n      int64 // the chunks
	window int64

	mu sync.Mutex
	// wake is signalled when next moves or the stream ends.
	wake *sync.Cond
	// next is the chunk to apply next; taken the first not yet taken
	// by a decoder.
	next, taken int64
	// ended says the stream's result is known (resume, done, err; or
	// panicked, exited: fn's panic or runtime.Goexit, to raise on the
	// caller's goroutine).
	ended    bool
	resume   int64
	done     bool
	err      error
	panicked any
	exited   bool
	given    int64 // the mapping's pages given back end here
}

// chunkWorker is a decoding goroutine's part: the chunks it decoded
// whose events are not all applied yet, in file order.
type chunkWorker struct {
	a   *chunkApplier
	own []*fileChunk
}

// take applies the worker's decoded chunks as they become next, and
// returns the next chunk for it to decode; false when the stream has
// ended or no chunk is left and its own are applied.
func (w *chunkWorker) take() (int64, bool) {
	a := w.a
	// No deferred unlock: fn's runtime.Goexit in applyOwn unwinds
	// through here with a.mu not held.
	a.mu.Lock()
	for {
		if a.ended {
			a.mu.Unlock()
			return 0, false
		}
		if len(w.own) > 0 && w.own[0].index == a.next {
			w.applyOwn()
			continue
		}
		if a.taken < a.n && a.taken-a.next < a.window {
			k := a.taken
			a.taken++
			a.mu.Unlock()
			return k, true
		}
		if a.taken >= a.n && len(w.own) == 0 {
			a.mu.Unlock()
			return 0, false
		}
		// Its chunks wait for another's, and it may not run further
		// ahead.
		a.wake.Wait()
	}
}

// applyOwn applies w.own[0], the chunk next in order, decoded: the
// batches not yet applied and its end. Under a.mu, which it lets go
// while it calls fn.
func (w *chunkWorker) applyOwn() {
	a := w.a
	c := w.own[0]
	w.own[0] = nil
	w.own = w.own[1:]
	a.mu.Unlock()
	end := a.guard(func() bool { return a.applyBatches(c) || a.applyEnd(c) })
	a.mu.Lock()
	a.next++
	if end {
		a.end()
	}
	a.wake.Broadcast()
}

// decoded takes a batch of c decoded, c being decoded still (its last
// batch is c.batches'): once the worker's earlier chunks that are next
// are applied, and if c is then next, it applies the batches of c
// decoded so far. No other goroutine applies any of c.
func (w *chunkWorker) decoded(c *fileChunk) {
	a := w.a
	a.mu.Lock()
	for !a.ended && len(w.own) > 0 && w.own[0].index == a.next {
		w.applyOwn()
	}
	ok := !a.ended && a.next == c.index
	a.mu.Unlock()
	if !ok {
		return
	}
	if a.guard(func() bool { return a.applyBatches(c) }) {
		a.mu.Lock()
		a.end()
		a.mu.Unlock()
	}
}

// end says the stream's result is known: the decoders stop. Under a.mu.
func (a *chunkApplier) end() {
	if !a.ended {
		a.ended = true
		a.wake.Broadcast()
	}
}

// guard runs apply, which calls fn and reports whether the stream ends
// (a.resume, a.done, a.err say how). A panic of fn, or fn ending its
// goroutine (runtime.Goexit: a test's t.FailNow), is raised again on the
// caller's goroutine (readChunks).
func (a *chunkApplier) guard(apply func() bool) (end bool) {
	returned := false
	defer func() {
		if returned {
			return
		}
		r := recover()
		a.mu.Lock()
		a.panicked, a.exited = r, r == nil
		if r == nil {
			a.end() // the goroutine goes on unwinding: no return to its caller
		}
		a.mu.Unlock()
		end = true
	}()
	end = apply()
	returned = true
	return end
}

// applyBatches calls fn with the events of the batches of c not yet
// applied, c being next in order, and reports whether the stream ends.
func (a *chunkApplier) applyBatches(c *fileChunk) bool {
	if !c.started {
		c.started = true
		if a.layout != nil && c.begin >= 0 && c.begin != a.resume {
			// Its first record does not start where the chunk before's
			// last ended (a line like a record's first inside an event
			// indented unlike the others): the scanner goes on from
			// there.
			return true
		}
	}
	for ; c.applied < len(c.batches); c.applied++ {
		b := c.batches[c.applied]
		if b.err != nil && b.records {
			// A record the decoder does not take (an event cut
			// wrongly, or one to read the careful way): the scanner
			// reads on from the batch's first record, as it would
			// have alone.
			a.resume = b.recordAt
			return true
		}
		if b.err != nil {
			a.done, a.err = true, b.err
			return true
		}
		for i := range b.events {
			if ferr := a.fn(&b.events[i]); ferr != nil {
				a.done = true
				if !errors.Is(ferr, ErrStop) {
					a.err = ferr
				}
				return true
			}
		}
		b.recycle()
	}
	return false
}

// applyEnd ends c, decoded and its batches applied: where the scanner
// would go on, the mapping's pages passed; it reports whether the stream
// ends.
func (a *chunkApplier) applyEnd(c *fileChunk) bool {
	if c.err != nil {
		a.done, a.err = true, c.err
		return true
	}
	if c.next >= 0 {
		a.resume = c.next
	}
	if a.m != nil && c.end-1-a.given >= giveBackBytes {
		// The chunks after this one read from its last byte on.
		a.given = giveBackMapped(a.m, a.given, c.end-1)
	}
	return c.stopped
}

// giveBackBytes is how many bytes of a mapped file the stream passes
// before it gives their pages back (giveBackMapped); a variable for the
// tests.
var giveBackBytes int64 = 4 << 20

// mappedChunks counts the chunks taken from a mapping (for the tests).
var mappedChunks atomic.Int64

// readMapped is read from m, the file mapped, in a goroutine that set
// debug.SetPanicOnFault: a fault on m's pages (the file cut shorter
// meanwhile) is the chunk's error ErrFileChanged.
func (c *fileChunk) readMapped(m []byte, p *fastParser, opts StreamOptions) {
	defer func() {
		if r := recover(); r != nil {
			if !MappedFault(r) {
				panic(r)
			}
			c.batches, c.err = nil, ErrFileChanged
		}
	}()
	c.read(nil, m, p, opts)
}

// read reads the chunk's lines and decodes their events: from m, the
// file mapped, when set, else read at their offset.
func (c *fileChunk) read(r io.ReaderAt, m []byte, p *fastParser, opts StreamOptions) {
	chunksRead.Add(1)
	size := int(chunkBytes + chunkSlack + 1)
	var rb *readBuf
	defer func() { rb.release() }()
	off := c.start // the file's offset of buf[0]
	if !c.first {
		off-- // the byte before: is start a line's start?
	}
	var buf []byte
	var eof bool
	if m != nil {
		// The rest of the mapping: a line that runs past the chunk's
		// end is read on in place, the mapping's end is the file's.
		buf, eof = m[min(off, int64(len(m))):], true
		mappedChunks.Add(1)
	} else {
		rb = getReadBuf(size)
		var err error
		if buf, eof, err = readAt(r, rb.b[:size], off); err != nil {
			c.err = err
			return
		}
	}
	i := 0
	if !c.first {
		k := bytes.IndexByte(buf, '\n')
		if k < 0 || off+int64(k)+1 >= c.end {
			// No line starts in the chunk (one runs across it): where
			// the next line starts is the chunk before's to say.
			c.next = -1
			return
		}
		i = k + 1
	}
	var b *streamBatch
	flush := func() {
		if d := b; d != nil && len(d.ends) > 0 {
			// Taken first: the callback that c.decoded calls may end
			// the goroutine (runtime.Goexit), which runs flush again.
			b = nil
			d.decode(p, opts.Hash, opts.Line)
			c.batches = append(c.batches, d)
			if c.decoded != nil {
				c.decoded(c)
			}
		}
		b = nil
	}
	defer func() {
		if r := recover(); r != nil {
			// A fault on a mapped file's page (readMapped) or a bug:
			// nothing more is decoded, the panic goes on.
			panic(r)
		}
		flush()
	}()
	for off+int64(i) < c.end {
		nl := bytes.IndexByte(buf[i:], '\n')
		if nl < 0 {
			if eof {
				c.next, c.stopped = off+int64(i), true
				return
			}
			// The line runs past what was read: its bytes to a larger
			// buffer, and read on.
			flush()
			var err error
			if rb, buf, eof, err = readOn(r, rb, buf, i, off, size); err != nil {
				c.err = err
				return
			}
			off += int64(i)
			i = 0
			continue
		}
		nl += i
		from, to, ok := eventOnLine(buf[i:nl])
		switch {
		case !ok:
			c.next, c.stopped = off+int64(i), true
			return
		case from >= 0:
			if b == nil {
				b = newStreamBatch(chunkEvents)
				b.raw = buf
				if m != nil {
					b.mapped = true
				} else {
					b.hold(rb)
				}
			}
			b.starts = append(b.starts, int32(i+from))
			b.ends = append(b.ends, int32(i+to))
			b.lineSplit = append(b.lineSplit, int32(len(b.ends)-1))
			if len(b.ends) == cap(b.ends) {
				flush()
			}
		}
		i = nl + 1
	}
	c.next = off + int64(i)
}

// recordLayout is how the events of a file that is not one event per
// line lie, for readRecords: indented as json.dump(indent=N) writes them
// (indent: an event from a line of the indent and "{" to the first line
// after it of the indent and "}", a comma ending that line), or all on
// one line as json.dump writes them without indent (joint: the bytes
// between one event's "}" and the next one's "{", a comma among them;
// first: how each event starts, its "{" and first key).
type recordLayout struct {
	indent       []byte
	joint, first []byte
	// open and closing are what readRecords looks for: a record's
	// start, and its end with what follows it.
	open, closing []byte
}

func newIndentLayout(indent []byte) *recordLayout {
	return &recordLayout{indent: indent, open: append(append([]byte{'\n'}, indent...), '{'),
		closing: append(append([]byte{'\n'}, indent...), '}')}
}

func newJointLayout(joint, first []byte) *recordLayout {
	p := append(append([]byte{'}'}, joint...), first...)
	return &recordLayout{joint: joint, first: first, open: p, closing: p}
}

// maxRecord bounds the bytes readRecords reads on for one record: an
// event larger than this is the scanner's.
const maxRecord = 16 << 20

// Results of recordLayout.record.
const (
	recordOK   = iota
	recordMore // its end is not in buf yet
	recordStop // not a record of the layout: the scanner's
)

// firstRecord returns where the first record that starts in buf starts
// (buf[0] is the byte before the chunk), -1 for none.
func (l *recordLayout) firstRecord(buf []byte) int {
	for k := 0; ; {
		n := bytes.Index(buf[k:], l.open)
		if n < 0 {
			return -1
		}
		k += n
		if l.indent == nil {
			return k + 1 + len(l.joint)
		}
		if lineEnd(buf, k+len(l.open)) >= 0 {
			return k + 1
		}
		k++
	}
}

// record finds the record that starts at buf[i]: its event at
// [from, to), the next record's start.
func (l *recordLayout) record(buf []byte, i int) (from, to, next, st int) {
	if l.indent == nil {
		// buf[i:] starts with first (looked for with the "}" before it).
		m := bytes.Index(buf[i+1:], l.closing)
		if m < 0 {
			return 0, 0, 0, recordMore
		}
		to = i + 1 + m + 1
		return i, to, to + len(l.joint), recordOK
	}
	// The closing line: a "}" after a newline and the indent, looked for
	// by its "}" (a few an event) rather than its newline (one a member).
	e := -1
	for k := i + len(l.closing) - 1; k < len(buf); k++ {
		n := bytes.IndexByte(buf[k:], '}')
		if n < 0 {
			break
		}
		k += n
		if bytes.Equal(buf[k+1-len(l.closing):k], l.closing[:len(l.closing)-1]) {
			e = k + 1 // after the "}"
			break
		}
	}
	if e < 0 {
		return 0, 0, 0, recordMore
	}
	if e+2 >= len(buf) {
		return 0, 0, 0, recordMore
	}
	next = lineEnd(buf, e+1)
	if buf[e] != ',' || next < 0 {
		// The last event, or another shape.
		return 0, 0, 0, recordStop
	}
	if len(buf)-next <= len(l.indent)+2 {
		return 0, 0, 0, recordMore // the next line's start not read yet
	}
	if !startLine(buf[next:], l.indent) {
		// The event is one, but what follows is not a record's first
		// line: taken, and the chunks end there.
		return i + len(l.indent), e, next, recordStop
	}
	return i + len(l.indent), e, next, recordOK
}

// readRecords is read for a file of a recordLayout. Newlines lie outside
// strings in JSON, so a record of lines is found by looking for its last
// line (bytes.Index), not by scanning the event's strings and brackets;
// on one line, an event's end is the next "}", joint and first. A record
// cut wrongly (an event whose lines are indented otherwise, a string or
// an object in an event's data that holds the joint and first) is not one
// object: the decoder refuses it, and the scanner reads on from the first
// record of its batch. The chunk's first record is the first that starts
// after its start; readChunks checks that it starts where the chunk
// before's last ended. Its first bytes that are not a record end the
// chunks, as read's first line of another shape does.
func (c *fileChunk) readRecords(r io.ReaderAt, p *fastParser, opts StreamOptions, l *recordLayout) {
	chunksRead.Add(1)
	c.begin = -1
	// The chunk, the bytes before it that tell whether a record starts at
	// its start (the newline; the "}" and the joint), and after it what
	// tells whether one starts at its last byte.
	back := 1 + len(l.joint)
	size := int(chunkBytes+chunkSlack) + back + len(l.open) + 2
	rb := getReadBuf(size)
	defer func() { rb.release() }()
	off := c.start // the file's offset of buf[0]
	if !c.first {
		off -= int64(back)
	}
	buf, eof, err := readAt(r, rb.b[:size], off)
	if err != nil {
		c.err = err
		return
	}
	i := 0
	if !c.first {
		if i = l.firstRecord(buf); i < 0 || off+int64(i) >= c.end {
			// No record starts in the chunk: where the next one
			// starts is the chunk before's to say.
			c.next = -1
			return
		}
	}
	c.begin = off + int64(i)
	var b *streamBatch
	flush := func() {
		if d := b; d != nil && len(d.ends) > 0 {
			// Taken first: the callback that c.decoded calls may end
			// the goroutine (runtime.Goexit), which runs flush again.
			b = nil
			d.decode(p, opts.Hash, opts.Line)
			c.batches = append(c.batches, d)
			if c.decoded != nil {
				c.decoded(c)
			}
		}
		b = nil
	}
	defer flush()
	for off+int64(i) < c.end {
		from, to, next, st := l.record(buf, i)
		if st == recordStop && next == 0 || st == recordMore && eof {
			c.next, c.stopped = off+int64(i), true
			return
		}
		if st == recordMore && len(buf)-i > maxRecord {
			// Not a record of the layout after all (its end would be
			// far off): the scanner's, without holding the rest.
			c.next, c.stopped = off+int64(i), true
			return
		}
		if st == recordMore {
			// The record runs past what was read: its bytes to a larger
			// buffer, and read on.
			flush()
			var err error
			if rb, buf, eof, err = readOn(r, rb, buf, i, off, size); err != nil {
				c.err = err
				return
			}
			off += int64(i)
			i = 0
			continue
		}
		if b == nil {
			b = newStreamBatch(chunkEvents)
			b.raw = buf
			b.hold(rb)
			b.records, b.recordAt = true, off+int64(i)
		}
		b.starts = append(b.starts, int32(from))
		b.ends = append(b.ends, int32(to))
		b.lineSplit = append(b.lineSplit, int32(len(b.ends)-1))
		if len(b.ends) == cap(b.ends) {
			flush()
		}
		i = next
		if st == recordStop {
			// Not a record's start: the chunks end here, the comma
			// before it read.
			c.next, c.stopped = off+int64(i), true
			return
		}
	}
	c.next = off + int64(i)
}

// eventOnLine looks at a line (without its newline): an event followed
// by a comma is at [from, to); a line of white space is from -1; ok is
// false for a line of any other shape.
func eventOnLine(l []byte) (from, to int, ok bool) {
	if n := len(l); n >= 3 && l[0] == '{' && l[n-1] == ',' && l[n-2] == '}' && l[n-3] != ']' {
		// The line as nearly every one is, without white space at its
		// ends: what the loops below find, at a fifth of their cost.
		return 0, n - 1, true
	}
	return eventOnLineGeneral(l)
}

// eventOnLineGeneral is eventOnLine for any line.
func eventOnLineGeneral(l []byte) (from, to int, ok bool) {
	i := 0
	for i < len(l) && (l[i] == ' ' || l[i] == '\t' || l[i] == '\r') {
		i++
	}
	if i == len(l) {
		return -1, -1, true
	}
	if l[i] != '{' {
		return 0, 0, false
	}
	j := len(l)
	trim := func() {
		for j > i && (l[j-1] == ' ' || l[j-1] == '\t' || l[j-1] == '\r') {
			j--
		}
	}
	trim()
	if j == i || l[j-1] != ',' {
		return 0, 0, false
	}
	j--
	trim()
	// "]}" is left to the scanner, as lineEvent leaves it.
	if j-i < 2 || l[j-1] != '}' || l[j-2] == ']' {
		return 0, 0, false
	}
	return i, j, true
}

// readOn carries on reading past the end of buf, the bytes read at file
// offset off into rb: the bytes from buf[i] on go to the start of a larger
// buffer (twice their length, at least size), which is filled from the
// file after them. It returns that buffer (rb is released), its bytes, and
// whether the file ended; the new bytes start at file offset off+i. On an
// error rb is kept.
func readOn(r io.ReaderAt, rb *readBuf, buf []byte, i int, off int64, size int) (*readBuf, []byte, bool, error) {
	tail := len(buf) - i
	n := max(2*tail, size)
	nb := getReadBuf(n)
	copy(nb.b[:tail], buf[i:])
	got, eof, err := readAt(r, nb.b[tail:n], off+int64(len(buf)))
	if err != nil {
		nb.release()
		return rb, buf, false, err
	}
	rb.release()
	return nb, nb.b[:tail+len(got)], eof, nil
}

// readAt reads into p at off until p is full or the file ends (eof).
func readAt(r io.ReaderAt, p []byte, off int64) ([]byte, bool, error) {
	n, err := r.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		return p[:n], true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read chain: %w", err)
	}
	return p[:n], false, nil
}
