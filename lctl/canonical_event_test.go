package lctl_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// pairs are the parsers of decodeBoth, one pair per setup, kept for the
// test (so that strings come from their tables the second time).
var pairs = map[[3]bool]func([]byte, bool, bool, bool, string) (lctl.Event, lctl.Event, bool, [2][2]int, error){}

// decodeBoth is lctl.DecodePair's function for the setup, failing the
// test when canonicalEvent decided but put the hash member elsewhere than
// the loop.
func decodeBoth(t *testing.T, raw []byte, skipHashes, fields, arena bool, prev string) (lctl.Event, lctl.Event, bool, error) {
	t.Helper()
	setup := [3]bool{skipHashes, fields, arena}
	if pairs[setup] == nil {
		pairs[setup] = lctl.DecodePair()
	}
	c, l, ok, at, err := pairs[setup](raw, skipHashes, fields, arena, prev)
	if ok && at[0] != at[1] {
		t.Errorf("%s: hash member at %v, loop %v", raw, at[0], at[1])
	}
	return c, l, ok, err
}

// canonicalEvent, the straight reader of events laid out as canonical
// JSON, gives exactly what the general loop gives, decides every event
// XCT writes, and leaves every other layout to the loop.
func TestCanonicalEventMatchesLoop(t *testing.T) {
	// Sealed, and unsealed as other writers write events (no hash, no
	// prev_hash): both decided by the straight reader.
	events := lctltest.Workflow("wf", 2000, lctltest.WorkflowOptions{Seal: true, StateHashes: true})
	events = append(events, lctltest.Workflow("wf", 2000, lctltest.WorkflowOptions{})...)
	prev := ""
	for i := range events {
		raw, err := events[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []struct{ skip, fields, arena bool }{
			{false, false, false}, {true, true, true}, {false, true, true}, {true, false, false},
		} {
			c, l, ok, err := decodeBoth(t, raw, o.skip, o.fields, o.arena, prev)
			if !ok || err != nil {
				t.Fatalf("event %d %+v: canonical %v, loop %v", i+1, o, ok, err)
			}
			if !reflect.DeepEqual(c, l) {
				t.Fatalf("event %d %+v:\ncanonical %+v\n     loop %+v", i+1, o, c, l)
			}
		}
		prev = events[i].Hash
	}
	canonical := `{"agent":"a","chain_id":"c","data":{"k":"v","n":1},"hash":"` + hash64 + `","prev_hash":"` + hash64 +
		`","seq":7,"timestamp":"2026-01-01T00:00:00Z","type":"t"}`
	if _, _, ok, err := decodeBoth(t, []byte(canonical), false, true, true, ""); !ok || err != nil {
		t.Fatalf("canonical: %v %v", ok, err)
	}
	// Without a hash, without a prev_hash, with neither: decided, and the
	// same as the loop's.
	for _, raw := range []string{
		`{"agent":"a","chain_id":"c","data":{"k":"v"},"prev_hash":"` + hash64 + `","seq":7,"timestamp":"2026-01-01T00:00:00Z","type":"t"}`,
		`{"agent":"a","chain_id":"c","data":{"k":"v"},"hash":"` + hash64 + `","seq":7,"timestamp":"2026-01-01T00:00:00Z","type":"t"}`,
		`{"agent":"a","chain_id":"c","data":{"k":"v","n":1},"seq":7,"timestamp":"2026-01-01T00:00:00Z","type":"t"}`,
	} {
		for _, skip := range []bool{false, true} {
			c, l, ok, err := decodeBoth(t, []byte(raw), skip, true, true, hash64)
			if !ok || err != nil || !reflect.DeepEqual(c, l) {
				t.Errorf("%s: canonical %v, loop %v\ncanonical %+v\n     loop %+v", raw, ok, err, c, l)
			}
		}
	}
	for _, raw := range []string{
		// Other layouts: the loop decides (and may refuse).
		" " + canonical,
		canonical + " ",
		`{"agent": "a","chain_id":"c","data":{},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`,
		`{"chain_id":"c","agent":"a","data":{},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`,
		`{"agent":"a","chain_id":"c","data":{},"extra":1,"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`,
		`{"agent":"a","chain_id":"c","data":{},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t","z":1}`,
		`{"agent":"a","chain_id":"c","data":{},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":""}`,
		`{"agent":"a","chain_id":"c","data":{},"hash":"` + hash64 + `","seq":07,"timestamp":"t","type":"t"}`,
		`{"agent":"a","chain_id":"c","data":null,"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`,
		`{"agent":"a","chain_id":"c","data":{},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}}`,
		`{"agent":"\u0061","chain_id":"c","data":{},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`,
		`{"agent":"a","chain_id":"c","data":{"k":"\u00e9"},"hash":"x\"y","seq":7,"timestamp":"t","type":"t"}`,
	} {
		for _, skip := range []bool{false, true} {
			c, l, ok, err := decodeBoth(t, []byte(raw), skip, true, true, hash64)
			if ok && (err != nil || !reflect.DeepEqual(c, l)) {
				t.Errorf("%s: canonical decided, loop %v\ncanonical %+v\n     loop %+v", raw, err, c, l)
			}
		}
	}
	// Decided ones with escapes, quotes and bytes past ASCII in strings of
	// every length around the tables' words agree too, read twice (the
	// second time from the tables), and so do ones that differ from them
	// only after the bytes a table compares.
	var odd []string
	for _, s := range []string{
		`\u0061\n`, `é`, `a\"b`, `\"`, `\\`, `\/x`, `1234567`, `12345678`, `123456789012345`, `1234567890123456`,
		`12345678901234567890123`, `123456789012345678901234`, `1234567\"9`, `123456789012345\"`, `12345678901234567890123\"x`,
		`é234567`, `1234567é`, `tab\there`, ``, `s0000207`, `finding F24 rev 3`,
	} {
		odd = append(odd, s, s+"x", "x"+s)
	}
	for round := range 2 {
		for _, s := range odd {
			raw := `{"agent":"` + s + `","chain_id":"` + s + `","data":{"` + s + `":"` + s + `","k":"` + s + `","n":` +
				fmt.Sprint(len(s)) + `,"z":[{"` + s + `":"` + s + `"}]},"hash":"` + hash64 + `","seq":7,"timestamp":"t` + s +
				`","type":"` + s + `"}`
			c, l, ok, err := decodeBoth(t, []byte(raw), false, true, true, "")
			if err == nil && (!ok || !reflect.DeepEqual(c, l)) {
				t.Errorf("round %d: %s: canonical %v, loop %v\ncanonical %+v\n     loop %+v", round, raw, ok, err, c, l)
			}
		}
	}
	// Hashes in hex and other 64-byte strings, as the previous event's
	// hash or not, kept or skipped.
	upper := strings.ToUpper(hash64)
	for _, h := range []string{hash64, upper, hash64[:63] + "-", hash64[:63], hash64 + "0"} {
		for _, prev := range []string{"", hash64, upper, h} {
			for _, skip := range []bool{false, true} {
				raw := `{"agent":"a","chain_id":"c","data":{},"hash":"` + h + `","prev_hash":"` + h + `","seq":7,"timestamp":"t","type":"t"}`
				c, l, ok, err := decodeBoth(t, []byte(raw), skip, true, true, prev)
				if !ok || err != nil || !reflect.DeepEqual(c, l) {
					t.Errorf("%s (prev %s): canonical %v, loop %v\ncanonical %+v\n     loop %+v", raw, prev, ok, err, c, l)
				}
			}
		}
	}
	// Numbers of every form, read in place or as the loop reads them.
	for _, n := range []string{"0", "7", "4095", "4096", "999999999999999", "1000000000000000", "12345678901234567890",
		"1.5", "0.68", "1e3", "1E+2", "2.5e-3", "-7", "-0", "-0.0", "0.1234567890123456789", "123456789012345.5"} {
		raw := `{"agent":"a","chain_id":"c","data":{"n":` + n + `,"m":[` + n + `],"o":{"n":` + n + `}},"hash":"` + hash64 +
			`","seq":7,"timestamp":"t","type":"t"}`
		c, l, ok, err := decodeBoth(t, []byte(raw), false, true, true, "")
		if !ok || err != nil || !reflect.DeepEqual(c, l) || !reflect.DeepEqual(c.Get("n"), l.Get("n")) {
			t.Errorf("%s: canonical %v, loop %v\ncanonical %+v\n     loop %+v", raw, ok, err, c.Get("n"), l.Get("n"))
		}
	}
	for _, n := range []string{"01", "1.", ".5", "1e", "+1", "1.5.5", "--1", "1x"} {
		raw := `{"agent":"a","chain_id":"c","data":{"n":` + n + `},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`
		if _, _, ok, err := decodeBoth(t, []byte(raw), false, true, true, ""); ok || err == nil {
			t.Errorf("%s: canonical %v, loop %v; want both to refuse", raw, ok, err)
		}
	}
	// Objects and arrays, kept as their JSON once checked.
	deep := strings.Repeat("[", 70) + strings.Repeat("]", 70)
	for _, v := range []string{"{}", "[]", "[{}]", "[[]]", `{"a":[]}`, `[[],[[]],{}]`, `{"a":{"b":{"c":[1,2.5,-3e2,"x",true,false,null]}}}`,
		`[{"rule_id":"allow-fs.read"}]`, `[{"rule_id":"allow-fs.read"}]`, `{"input":301,"output":41}`, `{"a":"\u00e9\n","a":"é"}`,
		deep, strings.Repeat(`{"k":`, 63) + "1" + strings.Repeat("}", 63), strings.Repeat(`{"k":`, 65) + "1" + strings.Repeat("}", 65),
		`["12345678901234567890123","123456789012345678901234"]`, `{"12345678901234567890123":1}`} {
		raw := `{"agent":"a","chain_id":"c","data":{"v":` + v + `},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`
		c, l, ok, err := decodeBoth(t, []byte(raw), false, true, true, "")
		if !ok || err != nil || !reflect.DeepEqual(c, l) {
			t.Errorf("%s: canonical %v, loop %v\ncanonical %+v\n     loop %+v", v, ok, err, c, l)
		}
	}
	for _, v := range []string{"[1,]", `{"a"}`, `{"a":}`, "[1 2]", "{,}", "[}", "{]", `{"a":1,}`, "[\"\x01\"]", "[tru]", "[nul]",
		`[1]]`, `{"a":1}}`, `{"a":1]`, `[1}`, "[01]", `[1.]`, `{1:2}`, `[["\xff"]]`, "[" + strings.Repeat("[", 70) + "]"} {
		raw := `{"agent":"a","chain_id":"c","data":{"v":` + v + `},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`
		if _, _, ok, err := decodeBoth(t, []byte(raw), false, true, true, ""); ok || err == nil {
			t.Errorf("%s: canonical %v, loop %v; want both to refuse", v, ok, err)
		}
	}
	// Bytes that are not JSON's or not UTF-8, after a table holds the
	// bytes before them: refused as the loop refuses them.
	for _, s := range []string{"ab\x01", "ab\xff", "ab\x80cd", "\xc3", "ab\\q", "ab\\u12"} {
		raw := `{"agent":"` + s + `","chain_id":"c","data":{"` + s + `":"` + s + `"},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"` + s + `"}`
		_, _, ok, err := decodeBoth(t, []byte(raw), false, true, true, "")
		if ok || err == nil {
			t.Errorf("%q: canonical %v, loop %v; want both to refuse", raw, ok, err)
		}
	}
}

var hash64 = string(bytes.Repeat([]byte("0a"), 32))

// pySpaces puts a space after every ':' and ',' outside strings, as
// Python's json.dumps separates members.
func pySpaces(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/8)
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		out = append(out, c)
		switch {
		case in && c == '\\' && i+1 < len(b):
			i++
			out = append(out, b[i])
		case c == '"':
			in = !in
		case !in && (c == ':' || c == ','):
			out = append(out, ' ')
		}
	}
	return out
}

// specOrder is e in the spec's key order (seq, type, timestamp, agent,
// data), without chain_id and hashes.
func specOrder(t *testing.T, e *lctl.Event) []byte {
	t.Helper()
	data, err := lctl.Canonical(e.Data)
	if err != nil {
		t.Fatal(err)
	}
	q := func(s string) string { b, _ := lctl.Canonical(s); return string(b) }
	return fmt.Appendf(nil, `{"seq":%d,"type":%s,"timestamp":%s,"agent":%s,"data":%s}`, e.Seq, q(e.Type), q(e.Timestamp), q(e.Agent), data)
}

// The general loop reads data through the tables (canonData) and the
// event's strings through its table whatever the key order and the white
// space: what it gives is exactly what it gives without them, on events
// in the spec's order, with Python's separators, indented as json.dump
// indents, with white space anywhere JSON allows it; and it refuses what
// the general way refuses.
func TestLoopTablesMatchGeneral(t *testing.T) {
	pair := lctl.LoopPair()
	layouts := map[string]func([]byte) []byte{
		"compact": func(b []byte) []byte { return b },
		"python":  pySpaces,
		"indent": func(b []byte) []byte {
			var buf bytes.Buffer
			if json.Indent(&buf, b, "    ", "  ") != nil {
				return pySpaces(b)
			}
			return buf.Bytes()
		},
		"two spaces": func(b []byte) []byte {
			// Python's separators with a space more (one space is
			// stepped over inline, more by the loop).
			return bytes.ReplaceAll(bytes.ReplaceAll(pySpaces(b), []byte(", \""), []byte(",  \"")), []byte("\": "), []byte("\":  "))
		},
		"tabs": func(b []byte) []byte {
			// White space of every kind before and after every token.
			var out []byte
			in := false
			for i := 0; i < len(b); i++ {
				c := b[i]
				if !in && strings.IndexByte("{}[]:,", c) >= 0 {
					out = append(out, " \t\r\n"[i%4], c, "\n \t\r"[i%4])
					continue
				}
				out = append(out, c)
				if in && c == '\\' && i+1 < len(b) {
					i++
					out = append(out, b[i])
				} else if c == '"' {
					in = !in
				}
			}
			return out
		},
	}
	// check decodes raw in every layout both ways; wantOK says both must
	// decide it, spec that the straight reader of the spec's order does.
	check := func(name string, raw []byte, wantOK, spec bool) {
		t.Helper()
		for layout, f := range layouts {
			r := f(raw)
			if wantOK && spec != lctl.SpecEventDecides(r) {
				t.Fatalf("%s %s: %s: in the spec's order %v, the straight reader decides %v", name, layout, r, spec, !spec)
			}
			for range 2 { // the second time from the tables
				tab, gen, errT, errG := pair(r)
				if (errT == nil) != (errG == nil) || errT == nil && !reflect.DeepEqual(tab, gen) {
					t.Fatalf("%s %s: %s\ntables %v %+v\ngeneral %v %+v", name, layout, r, errT, tab, errG, gen)
				}
				if wantOK && errT != nil {
					t.Fatalf("%s %s: %s: not decided: %v", name, layout, r, errT)
				}
			}
		}
	}
	// Every event of a workflow is checked in five layouts, twice each;
	// under the race detector (one goroutine: it finds nothing here, and
	// this test was one of the package's longest there) a fifth of them.
	n := 1500
	if lctl.RaceDetector {
		n = 300
	}
	for _, opts := range []lctltest.WorkflowOptions{{StateHashes: true}, {Seal: true}} {
		events := lctltest.Workflow("wf", n, opts)
		for i := range events {
			check(fmt.Sprint("spec ", i+1), specOrder(t, &events[i]), true, true)
			raw, err := events[i].MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprint("canonical ", i+1), raw, true, false)
		}
	}
	ev := func(data string) []byte {
		return []byte(`{"seq":7,"type":"t","timestamp":"2026-01-01T00:00:00Z","agent":"a","data":` + data + `}`)
	}
	// Other members, or the spec's in another order: the loop decides.
	for _, raw := range []string{
		`{"seq":7,"type":"t","timestamp":"x","agent":"a","data":{},"hash":"` + hash64 + `"}`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"a","chain_id":"c","data":{}}`,
		`{"seq":7,"timestamp":"x","type":"t","agent":"a","data":{}}`,
		`{"type":"t","seq":7,"timestamp":"x","agent":"a","data":{}}`,
		`{"seq":7,"type":"t","timestamp":"x","data":{},"agent":"a"}`,
	} {
		check("order "+raw, []byte(raw), true, false)
	}
	for _, raw := range []string{
		`{"seq":07,"type":"t","timestamp":"x","agent":"a","data":{}}`,
		`{"seq":7,"type":"","timestamp":"x","agent":"a","data":{}}`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"a","data":[]}`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"a","data":{}}}`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"a","data":{},}`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"a","data":{}} x`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"a","data":{"a":1},"data":{}}`,
		`{"seq":7.5,"type":"t","timestamp":"x","agent":"a","data":{}}`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"\ud800","data":{}}`,
		`{"seq":7,"type":"t","timestamp":"x","agent":"a\x","data":{}}`,
	} {
		check("refused "+raw, []byte(raw), false, false)
		if _, _, errT, _ := pair([]byte(raw)); errT == nil {
			t.Errorf("%s: decided", raw)
		}
	}
	for _, s := range []string{`\u0061\n`, `é`, `a\"b`, `\"`, `\\`, `\/x`, `12345678`, `12345678901234567890123`,
		`123456789012345678901234`, `1234567\"9`, `12345678901234567890123\"x`, `é234567`, `tab\there`, ``, `a b: c, d`} {
		check("string "+s, []byte(`{"agent":"`+s+`","type":"`+s+`x","seq":7,"data":{"`+s+`":"`+s+`","k":["`+s+`",{"`+s+`":"`+s+`"}]}}`), true, false)
		check("spec string "+s, []byte(`{"seq":7,"type":"`+s+`x","timestamp":"`+s+`","agent":"`+s+`","data":{"`+s+`":"`+s+`","k":["`+s+`",{"`+s+`":"`+s+`"}]}}`), true, true)
	}
	for _, n := range []string{"0", "7", "4096", "999999999999999", "1000000000000000", "12345678901234567890", "1.5", "1e3", "-7", "-0.0"} {
		check("number "+n, ev(`{"n":`+n+`,"m":[`+n+`,`+n+`],"o":{"n":`+n+`}}`), true, true)
	}
	for _, v := range []string{"{}", "[]", "[{}]", "[[]]", `{"a":[]}`, `[[],[[]],{}]`, `{"a":{"b":{"c":[1,2.5,-3e2,"x",true,false,null]}}}`,
		strings.Repeat(`{"k":`, 63) + "1" + strings.Repeat("}", 63), strings.Repeat(`{"k":`, 65) + "1" + strings.Repeat("}", 65)} {
		check("composite "+v, ev(`{"v":`+v+`,"w":1}`), true, true)
	}
	for _, v := range []string{"[1,]", `{"a"}`, `{"a":}`, "[1 2]", "{,}", "[}", "{]", `{"a":1,}`, "[\"\x01\"]", "[tru]",
		`[1]]`, `{"a":1}}`, `[1}`, "[01]", `{1:2}`, `[["\xff"]]`, "[\x01]", "{\x01}", `{"a" 1}`} {
		check("bad "+v, ev(`{"v":`+v+`}`), false, false)
		if _, _, errT, _ := pair(ev(`{"v":` + v + `}`)); errT == nil {
			t.Errorf("%s: decided", v)
		}
	}
}
