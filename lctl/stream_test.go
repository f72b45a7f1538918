package lctl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// streamAll reads a file with Stream and returns its header and events.
func streamAll(t *testing.T, raw []byte, opts lctl.StreamOptions) (*lctl.StreamHeader, []lctl.StreamEvent, error) {
	return streamAllFrom(t, bytes.NewReader(raw), opts)
}

// chunkReader reads at most n bytes at a time, so the stream refills its
// buffer in the middle of events.
type chunkReader struct {
	raw []byte
	n   int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.raw) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.raw)
	r.raw = r.raw[k:]
	return k, nil
}

func streamAllFrom(t *testing.T, r io.Reader, opts lctl.StreamOptions) (*lctl.StreamHeader, []lctl.StreamEvent, error) {
	t.Helper()
	var h *lctl.StreamHeader
	var events []lctl.StreamEvent
	err := lctl.Stream(r, opts, func(sh *lctl.StreamHeader) error {
		h = sh
		return nil
	}, func(e *lctl.StreamEvent) error {
		// Kept as the stream says: its data fields are copied (Own), the
		// batch's array of them is reused.
		c := *e
		c.Event = e.Own()
		events = append(events, c)
		return nil
	})
	return h, events, err
}

// The stream gives exactly the events Decode gives, in the files
// lctltest writes (one event per line) and in the indented form Encode
// writes, on one core and on several.
func TestStreamMatchesDecode(t *testing.T) {
	var gen bytes.Buffer
	if err := lctltest.WriteWorkflow(&gen, "wf", 12000, lctltest.WorkflowOptions{Seal: true}); err != nil {
		t.Fatal(err)
	}
	var enc bytes.Buffer
	if err := lctl.NewFile("wf", lctltest.Workflow("wf", 3000, lctltest.WorkflowOptions{Seal: true})).Encode(&enc, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	for name, raw := range map[string][]byte{"generated": gen.Bytes(), "encoded": enc.Bytes()} {
		want, err := lctl.DecodeFile(bytes.NewReader(raw), lctl.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{1, 3} {
			h, got, err := streamAllFrom(t, &chunkReader{raw: raw, n: 7777 * workers}, lctl.StreamOptions{Workers: workers, Hash: true})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if h.ChainID != "wf" || h.LCTL != lctl.Version || len(h.Warnings) != 0 {
				t.Errorf("%s: header %+v", name, h)
			}
			if len(got) != len(want.Events) {
				t.Fatalf("%s: %d events streamed, %d decoded", name, len(got), len(want.Events))
			}
			for i := range got {
				if !reflect.DeepEqual(got[i].Event, want.Events[i]) {
					t.Fatalf("%s: event %d differs:\n%+v\n%+v", name, i+1, got[i].Event, want.Events[i])
				}
				if got[i].Computed != want.Events[i].Hash || got[i].HashErr != nil {
					t.Fatalf("%s: event %d: computed hash %q, stored %q (%v)", name, i+1, got[i].Computed, want.Events[i].Hash, got[i].HashErr)
				}
			}
		}
	}
}

// Events the fast reader leaves alone (escapes, numbers in every form,
// keys beyond the spec's, unicode) still come out as Decode reads them.
func TestStreamUnusualEvents(t *testing.T) {
	raw := `{"lctl": "4.0", "chain": {"id": "c"}, "events": [
 {"seq": 1, "type": "fact_added", "timestamp": "2026-01-01T00:00:00Z", "agent": "a\u00e9\"b",
  "data": {"id": "F1", "text": "tab\there \ud83d\ude00 é \/ \\", "confidence": 0.85, "n": [-0, 1e3, 1.5E-3, -12, 12345678901234567890, 0.1],
           "dup": 1, "dup": 2, "nested": {"x": [true, false, null, {}], "y": []}}},
 {"seq": 2, "type": "custom", "agent": "b", "data": {}, "extra_field": {"kept": true}},
 {"seq": 3, "type": "step_start", "timestamp": "2026-01-01T00:00:01+02:00", "agent": "c", "data": {"k": "\u0041\u00ff"}, "Seq": 3}
]}`
	want, err := lctl.DecodeFile(strings.NewReader(raw), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := streamAll(t, []byte(raw), lctl.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.Events) {
		t.Fatalf("%d events, want %d", len(got), len(want.Events))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i].Event, want.Events[i]) {
			t.Errorf("event %d:\n got %#v\nwant %#v", i+1, got[i].Event, want.Events[i])
		}
	}
}

// What Decode reports or converts (a warning, an error, a layout a stream
// cannot read) is ErrStreamUnsupported, so the caller reads the file with
// Decode and says what Decode says.
func TestStreamUnsupported(t *testing.T) {
	for name, raw := range map[string]string{
		"seq as a string":     `{"lctl": "4.0", "chain": {"id": "c"}, "events": [{"seq": "1", "type": "x", "data": {}}]}`,
		"numeric timestamp":   `{"lctl": "4.0", "chain": {"id": "c"}, "events": [{"seq": 1, "type": "x", "timestamp": 1700000000, "data": {}}]}`,
		"truncated":           `{"lctl": "4.0", "chain": {"id": "c"}, "events": [{"seq": 1, "type": "x", "data": {}}`,
		"truncated in event":  `{"lctl": "4.0", "chain": {"id": "c"}, "events": [{"seq": 1, "type": "x", "data": {"a": "b`,
		"bad json":            `{"lctl": "4.0", "chain": {"id": "c"}, "events": [{"seq": 1, "type": "x", "data": {"a": tru}}]}`,
		"data not an object":  `{"lctl": "4.0", "chain": {"id": "c"}, "events": [{"seq": 1, "type": "x", "data": [1]}]}`,
		"chain after events":  `{"lctl": "4.0", "events": [{"seq": 1, "type": "x", "data": {}}], "chain": {"id": "c"}}`,
		"duplicate events":    `{"lctl": "4.0", "chain": {"id": "c"}, "events": [], "events": []}`,
		"wrong version":       `{"lctl": "9.0", "chain": {"id": "c"}, "events": []}`,
		"no chain id":         `{"lctl": "4.0", "events": []}`,
		"trailing data":       `{"lctl": "4.0", "chain": {"id": "c"}, "events": []} {}`,
		"events not a list":   `{"lctl": "4.0", "chain": {"id": "c"}, "events": {}}`,
		"a list, not a chain": `[{"seq": 1}]`,
		"invalid utf-8":       "{\"lctl\": \"4.0\", \"chain\": {\"id\": \"c\"}, \"events\": [{\"seq\": 1, \"type\": \"x\", \"data\": {\"a\": \"\xff\"}}]}",
		"state not an object": `{"lctl": "4.0", "chain": {"id": "c"}, "events": [], "state": [1]}`,
	} {
		_, _, err := streamAll(t, []byte(raw), lctl.StreamOptions{})
		if !errors.Is(err, lctl.ErrStreamUnsupported) {
			t.Errorf("%s: %v, want ErrStreamUnsupported", name, err)
		}
	}
	// The header's warnings are the stream's to give.
	h, events, err := streamAll(t, []byte(`{"chain": "c", "events": [{"seq": 1, "type": "x"}], "state": {"facts": {}}, "x-extra": [1]}`), lctl.StreamOptions{})
	if err != nil || len(events) != 1 || h.ChainID != "c" || len(h.Warnings) != 2 {
		t.Fatalf("header %+v, %d events, %v", h, len(events), err)
	}
}

// ErrStop ends the stream without an error, and nothing after the event
// that returned it is handed over.
func TestStreamStop(t *testing.T) {
	var buf bytes.Buffer
	if err := lctltest.WriteWorkflow(&buf, "wf", 20000, lctltest.WorkflowOptions{}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	calls := 0
	err := lctl.Stream(&buf, lctl.StreamOptions{}, func(*lctl.StreamHeader) error { return nil }, func(e *lctl.StreamEvent) error {
		calls++
		if e.Seq == 1234 {
			return lctl.ErrStop
		}
		last = e.Seq
		return nil
	})
	if err != nil || calls != 1234 || last != 1233 {
		t.Fatalf("err %v, %d calls, last seq %d", err, calls, last)
	}
	boom := errors.New("boom")
	err = lctl.Stream(strings.NewReader(`{"lctl": "4.0", "chain": {"id": "c"}, "events": [{"seq": 1, "type": "x"}]}`), lctl.StreamOptions{},
		func(*lctl.StreamHeader) error { return nil }, func(*lctl.StreamEvent) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("the callback's error was not returned: %v", err)
	}
}

// The generated workflow is deterministic, in order, sealed, with its
// checkpoints where they were asked for.
func TestWorkflowShape(t *testing.T) {
	a := lctltest.Workflow("wf", 2000, lctltest.WorkflowOptions{Seal: true, StateHashes: true})
	b := lctltest.Workflow("wf", 2000, lctltest.WorkflowOptions{Seal: true, StateHashes: true})
	if !reflect.DeepEqual(a, b) || len(a) != 2000 {
		t.Fatal("the generator is not deterministic")
	}
	if err := lctl.Verify(a); err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, e := range a {
		types[e.Type]++
	}
	for _, typ := range []string{"step_start", "step_end", "tool_call", "error", "fact_added", "fact_modified", "checkpoint", "handoff", "verdict"} {
		if types[typ] == 0 {
			t.Errorf("no %s event in %v", typ, types)
		}
	}
	if types["checkpoint"] != 3 || a[len(a)-1].Type != lctl.TypeRunFinished {
		t.Errorf("%d checkpoints (want 3, every 500 events), last event %s", types["checkpoint"], a[len(a)-1].Type)
	}
}

// WorkflowOptions.Detail adds its words to each step's intent and each
// fact's text, deterministically, and changes nothing else.
func TestWorkflowDetail(t *testing.T) {
	plain := lctltest.Workflow("wf", 3000, lctltest.WorkflowOptions{})
	long := lctltest.Workflow("wf", 3000, lctltest.WorkflowOptions{Detail: 12})
	if !reflect.DeepEqual(long, lctltest.Workflow("wf", 3000, lctltest.WorkflowOptions{Detail: 12})) || len(long) != len(plain) {
		t.Fatal("not deterministic, or not as many events")
	}
	changed := 0
	for i := range plain {
		p, l := plain[i], long[i]
		key := map[string]string{lctl.TypeStepStart: "intent", lctl.TypeFactAdded: "text", lctl.TypeFactModified: "text"}[p.Type]
		for k, v := range p.Data {
			lv := l.Data[k]
			if k == key {
				ps, ls := v.(string), lv.(string)
				if !strings.HasPrefix(ls, ps+" ") || len(strings.Fields(ls)) != len(strings.Fields(ps))+12 {
					t.Fatalf("event %d: %s %q, without detail %q", i+1, k, ls, ps)
				}
				changed++
				continue
			}
			if p.Type == lctl.TypeCheckpoint {
				continue // its snapshot holds the facts' texts
			}
			if !reflect.DeepEqual(v, lv) {
				t.Fatalf("event %d: %s %v, without detail %v", i+1, k, lv, v)
			}
		}
		if p.Seq != l.Seq || p.Type != l.Type || p.Agent != l.Agent || p.Timestamp != l.Timestamp || len(p.Data) != len(l.Data) {
			t.Fatalf("event %d differs: %+v / %+v", i+1, l, p)
		}
	}
	if changed < 800 {
		t.Errorf("%d intents and texts changed", changed)
	}
}

// DecodeEvent takes the fast reader for what the stream stores and gives
// what it always gave, for those events and for the rest.
func TestDecodeEventFastPath(t *testing.T) {
	events := lctltest.Workflow("wf", 3000, lctltest.WorkflowOptions{Seal: true})
	fast := lctl.FastEventReader()
	for i := range events {
		raw, err := events[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// The fast reader decides these itself (a fallback would hide a
		// fast path that never works).
		if e, err := fast(raw); err != nil || !reflect.DeepEqual(e, events[i]) {
			t.Fatalf("event %d: the fast reader: %v\n got %+v\nwant %+v", i+1, err, e, events[i])
		}
		got, err := lctl.DecodeEvent(raw)
		if err != nil || !reflect.DeepEqual(got, events[i]) {
			t.Fatalf("event %d: %v\n got %+v\nwant %+v", i+1, err, got, events[i])
		}
	}
	for raw, want := range map[string]string{
		`{"seq": 1, "type": "x", "agent": null, "data": null, "extra": 1}`: "",
		`{"seq": "2", "type": "x"}`:                                        "",
		`{"seq": 3}`:                                                       "event 3: missing type",
		`{"seq": 1.5, "type": "x"}`:                                        "seq 1.5 is not a positive integer",
		`{"type": "x"}`:                                                    "missing seq",
	} {
		_, err := lctl.DecodeEvent([]byte(raw))
		if (err == nil) != (want == "") || (err != nil && err.Error() != want) {
			t.Errorf("%s: error %v, want %q", raw, err, want)
		}
	}
}

// Files of one event per line are split at newlines once three events
// have ended their lines; a line that is not exactly one event then makes
// the file be read in full rather than read wrong. Files laid out
// otherwise are scanned event by event.
func TestStreamLines(t *testing.T) {
	ev := func(seq int) string {
		return fmt.Sprintf(`{"seq": %d, "type": "x", "agent": "a", "data": {"n": %d}}`, seq, seq)
	}
	head := `{"lctl": "4.0", "chain": {"id": "c"}, "events": [` + "\n"
	lines := []string{ev(1), ev(2), ev(3), ev(4), ev(5)}
	cases := map[string]struct {
		raw  string
		want int // events, -1: ErrStreamUnsupported
	}{
		"one per line":          {head + strings.Join(lines, ",\n") + "\n]}\n", 5},
		"all on one line":       {head + strings.Join(lines, ", ") + "]}", 5},
		"two on a later line":   {head + strings.Join(lines[:4], ",\n") + ", " + ev(5) + "\n]}\n", -1},
		"indented later":        {head + strings.Join(lines[:4], ",\n") + ",\n{\n  \"seq\": 5, \"type\": \"x\",\n  \"data\": {}\n}\n]}\n", 5},
		"surrogate on a line":   {head + strings.Join(lines[:4], ",\n") + ",\n" + `{"seq": 5, "type": "x", "data": {"s": "\ud83d\ude00"}}` + "\n]}\n", -1},
		"last with the bracket": {head + strings.Join(lines, ",\n") + "]}\n", 5},
	}
	for name, c := range cases {
		_, got, err := streamAll(t, []byte(c.raw), lctl.StreamOptions{})
		if c.want < 0 {
			if !errors.Is(err, lctl.ErrStreamUnsupported) {
				t.Errorf("%s: %d events, %v; want ErrStreamUnsupported", name, len(got), err)
			}
			continue
		}
		if err != nil || len(got) != c.want {
			t.Errorf("%s: %d events, %v; want %d", name, len(got), err, c.want)
			continue
		}
		for i, e := range got {
			if e.Seq != uint64(i+1) {
				t.Errorf("%s: event %d has seq %d", name, i+1, e.Seq)
			}
		}
	}
}

// DecodeEventHashed's hash is ComputeHash's, whether the bytes are the
// canonical form (the shortcut), indented, edited after sealing, or carry
// a "hash" key of their own inside data.
func TestDecodeEventHashed(t *testing.T) {
	e := lctl.Event{ChainID: "c", Seq: 2, Type: "tool_call", Timestamp: "2026-01-01T00:00:00Z", Agent: "a",
		Data: map[string]any{"hash": "inner", "n": 1.5, "s": "é\n"}}
	if err := e.Seal(strings.Repeat("a", 64)); err != nil {
		t.Fatal(err)
	}
	canonical, err := e.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, canonical, "", "  "); err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(canonical, []byte(`"n":1.5`), []byte(`"n":2.5`), 1)
	for name, raw := range map[string][]byte{"canonical": canonical, "indented": indented.Bytes(), "edited": edited} {
		got, h, err := lctl.DecodeEventHashed(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := got.ComputeHash()
		if err != nil || h != want {
			t.Errorf("%s: hash %s, ComputeHash %s (%v)", name, h, want, err)
		}
		if (name == "edited") == (h == got.Hash) {
			t.Errorf("%s: hash %s against the event's %s", name, h, got.Hash)
		}
	}
}

// TestStreamFields: with Fields, an event's data reads (Get, Lookup,
// DataLen, RangeData, DataMap) exactly as Decode's Data does, on the
// unusual events (a key twice: the last counts; empty data; nested values;
// escapes) and on a generated chain, and its hash is the same.
func TestStreamFields(t *testing.T) {
	raw := `{"lctl": "4.0", "chain": {"id": "c"}, "events": [
 {"seq": 1, "type": "fact_added", "timestamp": "2026-01-01T00:00:00Z", "agent": "a",
  "data": {"id": "F1", "text": "tab\there", "confidence": 0.85, "dup": 1, "dup": 2, "nested": {"x": [true, null, {}], "y": []}}},
 {"seq": 2, "type": "custom", "agent": "b", "data": {}},
 {"seq": 3, "type": "step_start", "timestamp": "2026-01-01T00:00:01Z", "agent": "c", "data": {"k": "\u0041\u00ff", "z": null}},
 {"seq": 4, "type": "tool_call", "agent": "d", "data": {"z0": -0, "big": 12345678901234567890, "e": 1e3, "step": 5000, "step2": 5000,
  "f": 0.25, "neg": -7, "small": 7, "long": "a string longer than thirty-two bytes, not interned", "t": true,
  "tokens": {"input": 5, "output": 7.5, "input": 9, "s": "x", "o": {"k": [1]}, "\u0069n": 3},
  "reasons": [{"rule_id": "a"}, 3, {"rule_id": "b\u00e9", "m": null}, [], {"rule_id": 4}], "empty": {}, "list": [],
  "flat": {"a": 1, "b": "x", "a": 2.5, "t": true, "n": null, "s": "é", "z": -0 , "é": 4}}}
]}`
	var gen bytes.Buffer
	// Enough events for the stream to reuse its batches' arrays of fields
	// while the events copied with Own are kept. Under the race detector
	// 6,000 (12 batches of 512, where 30,000 are 59): the arrays come
	// back to their pools from the third batch on, and every event is
	// checked member by member, so the size is the test's cost.
	n := 30000
	if lctl.RaceDetector {
		n = 6000
	}
	if err := lctltest.WriteWorkflow(&gen, "wf", n, lctltest.WorkflowOptions{Seal: true, StateHashes: true}); err != nil {
		t.Fatal(err)
	}
	for name, file := range map[string][]byte{"unusual": []byte(raw), "generated": gen.Bytes()} {
		want, err := lctl.DecodeFile(bytes.NewReader(file), lctl.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := streamAll(t, file, lctl.StreamOptions{Fields: true, Hash: true, Workers: 2})
		if err != nil || len(got) != len(want.Events) {
			t.Fatalf("%s: %d events (%v), want %d", name, len(got), err, len(want.Events))
		}
		for i := range got {
			e, w := &got[i].Event, &want.Events[i]
			if e.Data != nil {
				t.Fatalf("%s: event %d: Data set with Fields", name, i+1)
			}
			if e.DataLen() != len(w.Data) {
				t.Errorf("%s: event %d: DataLen %d, want %d", name, i+1, e.DataLen(), len(w.Data))
			}
			ranged := map[string]any{}
			e.RangeData(func(k string, v any) {
				if _, twice := ranged[k]; twice {
					t.Errorf("%s: event %d: RangeData gave %s twice", name, i+1, k)
				}
				ranged[k] = v
			})
			if !reflect.DeepEqual(ranged, w.Data) {
				t.Errorf("%s: event %d: RangeData %v, want %v", name, i+1, ranged, w.Data)
			}
			for k, v := range w.Data {
				if gv, ok := e.Lookup(k); !ok || !reflect.DeepEqual(gv, v) || !reflect.DeepEqual(e.Get(k), v) {
					t.Errorf("%s: event %d: %s = %v (%v), want %v", name, i+1, k, gv, ok, v)
				}
			}
			for k, v := range w.Data {
				ws, wok := v.(string)
				if gs, ok := e.Str(k); ok != wok || gs != ws {
					t.Errorf("%s: event %d: Str(%s) = %q %v, want %q %v", name, i+1, k, gs, ok, ws, wok)
				}
				wf, fok := v.(float64)
				if gf, ok := e.Get(k).(float64); fok && (!ok || math.Signbit(gf) != math.Signbit(wf)) {
					t.Errorf("%s: event %d: Get(%s) = %v, want %v", name, i+1, k, e.Get(k), v)
				}
				if gf, ok := e.Float(k); ok != fok || gf != wf || math.Signbit(gf) != math.Signbit(wf) {
					t.Errorf("%s: event %d: Float(%s) = %v %v, want %v %v", name, i+1, k, gf, ok, wf, fok)
				}
			}
			for k, v := range w.Data {
				wm, wok := v.(map[string]any)
				o, ok := e.Object(k)
				if ok != wok {
					t.Errorf("%s: event %d: Object(%s) %v, want %v", name, i+1, k, ok, wok)
				}
				for _, m := range append([]string{"absent"}, keysOf(wm)...) {
					if g := o.Get(m); !reflect.DeepEqual(g, wm[m]) {
						t.Errorf("%s: event %d: %s.%s = %#v, want %#v", name, i+1, k, m, g, wm[m])
					}
					wf, fok := wm[m].(float64)
					if gf, ok := o.Float(m); ok != fok || gf != wf {
						t.Errorf("%s: event %d: %s.%s Float %v %v, want %v %v", name, i+1, k, m, gf, ok, wf, fok)
					}
					ws, sok := wm[m].(string)
					if gs, ok := o.Str(m); ok != sok || gs != ws {
						t.Errorf("%s: event %d: %s.%s Str %q %v, want %q %v", name, i+1, k, m, gs, ok, ws, sok)
					}
				}
				var got, want []map[string]any
				e.EachObject(k, func(o lctl.Object) {
					m := map[string]any{}
					for _, n := range []string{"rule_id", "m", "absent"} {
						if v := o.Get(n); v != nil {
							m[n] = v
						}
					}
					got = append(got, m)
				})
				list, _ := v.([]any)
				for _, x := range list {
					if xm, ok := x.(map[string]any); ok {
						m := map[string]any{}
						for _, n := range []string{"rule_id", "m", "absent"} {
							if v := xm[n]; v != nil {
								m[n] = v
							}
						}
						want = append(want, m)
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: event %d: EachObject(%s) %v, want %v", name, i+1, k, got, want)
				}
			}
			var kept lctl.Event
			e.OwnInto(&kept)
			if !reflect.DeepEqual(kept.DataMap(), w.Data) || kept.Seq != w.Seq {
				t.Errorf("%s: event %d: OwnInto gave %v", name, i+1, kept.DataMap())
			}
			if _, ok := e.Lookup("absent"); ok || e.Get("absent") != nil {
				t.Errorf("%s: event %d: a member that is not there", name, i+1)
			}
			if got[i].Computed != w.Hash && w.Hash != "" {
				t.Errorf("%s: event %d: hash %s, want %s", name, i+1, got[i].Computed, w.Hash)
			}
			if h, err := e.ComputeHash(); err != nil || (w.Hash != "" && h != w.Hash) {
				t.Errorf("%s: event %d: ComputeHash %s (%v), want %s", name, i+1, h, err, w.Hash)
			}
			if m := e.DataMap(); !reflect.DeepEqual(m, w.Data) || (w.Data != nil && m == nil) {
				t.Errorf("%s: event %d: DataMap %#v, want %#v", name, i+1, m, w.Data)
			}
		}
	}
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
