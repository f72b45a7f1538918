package lctl_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// factsOnly is a StreamOptions.Data that decodes only fact events' data.
func factsOnly(typ string) bool { return typ == lctl.TypeFactAdded || typ == lctl.TypeFactModified }

// panics says whether fn panics.
func panics(fn func()) (p bool) {
	defer func() { p = recover() != nil }()
	fn()
	return false
}

// With StreamOptions.Data, the stream gives the same events (seq, type,
// time, agent, chain id, hashes) in every layout and shape, the data of
// the types asked for as without it, and the data of the others not
// decoded: reading it panics (Str, Get, RangeData, DataMap, Object), so a
// command wrong about what it reads fails loudly in the tests that
// compare it with the full read. (A canonical event's data is skipped
// once an event of its type was read: its type comes after its data.)
// With Line, every event's data is decoded (a line may read any). With
// Hash, an event that carries a hash has its data and the hash computed
// without Data, and so has every event after it on its decoding core; an
// event without a hash before it is skipped as without Hash.
func TestStreamDataSkipped(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{}
	for _, sh := range []lctltest.Shape{{Spec: true}, {Spec: true, Layout: lctltest.LayoutIndent}, {Spec: true, Layout: lctltest.LayoutOneLine}, {}} {
		var b bytes.Buffer
		if err := lctltest.WriteWorkflowShaped(&b, "wf", 3000, lctltest.WorkflowOptions{Seal: !sh.Spec, CheckpointEvery: 500}, sh); err != nil {
			t.Fatal(err)
		}
		files[fmt.Sprintf("spec=%v layout=%q", sh.Spec, sh.Layout)] = b.Bytes()
	}
	// The sealed file with the hashes taken off its first half's events.
	lines := bytes.SplitAfter(files[`spec=false layout=""`], []byte("\n"))
	unhash := regexp.MustCompile(`,"hash":"[0-9a-f]{64}"(,"prev_hash":"[0-9a-f]{64}")?`)
	for i := range lines[1:1501] {
		lines[i+1] = unhash.ReplaceAll(lines[i+1], nil)
	}
	files["half sealed"] = bytes.Join(lines, nil)
	for name, raw := range files {
		want := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: 2}, 0)
		got := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: 2, Data: factsOnly}, 0)
		if want.err != nil || got.err != nil || len(got.events) != len(want.events) || len(want.events) != 3000 {
			t.Fatalf("%s: %d events (%v), without Data %d (%v)", name, len(got.events), got.err, len(want.events), want.err)
		}
		skipped := 0
		for i := range got.events {
			g, w := &got.events[i], &want.events[i]
			if g.Seq != w.Seq || g.Type != w.Type || g.Timestamp != w.Timestamp || g.Agent != w.Agent || g.ChainID != w.ChainID ||
				g.Hash != w.Hash || g.PrevHash != w.PrevHash || g.TimeOK != w.TimeOK || !g.Time.Equal(w.Time) || !g.Event.Time().Equal(w.Event.Time()) {
				t.Fatalf("%s: event %d differs:\n%+v\n%+v", name, i+1, g.Event, w.Event)
			}
			if factsOnly(g.Type) {
				if !reflect.DeepEqual(g.DataMap(), w.DataMap()) {
					t.Fatalf("%s: event %d's data %v, without Data %v", name, i+1, g.DataMap(), w.DataMap())
				}
				continue
			}
			e := &g.Event
			if !panics(func() { e.Str("step") }) {
				// Decoded all the same (a canonical event's type is
				// known before its data only once one of its type was
				// read): as without Data.
				if !reflect.DeepEqual(g.DataMap(), w.DataMap()) {
					t.Fatalf("%s: event %d's data %v, without Data %v", name, i+1, g.DataMap(), w.DataMap())
				}
				continue
			}
			skipped++
			for what, read := range map[string]func(){
				"Str":    func() { e.Str("step") },
				"Get":    func() { e.Get("step") },
				"Float":  func() { e.Float("step") },
				"Object": func() { e.Object("tokens") },
				"RangeData": func() {
					e.RangeData(func(string, any) {})
				},
				"DataMap": func() { e.DataMap() },
				"DataLen": func() { e.DataLen() },
			} {
				if !panics(read) {
					t.Fatalf("%s: event %d (%s): %s of data not decoded did not panic", name, i+1, g.Type, what)
				}
			}
		}
		if skipped < 2000 && name != "half sealed" || skipped < 1000 {
			t.Errorf("%s: %d events skipped", name, skipped)
		}
		// With Line, nothing is skipped.
		all := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: 2, Data: factsOnly, Line: func(dst []byte, e *lctl.Event) []byte {
			return fmt.Appendf(dst, "%d %v", e.Seq, e.DataLen())
		}}, 0)
		if all.err != nil || len(all.events) != len(want.events) {
			t.Fatalf("%s, with Line: %d events, %v", name, len(all.events), all.err)
		}
		for i := range all.events {
			if e := &all.events[i]; !reflect.DeepEqual(e.DataMap(), want.events[i].DataMap()) {
				t.Fatalf("%s, with Line: event %d's data %v", name, i+1, e.DataMap())
			}
		}
		// With Hash: the hashes computed without Data; an event with a
		// hash has its data, one without is skipped as without Hash
		// until its core has met a hash.
		for _, workers := range []int{1, 2, 3} {
			hashed := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: workers, Hash: true}, 0)
			got := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: workers, Hash: true, Data: factsOnly}, 0)
			if hashed.err != nil || got.err != nil || len(got.events) != len(want.events) || len(hashed.events) != len(want.events) {
				t.Fatalf("%s, with Hash: %d events (%v), without Data %d (%v)", name, len(got.events), got.err, len(hashed.events), hashed.err)
			}
			skippedHash, computed := 0, 0
			for i := range got.events {
				g, h := &got.events[i], &hashed.events[i]
				if g.Computed != h.Computed || (g.HashErr == nil) != (h.HashErr == nil) || g.Hash != h.Hash || g.PrevHash != h.PrevHash {
					t.Fatalf("%s, with Hash, %d workers: event %d: hash %q %v, without Data %q %v", name, workers, i+1, g.Computed, g.HashErr, h.Computed, h.HashErr)
				}
				if g.Computed != "" {
					computed++
				}
				e := &g.Event
				if panics(func() { e.DataMap() }) {
					if g.Hash != "" || factsOnly(g.Type) {
						t.Fatalf("%s, with Hash, %d workers: event %d (%s, hash %q): data not decoded", name, workers, i+1, g.Type, g.Hash)
					}
					skippedHash++
					continue
				}
				if !reflect.DeepEqual(e.DataMap(), h.DataMap()) {
					t.Fatalf("%s, with Hash, %d workers: event %d's data %v, without Data %v", name, workers, i+1, e.DataMap(), h.DataMap())
				}
			}
			switch {
			case strings.HasPrefix(name, "spec=true") && (skippedHash != skipped || computed != 0):
				t.Errorf("%s, with Hash, %d workers: %d skipped (%d without Hash), %d hashes", name, workers, skippedHash, skipped, computed)
			case name == `spec=false layout=""` && (skippedHash != 0 || computed != 3000):
				t.Errorf("%s, with Hash, %d workers: %d skipped, %d hashes", name, workers, skippedHash, computed)
			case name == "half sealed" && (skippedHash < 1000 || computed != 1500):
				t.Errorf("%s, with Hash, %d workers: %d skipped, %d hashes", name, workers, skippedHash, computed)
			}
		}
	}
}

// What the stream accepts and what it gives way on is the same with
// StreamOptions.Data as without: data that is unusual but valid (escapes,
// characters beyond ASCII, numbers of every form, literals, nesting,
// white space, a key given twice) in an event whose data is skipped is
// taken, and data that is not valid JSON there makes the stream give way
// (ErrStreamUnsupported) as it does without, in the spec's order and in
// canonical events.
func TestStreamDataSkippedChecksData(t *testing.T) {
	t.Parallel()
	good := []string{
		`{}`, `{ }`, `{"k": "tab\there \ud83d\ude00 é \/ \\"}`, `{"n": [-0, 1e3, 1.5E-3, -12, 12345678901234567890, 0.1]}`,
		`{"dup": 1, "dup": 2}`, `{"nested": {"x": [true, false, null, {}], "y": []}}`, `{"a":1,"b":"c"}`,
		`{ "a" : 1 , "b" : [ ] }`, `{"a": 0}`, `{"a": -1}`, `{"a": 1234567890123456}`, `{"a": 1.0}`, `{"é": "ü"}`,
		`{"a": "\u0041\u00ff"}`, `{"a": true, "b": false, "c": null}`, `{"tokens": {"input": 3, "output": 4}}`,
		`{"reasons": [{"rule_id": "x"}, {"rule_id": "y"}]}`, "{\"a\":\t1,\n\"b\": 2}",
	}
	bad := []string{
		`{"a": tru}`, "{\"a\": \"\xff\"}", `{"a": 1,}`, `{"a": "\q"}`, `{"a": [1,]}`, `{"a": {"b": 1}`, `{"a": 01}`,
		`{"a" 1}`, `{"a": "x\u12"}`, "{\"a\": \"x\x01\"}", `{"a": 1 "b": 2}`, `{a: 1}`, `{"a": +1}`, `{"a": -}`,
		`{"a": 1.}`, `{"a": .5}`, `{"a": 1e}`, `{"a": [1 2]}`, `{"a": nul}`, `{"a": "\ud800"x}`, `{,}`,
		`{"a": 1e999}`, `{"a": {"b": {"c": [}}}`, "{\"\xc3\": 1}",
	}
	files := func(data string) map[string]string {
		spec := `{"lctl": "4.1", "chain": {"id": "c"}, "events": [
{"seq": 1, "type": "step_start", "timestamp": "2026-01-01T00:00:00Z", "agent": "a", "data": {"step": 1}},
{"seq": 2, "type": "step_end", "timestamp": "2026-01-01T00:00:01Z", "agent": "a", "data": ` + data + `},
{"seq": 3, "type": "fact_added", "timestamp": "2026-01-01T00:00:02Z", "agent": "a", "data": {"id": "F1", "text": "t", "confidence": 0.5}}
]}`
		canon := `{"lctl":"4.0","chain":{"id":"c"},"events":[
{"agent":"a","chain_id":"c","data":{"step":1},"seq":1,"timestamp":"2026-01-01T00:00:00Z","type":"step_start"},
{"agent":"a","chain_id":"c","data":` + data + `,"seq":2,"timestamp":"2026-01-01T00:00:01Z","type":"step_end"},
{"agent":"a","chain_id":"c","data":{"confidence":0.5,"id":"F1","text":"t"},"seq":3,"timestamp":"2026-01-01T00:00:02Z","type":"fact_added"}
]}`
		return map[string]string{"spec": spec, "canonical": canon}
	}
	for _, data := range append(append([]string{}, good...), bad...) {
		for name, raw := range files(data) {
			want := streamKeep(strings.NewReader(raw), lctl.StreamOptions{Fields: true}, 0)
			got := streamKeep(strings.NewReader(raw), lctl.StreamOptions{Fields: true, Data: factsOnly}, 0)
			if !errors.Is(got.err, want.err) || (got.err == nil) != (want.err == nil) || len(got.events) != len(want.events) {
				t.Errorf("%s data %q: %d events, %v; without Data %d events, %v", name, data, len(got.events), got.err, len(want.events), want.err)
			}
		}
	}
	for _, data := range good {
		for name, raw := range files(data) {
			got := streamKeep(strings.NewReader(raw), lctl.StreamOptions{Fields: true, Data: factsOnly}, 0)
			if got.err != nil || len(got.events) != 3 {
				t.Errorf("%s data %q: %d events, %v", name, data, len(got.events), got.err)
			}
		}
	}
	for _, data := range bad {
		for name, raw := range files(data) {
			got := streamKeep(strings.NewReader(raw), lctl.StreamOptions{Fields: true, Data: factsOnly}, 0)
			if !errors.Is(got.err, lctl.ErrStreamUnsupported) {
				t.Errorf("%s data %q: %v, want ErrStreamUnsupported", name, data, got.err)
			}
		}
	}
}
