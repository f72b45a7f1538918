package text

import (
	"strings"
	"testing"
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
