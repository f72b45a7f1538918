package tracer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
	"github.com/xct-dev/xct/services/tracer"
)

// appendGenerated appends a generated chain of n events through a
// ChainWriter, as the orchestrator would, and returns what was stored.
func appendGenerated(t *testing.T, e *env, id string, n int) []lctl.Event {
	t.Helper()
	w, err := e.log.NewChainWriter(id)
	if err != nil {
		t.Fatal(err)
	}
	var out []lctl.Event
	for _, ev := range lctltest.Chain(id, n, lctltest.Options{Facts: 7}) {
		stored, err := w.Append(context.Background(), ev.Type, ev.Agent, ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stored)
	}
	return out
}

// TestReplayEqualsMaterialized is the property the tracer's snapshots must
// keep: for every seq, the state ReplayChain returns (rebuilt from the
// nearest snapshot) is exactly what replaying the chain's prefix gives.
func TestReplayEqualsMaterialized(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stored := appendGenerated(t, e, "prop", 157)
	tr := e.startTracerWith(t, tracer.Config{SnapshotEvery: 10})
	tr.waitFor(t, "prop", uint64(len(stored)))
	ctx := context.Background()
	for k := uint64(1); k <= uint64(len(stored)); k++ {
		resp, err := tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: "prop", ToSeq: k, IncludeHash: true})
		if err != nil {
			t.Fatal(err)
		}
		want := lctl.Replay("prop", stored, k)
		wantJSON, _ := json.Marshal(want)
		var got, wantMap map[string]any
		gotJSON, _ := resp.GetState().MarshalJSON()
		_ = json.Unmarshal(gotJSON, &got)
		_ = json.Unmarshal(wantJSON, &wantMap)
		if fmt.Sprint(got) != fmt.Sprint(wantMap) {
			t.Fatalf("state at %d differs from the replayed prefix\n got %s\nwant %s", k, gotJSON, wantJSON)
		}
		wantHash, _ := want.Hash()
		if resp.GetStateHash() != wantHash {
			t.Fatalf("state hash at %d = %s, want %s", k, resp.GetStateHash(), wantHash)
		}
		if wantFrom := (k / 10) * 10; resp.GetFromSnapshotSeq() != wantFrom {
			t.Fatalf("to_seq %d replayed from snapshot %d, want %d", k, resp.GetFromSnapshotSeq(), wantFrom)
		}
		if s := resp.GetSummary(); s.GetSeq() != k || s.GetFacts() != uint32(len(want.Facts)) || s.GetErrors() != uint32(len(want.Errors)) {
			t.Fatalf("summary at %d = %v", k, s)
		}
	}
}

// TestSnapshotsSurviveRestart loads chains from disk into timelines with
// snapshots, and replays match after the restart.
func TestSnapshotsSurviveRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stored := appendGenerated(t, e, "restart", 95)
	first := e.startTracerWith(t, tracer.Config{SnapshotEvery: 8})
	first.waitFor(t, "restart", 95)
	first.stop()
	second := e.startTracerWith(t, tracer.Config{SnapshotEvery: 8})
	second.waitFor(t, "restart", 95)
	resp, err := second.client.ReplayChain(context.Background(), &lctlv1.ReplayChainRequest{ChainId: "restart", ToSeq: 90, View: lctlv1.StateView_STATE_VIEW_SUMMARY, IncludeHash: true})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := lctl.Replay("restart", stored, 90).Hash()
	if resp.GetStateHash() != want || resp.GetState() != nil || resp.GetFromSnapshotSeq() != 88 {
		t.Fatalf("after restart: hash %s (want %s), state %v, from %d", resp.GetStateHash(), want, resp.GetState() != nil, resp.GetFromSnapshotSeq())
	}
}

func TestGetChainPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stored := appendGenerated(t, e, "paged", 23)
	tr := e.startTracer(t)
	tr.waitFor(t, "paged", 23)
	var got []uint64
	from := uint64(0)
	for pages := 0; ; pages++ {
		resp, err := tr.client.GetChain(context.Background(), &lctlv1.GetChainRequest{ChainId: "paged", FromSeq: from, PageSize: 5})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetEvents()) > 5 || pages > 10 {
			t.Fatalf("page of %d events", len(resp.GetEvents()))
		}
		for _, ev := range resp.GetEvents() {
			got = append(got, ev.GetSeq())
		}
		if resp.GetNextSeq() == 0 {
			break
		}
		from = resp.GetNextSeq()
	}
	if len(got) != len(stored) {
		t.Fatalf("pages hold %d events, want %d", len(got), len(stored))
	}
	for i, s := range got {
		if s != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, s)
		}
	}
}

func TestAnalysisRPCs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeRun(t, e.log, "run-a", 3)
	w := writeRun(t, e.log, "run-b", 3)
	_ = w
	factsW, err := e.log.NewChainWriter("facts")
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, factsW, []ev{
		{"step_start", "analyzer", map[string]any{"intent": "analyze"}},
		{"fact_added", "analyzer", map[string]any{"id": "F1", "text": "SQL built from input", "confidence": 0.85, "source": "static", "tags": []any{"critical"}}},
		{"fact_added", "analyzer", map[string]any{"id": "F2", "text": "weak hash", "confidence": 0.3, "source": "static", "severity": "urgent"}},
		{"step_end", "analyzer", map[string]any{"outcome": "success", "duration_ms": 1000.0, "tokens": map[string]any{"input": 100.0, "output": 50.0}}},
		{"step_start", "reviewer", map[string]any{"intent": "review", "model": "m-big"}},
		{"fact_modified", "reviewer", map[string]any{"id": "F1", "confidence": 0.95, "reason": "verified"}},
		{"step_end", "reviewer", map[string]any{"outcome": "success", "duration_ms": 3000.0, "tokens": map[string]any{"input": 1000.0, "output": 500.0}}},
	})
	tr := e.startTracer(t)
	tr.waitFor(t, "run-a", 14)
	tr.waitFor(t, "run-b", 14)
	tr.waitFor(t, "facts", 7)
	ctx := context.Background()

	v, err := tr.client.VerifyChain(ctx, &lctlv1.VerifyChainRequest{ChainId: "run-a"})
	if err != nil || !v.GetOk() || len(v.GetChecks()) != 4 || v.GetEvents() != 14 {
		t.Fatalf("verify: %v %v", v, err)
	}

	d, err := tr.client.DiffChains(ctx, &lctlv1.DiffChainsRequest{ChainIdA: "run-a", ChainIdB: "run-b"})
	if err != nil {
		t.Fatal(err)
	}
	// The runs differ only in their run ids, which the default ignores.
	if !d.GetIdentical() {
		t.Errorf("diff of equal runs: %v", d)
	}
	d, err = tr.client.DiffChains(ctx, &lctlv1.DiffChainsRequest{ChainIdA: "run-a", ChainIdB: "facts"})
	if err != nil || d.GetIdentical() || d.GetAdded()+d.GetRemoved()+d.GetChanged() == 0 {
		t.Fatalf("diff of different chains: %v %v", d, err)
	}

	st, err := tr.client.ChainStats(ctx, &lctlv1.ChainStatsRequest{ChainId: "facts", Prices: map[string]*lctlv1.ModelPrice{"m-big": {InputPer_1K: 1, OutputPer_1K: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetTokensIn() != 1100 || st.GetTokensOut() != 550 || st.GetCost() != 2 || len(st.GetUnpriced()) != 1 || st.GetDurationMs() != 4000 {
		t.Errorf("stats = %v", st)
	}

	b, err := tr.client.FindBottlenecks(ctx, &lctlv1.FindBottlenecksRequest{ChainId: "facts", Top: 1})
	if err != nil || len(b.GetSteps()) != 1 || b.GetSteps()[0].GetAgent() != "reviewer" || b.GetSteps()[0].GetShare() != 0.75 {
		t.Fatalf("bottlenecks: %v %v", b, err)
	}

	c, err := tr.client.FactConfidence(ctx, &lctlv1.FactConfidenceRequest{ChainId: "facts"})
	if err != nil || len(c.GetFacts()) != 2 || c.GetHops() != 1 || c.GetFacts()[1].GetBand() != "block" || len(c.GetWarnings()) != 1 {
		t.Fatalf("confidence: %v %v", c, err)
	}

	q, err := tr.client.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: "facts", Query: "SELECT * WHERE tag = 'critical' ORDER BY confidence DESC"})
	if err != nil || len(q.GetFacts()) != 1 || q.GetFacts()[0].GetConfidence() != 0.95 {
		t.Fatalf("query: %v %v", q, err)
	}
	q, err = tr.client.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: "facts", Query: "SELECT *", ToSeq: 2})
	if err != nil || len(q.GetFacts()) != 1 || q.GetFacts()[0].GetConfidence() != 0.85 {
		t.Fatalf("query at seq 2: %v %v", q, err)
	}
	_, err = tr.client.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: "facts", Query: "SELECT * WHERE confidence >="})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "position 29") {
		t.Errorf("bad query: %v", err)
	}

	contracts := []byte("contracts:\n  analyzer:\n    outputs:\n      - type: fact\n        required_fields: [id, text, severity]\n        severity_values: [low, high]\n")
	val, err := tr.client.ValidateContracts(ctx, &lctlv1.ValidateContractsRequest{ChainId: "facts", Files: []*lctlv1.ContractFile{{Name: "c.yaml", Content: contracts}}})
	if err != nil || val.GetOk() || val.GetViolations() != 2 {
		t.Fatalf("validate: %v %v", val, err)
	}
	_, err = tr.client.ValidateContracts(ctx, &lctlv1.ValidateContractsRequest{ChainId: "facts", Files: []*lctlv1.ContractFile{{Name: "bad.yaml", Content: []byte("contracts: [1]")}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bad.yaml:1") {
		t.Errorf("bad contracts: %v", err)
	}

	for name, call := range map[string]func() error{
		"verify": func() error {
			_, err := tr.client.VerifyChain(ctx, &lctlv1.VerifyChainRequest{ChainId: "nope"})
			return err
		},
		"diff": func() error {
			_, err := tr.client.DiffChains(ctx, &lctlv1.DiffChainsRequest{ChainIdA: "run-a", ChainIdB: "nope"})
			return err
		},
		"stats": func() error {
			_, err := tr.client.ChainStats(ctx, &lctlv1.ChainStatsRequest{ChainId: "nope"})
			return err
		},
		"bottleneck": func() error {
			_, err := tr.client.FindBottlenecks(ctx, &lctlv1.FindBottlenecksRequest{ChainId: "nope"})
			return err
		},
		"confidence": func() error {
			_, err := tr.client.FactConfidence(ctx, &lctlv1.FactConfidenceRequest{ChainId: "nope"})
			return err
		},
		"query": func() error {
			_, err := tr.client.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: "nope", Query: "SELECT *"})
			return err
		},
	} {
		if status.Code(call()) != codes.NotFound {
			t.Errorf("%s of an unknown chain: not NOT_FOUND", name)
		}
	}
	_, err = tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: "facts", View: 9})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad view: %v", err)
	}
}

// Session 17 (ops17), issue 15: a caller gone (its context cancelled)
// stops DiffChains and QueryFacts: on main both computed their whole
// answer for nobody (seconds for two similar chains of a million events).
// Asked with a cancelled context, each answers CANCELED, and the same
// requests answer in full with a live one.
func TestAnalysisStopsForACallerGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeRun(t, e.log, "run-a", 3)
	writeRun(t, e.log, "run-b", 4)
	factsW, err := e.log.NewChainWriter("facts")
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, factsW, []ev{
		{"fact_added", "analyzer", map[string]any{"id": "F1", "text": "SQL built from input", "confidence": 0.85, "source": "static"}},
	})
	tr := e.startTracer(t)
	tr.waitFor(t, "run-a", 14)
	tr.waitFor(t, "run-b", 18)
	tr.waitFor(t, "facts", 1)
	h := tracer.Handler(tr.svc)
	diff := &lctlv1.DiffChainsRequest{ChainIdA: "run-a", ChainIdB: "run-b"}
	query := &lctlv1.QueryFactsRequest{ChainId: "facts", Query: "SELECT * ORDER BY confidence DESC"}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := h.DiffChains(gone, diff); status.Code(err) != codes.Canceled {
		t.Fatalf("DiffChains for a caller gone: %v, %v; want CANCELED", d, err)
	}
	if q, err := h.QueryFacts(gone, query); status.Code(err) != codes.Canceled {
		t.Fatalf("QueryFacts for a caller gone: %v, %v; want CANCELED", q, err)
	}
	if d, err := h.DiffChains(context.Background(), diff); err != nil || d.GetIdentical() {
		t.Fatalf("DiffChains: %v, %v", d, err)
	}
	if q, err := h.QueryFacts(context.Background(), query); err != nil || len(q.GetFacts()) != 1 {
		t.Fatalf("QueryFacts: %v, %v", q, err)
	}
}
