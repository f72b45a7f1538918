package text

import (
	"encoding/binary"
	"unsafe"
)

// hiddenIndexWords is hiddenIndex sixteen, then eight bytes at a time,
// in Go: what other architectures than amd64 use.
func hiddenIndexWords(b []byte) int {
	i := 0
	for ; i+16 <= len(b); i += 16 {
		if hiddenBits(binary.LittleEndian.Uint64(b[i:]))|hiddenBits(binary.LittleEndian.Uint64(b[i+8:])) != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		if !shownWord(binary.LittleEndian.Uint64(b[i:])) {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c >= 0x7f {
			return i
		}
	}
	return len(b)
}

// ShownASCII reports whether every byte of s is printable ASCII (0x20 to
// 0x7e): a string that shows as it is, a character a byte.
func ShownASCII(s string) bool {
	return hiddenIndex(unsafe.Slice(unsafe.StringData(s), len(s))) == len(s) //nolint:gosec // read only
}
