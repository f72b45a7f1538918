package lctl_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// decodeBoth is lctl.DecodeBoth, failing the test when canonicalEvent
// decided but put the hash member elsewhere than the loop.
func decodeBoth(t *testing.T, raw []byte, skipHashes, fields, arena bool, prev string) (lctl.Event, lctl.Event, bool, error) {
	t.Helper()
	c, l, ok, at, err := lctl.DecodeBoth(raw, skipHashes, fields, arena, prev)
	if ok && at[0] != at[1] {
		t.Errorf("%s: hash member at %v, loop %v", raw, at[0], at[1])
	}
	return c, l, ok, err
}

// canonicalEvent, the straight reader of events laid out as canonical
// JSON, gives exactly what the general loop gives, decides every event
// XCT writes, and leaves every other layout to the loop.
func TestCanonicalEventMatchesLoop(t *testing.T) {
	events := lctltest.Workflow("wf", 2000, lctltest.WorkflowOptions{Seal: true, StateHashes: true})
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
	// Decided ones with escapes and a non-ASCII byte agree too.
	for _, raw := range []string{
		`{"agent":"\u0061\n","chain_id":"c","data":{"k":"é"},"hash":"` + hash64 + `","seq":7,"timestamp":"t\"","type":"é"}`,
		`{"agent":"a","chain_id":"c","data":{},"hash":"` + hash64 + `","seq":7,"timestamp":"t","type":"t"}`,
	} {
		c, l, ok, err := decodeBoth(t, []byte(raw), false, true, true, "")
		if !ok || err != nil || !reflect.DeepEqual(c, l) {
			t.Errorf("%s: canonical %v, loop %v\ncanonical %+v\n     loop %+v", raw, ok, err, c, l)
		}
	}
}

var hash64 = string(bytes.Repeat([]byte("0a"), 32))
