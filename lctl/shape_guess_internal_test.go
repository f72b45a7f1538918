package lctl

import (
	"fmt"
	"math/rand/v2"
	"strings"
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

// TestSpecPyConstants: the constants specEvent compares the keys with
// inline are specPyWords'.
func TestSpecPyConstants(t *testing.T) {
	t.Parallel()
	for k, c := range [][4]uint64{
		specType:      {pyType0, pyType1, pyTypeM, pyTypeN},
		specTimestamp: {pyTimestamp0, pyTimestamp1, pyTimestampM, pyTimestampN},
		specAgent:     {pyAgent0, pyAgent1, pyAgentM, pyAgentN},
		specData:      {pyData0, pyData1, pyDataM, pyDataN},
	} {
		w := specPyWords[k]
		if w[1] != ^uint64(0) || c[0] != w[0] || c[1] != w[2] || c[2] != w[3] || int(c[3]) != specPyLens[k] {
			t.Errorf("key %d: constants %#x, words %#x, length %d", k, c, w, specPyLens[k])
		}
	}
}

// TestPyKeyMatchesSpecKey: where pyKey takes a key, specKey takes it to
// the same place; pyKey takes the keys as Python's separators write them
// (value next), and no other bytes: every cut of them and of the key in
// other layouts, other keys, more white space.
func TestPyKeyMatchesSpecKey(t *testing.T) {
	t.Parallel()
	names := [...]string{specType: "type", specTimestamp: "timestamp", specAgent: "agent", specData: "data"}
	consts := [...][4]uint64{
		specType:      {pyType0, pyType1, pyTypeM, pyTypeN},
		specTimestamp: {pyTimestamp0, pyTimestamp1, pyTimestampM, pyTimestampN},
		specAgent:     {pyAgent0, pyAgent1, pyAgentM, pyAgentN},
		specData:      {pyData0, pyData1, pyDataM, pyDataN},
	}
	taken := 0
	p := new(fastParser) // its tables are large: one for all
	for k, name := range names {
		c := consts[k]
		for _, form := range []string{`, "%s": "v", "x": 1}`, `,"%s":"v","x":1}`, `, "%s":  "v", "x": 1}`, `, "%s":` + "\t" + `"v", "x": 1}`,
			`,  "%s": "v", "x": 1}`, `, "%sx": "v", "x": 1}`, `, "%s" : "v", "x": 1}`, `, "%s": {"x": 1}}`, `, "%s": 7, "x": 1}`, `; "%s": "v", "x": 1}`} {
			for _, key := range []string{name, "type", "agent", "data", "timestamp", "Type", name[:len(name)-1]} {
				full := fmt.Sprintf(form, key)
				for cut := 0; cut <= len(full); cut++ {
					for _, lead := range []int{0, 3} {
						b := append([]byte(strings.Repeat("x", lead)), full[:cut]...)
						j := pyKey(b, lead, c[0], c[1], c[2], int(c[3]))
						p.b, p.i = b, lead
						ok := p.specKey(k)
						if j >= 0 && (!ok || p.i != j) {
							t.Fatalf("%q from %d: pyKey %d, specKey %v at %d", b, lead, j, ok, p.i)
						}
						if j >= 0 {
							taken++
						}
						python := form == `, "%s": "v", "x": 1}` || form == `, "%s": {"x": 1}}` || form == `, "%s": 7, "x": 1}`
						if python && key == name && cut == len(full) && j < 0 {
							t.Fatalf("%q: pyKey did not take it", b)
						}
					}
				}
			}
		}
	}
	if taken == 0 {
		t.Fatal("pyKey took nothing")
	}
}
