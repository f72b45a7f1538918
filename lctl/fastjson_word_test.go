package lctl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
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

// hexLike takes every hash in hex and no 64 bytes with a byte a string
// may not hold as it is.
func TestHexLike(t *testing.T) {
	hex := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	if !hexLike(hex) {
		t.Fatal("a hash refused")
	}
	for c := range 256 {
		for _, at := range []int{0, 7, 8, 31, 63} {
			b := bytes.Clone(hex)
			b[at] = byte(c)
			plain := c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
			if hexLike(b) && !plain {
				t.Errorf("byte %#x at %d taken", c, at)
			}
			if hexLike(b) != ((c >= 0x30 && c < 0x40) || (c >= 0x60 && c < 0x80)) {
				t.Errorf("byte %#x at %d: %v", c, at, hexLike(b))
			}
		}
	}
}

// scanNumber gives exactly what strconv.ParseFloat gives, on numbers of
// every shape and on random fractions (its own path for those of up to
// 15 digits without an exponent).
func TestScanNumberAgrees(t *testing.T) {
	nums := []string{"0", "-0", "0.0", "-0.0", "0.68", "0.1", "0.3", "1.5", "123456789012345", "1234567890123456",
		"12345678.1234567", "1234567.12345678", "0.000000000000001", "0.0000000000000000000001", "9.999999999999999",
		"99999999999999.9", "0.1e1", "1e-7", "2.5E+3", "-12.75", "4095", "4096", "12345678901234567890"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		whole, frac := r.IntN(8), 1+r.IntN(14)
		n := strconv.FormatUint(r.Uint64N(uint64(math.Pow10(whole))), 10) + "." + fmt.Sprintf("%0*d", frac, r.Uint64N(uint64(math.Pow10(frac))))
		if r.IntN(2) == 0 {
			n = "-" + n
		}
		nums = append(nums, n)
	}
	for _, n := range nums {
		want, err := strconv.ParseFloat(n, 64)
		if err != nil {
			t.Fatal(err)
		}
		got, _, next, ok := scanNumber([]byte(n+","), 0)
		if !ok || next != len(n) || math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("%s: %v (%x) %d %v, want %v (%x)", n, got, math.Float64bits(got), next, ok, want, math.Float64bits(want))
		}
	}
}
