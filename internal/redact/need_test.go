package redact

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestKeyValueNeedSkipsOnlyLinesThatCannotMatch: the key-value matcher
// skips a hinted line without an assigned hint (assignedHint); on every
// line, the matcher with that check finds what the expression alone finds.
// Lines are drawn from the rules' own words, separators, quotes, white
// space, ':' and '=' in every case, so assigned, near-assigned and
// unassigned keys all occur.
func TestKeyValueNeedSkipsOnlyLinesThatCannotMatch(t *testing.T) {
	t.Parallel()
	r := newTest(t, Rules{})
	var kv *matcher
	for i := range r.matchers {
		if r.matchers[i].name == "key-value" {
			kv = &r.matchers[i]
		}
	}
	if kv == nil || kv.need == nil {
		t.Fatal("no key-value matcher with a need check")
	}
	plain := *kv
	plain.need = nil
	var words []string
	for _, w := range r.keyRules {
		words = append(words, w...)
	}
	parts := append(words, "max", "s", "_", ".", "-", " ", "\t", "\"", "'", ":", "=", "= ", ": ", "x9Q7", "hunter2", "#", "bearer ", "token ", ",", ";")
	rng := rand.New(rand.NewPCG(19, 2026))
	skipped, matched := 0, 0
	for range 20000 {
		var b strings.Builder
		for range 1 + rng.IntN(8) {
			p := parts[rng.IntN(len(parts))]
			if rng.IntN(3) == 0 {
				p = strings.ToUpper(p)
			}
			b.WriteString(p)
		}
		line := b.String()
		if !kv.hinted(line) {
			continue
		}
		if !kv.need(line) {
			skipped++
		}
		got, gotOK := kv.apply(line, r)
		want, wantOK := plain.apply(line, r)
		if got != want || gotOK != wantOK {
			t.Fatalf("line %q: with the check %q %v, expression alone %q %v", line, got, gotOK, want, wantOK)
		}
		if wantOK {
			matched++
		}
	}
	if skipped == 0 || matched == 0 {
		t.Fatalf("lines skipped %d, matched %d: the corpus did not try both sides", skipped, matched)
	}
}

// BenchmarkKeyValueConfigLines: a config file whose lines name a key rule's
// word but assign no secret ("max_tokens: 4096 # the token budget").
func BenchmarkKeyValueConfigLines(b *testing.B) {
	r, err := New(Rules{}, []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("max_tokens: 4096 # the token budget for this step\n", 64<<10/50)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_ = r.Scope().Text(text)
	}
}
