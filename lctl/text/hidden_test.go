package text

import (
	"math/rand/v2"
	"testing"
)

// hiddenIndexRef is hiddenIndex one byte at a time.
func hiddenIndexRef(b []byte) int {
	for i, c := range b {
		if c < 0x20 || c >= 0x7f {
			return i
		}
	}
	return len(b)
}

// TestHiddenIndex: hiddenIndex (assembly on amd64, with and without
// AVX2) and hiddenIndexWords (Go, elsewhere) find the first byte that is
// not printable ASCII: each byte value at each place of slices of every
// length to 70 read from every alignment (to 104 with the values at
// either side of each bound), two such bytes (the first found), random
// slices to 200 bytes, none (the length).
func TestHiddenIndex(t *testing.T) {
	for name, hiddenIndex := range map[string]func([]byte) int{"hiddenIndex": hiddenIndex, "hiddenIndexWords": hiddenIndexWords} {
		t.Run(name, func(t *testing.T) { testHiddenIndex(t, hiddenIndex) })
	}
	if wide, ok := hiddenIndexWide(); ok {
		t.Run("hiddenIndex/narrow", func(t *testing.T) {
			defer wide(wide(false))
			testHiddenIndex(t, hiddenIndex)
		})
	}
}

func testHiddenIndex(t *testing.T, hiddenIndex func([]byte) int) {
	buf := make([]byte, 128)
	all := make([]byte, 256)
	for v := range all {
		all[v] = byte(v)
	}
	bounds := []byte{0, 0x1b, 0x1f, 0x20, 0x21, 0x7e, 0x7f, 0x80, 0xc2, 0xe2, 0xff}
	for off := range 16 {
		for n := 0; n <= 104; n++ {
			values := all
			if n > 70 {
				values = bounds
			}
			b := buf[off : off+n]
			for i := range b {
				b[i] = ' ' + byte(i%95)
			}
			if got := hiddenIndex(b); got != n {
				t.Fatalf("shown, %d bytes at %d: %d", n, off, got)
			}
			for at := range n {
				for _, v := range values {
					b[at] = v
					if got, want := hiddenIndex(b), hiddenIndexRef(b); got != want {
						t.Fatalf("%d bytes at %d, byte %#x at %d: %d, want %d", n, off, v, at, got, want)
					}
				}
				b[at] = 0x7f
				if at+3 < n {
					b[at+3] = 0x1b
					if got := hiddenIndex(b); got != at {
						t.Fatalf("%d bytes at %d, DEL at %d and an escape after: %d", n, off, at, got)
					}
					b[at+3] = ' ' + byte((at+3)%95)
				}
				b[at] = ' ' + byte(at%95)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 9))
	for range 20000 {
		b := make([]byte, r.IntN(200))
		for i := range b {
			b[i] = byte(0x20 + r.IntN(0x5f))
			if r.IntN(60) == 0 {
				b[i] = byte(r.IntN(256))
			}
		}
		if got, want := hiddenIndex(b), hiddenIndexRef(b); got != want {
			t.Fatalf("%q: %d, want %d", b, got, want)
		}
	}
}
