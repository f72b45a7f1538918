package namefold

import "testing"

func TestFold(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ a, b string }{
		{"sql", "SQL"},
		{"sql", "ſql"},              // long s
		{"kind", "\u212aind"},       // Kelvin sign
		{"alice", "ａｌｉｃｅ"},          // full width
		{"token", "to\u200bken"},    // zero-width space
		{"caf\u00e9", "cafe\u0301"}, // NFC / NFD
	} {
		if Fold(c.a) != Fold(c.b) {
			t.Errorf("Fold(%q) = %q, Fold(%q) = %q: want equal", c.a, Fold(c.a), c.b, Fold(c.b))
		}
	}
	for _, c := range []struct{ a, b string }{
		{"sql", "sql "},
		{"path", "paths"},
		{"a", "b"},
	} {
		if Fold(c.a) == Fold(c.b) {
			t.Errorf("Fold(%q) == Fold(%q): want different", c.a, c.b)
		}
	}
}
