package wire

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/xct-dev/xct/lctl/text"
)

// Hidden reports whether r does not show as itself where a person reads
// text (a terminal, a browser): lctl's text.Hidden, the one definition.
func Hidden(r rune) bool { return text.Hidden(r) }

// Visible returns s with every character that does not show as itself
// (Hidden), other than those in keep (say "\n\t" for text read line by
// line), written as its Go escape: \r, \x1b, \u202e, \U000e0041. It
// returns how many it replaced; s itself when none. Bytes that are not
// UTF-8 are written as \xNN. Text the model chose (a file it writes, its
// goal) is shown to the humans who decide on it through this, so what
// they read is what would run.
func Visible(s, keep string) (string, int) {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || (Hidden(r) && !strings.ContainsRune(keep, r)) })
	if i < 0 {
		return s, 0
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	n := 0
	for s = s[i:]; s != ""; {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[0])|0x100, 16)[1:])
			n++
		case Hidden(r) && !strings.ContainsRune(keep, r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			n++
		default:
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String(), n
}
