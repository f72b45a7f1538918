package lctl_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// allData reads every type's data.
func allData(string) bool { return true }

// unreadText leaves a step's intent and id (two members), a step_end's
// and a tool call's step id, a fact's text and a checkpoint's snapshot
// unread.
func unreadText(typ string) string {
	switch typ {
	case lctl.TypeStepStart:
		return "intent,step_id"
	case lctl.TypeStepEnd, lctl.TypeToolCall:
		return "step_id"
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		return "text"
	case lctl.TypeCheckpoint:
		return "facts_snapshot"
	}
	return ""
}

// unreadKeys is what unreadText names for typ, one member a string.
func unreadKeys(typ string) []string {
	if k := unreadText(typ); k != "" {
		return strings.Split(k, ",")
	}
	return nil
}

// With StreamOptions.Unread, the stream gives the same events in every
// layout and shape, each member but the one named for its type as
// without it, and that one present but not kept: reading it panics (Str,
// Get, Lookup, Float, Object, EachObject, RangeData, DataMap), so a
// command wrong about what it reads fails in the tests that compare it
// with the full read. With Line too (which must not read it either), the
// lines are those made without Unread; with Hash nothing is left unread.
func TestStreamUnread(t *testing.T) {
	t.Parallel()
	// line reads every member but the one left unread.
	line := func(dst []byte, e *lctl.Event) []byte {
		dst = fmt.Appendf(dst, "%d %d", e.Seq, e.DataLen())
		keys := unreadKeys(e.Type)
		for _, k := range []string{"intent", "text", "facts_snapshot", "tool", "step", "step_id", "id", "confidence", "tokens"} {
			if !slices.Contains(keys, k) {
				if v, ok := e.Lookup(k); ok {
					dst = fmt.Appendf(dst, " %s=%v", k, v)
				}
			}
		}
		return dst
	}
	for _, sh := range []lctltest.Shape{{Spec: true}, {Spec: true, Layout: lctltest.LayoutIndent}, {Spec: true, Layout: lctltest.LayoutOneLine}, {}} {
		var b bytes.Buffer
		if err := lctltest.WriteWorkflowShaped(&b, "wf", 3000, lctltest.WorkflowOptions{Seal: !sh.Spec, CheckpointEvery: 500, Detail: 12}, sh); err != nil {
			t.Fatal(err)
		}
		raw := b.Bytes()
		want := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: 2}, 0)
		if want.err != nil || len(want.events) != 3000 {
			t.Fatalf("spec=%v layout=%q: %d events without Unread (%v)", sh.Spec, sh.Layout, len(want.events), want.err)
		}
		wantLines := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: 2, Line: line}, 0)
		for with, opts := range map[string]lctl.StreamOptions{
			"Data": {Fields: true, Workers: 2, Data: allData, Unread: unreadText},
			"Line": {Fields: true, Workers: 2, Unread: unreadText, Line: line},
		} {
			name := fmt.Sprintf("spec=%v layout=%q, with %s", sh.Spec, sh.Layout, with)
			got := streamKeep(bytes.NewReader(raw), opts, 0)
			if got.err != nil || len(got.events) != len(want.events) {
				t.Fatalf("%s: %d events (%v), without Unread %d", name, len(got.events), got.err, len(want.events))
			}
			if with == "Line" {
				for i := range got.events {
					if g, w := got.events[i].Line, wantLines.events[i].Line; !bytes.Equal(g, w) {
						t.Fatalf("%s: event %d's line %q, without Unread %q", name, i+1, g, w)
					}
				}
			}
			checkUnread(t, name, got, want)
		}
		all := streamKeep(bytes.NewReader(raw), lctl.StreamOptions{Fields: true, Workers: 2, Hash: true, Data: allData, Unread: unreadText}, 0)
		if all.err != nil || len(all.events) != len(want.events) {
			t.Fatalf("with Hash: %d events, %v", len(all.events), all.err)
		}
		for i := range all.events {
			if e := &all.events[i]; !reflect.DeepEqual(e.DataMap(), want.events[i].DataMap()) {
				t.Fatalf("with Hash: event %d's data %v", i+1, e.DataMap())
			}
		}
	}
}

// checkUnread fails unless got's events are want's, each member but the
// ones unreadText names for its type the same, and those, where they
// were left unread, panicking when read (on enough events of each type).
func checkUnread(t *testing.T, name string, got, want streamResult) {
	t.Helper()
	unread := map[string]int{}
	for i := range got.events {
		g, w := &got.events[i], &want.events[i]
		if g.Seq != w.Seq || g.Type != w.Type || g.Timestamp != w.Timestamp || g.Agent != w.Agent || g.ChainID != w.ChainID || g.Hash != w.Hash {
			t.Fatalf("%s: event %d differs:\n%+v\n%+v", name, i+1, g.Event, w.Event)
		}
		wm := w.DataMap()
		var keys []string // the members named and present
		for _, k := range unreadKeys(g.Type) {
			if _, has := wm[k]; has {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			if !reflect.DeepEqual(g.DataMap(), wm) {
				t.Fatalf("%s: event %d's data %v, without Unread %v", name, i+1, g.DataMap(), wm)
			}
			continue
		}
		e := &g.Event
		if !panics(func() { e.Get(keys[0]) }) {
			// Kept all the same (a canonical event's type is known
			// before its data only once one of its type was read).
			if !reflect.DeepEqual(g.DataMap(), wm) {
				t.Fatalf("%s: event %d's data %v, without Unread %v", name, i+1, g.DataMap(), wm)
			}
			continue
		}
		unread[g.Type]++
		for k, v := range wm {
			if slices.Contains(keys, k) {
				continue
			}
			if got := e.Get(k); !reflect.DeepEqual(got, v) {
				t.Fatalf("%s: event %d's %s %v, without Unread %v", name, i+1, k, got, v)
			}
		}
		if e.DataLen() != len(wm) {
			t.Fatalf("%s: event %d: %d members, without Unread %d", name, i+1, e.DataLen(), len(wm))
		}
		for _, key := range keys {
			checkReadsPanic(t, name, i, g.Type, e, key)
		}
	}
	// Five checkpoints: in canonical events the first each decoding
	// core reads is not known for one before its data.
	for typ, least := range map[string]int{lctl.TypeStepStart: 400, lctl.TypeStepEnd: 400, lctl.TypeToolCall: 400, lctl.TypeFactAdded: 4, lctl.TypeCheckpoint: 1} {
		if unread[typ] < least {
			t.Errorf("%s: %d %s events with their member unread", name, unread[typ], typ)
		}
	}
}

// checkReadsPanic fails unless every read of e's member key panics.
func checkReadsPanic(t *testing.T, name string, i int, typ string, e *lctl.Event, key string) {
	t.Helper()
	for what, read := range map[string]func(){
		"Str":        func() { e.Str(key) },
		"Get":        func() { e.Get(key) },
		"Lookup":     func() { e.Lookup(key) },
		"Float":      func() { e.Float(key) },
		"Object":     func() { e.Object(key) },
		"EachObject": func() { e.EachObject(key, func(lctl.Object) {}) },
		"RangeData":  func() { e.RangeData(func(string, any) {}) },
		"DataMap":    func() { e.DataMap() },
	} {
		if !panics(read) {
			t.Fatalf("%s: event %d (%s): %s of its unread %s did not panic", name, i+1, typ, what, key)
		}
	}
}

// What the stream accepts and gives way on is the same with Unread as
// without: an unread member's value that is unusual but valid (escapes,
// characters beyond ASCII, an object, an array, a number, a literal) is
// taken, one that is not valid JSON makes the stream give way, in the
// spec's order and in canonical events.
func TestStreamUnreadChecksValues(t *testing.T) {
	t.Parallel()
	good := []string{
		`""`, `"plain words of an intent that runs on past thirty-two bytes"`, `"tab\there \ud83d\ude00 é \/ \\"`,
		`"é"`, `{"a": [1, {"b": null}]}`, `[]`, `[1, "x", {}]`, `{}`, `12`, `-1.5e3`, `true`, `null`, `"\u0041\u00ff"`,
	}
	bad := []string{
		`"\q"`, "\"x\x01\"", "\"\xff\"", `"x\u12"`, `"\ud800"x`, `{"a": 1,}`, `[1,]`, `{"a": tru}`, `[1 2]`, `{"a" 1}`,
		`"unterminated`, `tru`, `01`, `{"a": {"b": [}}}`,
	}
	files := func(v string) map[string]string {
		spec := `{"lctl": "4.1", "chain": {"id": "c"}, "events": [
{"seq": 1, "type": "step_start", "timestamp": "2026-01-01T00:00:00Z", "agent": "a", "data": {"intent": ` + v + `, "step": 1}},
{"seq": 2, "type": "step_end", "timestamp": "2026-01-01T00:00:01Z", "agent": "a", "data": {"step": 1}},
{"seq": 3, "type": "step_start", "timestamp": "2026-01-01T00:00:02Z", "agent": "a", "data": {"step": 2, "intent": ` + v + `}}
]}`
		canon := `{"lctl":"4.0","chain":{"id":"c"},"events":[
{"agent":"a","chain_id":"c","data":{"intent":"x","step":1},"seq":1,"timestamp":"2026-01-01T00:00:00Z","type":"step_start"},
{"agent":"a","chain_id":"c","data":{"intent":` + v + `,"step":2},"seq":2,"timestamp":"2026-01-01T00:00:01Z","type":"step_start"},
{"agent":"a","chain_id":"c","data":{"step":2},"seq":3,"timestamp":"2026-01-01T00:00:02Z","type":"step_end"}
]}`
		return map[string]string{"spec": spec, "canonical": canon}
	}
	opts := lctl.StreamOptions{Fields: true, Data: allData, Unread: unreadText}
	for _, v := range append(append([]string{}, good...), bad...) {
		for name, raw := range files(v) {
			want := streamKeep(strings.NewReader(raw), lctl.StreamOptions{Fields: true}, 0)
			got := streamKeep(strings.NewReader(raw), opts, 0)
			if !errors.Is(got.err, want.err) || (got.err == nil) != (want.err == nil) || len(got.events) != len(want.events) {
				t.Errorf("%s intent %q: %d events, %v; without Unread %d events, %v", name, v, len(got.events), got.err, len(want.events), want.err)
			}
		}
	}
	for _, v := range good {
		for name, raw := range files(v) {
			if got := streamKeep(strings.NewReader(raw), opts, 0); got.err != nil || len(got.events) != 3 {
				t.Errorf("%s intent %q: %d events, %v", name, v, len(got.events), got.err)
			}
		}
	}
	for _, v := range bad {
		for name, raw := range files(v) {
			if got := streamKeep(strings.NewReader(raw), opts, 0); !errors.Is(got.err, lctl.ErrStreamUnsupported) {
				t.Errorf("%s intent %q: %v, want ErrStreamUnsupported", name, v, got.err)
			}
		}
	}
}
