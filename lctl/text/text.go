// Package text holds the string helpers lctl and XCT share, each written
// once: cutting text on a character boundary (bytes or characters) and the
// edit distance behind "did you mean" hints. It imports only the standard
// library, so lctl stays free of XCT and XCT's services can use it.
package text

import "unicode/utf8"

// Ellipsis marks a cut.
const Ellipsis = "…"

// Truncate keeps at most n bytes of s, cut on a character boundary, and
// marks the cut with Ellipsis (which is not counted in n). It never splits
// a UTF-8 sequence, so valid UTF-8 stays valid; s of at most n bytes is
// returned unchanged. n below 0 counts as 0.
func Truncate(s string, n int) string {
	n = max(n, 0)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + Ellipsis
}

// TruncateRunes keeps s when it has at most n characters; otherwise it
// keeps its first n-1 characters and Ellipsis, n characters in all. n
// below 1 counts as 1 (the Ellipsis alone).
func TruncateRunes(s string, n int) string {
	n = max(n, 1)
	if len(s) <= n || utf8.RuneCountInString(s) <= n {
		return s
	}
	i, kept := 0, 0
	for kept < n-1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		kept++
	}
	return s[:i] + Ellipsis
}

// EditDistance is the Levenshtein distance between a and b, in characters
// (insertions, deletions and substitutions of one character each).
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
