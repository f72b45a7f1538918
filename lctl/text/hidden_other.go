//go:build !amd64

package text

// hiddenIndex returns the index of the first byte of b below 0x20 or
// above 0x7e (a byte that is not printable ASCII), len(b) when there is
// none.
func hiddenIndex(b []byte) int { return hiddenIndexWords(b) }
