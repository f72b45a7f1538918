package analysis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// countingCtx counts how often a computation looked at it, and is done
// from the cancelAt-th look on (0: never): the looks after the one that
// saw it done are work done past the cancel.
type countingCtx struct {
	context.Context
	looks    atomic.Int64
	cancelAt int64
}

func (c *countingCtx) Err() error {
	if n := c.looks.Add(1); c.cancelAt > 0 && n >= c.cancelAt {
		return context.Canceled
	}
	return nil
}

// similarChains are two chains of n tool calls that differ in every
// tenth tool: many edits for the alignment, and many aligned events to
// compare.
func similarChains(n int) (analysis.Chain, analysis.Chain) {
	var a, b []lctl.Event
	for i := range n {
		tool := fmt.Sprintf("t%d", i%7)
		a = append(a, lctl.Event{Seq: uint64(i + 1), Agent: "x", Type: lctl.TypeToolCall, Data: map[string]any{"tool": tool, "n": i}})
		if i%10 == 0 {
			tool = "other"
		}
		b = append(b, lctl.Event{Seq: uint64(i + 1), Agent: "x", Type: lctl.TypeToolCall, Data: map[string]any{"tool": tool, "n": i + 1}})
	}
	return analysis.Chain{ID: "a", Events: a}, analysis.Chain{ID: "b", Events: b}
}

// Session 17 (ops17), issue 15: a diff of two similar chains of a million
// events takes seconds, and went on after its reader (the tracer's
// DiffChains, the debugger's /api/diff) went away. DiffContext looks at
// its context as it aligns and as it compares: once it sees the context
// done it looks no more (nothing more is computed) and says why.
func TestDiffStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	a, b := similarChains(5000)
	whole := &countingCtx{Context: context.Background()}
	r, err := analysis.DiffContext(whole, a, b, analysis.DiffOptions{})
	if err != nil || r.Identical {
		t.Fatalf("the whole diff: %v, identical %v", err, r.Identical)
	}
	all := whole.looks.Load()
	if all < 100 {
		t.Fatalf("the whole diff looked at its context %d times; want many (one per edit distance, one per %d events)", all, 256)
	}
	for _, at := range []int64{1, 3, all / 2, all} {
		ctx := &countingCtx{Context: context.Background(), cancelAt: at}
		r, err := analysis.DiffContext(ctx, a, b, analysis.DiffOptions{})
		if !errors.Is(err, context.Canceled) || r != nil {
			t.Fatalf("cancelled at look %d of %d: %v, %v; want context.Canceled and no report", at, all, r, err)
		}
		if n := ctx.looks.Load(); n != at {
			t.Fatalf("cancelled at look %d of %d: it looked %d times, so it worked on after it saw the cancel", at, all, n)
		}
	}
	if r := analysis.Diff(a, b, analysis.DiffOptions{}); r.Changed != 0 && r.Identical {
		t.Fatal("Diff disagrees with DiffContext")
	}
}

// The same for a fact query: RunContext looks at its context as it
// filters and as it computes sort keys, and stops at once.
func TestQueryStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	facts := make([]*analysis.FactRecord, 5000)
	for i := range facts {
		c := float64(i%100) / 100
		facts[i] = &analysis.FactRecord{ID: fmt.Sprintf("f%d", i), Text: fmt.Sprintf("fact number %d about the deploy", i), Confidence: &c}
	}
	q, err := analysis.ParseQuery("SELECT * FROM facts WHERE confidence > 0.1 ORDER BY text LIMIT 10")
	if err != nil {
		t.Fatal(err)
	}
	whole := &countingCtx{Context: context.Background()}
	if rows, err := q.RunContext(whole, facts); err != nil || len(rows) != 10 {
		t.Fatalf("the whole query: %d rows, %v", len(rows), err)
	}
	all := whole.looks.Load()
	if all < 20 {
		t.Fatalf("the whole query looked at its context %d times; want one per 256 facts filtered and sorted", all)
	}
	for _, at := range []int64{1, 2, all} {
		ctx := &countingCtx{Context: context.Background(), cancelAt: at}
		rows, err := q.RunContext(ctx, facts)
		if !errors.Is(err, context.Canceled) || rows != nil {
			t.Fatalf("cancelled at look %d of %d: %d rows, %v; want context.Canceled", at, all, len(rows), err)
		}
		if n := ctx.looks.Load(); n != at {
			t.Fatalf("cancelled at look %d of %d: it looked %d times", at, all, n)
		}
	}
}
