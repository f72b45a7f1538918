package analysis_test

import (
	"reflect"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestConfidenceRendered: a report made with Rendered (what lctl's text
// output uses) renders every fact exactly as the listed report does and
// says the same otherwise, on a generated workflow (facts decayed to
// BLOCKED and assessed again, hops every few steps), on the decay test's
// chain and on a fact with more points than a chunk of the rendered
// builder's list holds; its points are not listed.
func TestConfidenceRendered(t *testing.T) {
	chains := [][]lctl.Event{
		lctltest.Workflow("w", 20_000, lctltest.WorkflowOptions{}),
		renumber([]lctl.Event{
			{Type: "step_start", Agent: "a"},
			{Type: "fact_added", Agent: "a", Data: map[string]any{"id": "F1", "confidence": 0.9}},
			{Type: "fact_added", Agent: "a", Data: map[string]any{"id": "F2", "confidence": 0.45}},
			{Type: "step_start", Agent: "b"},
			{Type: "fact_modified", Agent: "b", Data: map[string]any{"id": "F1", "confidence": 0.8, "reason": "consensus reached"}},
			{Type: "step_start", Agent: "c"},
			{Type: "fact_added", Agent: "c", Data: map[string]any{"id": "F3", "text": "no confidence"}},
			{Type: "step_start", Agent: "a"},
		}),
	}
	// A fact over 10,000 hops, its points kept in several chunks, blocked
	// and assessed again every so often.
	var long []lctl.Event
	long = append(long, lctl.Event{Type: "fact_added", Agent: "a", Data: map[string]any{"id": "F1", "confidence": 0.95}})
	for i := range 10_000 {
		long = append(long, lctl.Event{Type: "step_start", Agent: []string{"a", "b"}[i%2]})
		if i%37 == 0 {
			long = append(long, lctl.Event{Type: "fact_modified", Agent: "b", Data: map[string]any{"id": "F1", "confidence": 0.3 + float64(i%7)/10}})
		}
	}
	chains = append(chains, renumber(long))
	for n, events := range chains {
		for _, rate := range []float64{0, 0.9, 1} {
			listed := analysis.NewConfidenceBuilder("c", analysis.ConfidenceOptions{DecayRate: rate})
			rendered := analysis.NewConfidenceBuilder("c", analysis.ConfidenceOptions{DecayRate: rate, Rendered: true})
			for i := range events {
				listed.Add(&events[i])
				rendered.Add(&events[i])
			}
			want, got := listed.Report(), rendered.Report()
			if len(want.Facts) == 0 || len(got.Facts) != len(want.Facts) {
				t.Fatalf("chain %d: %d facts rendered, %d listed", n, len(got.Facts), len(want.Facts))
			}
			points := 0
			for i := range want.Facts {
				w, g := want.Facts[i], got.Facts[i]
				if g.Render() != w.Render() {
					t.Fatalf("chain %d rate %v, %s: rendered %q, listed %q", n, rate, w.ID, g.Render(), w.Render())
				}
				if g.Points != nil {
					t.Fatalf("chain %d, %s: points listed in a rendered report", n, w.ID)
				}
				points += len(w.Points)
				w.Points, g.Points = nil, nil
				if !reflect.DeepEqual(w.Final, g.Final) || w.Band != g.Band || !reflect.DeepEqual(w.Labels, g.Labels) ||
					w.BlockedSeq != g.BlockedSeq || !reflect.DeepEqual(w.Consensus, g.Consensus) || w.Text != g.Text {
					t.Fatalf("chain %d, %s: rendered %+v, listed %+v", n, w.ID, g, w)
				}
			}
			if (n == 0 && points < 1000) || (n == 2 && rate == 1 && points < 8192) {
				t.Fatalf("chain %d has only %d points", n, points)
			}
			if !reflect.DeepEqual(got.Warnings, want.Warnings) || got.Hops != want.Hops {
				t.Fatalf("chain %d: warnings %q / %q, hops %d / %d", n, got.Warnings, want.Warnings, got.Hops, want.Hops)
			}
		}
	}
}
