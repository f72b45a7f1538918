package text

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Hidden reports whether r does not show as itself where a person reads
// text (a terminal, a browser): control characters (a carriage return
// prints the rest of a line over its start, an escape sequence erases or
// moves lines), format characters (bidirectional overrides and isolates
// reorder text, zero-width characters and tag characters show nothing)
// and the Unicode line and paragraph separators.
func Hidden(r rune) bool {
	switch {
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0x80:
		return false
	case r >= 0x2010 && r < 0x2028:
		// Dashes, quotation marks, bullets and the ellipsis that ends
		// every clipped intent on replay's lines (a fifth of them).
		return false
	case r >= 0x2070 && r < 0xfeff:
		// No control, format or separator character lies here (arrows,
		// CJK, most symbols): TestHiddenRanges checks every rune.
		return false
	}
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// shownWord says no byte of x is below 0x20 or above 0x7e: a borrow out
// of a byte below 0x20, a carry out of 0x7f or above, or a high bit set
// (the subtraction and addition only carry past a byte that is itself
// one of those).
func shownWord(x uint64) bool { return hiddenBits(x) == 0 }

// hiddenBits is not zero when some byte of x is below 0x20 or above 0x7e
// (shownWord).
func hiddenBits(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return ((x-0x20*ones)&^x | (x + ones) | x) & highs
}

// EscapeHidden rewrites b[from:] with every Hidden character and every
// byte that is not UTF-8 written as its Go escape (\x1b, \u202e, \xff),
// so a line printed to a terminal shows what it holds. A b[from:] of
// printable ASCII is found so in one pass and returned as it is.
func EscapeHidden(b []byte, from int) []byte {
	i := from
	for {
		// Up to the first byte that is not printable ASCII (sixteen at a
		// time: hiddenIndex).
		if i += hiddenIndex(b[i:]); i == len(b) {
			return b // all of it shown
		}
		if b[i] < utf8.RuneSelf {
			break // a control character
		}
		// A character beyond ASCII (a handoff's arrow): stepped over when
		// it shows, and the bytes after it read as fast again.
		r, size := utf8.DecodeRune(b[i:])
		if (r == utf8.RuneError && size <= 1) || Hidden(r) {
			break
		}
		i += size
	}
	tail := string(b[i:])
	b = b[:i]
	for s := tail; s != ""; {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size <= 1:
			b = append(b, `\x`...)
			b = append(b, strconv.FormatUint(uint64(s[0])|0x100, 16)[1:]...)
		case Hidden(r):
			q := strconv.QuoteRuneToASCII(r)
			b = append(b, q[1:len(q)-1]...)
		default:
			b = append(b, s[:size]...)
		}
		s = s[size:]
	}
	return b
}
