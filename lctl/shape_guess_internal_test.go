package lctl

import (
	"math/rand/v2"
	"testing"
)

// TestStrGuessAt checks a guess against what it stands for: at(b, i) says
// yes exactly when the guess's bytes are there and a quote after them in
// b (with sixteen bytes after the opening quote in b's array to read), as
// quoted says where it takes the bytes, for guesses of 0 to 14 bytes made from a table's
// slots and strings that share their prefixes, have a quote or a byte
// more or less, end at b's end or past it (the array beyond b), from
// every place. A longer string gives no guess.
func TestStrGuessAt(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 1))
	alphabet := []byte{'a', 'b', '"', '\\', 0, 0xff, ' '}
	var tab rawTable
	rounds := 20000
	if raceDetector {
		rounds = 3000
	}
	tried, held := 0, 0
	for range rounds {
		// A string the careful read took whole: bytes without a quote.
		n := rng.IntN(18)
		s := make([]byte, n)
		for j := range s {
			if s[j] = alphabet[rng.IntN(len(alphabet))]; s[j] == '"' {
				s[j] = 'a'
			}
		}
		src := append(append(append([]byte{'"'}, s...), '"'), "xxxxxxxxxxxxxxxxxxxxxxxx"...)
		k := quoted(src, 0)
		sl := tab.put(&k, n+2, string(s), string(s))
		var g strGuess
		g.set(sl)
		if n > shapeMax {
			if g.m0 != 0 {
				t.Fatalf("%q: a guess of %d bytes", s, n)
			}
			continue
		}
		if g.m0 == 0 || g.s != string(s) || g.n != n {
			t.Fatalf("%q: guess %+v", s, g)
		}
		// Bytes to look at: the string, edited at one place or not, with
		// a quote after it or not, cut at some length, more bytes beyond.
		for range 8 {
			b := append([]byte{'"'}, s...)
			switch rng.IntN(5) {
			case 0: // a byte changed
				if n > 0 {
					b[1+rng.IntN(n)] = alphabet[rng.IntN(len(alphabet))]
				}
			case 1: // a byte more
				b = append(b, alphabet[rng.IntN(len(alphabet))])
			case 2: // a byte less
				if n > 0 {
					b = b[:len(b)-1]
				}
			}
			if rng.IntN(4) > 0 {
				b = append(b, '"')
			}
			for range rng.IntN(30) {
				b = append(b, alphabet[rng.IntN(len(alphabet))])
			}
			cut := rng.IntN(len(b) + 1)
			lead := rng.IntN(3)
			full := append(make([]byte, lead), b...)
			at := full[:lead+cut]
			if cut == 0 || rng.IntN(4) == 0 {
				// Nothing beyond (a copy the size of what is read).
				at = append([]byte{}, at...)
			}
			if cut == 0 || at[lead] != '"' {
				continue
			}
			// Its bytes, then a quote in b; read only with sixteen bytes
			// after the opening quote in b's array.
			want := lead+1+n < len(at) && string(at[lead+1:lead+1+n]) == string(s) && at[lead+1+n] == '"' && lead+17 <= cap(at)
			if got := g.at(at, lead); got != want {
				t.Fatalf("guess %q, bytes %q (of %q, %d in b, cap %d): at %v", s, at[lead:], full[lead:], cut, cap(at), got)
			}
			// Where quoted takes bytes, they are the guess's exactly when
			// it holds.
			if q := quoted(at, lead); q.n >= 0 && lead+17 <= cap(at) && want != (q.n == k.n && q.w0 == k.w0 && q.w1 == k.w1 && q.w2 == k.w2) {
				t.Fatalf("guess %q, bytes %q: at %v, quoted %+v", s, at[lead:], want, q)
			}
			tried++
			if want {
				held++
			}
		}
	}
	if held < tried/10 || held == tried {
		t.Fatalf("%d of %d held: the cases do not test both ways", held, tried)
	}
}
