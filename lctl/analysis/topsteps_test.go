package analysis

import (
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

// TestTopSteps: the slowest steps kept as they go by are exactly the first
// n of a stable sort of them all, ties (many: own times are whole
// milliseconds) in the order the steps came, for n below, at and above
// the number of steps; past topSelect it gives up and says so.
func TestTopSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 6))
	for round := range 200 {
		count := r.IntN(300)
		steps := make([]StepTiming, count)
		for i := range steps {
			steps[i] = StepTiming{StartSeq: uint64(i + 1), SelfMS: float64(r.IntN(1 + round%40))}
		}
		for _, n := range []int{1, 2, 5, 17, topSelect, count} {
			if n < 1 || n > topSelect {
				continue
			}
			s := newTopSteps(n)
			for i := range steps {
				s.add(&steps[i])
			}
			want := append([]StepTiming(nil), steps...)
			sort.SliceStable(want, func(i, j int) bool { return want[i].SelfMS > want[j].SelfMS })
			if len(want) > n {
				want = want[:n]
			}
			if s.whole || !reflect.DeepEqual(s.top, want) && len(want) > 0 {
				t.Fatalf("round %d, %d steps, top %d: got %v, want %v", round, count, n, s.top, want)
			}
		}
	}
	if !newTopSteps(topSelect + 1).whole {
		t.Fatal("a top past topSelect is kept by insertion")
	}
}

// TestTopStepsNaN: a NaN own time makes the selection give up, so the
// report sorts every step as it always did.
func TestTopStepsNaN(t *testing.T) {
	s := newTopSteps(3)
	nan := 0.0
	s.add(&StepTiming{SelfMS: 2})
	s.add(&StepTiming{SelfMS: nan / nan})
	if !s.whole {
		t.Fatal("a NaN own time did not make the selection give up")
	}
}
