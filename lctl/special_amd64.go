package lctl

// specialIndex returns the index of the first byte of b that is a quote,
// a backslash, below 0x20 or past ASCII (the bytes that end a plain
// string), len(b) when there is none. In assembly (special_amd64.s):
// sixteen bytes at a time.
//
//go:noescape
func specialIndex(b []byte) int
