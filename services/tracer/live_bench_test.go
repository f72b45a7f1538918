package tracer_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// BenchmarkLiveReplayToSeq1M is `lctl replay --to-seq N --chain ID` on a
// live chain of 1,000,000 events: the calls the CLI makes to a real tracer
// over gRPC on loopback (ReplayChain, summary view, from the nearest
// snapshot; QueryFacts at N, from the nearest copy of the fact store;
// GetChain for the step in progress), at seqs near the start, the middle
// and the end. The chain is a lctltest workflow the tracer loads from its
// data dir at start (some 10 s and 2 GB: run it on its own).
//
//	go test ./services/tracer/ -run XXX -bench LiveReplayToSeq1M -benchtime 200x
func BenchmarkLiveReplayToSeq1M(b *testing.B) {
	n := benchLiveEvents()
	e := newEnv(b)
	if err := os.MkdirAll(filepath.Join(e.dataDir, "chains"), 0o750); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(e.dataDir, "chains", "live1m.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	if err := lctltest.WriteWorkflowLines(f, "live1m", int(n), lctltest.WorkflowOptions{Seal: true}); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	tr := e.startTracer(b)
	tr.waitFor(b, "live1m", n)
	ctx := context.Background()
	for _, at := range []struct {
		name string
		seq  uint64
	}{{"start", 1_234}, {"middle", n/2 + 321}, {"end", n - 7}} {
		b.Run(at.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: "live1m", ToSeq: at.seq, View: lctlv1.StateView_STATE_VIEW_SUMMARY})
				if err != nil || resp.GetSeq() != at.seq {
					b.Fatal(resp.GetSeq(), err)
				}
				facts, err := tr.client.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: "live1m", Query: "SELECT *", ToSeq: at.seq})
				if err != nil || len(facts.GetFacts()) == 0 {
					b.Fatal(len(facts.GetFacts()), err)
				}
				if cs := resp.GetSummary().GetCurrentStepSeq(); cs != 0 {
					if _, err := tr.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "live1m", FromSeq: cs, PageSize: 1}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/replay")
		})
	}
}

// benchLiveEvents is the live chain's length: 1,000,000, or
// XCT_BENCH_LIVE_EVENTS.
func benchLiveEvents() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("XCT_BENCH_LIVE_EVENTS"), 10, 64); err == nil && v >= 20_000 {
		return v
	}
	return 1_000_000
}
