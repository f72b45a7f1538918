package analysis

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestStepDurationsGiveTheSameStats: a stats builder whose step timer
// keeps only the durations of the outermost steps (stepTimer.durations)
// gives exactly the Stats of one that keeps every step's timing, and of
// what it keeps of those it gives exactly what stats reads (the
// duration, nested, stream and unfinished marks, a stream's tokens), on
// random chains of steps nested by span and by agent, ended by number or
// by agent, with streams inside and outside steps (adopted by the next
// step), unfinished ones, and on a workflow; and it kept fewer timings.
func TestStepDurationsGiveTheSameStats(t *testing.T) {
	chains := [][]lctl.Event{lctltest.Workflow("w", 20_000, lctltest.WorkflowOptions{})}
	r := rand.New(rand.NewPCG(18, 2))
	for range 300 {
		chains = append(chains, randomSteps(r, 1+r.IntN(400)))
	}
	fewer := 0
	for c, events := range chains {
		a, b := NewStatsBuilder("c", nil), NewStatsBuilder("c", nil)
		b.steps.durations = false
		for i := range events {
			a.Add(&events[i])
			b.Add(&events[i])
		}
		type read struct {
			ms                         float64
			nested, stream, unfinished bool
			tokens                     int64
		}
		var got, want []read
		a.steps.each(func(t *StepTiming) {
			got = append(got, read{t.DurationMS, t.nested, t.Stream, t.Unfinished, t.Tokens})
		})
		b.steps.each(func(t *StepTiming) {
			want = append(want, read{t.DurationMS, t.nested, t.Stream, t.Unfinished, t.Tokens})
		})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("chain %d: what stats reads of the steps differs:\n%+v\nwant\n%+v", c, got, want)
		}
		if x, y := a.Stats(), b.Stats(); !reflect.DeepEqual(x, y) {
			t.Fatalf("chain %d: stats differ:\n%+v\nwant\n%+v", c, x, y)
		}
		if a.steps.out.len() < b.steps.out.len() {
			fewer++
		}
	}
	if fewer < len(chains)/2 {
		t.Fatalf("fewer timings kept on %d chains of %d: the test does not exercise durations", fewer, len(chains))
	}
}
