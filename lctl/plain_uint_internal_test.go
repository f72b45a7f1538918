package lctl

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// plainUintLoop is plainUint as it was before it read a word at a time:
// the reference.
func plainUintLoop(p *fastParser) (uint64, bool) {
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
		if p.i-start > 16 {
			return 0, false
		}
	}
	if p.i == start || (p.b[start] == '0') || n > maxExactInt {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return n, true
}

// TestPlainUintMatchesLoop: plainUint reads what a digit-by-digit loop
// reads (the number, whether it took it, where it stopped) for every
// number below 2,000,000 and random ones of up to 18 digits, followed by
// each kind of byte (the next key's comma, a brace, space, a fraction,
// an exponent, a byte past ASCII, one below '0' that borrows), with and
// without the bytes after that the word reads, and for leading zeros.
func TestPlainUintMatchesLoop(t *testing.T) {
	after := []string{`, "type": "x"}`, "}", " ", ".5, ", "e3 ", "E3 ", "\x80abcdefghijklmnop", "/abcdefghijklmnopq", ":abcdefghijklmnopq", "\x00abcdefghijklmnopq", ""}
	p, q := new(fastParser), new(fastParser) // large: made once
	check := func(num string) {
		t.Helper()
		for _, a := range after {
			b := []byte(num + a)
			p.b, p.i, q.b, q.i = b, 0, b, 0
			got, gok := p.plainUint()
			want, wok := plainUintLoop(q)
			if got != want || gok != wok || (wok && p.i != q.i) {
				t.Fatalf("%q: %d %v to %d, the loop %d %v to %d", b, got, gok, p.i, want, wok, q.i)
			}
		}
	}
	for n := range 2_000_000 {
		if n < 20_000 || n%31 == 0 {
			check(strconv.Itoa(n))
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 30_000 {
		check(strconv.FormatUint(r.Uint64()>>r.IntN(64), 10))
	}
	for _, s := range []string{"0", "00", "01", "007", "09999999", "10000000", "99999999", "100000000", "9007199254740993", "12345678901234567"} {
		check(s)
	}
}
