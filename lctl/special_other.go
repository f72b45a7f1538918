//go:build !amd64

package lctl

// specialIndex returns the index of the first byte of b that is a quote,
// a backslash, below 0x20 or past ASCII (the bytes that end a plain
// string), len(b) when there is none.
func specialIndex(b []byte) int { return specialIndexWords(b) }
