package lctl

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// eachAppendStr is what AppendStrs must give: EachObject with
// Object.AppendStr, as describe.go wrote a verdict's rule ids before.
func eachAppendStr(e *Event, dst []byte, key, name, first, sep string) ([]byte, int) {
	n := 0
	s := first
	e.EachObject(key, func(o Object) {
		at := len(dst)
		with := append(dst, s...)
		if b, ok := o.AppendStr(with, name); ok && len(b) > len(with) {
			dst, s = b, sep
			n++
		} else {
			dst = with[:at]
		}
	})
	return dst, n
}

// TestAppendStrsMatchesEachObject: on streamed arrays of objects built
// from pieces that take and that refuse the one-pass read (rule ids plain,
// empty, escaped, past ASCII, not strings, repeated; other members,
// nested values, elements that are not objects, white space), AppendStrs
// appends exactly what EachObject with AppendStr does, after bytes
// already in dst; and on data read into a map.
func TestAppendStrsMatchesEachObject(t *testing.T) {
	members := []string{
		`"rule_id": "allow-fs.read"`, `"rule_id":"deny-net"`, `"rule_id": ""`, `"rule_id": "r\"q"`,
		`"rule_id": "caf\u00e9"`, `"rule_id": "café"`, `"rule_id": 7`, `"rule_id": null`, `"rule_id": true`,
		`"rule_id": {"a": 1}`, `"rule_id": ["x"]`, `"why": "because"`, `"weight": 0.5`, `"nested": {"rule_id": "inner"}`,
		`"rule": "near"`, `"rule_idx": "other"`, `"list": [1, 2]`, `"r\u0075le_id": "escaped key"`,
	}
	elements := []string{`"text"`, `3`, `null`, `[]`, `{}`}
	ws := []string{"", " ", "\n  ", "\t"}
	r := rand.New(rand.NewPCG(3, 4))
	build := func() string {
		var b strings.Builder
		b.WriteString("[")
		for k := range r.IntN(5) {
			if k > 0 {
				b.WriteString(",")
				b.WriteString(ws[r.IntN(len(ws))])
			}
			if r.IntN(10) == 0 {
				b.WriteString(elements[r.IntN(len(elements))])
				continue
			}
			b.WriteString("{")
			for m := range r.IntN(4) {
				if m > 0 {
					b.WriteString(", ")
				}
				// Mostly rule ids and plain members, the one-pass read's.
				if r.IntN(3) > 0 {
					b.WriteString(members[r.IntN(3)])
				} else {
					b.WriteString(members[r.IntN(len(members))])
				}
			}
			b.WriteString(ws[r.IntN(len(ws))])
			b.WriteString("}")
		}
		b.WriteString("]")
		return b.String()
	}
	cases := []string{`[]`, `[{}]`, `[{"rule_id": "a"}]`, `[{"rule_id": "a"}, {"rule_id": "b"}]`, `{"rule_id": "a"}`, `"x"`, `5`}
	for range 20000 {
		cases = append(cases, build())
	}
	fast := 0
	p := newFastParser()
	p.fields = true
	for _, raw := range cases {
		p.slab, p.arena = p.slab[:0], make([]byte, 0, 64)
		var e Event
		if err := p.fastEventInto(&e, []byte(`{"seq": 1, "type": "verdict", "timestamp": "2026-11-21T09:00:00.037Z", "agent": "v", "data": {"reasons": `+raw+`, "step": 1}}`)); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if e.fields == nil {
			t.Fatalf("%s: not streamed as fields", raw)
		}
		for _, dst := range [][]byte{nil, []byte("verdict allow")} {
			want, wn := eachAppendStr(&e, append([]byte(nil), dst...), "reasons", "rule_id", " by ", ", ")
			got, gn := e.AppendStrs(append([]byte(nil), dst...), "reasons", "rule_id", " by ", ", ")
			if string(got) != string(want) || gn != wn {
				t.Fatalf("%s: AppendStrs gives %q (%d), EachObject %q (%d)", raw, got, gn, want, wn)
			}
		}
		if f := e.field("reasons"); f != nil && f.isComposite() {
			if _, _, ok := appendFlatStrs(nil, e.rawAt(f), "rule_id", " by ", ", "); ok {
				fast++
			}
		}
		m := Event{Type: "verdict", Data: e.DataMap()}
		want, wn := eachAppendStr(&m, nil, "reasons", "rule_id", " by ", ", ")
		got, gn := m.AppendStrs(nil, "reasons", "rule_id", " by ", ", ")
		if string(got) != string(want) || gn != wn {
			t.Fatalf("%s in a map: AppendStrs gives %q (%d), EachObject %q (%d)", raw, got, gn, want, wn)
		}
	}
	if fast < len(cases)/4 || fast == len(cases) {
		t.Fatalf("the one-pass read took %d of %d arrays: the pieces do not test both ways", fast, len(cases))
	}
}

// TestOnlyMember: the shape nearly every verdict's reasons have (one
// object whose one member is the name, a plain string; json.dumps' or
// canonical JSON's separators) is read at once, anything else is left to
// appendFlatStrs' loop; either way appendFlatStrs appends the name's
// strings as encoding/json reads the array.
func TestOnlyMember(t *testing.T) {
	tests := []struct {
		raw, v string
		ok     bool
	}{
		{`[{"rule_id": "allow-fs.read"}]`, "allow-fs.read", true},
		{`[{"rule_id":"deny-net"}]`, "deny-net", true},
		{`[{"rule_id": ""}]`, "", true},
		{`[{"rule_id": "café"}]`, "café", true},
		{`[{"rule_id": "r\"q"}]`, "", false},        // an escape
		{`[{"rule_id": "a\\b"}]`, "", false},        // an escape
		{`[{"rule_id":  "two spaces"}]`, "", false}, // other white space
		{`[{"rule_id": "x"} ]`, "", false},          // white space before the bracket
		{`[{"rule_id": "x"}, {"rule_id": "y"}]`, "", false},
		{`[{"rule_id": "x", "why": "z"}]`, "", false},
		{`[{"why": "z", "rule_id": "x"}]`, "", false},
		{`[{"rule_idx": "x"}]`, "", false},
		{`[{"rule": "x"}]`, "", false},
		{`[{"rule_id": 7}]`, "", false},
		{`[{"rule_id": null}]`, "", false},
		{`[{"rule_id": "x"}]]`, "", false},
		{`[{"rule_id": "x"`, "", false},
		{`[]`, "", false},
		{`[{}]`, "", false},
	}
	for _, tt := range tests {
		v, ok := onlyMember([]byte(tt.raw), "rule_id")
		if ok != tt.ok || string(v) != tt.v {
			t.Errorf("onlyMember(%s) = %q, %v; want %q, %v", tt.raw, v, ok, tt.v, tt.ok)
		}
		var arr []any
		if json.Unmarshal([]byte(tt.raw), &arr) != nil {
			continue // not an array appendFlatStrs is given (checked JSON)
		}
		var want []string
		for _, el := range arr {
			if o, isObj := el.(map[string]any); isObj {
				if s, isStr := o["rule_id"].(string); isStr && s != "" {
					want = append(want, s)
				}
			}
		}
		got, n, flat := appendFlatStrs([]byte("x"), []byte(tt.raw), "rule_id", " by ", ", ")
		if !flat {
			continue // EachObject's (TestAppendStrsMatchesEachObject)
		}
		w := "x"
		if len(want) > 0 {
			w += " by " + strings.Join(want, ", ")
		}
		if string(got) != w || n != len(want) {
			t.Errorf("appendFlatStrs(%s) = %q, %d; want %q, %d", tt.raw, got, n, w, len(want))
		}
	}
}
