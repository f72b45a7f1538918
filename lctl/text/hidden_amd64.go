package text

// hiddenIndex returns the index of the first byte of b below 0x20 or
// above 0x7e (a byte that is not printable ASCII), len(b) when there is
// none. In assembly (hidden_amd64.s): sixteen bytes at a time.
//
//go:noescape
func hiddenIndex(b []byte) int
