// Package namefold is the one form two names take when a reader may take
// them for one: principals that look alike (internal/auth) and argument
// names a tool's decoder may merge (internal/wire's KeyClash) compare by it.
package namefold

import (
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Fold is s compatibility-normalized (NFKC: full-width and other
// compatibility letters become plain ones), case folded (the Kelvin sign
// is k, ſ is s), without format characters (zero-width spaces and
// joiners, soft hyphens, bidi marks) or variation selectors, and
// normalized again.
func Fold(s string) string {
	s = norm.NFKC.String(s)
	s = cases.Fold().String(s) // a Caser is not safe for concurrent use: one per call
	s = strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) {
			return -1
		}
		return r
	}, s)
	return norm.NFKC.String(s)
}
