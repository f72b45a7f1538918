package analysis_test

import (
	"slices"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestCostTrackMatchesStats checks the cost so far at every sampled
// position against ComputeStats over the events up to there: the same
// dollars to the bit, the same unpriced models. The chain has more priced
// step_ends than costMarkEvery, so running totals are used too.
func TestCostTrackMatchesStats(t *testing.T) {
	events := lctltest.Chain("c", 4000, lctltest.Options{})
	prices := &analysis.Prices{Models: map[string]analysis.ModelPrice{
		"model-planner": {InputPer1K: 0.015, OutputPer1K: 0.075},
		"model-cod":     {InputPer1K: 0.0025, OutputPer1K: 0.01}, // by prefix
		// model-reviewer has no price.
	}}
	tr := analysis.NewCostTrack()
	for i := range events {
		tr.Add(&events[i])
	}
	if tr.Len() != len(events) {
		t.Fatalf("Len %d, want %d", tr.Len(), len(events))
	}
	ends := 0
	for _, e := range events {
		if e.Type == lctl.TypeStepEnd {
			ends++
		}
	}
	if ends <= 300 {
		t.Fatalf("only %d step_ends: the test does not reach the running totals", ends)
	}
	for _, pos := range append([]int{0, 1, 2, 3, 4, 5, 6, 7, 8}, sampled(len(events), 13)...) {
		want := analysis.ComputeStats("c", events[:pos+1], prices)
		got, unpriced := tr.CostAt(pos, prices)
		if (got == nil) != (want.Cost == nil) || got != nil && *got != *want.Cost {
			t.Fatalf("pos %d: cost %v, stats say %v", pos, deref(got), deref(want.Cost))
		}
		if !slices.Equal(unpriced, want.Unpriced) {
			t.Fatalf("pos %d: unpriced %v, stats say %v", pos, unpriced, want.Unpriced)
		}
		if none, np := tr.CostAt(pos, nil); none != nil || len(np) != 0 {
			t.Fatalf("pos %d without prices: %v %v", pos, deref(none), np)
		}
	}
	last, _ := tr.CostAt(len(events)-1, prices)
	if last == nil || *last <= 0 {
		t.Fatalf("the whole chain costs %v", deref(last))
	}
}

func sampled(n, every int) []int {
	var out []int
	for i := 0; i < n; i += every {
		out = append(out, i)
	}
	return append(out, n-1)
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// TestCostTrackSmall prices a hand-made chain: a step_end names its own
// model, one names none (the step's model is used), one has no step
// number (its agent's latest model), one has no model at all, one has no
// tokens.
func TestCostTrackSmall(t *testing.T) {
	ev := func(typ, agent string, data map[string]any) lctl.Event {
		return lctl.Event{ChainID: "c", Type: typ, Agent: agent, Data: data}
	}
	tok := func(in, out float64) map[string]any { return map[string]any{"input": in, "output": out} }
	events := []lctl.Event{
		ev("step_start", "a", map[string]any{"step": 1.0, "model": "big"}),
		ev("step_end", "a", map[string]any{"step": 1.0, "tokens": tok(1000, 2000)}),   // big: 1*1 + 2*2 = 5
		ev("step_end", "b", map[string]any{"model": "small", "tokens": tok(3000, 0)}), // small: 3*0.5 = 1.5
		ev("step_start", "c", map[string]any{"model": "big"}),
		ev("step_end", "c", map[string]any{"tokens": tok(0, 1000)}),                  // big: 2
		ev("step_end", "d", map[string]any{"tokens": tok(500, 0)}),                   // unknown model
		ev("step_end", "a", map[string]any{"step": 1.0, "tokens": map[string]any{}}), // no tokens
		ev("tool_call", "a", map[string]any{"tokens": tok(9999, 9999)}),              // not a step_end
	}
	prices := &analysis.Prices{Models: map[string]analysis.ModelPrice{
		"big": {InputPer1K: 1, OutputPer1K: 2}, "small": {InputPer1K: 0.5, OutputPer1K: 4},
	}}
	tr := analysis.NewCostTrack()
	for i := range events {
		tr.Add(&events[i])
	}
	for _, tc := range []struct {
		pos      int
		cost     any
		unpriced []string
	}{
		{0, nil, []string{}},
		{1, 5.0, []string{}},
		{2, 6.5, []string{}},
		{4, 8.5, []string{}},
		{5, 8.5, []string{analysis.UnknownModel}},
		{7, 8.5, []string{analysis.UnknownModel}},
	} {
		got, unpriced := tr.CostAt(tc.pos, prices)
		if deref(got) != tc.cost || !slices.Equal(unpriced, tc.unpriced) {
			t.Errorf("pos %d: %v %v, want %v %v", tc.pos, deref(got), unpriced, tc.cost, tc.unpriced)
		}
		want := analysis.ComputeStats("c", events[:tc.pos+1], prices)
		if deref(want.Cost) != tc.cost {
			t.Errorf("pos %d: stats say %v, the test %v", tc.pos, deref(want.Cost), tc.cost)
		}
	}
	// Only unpriced models: no cost, as in stats.
	only := &analysis.Prices{Models: map[string]analysis.ModelPrice{"other": {InputPer1K: 1}}}
	if got, unpriced := tr.CostAt(7, only); got != nil || !slices.Equal(unpriced, []string{analysis.UnknownModel, "big", "small"}) {
		t.Errorf("nothing priced: %v %v", deref(got), unpriced)
	}
}
