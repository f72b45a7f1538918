package analysis

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestAppendClip: appendClip appends exactly clip(oneLine(s), n), for
// strings of ASCII, of characters of two to four bytes, with bytes that
// are not UTF-8, line breaks and tabs, of every length around n.
func TestAppendClip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(15, 11))
	parts := []string{"a", "b", " ", "é", "→", "😀", "\xff", "\xe2\x86", "\n", "\t", "\r", "work on part 1 ", "x y"}
	for range 50000 {
		var b strings.Builder
		for k := r.IntN(30); k > 0; k-- {
			p := parts[r.IntN(len(parts))]
			if r.IntN(3) > 0 {
				p = parts[r.IntN(2)]
			}
			b.WriteString(p)
		}
		s := b.String()
		n := r.IntN(25)
		pre := []byte("pre:")
		got := string(appendClip(pre, s, n))
		if want := "pre:" + clip(oneLine(s), n); got != want {
			t.Fatalf("appendClip(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
}
