package lctl

import (
	"math/rand/v2"
	"testing"
)

// TestEventOnLineFastMatchesGeneral: eventOnLine's look at a line's ends
// answers as the loops do for every line of up to five bytes of braces,
// brackets, commas, white space and a letter, and for random longer ones.
func TestEventOnLineFastMatchesGeneral(t *testing.T) {
	const alphabet = "{}],[ \t\rx"
	check := func(l []byte) {
		t.Helper()
		f, to, ok := eventOnLine(l)
		gf, gto, gok := eventOnLineGeneral(l)
		if f != gf || to != gto || ok != gok {
			t.Fatalf("%q: %d %d %v, the loops %d %d %v", l, f, to, ok, gf, gto, gok)
		}
	}
	var walk func(l []byte)
	walk = func(l []byte) {
		check(l)
		if len(l) == 5 {
			return
		}
		for i := range len(alphabet) {
			walk(append(l, alphabet[i]))
		}
	}
	walk(nil)
	r := rand.New(rand.NewPCG(9, 10))
	for range 20000 {
		l := make([]byte, 3+r.IntN(40))
		for i := range l {
			l[i] = alphabet[r.IntN(len(alphabet))]
		}
		l[0] = '{'
		if r.IntN(2) == 0 {
			l[len(l)-1], l[len(l)-2] = ',', '}'
		}
		check(l)
	}
}
