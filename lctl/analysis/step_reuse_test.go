package analysis

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestStepTimerReuseChangesNothing: the step timer reusing ended steps
// gives exactly the timings (nested marks, unfinished steps, streamed
// tokens) of one that allocates every step, on random chains of steps with
// and without numbers, ended by number or by agent (another agent's
// step_end too), nested by OTel span and by agent, tool calls, streams
// inside and outside steps, and on a workflow; and it did reuse steps.
func TestStepTimerReuseChangesNothing(t *testing.T) {
	chains := [][]lctl.Event{lctltest.Workflow("w", 20_000, lctltest.WorkflowOptions{})}
	r := rand.New(rand.NewPCG(9, 15))
	for range 300 {
		chains = append(chains, randomSteps(r, 1+r.IntN(400)))
	}
	reused := 0
	for c, events := range chains {
		a, b := newStepTimer(), newStepTimer()
		b.noReuse = true
		for i := range events {
			a.add(&events[i])
			b.add(&events[i])
		}
		var got, want []StepTiming
		a.each(func(t *StepTiming) { got = append(got, *t) })
		b.each(func(t *StepTiming) { want = append(want, *t) })
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("chain %d: timings differ with reuse:\n%+v\nwant\n%+v", c, got, want)
		}
		if x, y := a.unreportedStreamTokens(), b.unreportedStreamTokens(); x != y {
			t.Fatalf("chain %d: unreported stream tokens %d, want %d", c, x, y)
		}
		if b.reused != 0 {
			t.Fatal("the timer without reuse reused")
		}
		reused += a.reused
	}
	if reused < 5_000 {
		t.Fatalf("%d steps reused: the test does not exercise reuse", reused)
	}
}

// randomSteps is a chain of step, tool and stream events in random order
// and shape.
func randomSteps(r *rand.Rand, n int) []lctl.Event {
	agents := []string{"a", "b", "c"}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var events []lctl.Event
	step := int64(0)
	for i := range n {
		e := lctl.Event{Seq: uint64(i + 1), Agent: agents[r.IntN(len(agents))],
			Timestamp: start.Add(time.Duration(i*37) * time.Millisecond).Format(time.RFC3339Nano), Data: map[string]any{}}
		span := func() {
			if r.IntN(4) == 0 {
				ref := map[string]any{"span_id": fmt.Sprint("s", r.IntN(8))}
				if r.IntN(2) == 0 {
					ref["parent_span_id"] = fmt.Sprint("s", r.IntN(8))
				}
				e.Data["otel"] = ref
			}
		}
		switch k := r.IntN(10); {
		case k < 3:
			e.Type = lctl.TypeStepStart
			if r.IntN(3) > 0 {
				step++
				e.Data["step"] = float64(step - int64(r.IntN(3)))
			}
			e.Data["intent"] = fmt.Sprint("i", i)
			span()
		case k < 6:
			e.Type = lctl.TypeStepEnd
			if r.IntN(2) == 0 && step > 0 {
				e.Data["step"] = float64(step - int64(r.IntN(3)))
			}
			if r.IntN(3) > 0 {
				e.Data["duration_ms"] = float64(r.IntN(100))
			}
			if r.IntN(2) == 0 {
				e.Data["tokens"] = map[string]any{"input": 1.0, "output": 2.0}
			}
		case k < 7:
			e.Type = lctl.TypeToolCall
			if r.IntN(2) == 0 && step > 0 {
				e.Data["step"] = float64(step)
			}
			e.Data["duration_ms"] = float64(r.IntN(50))
		case k < 8:
			e.Type = lctl.TypeStreamStart
		case k < 9:
			e.Type = lctl.TypeStreamChunk
			e.Data["tokens"] = float64(r.IntN(9))
		default:
			e.Type = lctl.TypeStreamEnd
			if r.IntN(2) == 0 {
				e.Data["total_tokens"] = float64(r.IntN(90))
			}
		}
		events = append(events, e)
	}
	return events
}

// TestStepTimerUntitled: a step timer that leaves the steps' intent and
// tool empty (stats') gives the timings of one that reads them, but for
// those two, on the same chains as above.
func TestStepTimerUntitled(t *testing.T) {
	chains := [][]lctl.Event{lctltest.Workflow("w", 20_000, lctltest.WorkflowOptions{})}
	r := rand.New(rand.NewPCG(9, 16))
	for range 300 {
		chains = append(chains, randomSteps(r, 1+r.IntN(400)))
	}
	named := 0
	for c, events := range chains {
		a, b := newStepTimer(), newStepTimer()
		a.untitled = true
		for i := range events {
			a.add(&events[i])
			b.add(&events[i])
		}
		var got, want []StepTiming
		a.each(func(t *StepTiming) { got = append(got, *t) })
		b.each(func(t *StepTiming) {
			if !t.Stream {
				if t.Intent != "" || t.Tool != "" {
					named++
				}
				t.Intent, t.Tool = "", ""
			}
			want = append(want, *t)
		})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("chain %d: timings differ beyond intent and tool", c)
		}
		if x, y := a.unreportedStreamTokens(), b.unreportedStreamTokens(); x != y {
			t.Fatalf("chain %d: unreported stream tokens %d, want %d", c, x, y)
		}
	}
	if named < 5_000 {
		t.Fatalf("%d named steps: the test does not read them", named)
	}
}
