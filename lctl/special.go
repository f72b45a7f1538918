package lctl

import (
	"encoding/binary"
	"math/bits"
)

// specialIndexWords is specialIndex eight bytes at a time, in Go: what
// other architectures than amd64 use.
func specialIndexWords(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return i
		}
	}
	return len(b)
}
