package tracer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// TestChainFilesFewOpen writes to more chains than files may be open: the
// least recently written is closed and opened again when written, every
// line lands in its file in order, and a sync reaches the closed ones too.
func TestChainFilesFewOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newChainFiles(dir)
	w.maxOpen = 2
	ids := []string{"a", "b", "c"}
	for round := 1; round <= 3; round++ {
		w.begin()
		for _, id := range ids {
			e := lctl.Event{Seq: uint64(round), Hash: fmt.Sprintf("%s%d", id, round)}
			w.add(id, []byte(fmt.Sprintf(`{"chain":%q,"seq":%d}`, id, round)), &e, "")
		}
		if failed, err := w.write(); err != nil || failed != nil {
			t.Fatalf("round %d: failed %v, %v", round, failed, err)
		}
		if n := w.lru.Len(); n > 2 {
			t.Fatalf("round %d: %d files open, at most 2 allowed", round, n)
		}
	}
	if len(w.dirty) != 3 || !w.dirDirty {
		t.Fatalf("dirty %v, directory dirty %v before the sync", w.dirty, w.dirDirty)
	}
	if err := w.sync(); err != nil {
		t.Fatal(err)
	}
	if len(w.dirty) != 0 || w.dirDirty {
		t.Fatalf("dirty %v, directory dirty %v after the sync", w.dirty, w.dirDirty)
	}
	for _, id := range ids {
		raw, err := os.ReadFile(filepath.Join(dir, id+chainFileExt))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("{\"chain\":%q,\"seq\":1}\n{\"chain\":%q,\"seq\":2}\n{\"chain\":%q,\"seq\":3}\n", id, id, id)
		if string(raw) != want {
			t.Errorf("%s holds %q, want %q", id, raw, want)
		}
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if w.lru.Len() != 0 || len(w.open) != 0 {
		t.Errorf("%d files still open after close", w.lru.Len())
	}
}

// TestChainFilesWriteFails: a chain whose file cannot be written is
// reported failed, with an error naming it; the others are written.
func TestChainFilesWriteFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "blocked"+chainFileExt), 0o750); err != nil {
		t.Fatal(err)
	}
	w := newChainFiles(dir)
	w.begin()
	for _, id := range []string{"blocked", "fine"} {
		e := lctl.Event{Seq: 1, Hash: "h"}
		w.add(id, []byte(`{"seq":1}`), &e, "")
	}
	failed, err := w.write()
	if !failed["blocked"] || failed["fine"] || err == nil || !strings.Contains(err.Error(), "chain blocked") {
		t.Fatalf("failed %v, err %v", failed, err)
	}
	raw, rerr := os.ReadFile(filepath.Join(dir, "fine"+chainFileExt))
	if rerr != nil || string(raw) != "{\"seq\":1}\n" {
		t.Fatalf("fine holds %q, %v", raw, rerr)
	}
	if _, dirty := w.dirty["blocked"]; dirty {
		t.Error("the chain that failed is marked written")
	}
}

// TestProgressFloor: the position held back by messages not done.
func TestProgressFloor(t *testing.T) {
	t.Parallel()
	p := newProgress(10)
	if f := p.floor(); f != 10 {
		t.Fatalf("start: floor %d", f)
	}
	p.done(11)
	p.notDone(12) // to be redelivered
	p.done(13)
	p.done(14)
	if f := p.floor(); f != 11 {
		t.Fatalf("with 12 pending: floor %d, want 11", f)
	}
	p.done(12) // redelivered and stored
	if f := p.floor(); f != 14 {
		t.Fatalf("after 12 was done: floor %d, want 14", f)
	}
}

// TestStreamPositionFile round-trips the position and reports a missing or
// unreadable one.
func TestStreamPositionFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, ok, err := readPosition(dir, positionFile); ok || err != nil {
		t.Fatalf("no file: ok %v, err %v", ok, err)
	}
	want := streamPosition{Stream: "LCTL", Seq: 42}
	if err := writePosition(dir, positionFile, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := readPosition(dir, positionFile)
	if !ok || err != nil || got != want {
		t.Fatalf("read %+v, %v, %v; wrote %+v", got, ok, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, positionFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := readPosition(dir, positionFile); ok || err == nil {
		t.Fatalf("garbled file: ok %v, err %v", ok, err)
	}
}
