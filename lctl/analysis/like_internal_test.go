package analysis

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// likeReference is LIKE as the query language had it before session 16:
// the set of pattern positions reached, as booleans, made for each rune.
func likeReference(s, pat string) bool {
	s, pat = strings.ToLower(s), strings.ToLower(pat)
	pr := []rune(pat)
	cur := make([]bool, len(pr)+1)
	cur[0] = true
	for j := 0; j < len(pr) && pr[j] == '%'; j++ {
		cur[j+1] = true
	}
	for _, c := range s {
		next := make([]bool, len(pr)+1)
		for j, p := range pr {
			if !cur[j] {
				continue
			}
			switch p {
			case '%':
				next[j] = true
			case '_':
				next[j+1] = true
			default:
				if p == c {
					next[j+1] = true
				}
			}
		}
		for j := 0; j < len(pr); j++ {
			if next[j] && pr[j] == '%' {
				next[j+1] = true
			}
		}
		cur = next
	}
	return cur[len(pr)]
}

// TestLikeAgreesWithTheReference: the bit-parallel LIKE says what the
// reference says, for random patterns and texts over a small alphabet
// (runs of %, _, upper case, a rune beyond ASCII) and patterns longer
// than one word of bits.
func TestLikeAgreesWithTheReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 3))
	patAlpha := []rune("ab%_Aé")
	textAlpha := []rune("abAéc")
	gen := func(alpha []rune, n int) string {
		r := make([]rune, n)
		for i := range r {
			r[i] = alpha[rng.IntN(len(alpha))]
		}
		return string(r)
	}
	for i := 0; i < 20000; i++ {
		pn, tn := rng.IntN(12), rng.IntN(16)
		if i%50 == 0 {
			pn, tn = 60+rng.IntN(200), rng.IntN(300)
		}
		pat, s := gen(patAlpha, pn), gen(textAlpha, tn)
		if i%7 == 0 && len(s) > 0 {
			// Make a match likely: the pattern from the text, some runes
			// made wildcards.
			pr := []rune(s)
			for j := range pr {
				switch rng.IntN(5) {
				case 0:
					pr[j] = '_'
				case 1:
					pr[j] = '%'
				}
			}
			pat = string(pr)
		}
		if got, want := like(s, pat), likeReference(s, pat); got != want {
			t.Fatalf("like(%q, %q) = %v, want %v", s, pat, got, want)
		}
	}
	for _, tc := range []struct {
		s, pat string
		want   bool
	}{
		{"", "", true}, {"", "%", true}, {"", "%%%", true}, {"", "_", false}, {"a", "", false},
		{"SQL injection", "%sql%", true}, {"x" + strings.Repeat("a", 100) + "b", "x%" + strings.Repeat("a", 64) + "%b", true},
		{strings.Repeat("a", 200), strings.Repeat("_", 199), false}, {strings.Repeat("a", 200), strings.Repeat("_", 200), true},
	} {
		if got := like(tc.s, tc.pat); got != tc.want || likeReference(tc.s, tc.pat) != tc.want {
			t.Fatalf("like(%q, %q) = %v, want %v", tc.s, tc.pat, got, tc.want)
		}
	}
}
