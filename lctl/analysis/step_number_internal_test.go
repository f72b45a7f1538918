package analysis

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// stepNumber gives intAt(e, "step") for every kind of step member (whole,
// fractional, negative, past 2^53, a string, none, NaN-free JSON numbers
// and Go integers), reads it once: a second of() returns the first
// answer even if the event changed in between.
func TestStepNumberIsIntAtReadOnce(t *testing.T) {
	t.Parallel()
	values := []any{nil, float64(7), float64(0), float64(-3), 2.5, float64(1 << 53), float64(1<<53 + 2), math.Inf(1), "7", int(9), int64(11), json.Number("13"), json.Number("x"), true}
	for _, v := range values {
		e := &lctl.Event{Type: lctl.TypeStepStart, Data: map[string]any{}}
		if v != nil {
			e.Data["step"] = v
		}
		wantN, wantOK := intAt(e, "step")
		var s stepNumber
		if n, ok := s.of(e); n != wantN || ok != wantOK {
			t.Errorf("step %#v: of = %d, %v; intAt %d, %v", v, n, ok, wantN, wantOK)
		}
		e.Data["step"] = float64(99) // read once: not seen
		if n, ok := s.of(e); n != wantN || ok != wantOK {
			t.Errorf("step %#v: second of = %d, %v; want the first %d, %v", v, n, ok, wantN, wantOK)
		}
		if n, ok := (&stepNumber{}).of(e); n != 99 || !ok {
			t.Errorf("a new stepNumber: %d, %v; want 99", n, ok)
		}
	}
}

// The step timer and the pricer given one stepNumber per event (Add)
// time the steps as the timer reading the number itself does, and price
// each step's tokens by its step's model: by number, else the agent's
// last (a fractional, a string or no step number).
func TestStatsStepNumberShared(t *testing.T) {
	t.Parallel()
	ts := func(s int) string { return "2026-01-01T00:00:" + string(rune('0'+s/10)) + string(rune('0'+s%10)) + "Z" }
	var events []lctl.Event
	seq := uint64(0)
	add := func(typ, agent string, s int, data map[string]any) {
		seq++
		events = append(events, lctl.Event{Seq: seq, Type: typ, Agent: agent, Timestamp: ts(s), Data: data})
	}
	add(lctl.TypeStepStart, "a", 0, map[string]any{"step": float64(1), "model": "m1"})
	add(lctl.TypeStepStart, "b", 1, map[string]any{"step": float64(2), "model": "m2"})
	add(lctl.TypeStepEnd, "a", 2, map[string]any{"step": float64(1), "duration_ms": float64(1500), "tokens": map[string]any{"input": float64(10), "output": float64(5)}})
	add(lctl.TypeStepStart, "a", 3, map[string]any{"step": 2.5, "model": "m3"})
	add(lctl.TypeStepEnd, "b", 4, map[string]any{"step": float64(2), "tokens": map[string]any{"input": float64(7), "output": float64(1)}})
	add(lctl.TypeStepEnd, "a", 5, map[string]any{"tokens": map[string]any{"input": float64(3), "output": float64(2)}})
	add(lctl.TypeStepStart, "c", 6, map[string]any{"model": "m4"})
	add(lctl.TypeStepEnd, "c", 8, map[string]any{"step": "x", "tokens": map[string]any{"input": float64(1), "output": float64(1)}})
	b := NewStatsBuilder("c", nil)
	steps := newStepTimer() // reading each number itself
	steps.untitled, steps.durations = true, true
	for i := range events {
		b.Add(&events[i])
		steps.add(&events[i])
	}
	got := b.Stats()
	var dur float64
	steps.each(func(t *StepTiming) {
		if !t.Unfinished && !t.nested {
			dur += t.DurationMS
		}
	})
	if got.DurationMS != dur || dur == 0 {
		t.Errorf("duration %v, the timer alone %v", got.DurationMS, dur)
	}
	want := map[string][2]int64{"m1": {10, 5}, "m2": {7, 1}, "m3": {3, 2}, "m4": {1, 1}}
	if len(got.CostByModel) != len(want) {
		t.Fatalf("cost by model %+v, want %v", got.CostByModel, want)
	}
	for _, mc := range got.CostByModel {
		if w := want[mc.Model]; mc.Input != w[0] || mc.Output != w[1] {
			t.Errorf("model %s: %d/%d, want %v", mc.Model, mc.Input, mc.Output, w)
		}
	}
}
