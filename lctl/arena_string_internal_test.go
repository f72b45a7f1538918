package lctl

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestArenaStringWords: arenaString reads what the byte-by-byte careful
// read (strKeep) reads, or nothing, the same whether its four-word fast
// way is taken (room in the arena, 32 bytes after the quote) or not: on
// strings of 0 to 40 bytes with a quote, a backslash, a control byte or a
// byte past ASCII anywhere, cut anywhere, and with the arena nearly full
// (replaced on the way). What it read stays as it was after later reads.
func TestArenaStringWords(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 1))
	type kept struct{ s, want string }
	var keep []kept
	specials := []byte{'"', '\\', 0x01, 0x1f, 0x80, 0xe9, 'Z'}
	ref, p := newFastParser(), newFastParser() // reused: a parser is large
	for round := range 40000 {
		n := r.IntN(41)
		b := []byte(`"` + strings.Repeat("2", n))
		for k := 1; k < len(b); k++ {
			b[k] = "0123456789-:.TZ"[r.IntN(15)]
		}
		if r.IntN(3) > 0 && n > 0 {
			b[1+r.IntN(n)] = specials[r.IntN(len(specials))]
		}
		b = append(b, `", "agent": "planner", "data": {}}`...)
		if r.IntN(4) == 0 {
			b = b[:r.IntN(len(b))+1]
		}
		ref.b, ref.i = b, 0
		want, wok := ref.strKeep(false, true)
		for _, room := range []int{0, 8, 31, 32, 64, 4096} {
			p.b, p.i = b, 0
			p.arena = make([]byte, 0, room)
			got, ok := p.arenaString()
			if ok && (!wok || got != want || p.i != ref.i) {
				t.Fatalf("round %d %q, room %d: %q %v at %d; careful read %q %v at %d", round, b, room, got, ok, p.i, want, wok, ref.i)
			}
			if !ok && p.i != 0 {
				t.Fatalf("%q: not read, but moved to %d", b, p.i)
			}
			if ok {
				keep = append(keep, kept{got, strings.Clone(want)})
			}
		}
		// Plain strings of up to 31 bytes are read (the fast way with room).
		plain := true
		for _, c := range []byte(want) {
			plain = plain && c >= 0x20 && c < 0x80 && c != '\\' && c != '"'
		}
		if wok && plain && ref.i <= 33 && len(b) >= ref.i+31 {
			p.b, p.i = b, 0
			p.arena = make([]byte, 0, 64)
			if _, ok := p.arenaString(); !ok {
				t.Fatalf("%q: plain string not read", b)
			}
		}
	}
	// One arena for many reads: each string read stays as it was.
	p.arena = make([]byte, 0, 100)
	var got []kept
	for k := range 300 {
		s := strings.Repeat("9", k%30) + "Z"
		p.b, p.i = []byte(`"`+s+`", "agent": "a", "data": {"k": "vvvvvvvvvvvvvvvvvvvvvvvvvvv"}}`), 0
		v, ok := p.arenaString()
		if !ok {
			t.Fatalf("%q not read", s)
		}
		got = append(got, kept{v, s})
	}
	for _, k := range append(got, keep...) {
		if k.s != k.want {
			t.Fatalf("a string read earlier changed: %q, was %q", k.s, k.want)
		}
	}
}
