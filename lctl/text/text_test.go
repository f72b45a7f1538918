package text

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello", 4, "hell…"},
		{"hello", 0, "…"},
		{"hello", -3, "…"},
		{"héllo", 2, "h…"}, // é is 2 bytes: byte 2 is inside it
		{"héllo", 3, "hé…"},
		{"日本語", 4, "日…"},
		{"日本語", 9, "日本語"},
		{"", 0, ""},
	} {
		if got := Truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestTruncateRunes(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello", 4, "hel…"},
		{"日本語です", 3, "日本…"},
		{"hello", 1, "…"},
		{"hello", 0, "…"},
		{"", 0, ""},
	} {
		if got := TruncateRunes(tc.s, tc.n); got != tc.want {
			t.Errorf("TruncateRunes(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"kitten", "sitting", 3},
		{"read_file", "readfile", 1},
		{"", "abc", 3},
		{"café", "cafe", 1}, // one character, two bytes
	} {
		if got := EditDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := EditDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

// FuzzTruncate: the cut is a prefix of s, within its bound, marked, and
// never makes valid UTF-8 invalid.
func FuzzTruncate(f *testing.F) {
	for _, s := range []string{"", "hello", "héllo", "日本語", "a\xffb", "\U0001F600x"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 64
		got := Truncate(s, n)
		if len(s) <= max(n, 0) {
			if got != s {
				t.Fatalf("Truncate(%q, %d) = %q: changed a short string", s, n, got)
			}
		} else {
			kept, ok := strings.CutSuffix(got, Ellipsis)
			if !ok || !strings.HasPrefix(s, kept) || len(kept) > max(n, 0) {
				t.Fatalf("Truncate(%q, %d) = %q", s, n, got)
			}
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Truncate(%q, %d) = %q: split a character", s, n, got)
		}
		r := TruncateRunes(s, n)
		if utf8.ValidString(s) && !utf8.ValidString(r) {
			t.Fatalf("TruncateRunes(%q, %d) = %q: split a character", s, n, r)
		}
		if utf8.RuneCountInString(r) > max(n, 1) && r != s {
			t.Fatalf("TruncateRunes(%q, %d) = %q: too long", s, n, r)
		}
	})
}

// TestEscapeHidden: every hidden character and stray byte is escaped,
// wherever it is in the word-at-a-time scan; shown text is unchanged.
func TestEscapeHidden(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain ascii text, longer than eight bytes ~", "plain ascii text, longer than eight bytes ~"},
		{"réécrire … 世界", "réécrire … 世界"},
		{"\x1b[2J", `\x1b[2J`},
		{"0123456\x7f89", `0123456\x7f89`},
		{"01234567\x1f", `01234567\x1f`},
		{"abcdefgh\u202eij", `abcdefgh\u202eij`},
		{"abcdefghijklmno\xff", `abcdefghijklmno\xff`},
		{"a\u2028b\u0085c\u200bd\U000e0041", `a\u2028b\u0085c\u200bd\U000e0041`},
		{"tab\there\r\n", `tab\there\r\n`},
	} {
		for _, prefix := range []string{"", "[12] keep: "} {
			got := string(EscapeHidden([]byte(prefix+c.in), len(prefix)))
			if got != prefix+c.want {
				t.Errorf("EscapeHidden(%q) = %q, want %q", prefix+c.in, got, prefix+c.want)
			}
		}
	}
	// Every position of every byte value in a word.
	for v := range 256 {
		for pos := range 16 {
			b := []byte("0123456789abcdef")
			b[pos] = byte(v)
			got := EscapeHidden(append([]byte(nil), b...), 0)
			hidden := v < 0x20 || v >= 0x7f
			if changed := string(got) != string(b); changed != hidden {
				t.Errorf("byte %#x at %d: escaped %v (%q)", v, pos, changed, got)
			}
		}
	}
}

// TestHiddenRanges: Hidden, with its shortcut for the range of arrows
// and CJK, is its definition for every rune.
func TestHiddenRanges(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		want := r < 0x20 || r == 0x7f || unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
		if got := Hidden(r); got != want {
			t.Fatalf("Hidden(%U) = %v, want %v", r, got, want)
		}
	}
}

// TestEscapeHiddenAfterShown: after a shown character beyond ASCII (an
// arrow, an accent) the scan goes on word by word; what it writes is the
// escape of each hidden character and stray byte, whatever is before
// and after it, as a rune-by-rune rewrite gives.
func TestEscapeHiddenAfterShown(t *testing.T) {
	ref := func(s string) string {
		var b strings.Builder
		for len(s) > 0 {
			r, size := utf8.DecodeRuneInString(s)
			switch {
			case r == utf8.RuneError && size <= 1:
				fmt.Fprintf(&b, `\x%02x`, s[0])
			case Hidden(r):
				q := strconv.QuoteRuneToASCII(r)
				b.WriteString(q[1 : len(q)-1])
			default:
				b.WriteString(s[:size])
			}
			s = s[size:]
		}
		return b.String()
	}
	pieces := []string{"a", "plain words ", "→", "é", "世界", "\u202e", "\x1b", "\xff", "\xe2\x86", "\u200b", "\t", "\x7f", "12345678", "\U0001f600", "\ufeff", "\u2069"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var s strings.Builder
		for range rng.IntN(12) {
			s.WriteString(pieces[rng.IntN(len(pieces))])
		}
		in := s.String()
		for _, prefix := range []string{"", "[12] keep → "} {
			got := string(EscapeHidden([]byte(prefix+in), len(prefix)))
			if want := prefix + ref(in); got != want {
				t.Fatalf("EscapeHidden(%q) = %q, want %q", prefix+in, got, want)
			}
		}
	}
}
