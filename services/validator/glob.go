package validator

import "unicode/utf8"

// globMatch reports whether name matches pattern, where '*' matches any run
// of characters (dots included, so "fs.*" covers "fs.read" and
// "fs.dir.list") and '?' matches exactly one character. Every other
// character matches itself. It runs in O(len(pattern)·len(name)) at worst,
// without allocating or recursing.
func globMatch(pattern, name string) bool {
	px, nx := 0, 0
	// Where to resume after a mismatch: the last '*' and the name position
	// after the one it has absorbed so far.
	starPx, starNx := -1, 0
	for px < len(pattern) || nx < len(name) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starPx, starNx = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					_, w := utf8.DecodeRuneInString(name[nx:])
					px++
					nx += w
					continue
				}
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		// Mismatch: let the last '*' absorb one more character, if any.
		if starPx >= 0 && starNx < len(name) {
			_, w := utf8.DecodeRuneInString(name[starNx:])
			starNx += w
			px, nx = starPx+1, starNx
			continue
		}
		return false
	}
	return true
}
