package analysis

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestAppendCentsMatchesStrconv checks appendCents against strconv's 'f'
// with 2 digits, byte for byte: hundredths and their neighbours, exact
// ties (to even), decayed confidences, random values of every size it
// takes, subnormals, and the values it leaves to strconv.
func TestAppendCentsMatchesStrconv(t *testing.T) {
	check := func(v float64) {
		t.Helper()
		got := string(appendCents([]byte("x"), v))
		want := "x" + strconv.FormatFloat(v, 'f', 2, 64)
		if got != want {
			t.Fatalf("appendCents(%v [%#x]) = %q, want %q", v, math.Float64bits(v), got, want)
		}
	}
	near := func(v float64) {
		t.Helper()
		check(v)
		for _, d := range []float64{math.Inf(1), math.Inf(-1)} {
			w := v
			for range 3 {
				w = math.Nextafter(w, d)
				check(w)
			}
		}
	}
	// Every hundredth, half hundredth and thousandth up to 1000.
	for k := range 100_000 {
		near(float64(k) / 100)
		near(float64(k) / 200)
		near(float64(k) / 1000)
	}
	// Exact binary ties: k/2^n whose hundredths end in exactly .5.
	for n := 1; n <= 12; n++ {
		for k := range 5000 {
			check(float64(k) / float64(uint(1)<<n))
		}
	}
	// Confidences decayed hop by hop, as the report's points are.
	for c := 0.0; c <= 1.0; c += 0.001 {
		v := c
		for range 200 {
			check(v)
			v *= DefaultDecayRate
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		check(r.Float64())
		check(r.Float64() * 100)
		check(math.Ldexp(r.Float64(), r.IntN(100)-50))
		check(math.Float64frombits(r.Uint64() & (1<<63 - 1))) // any positive value
	}
	// The smallest and largest it writes itself, and what it leaves.
	for _, v := range []float64{0, math.SmallestNonzeroFloat64, 1e-310, 2.2250738585072014e-308,
		0.005, 0.015, 0.025, 0.125, 0.375, 1.005, 2.675, 0.045, 1e15, centsMax, math.Nextafter(centsMax, 0),
		math.MaxFloat64, math.Copysign(0, -1), -0.001, -0.005, -1.235, -1e20} {
		near(v)
	}
}
