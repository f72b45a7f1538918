package lctl_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// TestTokenMembersMatchMembers: what State.TokenMembers gives (the members
// Apply found in the last step_end's tokens object, kept with
// KeepTokens) reads exactly as the object's own Members, for the object
// Apply just read, for the one before it (another object: found again),
// for objects of the same bytes elsewhere, and for other names (objects
// of the same length side by side: only where they lie tells them apart).
func TestTokenMembersMatchMembers(t *testing.T) {
	t.Parallel()
	names := []string{"input", "in", "input_tokens", "prompt_tokens", "output", "out", "output_tokens", "completion_tokens"}
	others := []string{"output", "input", "x"}
	objects := []string{
		`{"input": 301, "output": 41}`, `{"input": 301, "output": 41}`, `{"output": 42, "input": 302}`,
		`{"in":5,"out":6}`, `{"out":7,"in":4}`,
		`{"prompt_tokens": 7, "completion_tokens": 8, "input": -1}`, `{"output": 2.5, "input": "x"}`,
		`{"input": 1, "input": 2}`, `{"input_tokens": 9, "output_tokens": {"n": 1}}`, `{}`,
		"{\n  \"input\": 12,\n  \"output\": 1e3\n}", `{"input": 301, "output": 41}`,
	}
	var file strings.Builder
	file.WriteString(`{"lctl":"4.0","chain":{"id":"c"},"events":[`)
	for i, obj := range objects {
		if i > 0 {
			file.WriteString(",\n")
		}
		file.WriteString(`{"seq":` + strconv.Itoa(i+1) + `,"type":"step_end","agent":"a","data":{"step":1,"tokens":` + obj + `}}`)
	}
	file.WriteString("]}")
	same := func(what string, got, want lctl.Members, n int) {
		t.Helper()
		for i := range n {
			gf, gok := got.Float(i)
			wf, wok := want.Float(i)
			if gf != wf || gok != wok || !reflect.DeepEqual(got.Get(i), want.Get(i)) {
				t.Errorf("%s, member %d: TokenMembers %v %v %v, Members %v %v %v", what, i, gf, gok, got.Get(i), wf, wok, want.Get(i))
			}
		}
	}
	s := lctl.NewState("c")
	s.KeepTokens()
	var prev lctl.Object
	n := 0
	err := lctl.Stream(strings.NewReader(file.String()), lctl.StreamOptions{Fields: true, SkipHashes: true}, func(*lctl.StreamHeader) error { return nil },
		func(e *lctl.StreamEvent) error {
			s.Apply(&e.Event)
			tok, ok := e.Object("tokens")
			if !ok {
				t.Fatalf("event %d: no tokens object", e.Seq)
			}
			what := "event " + strconv.Itoa(int(e.Seq))
			same(what, s.TokenMembers(tok, names), tok.Members(names), len(names))
			same(what+", other names", s.TokenMembers(tok, others), tok.Members(others), len(others))
			if n > 0 {
				same(what+", the object before", s.TokenMembers(prev, names), prev.Members(names), len(names))
			}
			prev = tok
			n++
			return nil
		})
	if err != nil || n != len(objects) {
		t.Fatalf("streamed %d of %d: %v", n, len(objects), err)
	}
	// Without KeepTokens, and for a decoded object: Members.
	plain := lctl.NewState("c")
	f, err := lctl.Decode(strings.NewReader(file.String()), lctl.FormatJSON, lctl.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Events {
		e := &f.Events[i]
		plain.Apply(e)
		s.Apply(e)
		tok, _ := e.Object("tokens")
		same("decoded "+strconv.Itoa(i+1), plain.TokenMembers(tok, names), tok.Members(names), len(names))
		same("decoded, kept "+strconv.Itoa(i+1), s.TokenMembers(tok, names), tok.Members(names), len(names))
	}
}
