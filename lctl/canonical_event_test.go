package lctl_test

import (
	"bytes"
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
