package lctl

import (
	"math/rand/v2"
	"testing"
)

// specialIndexRef is specialIndex one byte at a time.
func specialIndexRef(b []byte) int {
	for i, c := range b {
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return i
		}
	}
	return len(b)
}

// TestSpecialIndex: specialIndex (assembly on amd64, with and without
// AVX2) and specialIndexWords (Go, elsewhere) find the first special byte
// of plain ASCII with each byte value at each place, in slices of every
// length to 70 read from every alignment (to 104 with the values on
// either side of each bound), and with two special bytes
// (the first one found); random slices; nothing special (the length).
func TestSpecialIndex(t *testing.T) {
	for name, specialIndex := range map[string]func([]byte) int{"specialIndex": specialIndex, "specialIndexWords": specialIndexWords} {
		t.Run(name, func(t *testing.T) { testSpecialIndex(t, specialIndex) })
	}
	if wide, ok := specialIndexWide(); ok {
		t.Run("specialIndex/narrow", func(t *testing.T) {
			defer wide(wide(false))
			testSpecialIndex(t, specialIndex)
		})
	}
}

func testSpecialIndex(t *testing.T, specialIndex func([]byte) int) {
	buf := make([]byte, 128)
	all := make([]byte, 256)
	for v := range all {
		all[v] = byte(v)
	}
	bounds := []byte{0, 0x1f, 0x20, 0x21, '"', 0x23, 0x5b, '\\', 0x5d, 0x7e, 0x7f, 0x80, 0xff}
	for off := range 16 {
		for n := 0; n <= 104; n++ {
			values := all
			if n > 70 {
				values = bounds
			}
			b := buf[off : off+n]
			for i := range b {
				b[i] = 'a' + byte(i%26)
			}
			if got := specialIndex(b); got != n {
				t.Fatalf("plain, %d bytes at %d: %d", n, off, got)
			}
			for at := range n {
				for _, v := range values {
					b[at] = v
					// b is plain but for v at at (checked above, put back
					// below): the reference's answer is at when v is
					// special, else n. Asking it of v alone, not of all
					// of b, saves the scan of b's plain bytes before at,
					// which under -race cost more than the rest of the
					// test (millions of calls).
					want := n
					if specialIndexRef(b[at:at+1]) == 0 {
						want = at
					}
					if got := specialIndex(b); got != want {
						t.Fatalf("%d bytes at %d, byte %#x at %d: %d, want %d", n, off, v, at, got, want)
					}
				}
				b[at] = '"'
				if at+3 < n {
					b[at+3] = '\\'
					if got := specialIndex(b); got != at {
						t.Fatalf("%d bytes at %d, quote at %d and a backslash after: %d", n, off, at, got)
					}
					b[at+3] = 'a' + byte((at+3)%26)
				}
				b[at] = 'a' + byte(at%26)
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 7))
	for range 20000 {
		n := r.IntN(200)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(0x20 + r.IntN(0x5f))
			if r.IntN(60) == 0 {
				b[i] = byte(r.IntN(256))
			}
		}
		if got, want := specialIndex(b), specialIndexRef(b); got != want {
			t.Fatalf("%q: %d, want %d", b, got, want)
		}
	}
}
