package debugger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/debugger"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// memSource is one chain held in memory, as the tracer holds its chains.
type memSource struct{ c *debugger.Chain }

func newMemSource(id string, events []lctl.Event) memSource {
	t := lctl.NewTimeline(id, lctl.DefaultSnapshotEvery)
	for _, e := range events {
		t.Append(e)
	}
	return memSource{&debugger.Chain{
		ChainInfo: debugger.ChainInfo{ID: id, Events: len(events), FirstTimestamp: events[0].Timestamp, LastTimestamp: events[len(events)-1].Timestamp},
		Events:    t.Events(), Timeline: t, Sorted: true,
	}}
}

func (m memSource) Mode() string { return "cluster" }
func (m memSource) Chains(context.Context) ([]debugger.ChainInfo, error) {
	return []debugger.ChainInfo{m.c.ChainInfo}, nil
}
func (m memSource) Chain(_ context.Context, id string) (*debugger.Chain, error) {
	if id != m.c.ID {
		return nil, debugger.ErrChainNotFound
	}
	return m.c, nil
}
func (m memSource) Watch(string) (uint64, <-chan struct{}, bool) {
	ch := make(chan struct{})
	close(ch)
	return 0, ch, true
}

const bigChain = 100_000

func bigHandler(tb testing.TB, prices ...*analysis.Prices) *debugger.Handler {
	tb.Helper()
	opts := debugger.Options{Source: newMemSource("big", lctltest.Chain("big", bigChain, lctltest.Options{}))}
	if len(prices) > 0 {
		opts.Prices = prices[0]
	}
	h, err := debugger.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func serveOnce(tb testing.TB, h http.Handler, path string) *httptest.ResponseRecorder {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
	}
	return rec
}

// TestBigChainAnswersInBoundedPieces checks what keeps a 100,000-event
// chain quick, without timing anything: the state at a seq is rebuilt from
// a snapshot at most the snapshot interval back, and every answer is a
// bounded piece of the chain.
func TestBigChainAnswersInBoundedPieces(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a 100,000-event chain")
	}
	h := bigHandler(t)
	for _, seq := range []uint64{1, 999, 1000, 1001, 54_321, bigChain} {
		rec := serveOnce(t, h, fmt.Sprintf("/api/chains/big/state?seq=%d", seq))
		var s struct {
			Seq          uint64
			SnapshotFrom uint64 `json:"snapshot_from"`
			State        struct {
				EventCount int `json:"event_count"`
				ToolCalls  []any
				Steps      []any
			}
			Counts struct {
				ToolCalls int `json:"tool_calls"`
			}
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		if s.Seq != seq || s.State.EventCount != int(seq) {
			t.Fatalf("seq %d: got seq %d with %d events", seq, s.Seq, s.State.EventCount)
		}
		if seq-s.SnapshotFrom > lctl.DefaultSnapshotEvery {
			t.Fatalf("seq %d replayed from %d: more than the snapshot interval", seq, s.SnapshotFrom)
		}
		if len(s.State.ToolCalls) > 100 || len(s.State.Steps) > 100 || (seq > 10_000 && s.Counts.ToolCalls <= 100) {
			t.Fatalf("seq %d: lists not cut to the tail: %d tool calls (of %d), %d steps", seq, len(s.State.ToolCalls), s.Counts.ToolCalls, len(s.State.Steps))
		}
		// What is left grows with the number of facts (500 here), not
		// with the chain.
		if rec.Body.Len() > 512<<10 {
			t.Fatalf("seq %d: %d bytes", seq, rec.Body.Len())
		}
	}
	var page debugger.FlowPage
	rec := serveOnce(t, h, "/api/chains/big/flow?from=50000&limit=200")
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Nodes) != 200 || page.Nodes[0].Seq < 50000 || page.TotalEvents != bigChain || page.NextFrom <= page.Nodes[199].Seq {
		t.Fatalf("flow page: %d nodes from %d, total %d, next %d", len(page.Nodes), page.Nodes[0].Seq, page.TotalEvents, page.NextFrom)
	}
	// Every event is in exactly one node.
	covered := 0
	from := uint64(1)
	for from != 0 {
		var p debugger.FlowPage
		if err := json.Unmarshal(serveOnce(t, h, fmt.Sprintf("/api/chains/big/flow?from=%d&limit=1000", from)).Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		for _, n := range p.Nodes {
			covered += n.Events
		}
		from = p.NextFrom
	}
	if covered != bigChain {
		t.Fatalf("flow nodes cover %d events of %d", covered, bigChain)
	}
}

func BenchmarkState100k(b *testing.B) {
	h := bigHandler(b)
	seqs := []uint64{1, 12_345, 50_999, 77_777, 99_999}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		serveOnce(b, h, fmt.Sprintf("/api/chains/big/state?seq=%d", seqs[i%len(seqs)]))
	}
}

// BenchmarkState100kPriced is BenchmarkState100k with a price table: the
// cost so far at each seq comes from the chain's cost track (built by the
// first request, before the timer starts).
func BenchmarkState100kPriced(b *testing.B) {
	h := bigHandler(b, &analysis.Prices{Models: map[string]analysis.ModelPrice{
		"model-planner": {InputPer1K: 0.015, OutputPer1K: 0.075}, "model-coder": {InputPer1K: 0.0025, OutputPer1K: 0.01},
	}})
	serveOnce(b, h, "/api/chains/big/state")
	seqs := []uint64{1, 12_345, 50_999, 77_777, 99_999}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		serveOnce(b, h, fmt.Sprintf("/api/chains/big/state?seq=%d", seqs[i%len(seqs)]))
	}
}

// BenchmarkCostTrack100k is building the cost track of a 100,000-event
// chain: what the first priced state request of a chain pays once.
func BenchmarkCostTrack100k(b *testing.B) {
	events := lctltest.Chain("big", bigChain, lctltest.Options{})
	b.ResetTimer()
	for b.Loop() {
		t := analysis.NewCostTrack()
		for i := range events {
			t.Add(&events[i])
		}
	}
}

func BenchmarkFlowPage100k(b *testing.B) {
	h := bigHandler(b)
	serveOnce(b, h, "/api/chains/big/flow") // builds the flow once
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		serveOnce(b, h, fmt.Sprintf("/api/chains/big/flow?from=%d&limit=200", 1+(i*7919)%bigChain))
	}
}

func BenchmarkFlowFirstPage100k(b *testing.B) {
	events := lctltest.Chain("big", bigChain, lctltest.Options{})
	src := newMemSource("big", events)
	b.ResetTimer()
	for b.Loop() {
		h, err := debugger.New(debugger.Options{Source: src})
		if err != nil {
			b.Fatal(err)
		}
		serveOnce(b, h, "/api/chains/big/flow")
	}
}

func BenchmarkChainDetail100k(b *testing.B) {
	events := lctltest.Chain("big", bigChain, lctltest.Options{})
	src := newMemSource("big", events)
	b.ResetTimer()
	for b.Loop() {
		h, err := debugger.New(debugger.Options{Source: src})
		if err != nil {
			b.Fatal(err)
		}
		serveOnce(b, h, "/api/chains/big")
	}
}
