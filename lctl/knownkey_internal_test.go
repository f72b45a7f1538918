package lctl

import (
	"strings"
	"testing"
)

// TestKnownKey checks every key the fast reader matches as bytes (each
// with its own hand-written length): it is read whole, with its closing
// quote, and a longer or shorter key that starts the same is not taken
// for it, nor is anything read then.
func TestKnownKey(t *testing.T) {
	t.Parallel()
	keys := strings.Fields(`alternatives_considered agent_profile confidence consensus category
		contract chunk code duration_ms direction decision depth facts_snapshot facts from goal
		intent index id labels max_steps message model outcome otel principal recoverable reasons
		reason run_id suggested_queries state_hash step_id summary source status steps step
		total_chunks total_tokens tokens tags text tool type to warnings`)
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	for _, k := range keys {
		p := &fastParser{b: []byte(`"` + k + `":1`)}
		got, ok := p.knownKey()
		if !ok || got != k || p.i != len(k)+2 {
			t.Errorf("%q: got %q, %v, read %d bytes", k, got, ok, p.i)
		}
		for _, other := range []string{k + "x", k[:len(k)-1]} {
			if known[other] {
				continue
			}
			p := &fastParser{b: []byte(`"` + other + `":1`)}
			if got, ok := p.knownKey(); ok || p.i != 0 {
				t.Errorf("%q taken for %q (read %d bytes)", other, got, p.i)
			}
		}
	}
}

// TestTopKey: each top-level key is read whole, with its closing quote,
// however many bytes follow it (the word compare needs 16, the byte
// compare fewer); a key one longer or shorter, or with a byte changed,
// is not taken for it, and nothing is read then.
func TestTopKey(t *testing.T) {
	t.Parallel()
	for _, k := range topKeys {
		name := k.quoted[1 : len(k.quoted)-1]
		for _, tail := range []string{`:1}`, `:"0123456789abcdefghij"}`} {
			p := &fastParser{b: []byte(k.quoted + tail)}
			if bit := p.topKey(); bit != k.bit || p.i != len(k.quoted) {
				t.Errorf("%s%s: bit %d, read %d bytes", k.quoted, tail, bit, p.i)
			}
			others := []string{name + "x", name[:len(name)-1], "x" + name[1:], name[:len(name)-1] + "X"}
			for _, other := range others {
				p := &fastParser{b: []byte(`"` + other + `"` + tail)}
				if bit := p.topKey(); bit != 0 || p.i != 0 {
					t.Errorf("%q taken for %s (bit %d, read %d bytes)", other, k.quoted, bit, p.i)
				}
			}
		}
	}
}
