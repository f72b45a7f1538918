package tracer

import (
	"bytes"
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// The tracer's chain files are a cache of the LCTL stream, which is where
// events are durable (JetStream acknowledged them to their writer). So a
// batch's events are written to their files without a sync; the files are
// synced every Config.SyncInterval and at Stop, and after each sync the
// stream position everything before which is on disk is recorded in
// positionFile. A tracer that starts again reads the stream from there:
// what a crash cut short of the files is delivered again, what survived it
// is recognized by its seq and skipped.

// positionFile (in the chains directory) records the LCTL stream position
// the chain files are synced to; positionFile.LCTL_OTEL the LCTL_OTEL one.
const positionFile = ".stream-position"

// DefaultSyncInterval is how often written chain files are synced.
const DefaultSyncInterval = time.Second

// chainFiles appends the batches' lines to the chain files. It is used by
// one goroutine (the consumer).
type chainFiles struct {
	dir string

	maxOpen int                      // openFilesLimit
	open    map[string]*list.Element // of *openFile, most recently used first
	lru     *list.List
	dirty   map[string]struct{} // written since the last sync
	// dirDirty: a file was created since the last sync.
	dirDirty bool

	// The batch being built (begin resets it).
	bufs    map[string]*bytes.Buffer
	order   []string // chains in the order they first appear in the batch
	pending []pendingEvent
	last    map[string]uint64
	hashes  map[pendingKey]string
}

type openFile struct {
	id   string
	f    *os.File
	size int64 // bytes in the file, to undo a partial write
}

type pendingEvent struct {
	id       string
	event    lctl.Event
	computed string // the event's hash as decoding computed it ("" if it did not)
}

type pendingKey struct {
	id  string
	seq uint64
}

func newChainFiles(dir string) *chainFiles {
	return &chainFiles{
		dir:     dir,
		maxOpen: openFilesLimit(),
		open:    map[string]*list.Element{},
		lru:     list.New(),
		dirty:   map[string]struct{}{},
		bufs:    map[string]*bytes.Buffer{},
		last:    map[string]uint64{},
		hashes:  map[pendingKey]string{},
	}
}

// begin starts a new batch, reusing the last one's buffers.
func (w *chainFiles) begin() {
	for _, id := range w.order {
		w.bufs[id].Reset()
	}
	if len(w.bufs) > w.maxOpen {
		clear(w.bufs)
	}
	w.order = w.order[:0]
	clear(w.pending) // drop the events' references
	w.pending = w.pending[:0]
	clear(w.last)
	clear(w.hashes)
}

// add queues one event's line for the chain's file.
func (w *chainFiles) add(id string, line []byte, e *lctl.Event, computed string) {
	if _, ok := w.last[id]; !ok {
		w.order = append(w.order, id)
		if w.bufs[id] == nil {
			w.bufs[id] = &bytes.Buffer{}
		}
	}
	buf := w.bufs[id]
	buf.Write(line)
	buf.WriteByte('\n')
	w.pending = append(w.pending, pendingEvent{id: id, event: *e, computed: computed})
	w.last[id] = e.Seq
	w.hashes[pendingKey{id, e.Seq}] = e.Hash
}

// write appends each chain's lines of the batch to its file in one write,
// without syncing. It returns the chains whose lines could not be written:
// their files are cut back to their previous size, so a file never holds
// part of an event.
func (w *chainFiles) write() (failed map[string]bool, err error) {
	var errs []error
	for _, id := range w.order {
		if werr := w.writeOne(id, w.bufs[id].Bytes()); werr != nil {
			if failed == nil {
				failed = map[string]bool{}
			}
			failed[id] = true
			errs = append(errs, fmt.Errorf("chain %s: %w", id, werr))
		}
	}
	return failed, errors.Join(errs...)
}

func (w *chainFiles) writeOne(id string, data []byte) error {
	of, err := w.file(id)
	if err != nil {
		return err
	}
	n, err := of.f.Write(data)
	if err == nil {
		of.size += int64(n)
		w.dirty[id] = struct{}{}
		return nil
	}
	err = fmt.Errorf("append to chain file: %w", err)
	if n > 0 {
		if terr := of.f.Truncate(of.size); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo partial write: %w", terr))
		}
	}
	// Open the file afresh next time.
	w.closeFile(id)
	return err
}

// file returns the chain's file open for appending.
func (w *chainFiles) file(id string) (*openFile, error) {
	if el, ok := w.open[id]; ok {
		w.lru.MoveToFront(el)
		return el.Value.(*openFile), nil
	}
	path := filepath.Join(w.dir, id+chainFileExt)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open chain file: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("stat chain file: %w", err)
	}
	if info.Size() == 0 {
		w.dirDirty = true
	}
	for w.lru.Len() >= w.maxOpen {
		w.closeFile(w.lru.Back().Value.(*openFile).id)
	}
	of := &openFile{id: id, f: f, size: info.Size()}
	w.open[id] = w.lru.PushFront(of)
	return of, nil
}

// closeFile closes the chain's file if it is open. Written data not synced
// yet stays on the dirty list: sync opens the file again for it.
func (w *chainFiles) closeFile(id string) {
	el, ok := w.open[id]
	if !ok {
		return
	}
	delete(w.open, id)
	w.lru.Remove(el)
	_ = el.Value.(*openFile).f.Close()
}

// sync makes everything written so far durable: the written files, and the
// directory when files were created. Files that fail to sync stay dirty.
func (w *chainFiles) sync() error {
	if len(w.dirty) == 0 && !w.dirDirty {
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		done []string
	)
	for id := range w.dirty {
		var f *os.File
		if el, ok := w.open[id]; ok {
			f = el.Value.(*openFile).f
		}
		wg.Go(func() {
			err := syncFile(filepath.Join(w.dir, id+chainFileExt), f)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("chain %s: %w", id, err))
				return
			}
			done = append(done, id)
		})
	}
	wg.Wait()
	for _, id := range done {
		delete(w.dirty, id)
	}
	if w.dirDirty {
		if err := syncDir(w.dir); err != nil {
			errs = append(errs, err)
		} else {
			w.dirDirty = false
		}
	}
	return errors.Join(errs...)
}

// syncFile syncs f, or the file at path when f is nil (closed since it was
// written: a sync through any descriptor writes the file's data).
func syncFile(path string, f *os.File) error {
	if f != nil {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync chain file: %w", err)
		}
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open chain file to sync it: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync chain file: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open chain directory to sync it: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync chain directory: %w", err)
	}
	return nil
}

// close syncs and closes every file.
func (w *chainFiles) close() error {
	err := w.sync()
	for id := range w.open {
		w.closeFile(id)
	}
	return err
}

// streamPosition is what positionFile holds: every message of the stream
// up to Seq is in the chain files and synced. Created tells the stream
// apart from another one of the same name (one deleted and made again
// starts its sequence over).
type streamPosition struct {
	Stream  string    `json:"stream"`
	Created time.Time `json:"created"`
	Seq     uint64    `json:"seq"`
}

// readPosition reads the position recorded in file; ok is false when there
// is none or it cannot be read (the caller then reads the stream from its
// start).
func readPosition(dir, file string) (pos streamPosition, ok bool, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if errors.Is(err, os.ErrNotExist) {
		return pos, false, nil
	}
	if err != nil {
		return pos, false, fmt.Errorf("read stream position: %w", err)
	}
	if err := json.Unmarshal(raw, &pos); err != nil {
		return pos, false, fmt.Errorf("stream position %s does not decode: %w", strconv.Quote(string(raw)), err)
	}
	return pos, true, nil
}

// writePosition records pos durably in file: a temporary file, synced,
// renamed over the old one, and the directory synced.
func writePosition(dir, file string, pos streamPosition) error {
	raw, err := json.Marshal(pos)
	if err != nil {
		return fmt.Errorf("encode stream position: %w", err)
	}
	tmp := filepath.Join(dir, file+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write stream position: %w", err)
	}
	_, err = f.Write(append(raw, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write stream position: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
		return fmt.Errorf("write stream position: %w", err)
	}
	return syncDir(dir)
}

// progress tracks which stream messages the tracer is done with (stored,
// or never storable), so that it knows from where the stream must be read
// again after a crash. Messages arrive in stream order, except the ones
// redelivered after a retry; those are tracked until they are done.
type progress struct {
	max  uint64              // highest stream seq done
	open map[uint64]struct{} // delivered and not done (to be redelivered)
}

func newProgress(start uint64) *progress {
	return &progress{max: start, open: map[uint64]struct{}{}}
}

func (p *progress) done(seq uint64) {
	if len(p.open) > 0 {
		delete(p.open, seq)
	}
	p.max = max(p.max, seq)
}

func (p *progress) notDone(seq uint64) { p.open[seq] = struct{}{} }

// floor is the stream seq through which every message is done.
func (p *progress) floor() uint64 {
	f := p.max
	for seq := range p.open {
		f = min(f, seq-1)
	}
	return f
}
