package lctl_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// sameMapped fails unless a stream of the mapped file gave what the read
// one gave: every event's members, time, hash, line and data (read
// through DataMap: where the data's values lie differs, what they are
// must not), and the error. The events are compared once every stream
// has ended: a kept event's strings point into pages the stream gave
// back, which read the same.
func sameMapped(t *testing.T, name string, got, want streamResult) {
	t.Helper()
	if (got.err == nil) != (want.err == nil) || got.err != nil && got.err.Error() != want.err.Error() {
		t.Errorf("%s: error %v, read %v", name, got.err, want.err)
		return
	}
	if len(got.events) != len(want.events) {
		t.Errorf("%s: %d events, read %d", name, len(got.events), len(want.events))
		return
	}
	for i := range got.events {
		g, w := got.events[i], want.events[i]
		gd, wd := dataOf(&g.Event), dataOf(&w.Event)
		type seen struct {
			ChainID, Type, Timestamp, Agent, PrevHash, Hash, Computed string
			Seq                                                       uint64
			Extra                                                     map[string]any
			HashErr                                                   error
			Time                                                      time.Time
			TimeOK                                                    bool
			Line                                                      string
		}
		view := func(e *lctl.StreamEvent) seen {
			return seen{e.ChainID, e.Type, e.Timestamp, e.Agent, e.PrevHash, e.Hash, e.Computed, e.Seq, e.Extra, e.HashErr, e.Time, e.TimeOK, string(e.Line)}
		}
		if !reflect.DeepEqual(view(&g), view(&w)) || !sameData(gd, wd) {
			t.Errorf("%s: event %d differs:\n%+v %v\n%+v %v", name, i+1, view(&g), gd, view(&w), wd)
			return
		}
	}
}

// sameData says two events' data (dataOf) are the same where both were
// decoded: whether a stream skips a member it was told is not read
// (StreamOptions.Data, Unread) may differ between two reads of a sealed
// file (a guess of the type), never what a member read is.
func sameData(g, w map[string]any) bool {
	skipped := func(m map[string]any) bool {
		s, ok := m["step"].(string)
		return len(m) == 1 && ok && strings.HasPrefix(s, "panic: ") && strings.Contains(s, "StreamOptions.Data")
	}
	if skipped(g) || skipped(w) {
		return true
	}
	if len(g) != len(w) {
		return false
	}
	for k, gv := range g {
		wv, ok := w[k]
		if !ok {
			return false
		}
		gs, gp := gv.(string)
		ws, wp := wv.(string)
		if gp && strings.HasPrefix(gs, "panic: ") || wp && strings.HasPrefix(ws, "panic: ") {
			continue
		}
		if !reflect.DeepEqual(gv, wv) {
			return false
		}
	}
	return true
}

// dataOf is the event's data, each member as Get gives it, with what
// reading a member the stream was told is not read says (a panic).
func dataOf(e *lctl.Event) map[string]any {
	m := map[string]any{}
	read := func(k string) (v any) {
		defer func() {
			if r := recover(); r != nil {
				v = fmt.Sprint("panic: ", r)
			}
		}()
		return e.Get(k)
	}
	keys := lctl.DataKeys(e)
	if keys == nil {
		keys = []string{"step"} // not decoded: the panic Get gives
	}
	for _, k := range keys {
		m[k] = read(k)
	}
	return m
}

// A file of one event per line streamed through a mapping of it
// (StreamOptions.Map: strings and data values over the mapping's bytes,
// pages given back as the stream goes) gives exactly what reading it
// gives: sealed and spec-shaped chains with long intents and texts,
// strings escaped, past ASCII and of every length around the decoder's
// word reads, composite values, timestamps in and out of the cached
// second, an event over lines, a line the decoder refuses, a file cut
// short; for a stream of fields, of data by type with a member left
// unread, of hashes with lines; stopped early; read in chunks small and
// large, with pages given back often. The events are kept and read after
// the streams end.
func TestStreamMappedMatchesRead(t *testing.T) {
	n := 1500
	if lctl.RaceDetector {
		n = 600
	}
	write := func(shape lctltest.Shape, opts lctltest.WorkflowOptions) string {
		var b bytes.Buffer
		if err := lctltest.WriteWorkflowShaped(&b, "wf", n, opts, shape); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	spec := write(lctltest.Shape{Spec: true}, lctltest.WorkflowOptions{Detail: 12})
	sealed := write(lctltest.Shape{}, lctltest.WorkflowOptions{Seal: true, Detail: 3})
	edit := func(s string, every int, f func(i int, l string) string) string {
		lines := strings.Split(s, "\n")
		for i := 1; i < len(lines)-2; i++ {
			if i%every == 0 {
				lines[i] = f(i, lines[i])
			}
		}
		return strings.Join(lines, "\n")
	}
	// Strings of 0 to 40 bytes (the decoder reads words of 8 and 32),
	// escaped, past ASCII; objects and arrays; a long text.
	odd := edit(spec, 7, func(i int, l string) string {
		s := strings.Repeat("x", i%41)
		extra := fmt.Sprintf(`"a%d": %q, "b": "tab\there", "c": "é%s", "d": {"k": [1, "%s", {"z": null}]}, "e": [%q], "f": %q, `,
			i%5, s, s, s, s, strings.Repeat("long words ", i%300))
		return strings.Replace(l, `"data": {`, `"data": {`+extra, 1)
	})
	stamps := edit(spec, 5, func(i int, l string) string {
		// Fractions of other lengths, another second, a zone.
		r := []string{`.1Z"`, `.123456Z"`, `Z"`, `.5+01:00"`}[i%4]
		k := strings.Index(l, `"timestamp": "`)
		if k < 0 {
			return l
		}
		k += len(`"timestamp": "`) + 19
		e := strings.IndexByte(l[k:], '"')
		return l[:k] + r + l[k+e+1:]
	})
	files := map[string]string{
		"spec":    spec,
		"sealed":  sealed,
		"odd":     odd,
		"stamps":  stamps,
		"escaped": edit(sealed, 11, func(_ int, l string) string { return strings.Replace(l, `"step_id":"`, `"step_id":"\u0073`, 1) }),
		"an event over lines": edit(spec, n/2, func(_ int, l string) string {
			return strings.Replace(l, `, "data": `, ",\n\"data\":\n", 1)
		}),
		"refused": edit(spec, n*3/4, func(_ int, l string) string { return strings.Replace(l, `"agent": "`, `"agent": "`+"\xff", 1) }),
		"cut":     spec[:len(spec)*2/3],
	}
	dir := t.TempDir()
	stats := func(typ string) bool { return typ != lctl.TypeVerdict }
	unread := func(typ string) string {
		if typ == lctl.TypeStepStart {
			return "intent"
		}
		return ""
	}
	optsList := []lctl.StreamOptions{
		{Workers: 2, Fields: true, SkipHashes: true},
		{Workers: 2, Fields: true, SkipHashes: true, Data: stats, Unread: unread},
		{Workers: 3, Hash: true, Fields: true, Line: func(dst []byte, e *lctl.Event) []byte {
			dst = fmt.Appendf(dst, "%d %s %s %s", e.Seq, e.Type, e.Agent, e.Timestamp)
			e.RangeData(func(k string, v any) { dst = fmt.Appendf(dst, " %s=%v", k, v) })
			return dst
		}},
	}
	defer lctl.SetGiveBack(1 << 12)()
	before := lctl.MappedChunks()
	for name, raw := range files {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
			t.Fatal(err)
		}
		stream := func(opts lctl.StreamOptions, stop int) streamResult {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			return streamKeep(f, opts, stop)
		}
		for oi, opts := range optsList {
			for _, s := range [][2]int64{{5000, 64}, {1 << 18, 4 << 10}} {
				restore := lctl.SetChunks(s[0], s[1], 100, 512)
				for _, stop := range []int{0, n * 11 / 20} {
					want := stream(opts, stop)
					mopts := opts
					mopts.Map = true
					got := stream(mopts, stop)
					runtime.GC() // nothing the events keep may go with the stream
					sameMapped(t, fmt.Sprintf("%s, options %d, chunks of %d, stopped at %d", name, oi, s[0], stop), got, want)
					if name == "spec" && stop == 0 && (want.err != nil || len(want.events) != n) {
						t.Fatalf("the workflow streams %d events, %v", len(want.events), want.err)
					}
				}
				restore()
			}
		}
	}
	if runtime.GOOS == "linux" && lctl.MappedChunks() == before {
		t.Fatal("no file was read through a mapping")
	}
}
