package lctl_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// goroutineID is the running goroutine's number, from its stack's first
// line ("goroutine 17 [running]:").
func goroutineID() int64 {
	var buf [64]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	id, err := strconv.ParseInt(s[:strings.IndexByte(s, ' ')], 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// applyFiles writes the workflow as one event per line and indented (read
// in chunks of records), each to a file of its own.
func applyFiles(t *testing.T, n int) map[string]string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for name, shape := range map[string]lctltest.Shape{
		"lines":    {Spec: true},
		"sealed":   {},
		"indented": {Spec: true, Layout: lctltest.LayoutIndent},
	} {
		var b bytes.Buffer
		if err := lctltest.WriteWorkflowShaped(&b, "wf", n, lctltest.WorkflowOptions{Seal: true}, shape); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		files[name] = path
	}
	return files
}

// Each event of a file read in chunks (all but the last, the scanner's)
// is handed to the callback by the goroutine that decoded it (its line, rendered on the decoding core, says
// which), one call at a time and in file order, whatever the chunks' and
// batches' sizes and the number of decoders; read or mapped. Before
// session 19 the caller's goroutine applied every event, none of them
// decoded there but the first batch's.
func TestStreamAppliesOnTheDecodingGoroutine(t *testing.T) {
	const n = 3000
	files := applyFiles(t, n)
	type setting struct {
		n, slack     int64
		first, batch int
	}
	before := lctl.ChunksRead()
	for name, path := range files {
		for _, s := range []setting{{5000, 64, 100, 7}, {20000, 2000, 100, 512}, {97, 0, 4, 5}} {
			for _, workers := range []int{1, 2, 3} {
				for _, mapped := range []bool{false, true} {
					label := fmt.Sprintf("%s, chunks of %d after %d, batches of %d, %d workers, mapped %v", name, s.n, s.first, s.batch, workers, mapped)
					restore := lctl.SetChunks(s.n, s.slack, s.first, s.batch)
					f, err := os.Open(path)
					if err != nil {
						t.Fatal(err)
					}
					var inside atomic.Int32
					seen, elsewhere := 0, 0
					var seq uint64
					err = lctl.Stream(f, lctl.StreamOptions{Workers: workers, Fields: true, SkipHashes: true, Map: mapped,
						Line: func(dst []byte, e *lctl.Event) []byte {
							return strconv.AppendInt(dst, goroutineID(), 10)
						}}, func(*lctl.StreamHeader) error { return nil },
						func(e *lctl.StreamEvent) error {
							if inside.Add(1) != 1 {
								t.Errorf("%s: two callbacks at once at seq %d", label, e.Seq)
							}
							defer inside.Add(-1)
							seen++
							if e.Seq != seq+1 {
								t.Errorf("%s: seq %d after %d", label, e.Seq, seq)
							}
							seq = e.Seq
							// The last event, not followed by a comma, is the
							// scanner's (after the chunks).
							if e.Seq < n && string(bytes.TrimSuffix(e.Line, []byte("\n"))) != strconv.FormatInt(goroutineID(), 10) {
								elsewhere++
							}
							return nil
						})
					_ = f.Close()
					restore()
					if err != nil || seen != n {
						t.Fatalf("%s: %d events streamed, %v", label, seen, err)
					}
					if elsewhere != 0 {
						t.Errorf("%s: %d of %d events handed over by a goroutine other than the one that decoded them", label, elsewhere, n)
					}
				}
			}
		}
	}
	if lctl.ChunksRead() == before {
		t.Fatal("no file was read in chunks")
	}
}

// A panic in the callback of a stream read in chunks, or its
// runtime.Goexit (t.FailNow), reaches the caller's goroutine as if the
// callback had run there: the caller recovers the very value (lctl's cli
// tells a mapped file's fault by it); Stream does not return after a
// Goexit. An error or ErrStop in the middle of a chunk ends the stream
// with no call after it.
func TestStreamCallbackEndsOnTheCallersGoroutine(t *testing.T) {
	const n = 3000
	path := applyFiles(t, n)["lines"]
	defer lctl.SetChunks(5000, 64, 100, 7)()
	stream := func(fn func(e *lctl.StreamEvent) error) error {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		return lctl.Stream(f, lctl.StreamOptions{Workers: 2, Fields: true, SkipHashes: true, Map: true}, func(*lctl.StreamHeader) error { return nil }, fn)
	}
	before := lctl.MappedChunks()
	for _, at := range []uint64{1, 777, 2000, n} {
		type boom struct{ seq uint64 }
		var got any
		caller := goroutineID()
		func() {
			defer func() { got = recover() }()
			_ = stream(func(e *lctl.StreamEvent) error {
				if e.Seq == at {
					panic(boom{e.Seq})
				}
				return nil
			})
		}()
		if got != (boom{at}) {
			t.Errorf("a panic at seq %d: the caller recovered %v", at, got)
		}
		if goroutineID() != caller {
			t.Fatal("recovered on another goroutine")
		}

		done := make(chan bool)
		go func() {
			returned := false
			defer func() { done <- returned }()
			_ = stream(func(e *lctl.StreamEvent) error {
				if e.Seq == at {
					runtime.Goexit()
				}
				return nil
			})
			returned = true
		}()
		if <-done {
			t.Errorf("Goexit at seq %d: Stream returned", at)
		}

		for _, want := range []error{lctl.ErrStop, errors.New("stop here")} {
			last := uint64(0)
			err := stream(func(e *lctl.StreamEvent) error {
				last = e.Seq
				if e.Seq == at {
					return want
				}
				return nil
			})
			if last != at {
				t.Errorf("%v at seq %d: the last event handed over is %d", want, at, last)
			}
			if errors.Is(want, lctl.ErrStop) && err != nil || !errors.Is(want, lctl.ErrStop) && !errors.Is(err, want) {
				t.Errorf("%v at seq %d: Stream returned %v", want, at, err)
			}
		}
	}
	if lctl.MappedChunks() == before {
		t.Fatal("the file was not read through a mapping")
	}
}
