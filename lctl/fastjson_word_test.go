package lctl

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// TestPlainWord: the eight-bytes-at-a-time checks of the fast reader say
// what a byte-by-byte look says, on words made of the bytes that matter
// (quote, backslash, control characters, past ASCII) among plain ones.
func TestPlainWord(t *testing.T) {
	interesting := []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xff, 'a', '0', '{', '}', 0x5b, 0x5d, 0x5c - 1, 0x5c + 1, 0x22 - 1, 0x22 + 1}
	r := rand.New(rand.NewPCG(1, 2))
	var b [8]byte
	for range 200_000 {
		for i := range b {
			if r.IntN(3) == 0 {
				b[i] = interesting[r.IntN(len(interesting))]
			} else {
				b[i] = byte(r.IntN(256))
			}
		}
		plain, ascii := true, true
		for _, c := range b {
			if c < 0x20 || c >= utf8.RuneSelf {
				plain, ascii = false, false
			}
			if c == '"' || c == '\\' {
				plain = false
			}
		}
		x := binary.LittleEndian.Uint64(b[:])
		if plainWord(x) != plain || asciiWord(x) != ascii {
			t.Fatalf("% x: plainWord %v asciiWord %v, want %v %v", b, plainWord(x), asciiWord(x), plain, ascii)
		}
	}
}

// TestSpecial: special's lowest set bit is the first byte that ends a
// plain string, on random words.
func TestSpecial(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	interesting := []byte{'"', '\\', 0, 0x1f, 0x20, 0x7f, 0x80, 0xff, 'a', 0x21, 0x23, 0x5b, 0x5d}
	var b [8]byte
	for range 200_000 {
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = interesting[r.IntN(len(interesting))]
			} else {
				b[i] = byte(0x20 + r.IntN(0x60))
			}
		}
		first := -1
		for i, c := range b {
			if c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
				first = i
				break
			}
		}
		m := special(binary.LittleEndian.Uint64(b[:]))
		got := -1
		if m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if got != first {
			t.Fatalf("% x: first special byte %d, want %d", b, got, first)
		}
	}
}
