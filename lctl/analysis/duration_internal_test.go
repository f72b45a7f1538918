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
