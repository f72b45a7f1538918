package analysis

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestAppendShortest: appendShortest writes what strconv's shortest 'f'
// form does, for whole numbers, fractions, zero, negative zero and the
// ends of its range, and appendDuration what FormatDuration does.
func TestAppendShortest(t *testing.T) {
	xs := []float64{0, math.Copysign(0, -1), 0.5, 1, 2, 9, 9.99, 10, 10.5, 99, 999, 999.9, 1e-9, math.Nextafter(1, 0), math.Nextafter(1000, 0)}
	r := rand.New(rand.NewPCG(7, 7))
	for range 100_000 {
		xs = append(xs, float64(r.IntN(1000)), r.Float64()*1000, math.Round(r.Float64()*10_000)/10)
	}
	for _, x := range xs {
		if got, want := string(appendShortest(nil, x)), strconv.FormatFloat(x, 'f', -1, 64); got != want {
			t.Fatalf("appendShortest(%v) = %s, want %s", x, got, want)
		}
		for _, ms := range []float64{x, x / 100, x * 10} {
			if got, want := string(appendDuration(nil, ms)), FormatDuration(ms); got != want {
				t.Fatalf("appendDuration(%v) = %s, want %s", ms, got, want)
			}
		}
	}
}

// TestAppendUint: appendUint and appendInt write what strconv does, and
// appendCount what FormatCount does, after what the buffer holds, for
// every length of number, the powers of ten and their neighbours, and
// the ends of the types.
func TestAppendUint(t *testing.T) {
	us := []uint64{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64}
	for p := uint64(1); p <= 1e19; p *= 10 {
		us = append(us, p-1, p, p+1)
		if p > math.MaxUint64/10 {
			break
		}
	}
	r := rand.New(rand.NewPCG(3, 9))
	for range 100_000 {
		us = append(us, r.Uint64()>>r.IntN(64), uint64(r.IntN(10_000_000)))
	}
	for _, u := range us {
		if got, want := string(appendUint([]byte("x"), u)), "x"+strconv.FormatUint(u, 10); got != want {
			t.Fatalf("appendUint(%d) = %s, want %s", u, got, want)
		}
		for _, n := range []int64{int64(u), -int64(u)} {
			if got, want := string(appendInt([]byte("x"), n)), "x"+strconv.FormatInt(n, 10); got != want {
				t.Fatalf("appendInt(%d) = %s, want %s", n, got, want)
			}
			if got, want := string(appendCount([]byte("x"), n)), "x"+FormatCount(n); got != want {
				t.Fatalf("appendCount(%d) = %s, want %s", n, got, want)
			}
		}
	}
}
