package analysis_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/lctltest"
)

func chainOf(events []lctl.Event) analysis.Chain { return analysis.Chain{ID: "c", Events: events} }

func renumber(events []lctl.Event) []lctl.Event {
	for i := range events {
		events[i].Seq = uint64(i + 1)
	}
	return events
}

func clone(events []lctl.Event) []lctl.Event {
	out := make([]lctl.Event, len(events))
	for i, e := range events {
		d := map[string]any{}
		for k, v := range e.Data {
			d[k] = v
		}
		e.Data = d
		out[i] = e
	}
	return out
}

// TestDiffInsertedStep: one inserted event is one difference, however many
// events follow it; the rest align although their seqs moved.
func TestDiffInsertedStep(t *testing.T) {
	a := lctltest.Chain("a", 300, lctltest.Options{})
	b := clone(a)
	extra := lctl.Event{Type: "tool_call", Agent: "coder", Data: map[string]any{"tool": "curl", "duration_ms": 5.0}}
	b = renumber(append(b[:40], append([]lctl.Event{extra}, b[40:]...)...))
	r := analysis.Diff(chainOf(a), chainOf(b), analysis.DiffOptions{})
	if len(r.Differences) != 1 || r.Added != 1 || r.First.Kind != analysis.DiffAdded || r.First.V2.Seq != 41 {
		t.Fatalf("differences %+v", r.Differences)
	}
	// Removing it again: one removal.
	r = analysis.Diff(chainOf(b), chainOf(a), analysis.DiffOptions{})
	if len(r.Differences) != 1 || r.Removed != 1 || r.First.V1.Seq != 41 {
		t.Fatalf("reverse: %+v", r.Differences)
	}
}

// TestDiffChangedData reports aligned events whose data differ, by field.
func TestDiffChangedData(t *testing.T) {
	a := lctltest.Chain("a", 120, lctltest.Options{})
	b := clone(a)
	i := slices.IndexFunc(b, func(e lctl.Event) bool { return e.Type == "fact_added" })
	b[i].Data["confidence"] = 0.11
	b[i+3].Data["duration_ms"] = 9999.0 // ignored by default
	r := analysis.Diff(chainOf(a), chainOf(b), analysis.DiffOptions{})
	if len(r.Differences) != 1 || r.First.Kind != analysis.DiffChanged || r.First.Fields[0].Path != "confidence" || r.First.Fields[0].V2 != 0.11 {
		t.Fatalf("differences %+v", r.Differences)
	}
	r = analysis.Diff(chainOf(a), chainOf(b), analysis.DiffOptions{Ignore: []string{}})
	if len(r.Differences) != 2 {
		t.Fatalf("strict: %+v", r.Differences)
	}
	if d := r.First.Describe(5); d != "confidence: 0.53 → 0.11" {
		t.Errorf("describe = %q", d)
	}
}

// TestDiffReplacedTool pairs a removed and an added event of the same
// agent and type as one change.
func TestDiffReplacedTool(t *testing.T) {
	mk := func(tool string) []lctl.Event {
		return renumber([]lctl.Event{
			{Type: "step_start", Agent: "a", Data: map[string]any{"intent": "x"}},
			{Type: "tool_call", Agent: "a", Data: map[string]any{"tool": tool}},
			{Type: "step_end", Agent: "a", Data: map[string]any{"outcome": "success"}},
		})
	}
	r := analysis.Diff(chainOf(mk("grep")), chainOf(mk("rg")), analysis.DiffOptions{})
	if len(r.Differences) != 1 || r.First.Kind != analysis.DiffChanged || r.First.Fields[0].Path != "tool" {
		t.Fatalf("%+v", r.Differences)
	}
}

// TestDiffRandomEdits: for random chains and random insertions and
// deletions, Diff reports no more edits than were made, and nothing when
// none were.
func TestDiffRandomEdits(t *testing.T) {
	base := lctltest.Chain("a", 400, lctltest.Options{})
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		b := clone(base)
		edits := rng.IntN(8)
		for range edits {
			i := rng.IntN(len(b))
			if rng.IntN(2) == 0 {
				b = append(b[:i], b[i+1:]...)
			} else {
				b = append(b[:i], append([]lctl.Event{{Type: "custom", Agent: "x", Data: map[string]any{"n": float64(i)}}}, b[i:]...)...)
			}
		}
		b = renumber(b)
		r := analysis.Diff(chainOf(base), chainOf(b), analysis.DiffOptions{})
		if got := r.Added + r.Removed + r.Changed; got > edits || (edits == 0) != r.Identical {
			t.Fatalf("seed %d: %d edits reported as %d (+%d -%d ~%d)", seed, edits, got, r.Added, r.Removed, r.Changed)
		}
	}
}

// TestDiffTooDifferent falls back to positions past MaxEdits.
func TestDiffTooDifferent(t *testing.T) {
	a := lctltest.Chain("a", 200, lctltest.Options{})
	b := clone(a)
	for i := range b {
		b[i].Agent = fmt.Sprint("other-", i)
	}
	r := analysis.Diff(chainOf(a), chainOf(b), analysis.DiffOptions{MaxEdits: 10})
	if r.Aligned || r.Identical {
		t.Fatalf("aligned %v identical %v", r.Aligned, r.Identical)
	}
}

func TestBottlenecksPairSteps(t *testing.T) {
	events := renumber([]lctl.Event{
		{Type: "step_start", Agent: "a", Timestamp: "2024-01-01T00:00:00Z"},
		{Type: "step_start", Agent: "b", Timestamp: "2024-01-01T00:00:01Z"},
		{Type: "tool_call", Agent: "b", Data: map[string]any{"tool": "t", "duration_ms": 1500.0}},
		{Type: "step_end", Agent: "b", Timestamp: "2024-01-01T00:00:03Z"}, // 2s by timestamps
		{Type: "step_end", Agent: "a", Timestamp: "2024-01-01T00:00:04Z", Data: map[string]any{"duration_ms": 6000.0}},
		{Type: "step_start", Agent: "c", Timestamp: "2024-01-01T00:00:05Z"},
		{Type: "custom", Agent: "c", Timestamp: "2024-01-01T00:00:07Z"},
	})
	r := analysis.Bottlenecks("c", events, 0)
	if len(r.Steps) != 2 || r.Steps[0].Agent != "a" || r.Steps[0].DurationMS != 6000 || r.Steps[1].DurationMS != 2000 || r.Steps[1].ToolMS != 1500 {
		t.Fatalf("steps %+v", r.Steps)
	}
	if math.Abs(r.Steps[0].Share-0.75) > 1e-9 || r.TotalMS != 8000 {
		t.Errorf("share %v total %v", r.Steps[0].Share, r.TotalMS)
	}
	if len(r.Unfinished) != 1 || r.Unfinished[0].Agent != "c" || r.Unfinished[0].DurationMS != 2000 {
		t.Errorf("unfinished %+v", r.Unfinished)
	}
	if !strings.HasPrefix(r.Recommendation, "a is bottleneck. Consider parallelization.") || !strings.Contains(r.Recommendation, "c's step 6 never ended") {
		t.Errorf("recommendation %q", r.Recommendation)
	}
}

func TestConfidenceDecayAndThresholds(t *testing.T) {
	events := renumber([]lctl.Event{
		{Type: "step_start", Agent: "a"},
		{Type: "fact_added", Agent: "a", Data: map[string]any{"id": "F1", "confidence": 0.9}},
		{Type: "fact_added", Agent: "a", Data: map[string]any{"id": "F2", "confidence": 0.45}},
		{Type: "step_start", Agent: "a"}, // same agent: no hop
		{Type: "step_start", Agent: "b"}, // hop 1
		{Type: "fact_modified", Agent: "b", Data: map[string]any{"id": "F1", "confidence": 0.8, "reason": "consensus reached"}},
		{Type: "step_start", Agent: "c"}, // hop 2
		{Type: "fact_added", Agent: "c", Data: map[string]any{"id": "F3", "text": "no confidence"}},
	})
	r := analysis.Confidence("c", events, analysis.ConfidenceOptions{})
	if r.Hops != 2 || len(r.Facts) != 3 {
		t.Fatalf("hops %d facts %d", r.Hops, len(r.Facts))
	}
	f1, f2, f3 := r.Facts[0], r.Facts[1], r.Facts[2]
	if got := f1.Render(); got != "0.90 → 0.85 → 0.80 → 0.76 (verified, decayed, warn)" {
		t.Errorf("F1 = %s", got)
	}
	if f1.Consensus == nil || math.Abs(f1.Consensus.Score-0.85) > 1e-9 || math.Abs(f1.Consensus.Conflict-0.1) > 1e-9 {
		t.Errorf("F1 consensus = %+v", f1.Consensus)
	}
	// 0.45 -> 0.4275 (verify) -> 0.406 (verify): never blocked.
	if f2.Band != analysis.BandVerify || f2.BlockedSeq != 0 || len(f2.Points) != 3 {
		t.Errorf("F2 = %+v", f2)
	}
	if f3.Band != analysis.BandUnknown || f3.Final != nil {
		t.Errorf("F3 = %+v", f3)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "F2 needs verification at step 7") {
		t.Errorf("warnings %q", r.Warnings)
	}
	// A third hop blocks F2 (0.386), and it stays blocked.
	events = append(events, lctl.Event{Seq: 9, Type: "step_start", Agent: "a"}, lctl.Event{Seq: 10, Type: "step_start", Agent: "b"})
	r = analysis.Confidence("c", events, analysis.ConfidenceOptions{})
	f2 = r.Facts[1]
	if f2.Band != analysis.BandBlock || f2.BlockedSeq != 9 || f2.Render() != "0.45 → 0.43 → 0.41 → BLOCKED (decayed, below threshold)" {
		t.Errorf("F2 = %s %+v", f2.Render(), f2)
	}
	if !slices.Contains(r.Warnings, "Warning: F2 blocked at step 9 due to low confidence.") {
		t.Errorf("warnings %q", r.Warnings)
	}
	for c, band := range map[float64]string{0.8: "proceed", 0.79: "warn", 0.6: "warn", 0.59: "verify", 0.4: "verify", 0.39: "block"} {
		if got := analysis.BandOf(c); got != band {
			t.Errorf("BandOf(%v) = %s, want %s", c, got, band)
		}
	}
}

func TestContractsFileErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"contracts: {a: {outputs: [{type: fact, required_feilds: [x]}]}}", `c.yaml:1: unknown key "required_feilds"`},
		{"contracts: {a: {outputs: [{required_fields: [x]}]}}", "has no type"},
		{"contracts: {a: {inputs: {type: fact}}}", "a.inputs must be a list"},
		{"contracts: {a: {outputs: [{type: fact, confidence_min: 2}]}}", "confidence_min must be a number between 0 and 1"},
		{"contracts: {a: {outputs: [{type: fact, severity_values: []}]}}", "severity_values must be a non-empty list"},
		{"contracts: {a: {produces: []}}", `unknown key "produces"`},
		{"agents: {}", "no contracts: section"},
		{"contracts: [1]", "must map agent names"},
		{"contracts: {a: {outputs: [{type: fact}]}}\ncontracts2: 1\n", ""},
	}
	for _, tc := range tests {
		cs := analysis.NewContractSet()
		err := cs.Add("c.yaml", []byte(tc.in))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	cs := analysis.NewContractSet()
	_ = cs.Add("one.yaml", []byte("contracts: {a: {outputs: [{type: fact}]}}"))
	if err := cs.Add("two.yaml", []byte("contracts:\n  a: {outputs: [{type: fact}]}")); err == nil || !strings.Contains(err.Error(), "two.yaml:2: agent a already has a contract (one.yaml:1)") {
		t.Errorf("duplicate agent: %v", err)
	}
}

func TestContractInputsAndOutputs(t *testing.T) {
	cs := analysis.NewContractSet()
	if err := cs.Add("c.yaml", []byte(`contracts:
  writer:
    outputs:
      - type: fact
        required_fields: [id, text, severity]
        confidence_min: 0.5
        severity_values: [low, high]
      - type: tool_call
        required_fields: [tool, output]
  reader:
    inputs:
      - type: fact
        required_fields: [id, text]
        confidence_min: 0.6
`)); err != nil {
		t.Fatal(err)
	}
	events := renumber([]lctl.Event{
		{Type: "fact_added", Agent: "writer", Data: map[string]any{"id": "F1", "text": "t", "confidence": 0.4, "severity": "medium"}},
		{Type: "fact_modified", Agent: "writer", Data: map[string]any{"id": "F1", "confidence": 0.9, "severity": "high"}},
		{Type: "tool_call", Agent: "writer", Data: map[string]any{"tool": "grep"}},
		{Type: "fact_added", Agent: "reader", Data: map[string]any{"id": "R1", "confidence": 0.1}}, // its own fact: not an input
		{Type: "step_start", Agent: "reader"},
		{Type: "step_start", Agent: "reader"}, // F1 already checked: not twice
	})
	r := analysis.ValidateContracts("c", events, cs)
	var got []string
	for _, res := range r.Results {
		for _, v := range res.Violations {
			got = append(got, fmt.Sprintf("%s %s [%d] %s", res.Agent, res.Direction, v.Seq, v.Message))
		}
	}
	want := []string{
		`writer outputs [1] confidence 0.40 is below confidence_min 0.50`,
		`writer outputs [1] severity "medium" is not one of low, high`,
		`writer outputs [3] missing required field output`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || r.OK || r.Violated != 1 {
		t.Fatalf("violations:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if in := r.Results[1]; in.Agent != "reader" || in.Checked != 1 || !in.OK {
		t.Errorf("reader inputs = %+v", in)
	}
}

func TestStatsPricesAndModels(t *testing.T) {
	p, err := analysis.LoadPrices(strings.NewReader("models:\n  claude-3-opus: {input_per_1k: 1, output_per_1k: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	events := renumber([]lctl.Event{
		{Type: "step_start", Agent: "a", Data: map[string]any{"model": "claude-3-opus-20240229"}},
		{Type: "step_end", Agent: "a", Data: map[string]any{"tokens": map[string]any{"input": 1000.0, "output": 500.0}, "duration_ms": 10.0}},
		{Type: "step_start", Agent: "b", Data: map[string]any{"agent_profile": map[string]any{"model": "mystery"}}},
		{Type: "step_end", Agent: "b", Data: map[string]any{"tokens": map[string]any{"in": 10.0, "out": 5.0}}},
		{Type: "step_start", Agent: "c"},
		{Type: "step_end", Agent: "c", Data: map[string]any{"tokens": map[string]any{"input": 1.0}}},
	})
	st := analysis.ComputeStats("c", events, p)
	if st.Cost == nil || *st.Cost != 2 || st.CostByModel[1].PricedAs != "claude-3-opus" {
		t.Fatalf("cost %v by model %+v", st.Cost, st.CostByModel)
	}
	if strings.Join(st.Unpriced, ",") != "(unknown model),mystery" {
		t.Errorf("unpriced %v", st.Unpriced)
	}
	for _, bad := range []string{"", "models: {}", "models: {m: {input_per_1k: -1}}", "models: {m: {input_per_1k: 1, per_token: 2}}"} {
		if _, err := analysis.LoadPrices(strings.NewReader(bad)); err == nil {
			t.Errorf("LoadPrices(%q) accepted", bad)
		}
	}
	for ms, want := range map[float64]string{0: "0ms", 12.6: "12.6ms", 999: "999ms", 45200: "45.2s", 125000: "2m05.0s", 3_900_000: "1h05m"} {
		if got := analysis.FormatDuration(ms); got != want {
			t.Errorf("FormatDuration(%v) = %s, want %s", ms, got, want)
		}
	}
	for c, want := range map[float64]string{0.047: "$0.047", 0.0033: "$0.0033", 12.5: "$12.50"} {
		if got := analysis.FormatCost(c); got != want {
			t.Errorf("FormatCost(%v) = %s, want %s", c, got, want)
		}
	}
}

// TestVerifyPinpoints names the first edited, removed and reordered event.
func TestVerifyPinpoints(t *testing.T) {
	base := lctltest.Chain("v", 60, lctltest.Options{Seal: true})
	if r := analysis.Verify("v", base); !r.OK {
		t.Fatalf("intact chain: %+v", r.Problems)
	}
	tests := []struct {
		name   string
		mutate func([]lctl.Event) []lctl.Event
		seq    uint64
		kind   string
	}{
		{"edited", func(e []lctl.Event) []lctl.Event { e[20].Agent = "mallory"; return e }, 21, lctl.ProblemEdited},
		{"removed", func(e []lctl.Event) []lctl.Event { return append(e[:30], e[31:]...) }, 32, lctl.ProblemMissingSeq},
		{"head removed", func(e []lctl.Event) []lctl.Event { return e[3:] }, 4, lctl.ProblemMissingSeq},
		{"swapped", func(e []lctl.Event) []lctl.Event { e[10], e[11] = e[11], e[10]; return e }, 12, lctl.ProblemOutOfOrder},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			events := tc.mutate(clone(base))
			r := analysis.Verify("v", events)
			if r.OK || r.First.Seq != tc.seq || r.First.Kind != tc.kind {
				t.Fatalf("first problem %+v, want seq %d %s", r.First, tc.seq, tc.kind)
			}
		})
	}
}

// TestAnalysesNeverPanic runs every analysis on random, malformed chains.
func TestAnalysesNeverPanic(t *testing.T) {
	values := []any{nil, "x", -1.0, 1.5, 1e300, true, []any{1.0, "a"}, map[string]any{"input": "many"}}
	types := []string{"step_start", "step_end", "fact_added", "fact_modified", "tool_call", "error", "checkpoint", "contract_validation", "model_routing", "stream_chunk", "verdict", "?"}
	keys := []string{"id", "text", "confidence", "tool", "step", "duration_ms", "tokens", "model", "state_hash", "facts_snapshot", "reasons", "severity"}
	cs := analysis.NewContractSet()
	_ = cs.Add("c", []byte("contracts: {a: {inputs: [{type: fact, required_fields: [id]}], outputs: [{type: fact, confidence_min: 0.5, severity_values: [x]}]}}"))
	q, _ := analysis.ParseQuery("SELECT * WHERE confidence > 0.1 OR severity LIKE '%' ORDER BY text")
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		var events []lctl.Event
		for i := range 1 + rng.IntN(50) {
			d := map[string]any{}
			for _, k := range keys {
				if rng.IntN(2) == 0 {
					d[k] = values[rng.IntN(len(values))]
				}
			}
			events = append(events, lctl.Event{Seq: uint64(1 + rng.IntN(i+2)), Type: types[rng.IntN(len(types))], Agent: []string{"a", "b", ""}[rng.IntN(3)], Data: d,
				Timestamp: []string{"", "2024-01-01T00:00:00Z", "junk"}[rng.IntN(3)]})
		}
		analysis.Verify("c", events)
		analysis.Diff(chainOf(events), chainOf(events[:len(events)/2]), analysis.DiffOptions{})
		analysis.ComputeStats("c", events, nil)
		analysis.Bottlenecks("c", events, 3)
		analysis.Confidence("c", events, analysis.ConfidenceOptions{})
		analysis.ValidateContracts("c", events, cs)
		if _, err := q.Run(analysis.FactStore(events, 0)); err != nil {
			_ = err
		}
		for i := range events {
			analysis.Line(&events[i])
		}
	}
}

// TestHandoffLine: replay says who handed over to whom and why, in each
// shape a handoff is written (XCT's crews, the v3 conversion, the OTel
// conversion, lctlgen's counted facts), not "unknown type".
func TestHandoffLine(t *testing.T) {
	tests := []struct {
		agent string
		data  map[string]any
		want  string
	}{
		{"planner", map[string]any{"from": "planner", "to": "coder", "summary": "fix the vet\nerror", "depth": 2.0,
			"suggested_queries": []any{"SELECT *"}, "facts": []any{"F1", "F2"}},
			"[7] planner: handoff planner → coder (fix the vet error, facts F1, F2, 1 suggested query, depth 2)"},
		{"orchestrator", map[string]any{"to": "human-review", "reason": "F4 is low", "facts": []any{"F4"}},
			"[7] orchestrator: handoff orchestrator → human-review (F4 is low, fact F4)"},
		{"a", map[string]any{"from": "a", "to": "b", "otel": map[string]any{"span_id": "x"}}, "[7] a: handoff a → b"},
		{"coder", map[string]any{"from": "coder", "to": "reviewer", "facts": 12.0}, "[7] coder: handoff coder → reviewer (12 facts)"},
		{"x", map[string]any{"facts": []any{}}, "[7] x: handoff (no facts)"},
		{"x", map[string]any{"note": "n"}, `[7] x: handoff (data {"note":"n"})`},
		{"", map[string]any{"to": "b"}, "[7] -: handoff → b"},
	}
	for _, tt := range tests {
		e := lctl.Event{Seq: 7, Type: lctl.TypeHandoff, Agent: tt.agent, Data: tt.data}
		if got := analysis.Line(&e); got != tt.want {
			t.Errorf("Line = %q\n want %q", got, tt.want)
		}
	}
}

// TestStreamVerifierSummary: without the state's steps the verifier
// reports what the full one does on a chain whose checkpoints carry fact
// snapshots only, and stops at the first checkpoint with a state hash
// (NeedsState), which the full one checks.
func TestStreamVerifierSummary(t *testing.T) {
	run := func(v *analysis.StreamVerifier, events []lctl.Event) (*analysis.VerifyReport, int) {
		for i := range events {
			h, err := events[i].ComputeHash()
			if !v.Add(&events[i], h, err) {
				return nil, i
			}
		}
		return v.Report(), len(events)
	}
	plain := lctltest.Workflow("w", 3000, lctltest.WorkflowOptions{Seal: true})
	full, n := run(analysis.NewStreamVerifier("w"), plain)
	sum, m := run(analysis.NewStreamVerifierSummary("w"), plain)
	if n != len(plain) || m != len(plain) || !full.OK || !reflect.DeepEqual(full, sum) {
		t.Fatalf("plain chain: full %d %+v\nsummary %d %+v", n, full, m, sum)
	}
	hashed := lctltest.Workflow("w", 3000, lctltest.WorkflowOptions{Seal: true, StateHashes: true})
	v := analysis.NewStreamVerifierSummary("w")
	if _, stop := run(v, hashed); stop == len(hashed) || !v.NeedsState || hashed[stop].Type != lctl.TypeCheckpoint {
		t.Fatalf("state hashes: stopped at %d (needs state %v)", stop, v.NeedsState)
	}
	if r, n := run(analysis.NewStreamVerifier("w"), hashed); n != len(hashed) || !r.OK || !strings.Contains(fmt.Sprint(r.Checks), "state hashes and fact snapshots match") {
		t.Fatalf("full verifier on state hashes: %d %+v", n, r)
	}
}

// TestVerifyStateHashes: on a chain whose checkpoints carry state hashes,
// of version 2 (what XCT writes now) and of version 1 (before session 5),
// verify passes the chain as written and names the first checkpoint after
// a change that the hash chain cannot show, the chain re-sealed after it:
// a fact's source and a revision's reason (in no fact snapshot), a verdict, a step revisited, two
// events swapped and renumbered, a tool call's duration.
func TestVerifyStateHashes(t *testing.T) {
	for _, version := range []int{1, 2} {
		base := lctltest.Workflow("w", 1500, lctltest.WorkflowOptions{Seal: true, StateHashes: true, StateHashVersion: version, CheckpointEvery: 100})
		hashes := 0
		for i := range base {
			if h, _ := base[i].Get("state_hash").(string); h != "" {
				if lctl.StateHashVersion(h) != version {
					t.Fatalf("version %d: checkpoint %d carries %q", version, base[i].Seq, h)
				}
				hashes++
			}
		}
		if r := analysis.Verify("w", base); !r.OK || hashes < 10 || !strings.Contains(fmt.Sprint(r.Checks), fmt.Sprintf("%d checkpoints; state hashes and fact snapshots match", hashes)) {
			t.Fatalf("version %d: intact chain (%d hashes): %+v", version, hashes, r)
		}
		find := func(events []lctl.Event, typ string, from int) int {
			for i := from; i < len(events); i++ {
				if events[i].Type == typ {
					return i
				}
			}
			t.Fatalf("no %s after %d", typ, from)
			return 0
		}
		edit := func(e []lctl.Event, i int, k string, v any) int {
			e[i].Data[k] = v
			return i
		}
		tests := map[string]func([]lctl.Event) int{
			"fact source":   func(e []lctl.Event) int { return edit(e, find(e, lctl.TypeFactModified, 420), "source", "elsewhere") },
			"fact reason":   func(e []lctl.Event) int { return edit(e, find(e, lctl.TypeFactModified, 420), "reason", "none") },
			"verdict":       func(e []lctl.Event) int { return edit(e, find(e, lctl.TypeVerdict, 420), "decision", "deny") },
			"early step":    func(e []lctl.Event) int { return edit(e, find(e, lctl.TypeVerdict, 420), "step", 3.0) },
			"tool duration": func(e []lctl.Event) int { return edit(e, find(e, lctl.TypeToolCall, 420), "duration_ms", 1.0) },
			"swapped": func(e []lctl.Event) int {
				i := find(e, lctl.TypeToolCall, 420)
				e[i], e[i+1] = e[i+1], e[i]
				e[i].Seq, e[i+1].Seq = e[i+1].Seq, e[i].Seq
				e[i].Timestamp, e[i+1].Timestamp = e[i+1].Timestamp, e[i].Timestamp
				return i
			},
		}
		for name, mutate := range tests {
			events := clone(base)
			at := mutate(events)
			prev := ""
			for i := range events {
				if err := events[i].Seal(prev); err != nil {
					t.Fatal(err)
				}
				prev = events[i].Hash
			}
			next := find(events, lctl.TypeCheckpoint, at+1)
			r := analysis.Verify("w", events)
			if r.OK || r.First.Kind != lctl.ProblemCheckpoint || r.First.Seq != events[next].Seq || !strings.Contains(r.First.Message, "state_hash") {
				t.Errorf("version %d, %s (event %d): first problem %+v, want the state hash of checkpoint %d", version, name, events[at].Seq, r.First, events[next].Seq)
			}
			for _, p := range r.Problems {
				if p.Kind != lctl.ProblemCheckpoint {
					t.Errorf("version %d, %s: %+v (only checkpoints should fail)", version, name, p)
				}
			}
		}
	}
}

// TestVerifyRecordedCrewRun: a crew run's chain recorded before session 5
// (the debugger's demo, its two checkpoints' state hashes of version 1)
// still verifies, each state hash recomputed.
func TestVerifyRecordedCrewRun(t *testing.T) {
	f, err := os.Open("../debugger/testdata/crew-demo.lctl.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	file, err := lctl.DecodeFile(f, lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	v1 := 0
	for i := range file.Events {
		if h, _ := file.Events[i].Get("state_hash").(string); lctl.StateHashVersion(h) == 1 {
			v1++
		}
	}
	r := analysis.Verify(file.Chain.ID, file.Events)
	if v1 != 2 || !r.OK || !strings.Contains(fmt.Sprint(r.Checks), "2 checkpoints; state hashes and fact snapshots match") {
		t.Fatalf("%d version-1 hashes; %+v", v1, r)
	}
}
