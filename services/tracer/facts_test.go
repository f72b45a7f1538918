package tracer

import (
	"log/slog"
	"reflect"
	"testing"

	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// The fact store at a seq, rebuilt from the index's nearest copy, is the
// one FactStore builds from the chain's first event: at every kind of seq
// (before any fact, on a copy's seq, between copies, past the end).
func TestFactIndexMatchesFactStore(t *testing.T) {
	t.Parallel()
	events := lctltest.Workflow("facts", 6000, lctltest.WorkflowOptions{Seal: true, Facts: 7})
	c := newStore(t.TempDir(), slog.New(slog.DiscardHandler), 100, 0).newChain("facts")
	for _, e := range events {
		c.add(slog.New(slog.DiscardHandler), e, "")
	}
	v := c.facts.view()
	if len(v.snaps) < 3 {
		t.Fatalf("%d copies: the test does not cross one", len(v.snaps))
	}
	seqs := []uint64{0, 1, 2, 3, 5000, 5999, 6000, 7000}
	for _, s := range v.snaps {
		seqs = append(seqs, s.seq-1, s.seq, s.seq+1)
	}
	for _, seq := range seqs {
		got := v.at(c.timeline.Events(), seq)
		want := analysis.FactStore(events, seq)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("to seq %d: the index gives %d facts, FactStore %d (or they differ)", seq, len(got), len(want))
		}
	}
	// What a query returns is a copy: changing it leaves the index alone.
	got := v.at(c.timeline.Events(), 0)
	got[0].Fields["text"] = "changed"
	if reflect.DeepEqual(v.at(c.timeline.Events(), 0), got) {
		t.Fatal("a query's facts share their fields with the index")
	}
}
