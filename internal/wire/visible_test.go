package wire

import "testing"

func TestVisible(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, keep, want string
		n              int
	}{
		{"plain text, ünïcode, 日本語", "", "plain text, ünïcode, 日本語", 0},
		{"a\r\nb\tc", "\n\t", `a\r` + "\nb\tc", 1},
		{"a\r\nb\tc", "", `a\r\nb\tc`, 3},
		{"\x1b[2Kx\x7f", "", `\x1b[2Kx\x7f`, 2},
		{"owner: \u202eeve\u202c \u2066x\u2069", "", `owner: \u202eeve\u202c \u2066x\u2069`, 4},
		{"zero\u200bwidth\ufeff tag\U000E0041 c1\u0085 sep\u2028", "", `zero\u200bwidth\ufeff tag\U000e0041 c1\u0085 sep\u2028`, 5},
		{"bad \xff utf8", "", `bad \xff utf8`, 1},
		{`a literal \r stays`, "", `a literal \r stays`, 0},
	} {
		got, n := Visible(tc.in, tc.keep)
		if got != tc.want || n != tc.n {
			t.Errorf("Visible(%q, %q) = %q, %d; want %q, %d", tc.in, tc.keep, got, n, tc.want, tc.n)
		}
	}
}

func FuzzVisible(f *testing.F) {
	f.Add("a\rb\x1b\u202e\U000E0041\xff", "\n")
	f.Fuzz(func(t *testing.T, s, keep string) {
		got, _ := Visible(s, keep)
		for _, r := range got {
			if Hidden(r) && !containsRune(keep, r) {
				t.Fatalf("Visible(%q) = %q still holds %U", s, got, r)
			}
		}
	})
}

func containsRune(s string, r rune) bool {
	for _, c := range s {
		if c == r {
			return true
		}
	}
	return false
}
