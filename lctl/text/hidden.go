package text

import "encoding/binary"

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
