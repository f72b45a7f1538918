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
	parts := []string{"a", "b", " ", "é", "→", "😀", "\xff", "\xe2\x86", "\n", "\t", "\r", "work on part 1 ", "x y", "\x1f", "\x7f", "\x80", "~"}
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
		if r.IntN(2) == 0 {
			// Mostly plain ASCII, a byte outside it anywhere at times.
			s = strings.Repeat("plain ascii ", r.IntN(8)) + s
		}
		n := r.IntN(25)
		pre := []byte("pre:")
		got := string(appendClip(pre, s, n))
		if want := "pre:" + clip(oneLine(s), n); got != want {
			t.Fatalf("appendClip(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
}

// plainASCII agrees with a byte-by-byte look, for every byte at every
// position of strings of up to 24 bytes.
func TestPlainASCII(t *testing.T) {
	t.Parallel()
	base := []byte("abcdefghijklmnopqrstuvwx")
	for n := 0; n <= len(base); n++ {
		for at := 0; at < n; at++ {
			for c := 0; c < 256; c++ {
				b := append([]byte(nil), base[:n]...)
				b[at] = byte(c)
				want := c >= 0x20 && c < 0x7f
				if got := plainASCII(string(b)); got != want {
					t.Fatalf("%q: %v", b, got)
				}
			}
		}
		if !plainASCII(string(base[:n])) {
			t.Fatalf("%q: not plain", base[:n])
		}
	}
}
