package validator

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"fs.read", "fs.read", true},
		{"fs.read", "fs.reads", false},
		{"fs.*", "fs.read", true},
		{"fs.*", "fs.dir.list", true},
		{"fs.*", "fs.", true},
		{"fs.*", "fs", false},
		{"fs.*", "xfs.read", false},
		{"*", "", true},
		{"*", "anything.at.all", true},
		{"*.delete", "db.table.delete", true},
		{"*.delete", "db.deleted", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"fs.rea?", "fs.read", true},
		{"fs.rea?", "fs.rea", false},
		{"?", "é", true},
		{"é*", "étude", true},
		{"**", "x", true},
		{"", "", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.name); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

// globRegexp is the reference semantics of globMatch.
func globRegexp(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

func FuzzGlobMatch(f *testing.F) {
	f.Add("fs.*", "fs.read")
	f.Add("*.?x*", "a.bx.c")
	f.Add("a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add("?é", "xé")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(name) || len(pattern) > 64 || len(name) > 256 {
			return
		}
		want := globRegexp(pattern).MatchString(name)
		if got := globMatch(pattern, name); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, regexp says %v", pattern, name, got, want)
		}
	})
}
