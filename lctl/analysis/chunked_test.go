package analysis

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestChunked: the chunked list holds what a slice would, through adds,
// changes in place and the flattening (which may come before more adds).
func TestChunked(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 20_000} {
		var c chunked[int]
		var want []int
		for i := range n {
			c.add(i)
			want = append(want, i)
			if i%7 == 0 {
				*c.at(i / 2) += 1000
				want[i/2] += 1000
			}
		}
		var seen []int
		c.each(func(i int, v *int) {
			if i != len(seen) {
				t.Fatalf("n=%d: each gave index %d at %d", n, i, len(seen))
			}
			seen = append(seen, *v)
		})
		if c.len() != n || !reflect.DeepEqual(seen, want) {
			t.Fatalf("n=%d: each %d elements, want %d (equal: %v)", n, len(seen), n, reflect.DeepEqual(seen, want))
		}
		all := c.all(3)
		if len(all) != n || (n > 0 && !reflect.DeepEqual(all, want)) || cap(all) < n+3 {
			t.Fatalf("n=%d: all gave %d elements, cap %d", n, len(all), cap(all))
		}
		c.add(-1)
		*c.at(0 + n) = -2
		if c.len() != n+1 || *c.at(n) != -2 || !slices.Equal(c.all(0)[:n], want) {
			t.Fatalf("n=%d: adding after all", n)
		}
	}
}

// TestStepModels: the step-number-to-model index answers as a map does,
// for numbers in order, out of order, far apart, negative and set again
// (also to "" once the slice has grown past a number first kept in the
// map), with a few models and with more than are looked for one by one
// (fewModels), each name made anew at every set (equal by its bytes).
func TestStepModels(t *testing.T) {
	for _, count := range []int{3, 3 * fewModels} {
		testStepModels(t, count)
	}
}

func testStepModels(t *testing.T, count int) {
	r := rand.New(rand.NewPCG(3, uint64(count)))
	x := &stepModels{}
	want := map[int64]string{}
	for i := range 50_000 {
		var n int64
		switch r.IntN(4) {
		case 0:
			n = int64(i)
		case 1:
			n = r.Int64N(1 << 23)
		case 2:
			n = -r.Int64N(100)
		default:
			n = r.Int64N(5000)
		}
		m := ""
		if k := r.IntN(count + 1); k > 0 {
			m = fmt.Sprintf("model-%d", k)
		}
		x.set(n, m)
		want[n] = m
		probe := r.Int64N(1<<23) - 100
		if got := x.get(probe); got != want[probe] {
			t.Fatalf("get(%d) = %q, want %q", probe, got, want[probe])
		}
	}
	for n, m := range want {
		if got := x.get(n); got != m {
			t.Fatalf("get(%d) = %q, want %q", n, got, m)
		}
	}
	if len(x.names) != count || (count > fewModels) != (x.named != nil) {
		t.Fatalf("%d models: %d names, map %v", count, len(x.names), x.named != nil)
	}
}
