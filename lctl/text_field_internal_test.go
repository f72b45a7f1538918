package lctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// A long string of plain ASCII in a streamed event's data (an intent, a
// finding) is kept in the batch's arena (textField), not allocated as a
// string in an any: Str, Get, Lookup, RangeData and DataMap give what
// decoding the data with encoding/json gives, for strings on either side
// of internMax, with escapes, past ASCII, in the spec's layout and the
// canonical one, whichever member lies where, and while the arena grows
// in the middle of an event (it starts at 64 bytes here).
func TestTextFieldsMatchDecode(t *testing.T) {
	t.Parallel()
	word := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString("findings ")
		}
		return b.String()[:n]
	}
	values := []string{"", "x", word(internMax - 1), word(internMax), word(internMax + 1), word(100), word(300),
		word(40) + `\"quoted\"`, word(40) + `\\`, word(40) + "é", word(40) + `\u00e9`, word(40) + `\n`}
	texts := 0
	for _, spec := range []bool{true, false} {
		for i, v := range values {
			for j, w := range values {
				data := fmt.Sprintf(`{"a": "%s", "n": 7, "o": {"k": "%s"}, "z": "%s"}`, v, v, w)
				var raw string
				if spec {
					raw = fmt.Sprintf(`{"seq": %d, "type": "step_start", "timestamp": "2026-11-21T09:00:00.037Z", "agent": "a", "data": %s}`, i*len(values)+j+1, data)
				} else {
					data = strings.ReplaceAll(strings.ReplaceAll(data, `": `, `":`), `, "`, `,"`)
					raw = fmt.Sprintf(`{"agent":"a","data":%s,"seq":%d,"timestamp":"2026-11-21T09:00:00.037Z","type":"step_start"}`, data, i*len(values)+j+1)
				}
				var want struct {
					Data map[string]any `json:"data"`
				}
				if err := json.Unmarshal([]byte(raw), &want); err != nil {
					t.Fatalf("%s: %v", raw, err)
				}
				p := newFastParser()
				p.fields, p.arena, p.slab = true, make([]byte, 0, 64), nil
				p.b, p.i = []byte(raw), 0
				var e Event
				if err := p.fastEventInto(&e, p.b); err != nil {
					t.Fatalf("%s: %v", raw, err)
				}
				// The input is overwritten: nothing read may point into it.
				copy(p.b, bytes.Repeat([]byte{'#'}, len(p.b)))
				for k, wv := range want.Data {
					if got := e.Get(k); !reflect.DeepEqual(got, wv) {
						t.Fatalf("%s: Get(%q) = %#v, want %#v", raw, k, got, wv)
					}
					if s, ok := wv.(string); ok {
						if got, ok := e.Str(k); !ok || got != s {
							t.Fatalf("%s: Str(%q) = %q %v, want %q", raw, k, got, ok, s)
						}
					}
				}
				if got := e.DataMap(); !reflect.DeepEqual(got, want.Data) {
					t.Fatalf("%s: DataMap %#v, want %#v", raw, got, want.Data)
				}
				seen := map[string]any{}
				e.RangeData(func(k string, v any) { seen[k] = v })
				if !reflect.DeepEqual(seen, want.Data) {
					t.Fatalf("%s: RangeData %#v, want %#v", raw, seen, want.Data)
				}
				for _, f := range e.fields {
					s, _ := want.Data[f.key].(string)
					plain := len(s) > internMax && !strings.ContainsAny(s, "\"\\\né")
					if f.isText() != plain {
						t.Fatalf("%s: member %q kept as text %v, want %v", raw, f.key, f.isText(), plain)
					}
					if f.isText() {
						texts++
					}
				}
			}
		}
	}
	if texts == 0 {
		t.Fatal("no member kept as text")
	}
}
