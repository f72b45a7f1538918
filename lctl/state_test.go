package lctl_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// specExample is the "Event Stream Example" of LCTL v4.0 part 2, verbatim.
const specExample = `lctl: "4.0"
chain:
  id: "security-review-001"

events:
  - seq: 1
    type: step_start
    timestamp: "2024-01-15T10:30:00Z"
    agent: "code-analyzer"
    data:
      intent: "analyze"
      input_summary: "UserController.py - 200 lines"

  - seq: 2
    type: fact_added
    timestamp: "2024-01-15T10:30:15Z"
    agent: "code-analyzer"
    data:
      id: "F1"
      text: "SQL query constructed from user input at line 45"
      confidence: 0.85
      source: "static-analysis"

  - seq: 3
    type: tool_call
    timestamp: "2024-01-15T10:30:16Z"
    agent: "code-analyzer"
    data:
      tool: "grep"
      input: {pattern: "execute.*user", file: "UserController.py"}
      output: {matches: 3, lines: [45, 67, 89]}
      duration_ms: 50

  - seq: 4
    type: step_end
    timestamp: "2024-01-15T10:30:30Z"
    agent: "code-analyzer"
    data:
      outcome: "success"
      output_summary: "Found 1 potential SQL injection"
      duration_ms: 30000
      tokens: {input: 500, output: 200}

  - seq: 5
    type: checkpoint
    timestamp: "2024-01-15T10:30:31Z"
    agent: "system"
    data:
      state_hash: "abc123"
      facts_snapshot:
        F1: {text: "SQL query constructed...", confidence: 0.85}

  - seq: 6
    type: step_start
    timestamp: "2024-01-15T10:30:32Z"
    agent: "security-reviewer"
    data:
      intent: "assess"
      input_summary: "Review F1 for exploitability"
`

func specEvents(t testing.TB) []lctl.Event {
	t.Helper()
	f, err := lctl.DecodeFile(strings.NewReader(specExample), lctl.FormatYAML)
	if err != nil {
		t.Fatalf("decode spec example: %v", err)
	}
	if f.Chain.ID != "security-review-001" || len(f.Events) != 6 {
		t.Fatalf("decoded chain %q with %d events", f.Chain.ID, len(f.Events))
	}
	return f.Events
}

func TestReplaySpecExample(t *testing.T) {
	s := lctl.Replay("security-review-001", specEvents(t), 0)

	if s.ChainID != "security-review-001" || s.Seq != 6 || s.EventCount != 6 {
		t.Fatalf("chain %q seq %d count %d", s.ChainID, s.Seq, s.EventCount)
	}
	if want := []string{"code-analyzer", "security-reviewer"}; !reflect.DeepEqual(s.Agents, want) {
		t.Errorf("agents = %v, want %v", s.Agents, want)
	}
	f1 := s.Facts["F1"]
	if len(s.Facts) != 1 || f1 == nil {
		t.Fatalf("facts = %v, want F1 only", s.Facts)
	}
	if f1.Confidence == nil || *f1.Confidence != 0.85 || f1.Source != "static-analysis" ||
		f1.Text != "SQL query constructed from user input at line 45" {
		t.Errorf("F1 = %+v", f1)
	}
	if len(f1.History) != 1 || f1.History[0].Seq != 2 || f1.History[0].Agent != "code-analyzer" {
		t.Errorf("F1 history = %+v", f1.History)
	}
	if len(s.ToolCalls) != 1 {
		t.Fatalf("tool calls = %+v", s.ToolCalls)
	}
	if tc := s.ToolCalls[0]; tc.Seq != 3 || tc.Tool != "grep" || tc.DurationMS != 50 || tc.Agent != "code-analyzer" {
		t.Errorf("tool call = %+v", tc)
	}
	if s.Tokens != (lctl.Tokens{Input: 500, Output: 200}) {
		t.Errorf("tokens = %+v, want 500/200", s.Tokens)
	}
	if s.DurationMS != 30000 {
		t.Errorf("duration_ms = %v", s.DurationMS)
	}
	if s.LastCheckpointSeq != 5 || s.LastCheckpointHash != "abc123" {
		t.Errorf("checkpoint = %d %q", s.LastCheckpointSeq, s.LastCheckpointHash)
	}
	if c := s.CurrentStep; c == nil || c.Seq != 6 || c.Agent != "security-reviewer" || c.Intent != "assess" {
		t.Errorf("current step = %+v", c)
	}
	wantTypes := map[string]int{"step_start": 2, "fact_added": 1, "tool_call": 1, "step_end": 1, "checkpoint": 1}
	if !reflect.DeepEqual(s.EventTypes, wantTypes) {
		t.Errorf("event types = %v", s.EventTypes)
	}
	if len(s.UnknownTypes) != 0 || len(s.Errors) != 0 || s.Run != nil || len(s.Steps) != 0 {
		t.Errorf("unexpected: unknown %v errors %v run %v steps %v", s.UnknownTypes, s.Errors, s.Run, s.Steps)
	}
	if s.LastTimestamp != "2024-01-15T10:30:32Z" {
		t.Errorf("last timestamp = %q", s.LastTimestamp)
	}
}

func TestReplayToSeq(t *testing.T) {
	events := specEvents(t)
	tests := []struct {
		toSeq      uint64
		wantSeq    uint64
		facts      int
		agents     int
		tokens     int64
		checkpoint uint64
		current    string // agent of the current step, "" for none
	}{
		{toSeq: 0, wantSeq: 6, facts: 1, agents: 2, tokens: 700, checkpoint: 5, current: "security-reviewer"},
		{toSeq: 1, wantSeq: 1, facts: 0, agents: 1, current: "code-analyzer"},
		{toSeq: 2, wantSeq: 2, facts: 1, agents: 1, current: "code-analyzer"},
		{toSeq: 4, wantSeq: 4, facts: 1, agents: 1, tokens: 700},
		{toSeq: 5, wantSeq: 5, facts: 1, agents: 1, tokens: 700, checkpoint: 5},
		{toSeq: 6, wantSeq: 6, facts: 1, agents: 2, tokens: 700, checkpoint: 5, current: "security-reviewer"},
		{toSeq: 99, wantSeq: 6, facts: 1, agents: 2, tokens: 700, checkpoint: 5, current: "security-reviewer"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("to-seq-%d", tt.toSeq), func(t *testing.T) {
			s := lctl.Replay("security-review-001", events, tt.toSeq)
			if s.Seq != tt.wantSeq || s.EventCount != int(tt.wantSeq) {
				t.Errorf("seq %d count %d, want %d", s.Seq, s.EventCount, tt.wantSeq)
			}
			if len(s.Facts) != tt.facts || len(s.Agents) != tt.agents {
				t.Errorf("facts %d agents %v", len(s.Facts), s.Agents)
			}
			if got := s.Tokens.Input + s.Tokens.Output; got != tt.tokens {
				t.Errorf("tokens %d, want %d", got, tt.tokens)
			}
			if s.LastCheckpointSeq != tt.checkpoint {
				t.Errorf("checkpoint %d, want %d", s.LastCheckpointSeq, tt.checkpoint)
			}
			got := ""
			if s.CurrentStep != nil {
				got = s.CurrentStep.Agent
			}
			if got != tt.current {
				t.Errorf("current step agent %q, want %q", got, tt.current)
			}
		})
	}
}

// xctChain builds a run the way the orchestrator writes it: an allowed step,
// a denied step, an invalid model output, then the end of the run.
func xctChain(t testing.TB) []lctl.Event {
	t.Helper()
	type ev struct {
		typ, agent string
		data       string
	}
	script := []ev{
		{"run_started", "orchestrator", `{"run_id":"r1","goal":"list files","model":"m1","principal":"alice","labels":{"team":"x","bad":3},"max_steps":10}`},
		{"step_start", "m1", `{"step":1,"step_id":"s1","intent":"look around","input_summary":"goal","tool":"list_dir","arguments":{"path":"."},"model":"m1"}`},
		{"verdict", "validator", `{"step":1,"step_id":"s1","tool":"list_dir","decision":"allow","reasons":[{"rule_id":"read-ok","message":"reads are fine"}],"policy_version":"p1","evaluated_at":"2024-01-01T00:00:00Z","code":""}`},
		{"tool_call", "executor", `{"step":1,"step_id":"s1","tool":"list_dir","input":{"path":"."},"output":{"entries":["a"]},"duration_ms":12,"status":"success"}`},
		{"step_end", "m1", `{"step":1,"step_id":"s1","outcome":"success","output_summary":"1 entry","duration_ms":40,"tokens":{"input":100,"output":20}}`},
		{"step_start", "m1", `{"step":2,"step_id":"s2","intent":"delete","input_summary":"r","tool":"rm","arguments":{"path":"/"},"model":"m1"}`},
		{"verdict", "validator", `{"step":2,"step_id":"s2","tool":"rm","decision":"deny","reasons":[{"rule_id":"no-rm","message":"no"}],"policy_version":"p1","code":"POLICY_DENIED"}`},
		{"error", "validator", `{"step":2,"step_id":"s2","code":"POLICY_DENIED","category":"output_error","type":"validation_failed","message":"denied by no-rm","recoverable":true,"suggested_action":"propose_a_different_action","details":{}}`},
		{"step_end", "m1", `{"step":2,"step_id":"s2","outcome":"denied","output_summary":"denied","duration_ms":5,"tokens":{"input":110,"output":15}}`},
		{"step_start", "m1", `{"step":3,"intent":"","input_summary":"invalid model output","raw":"lol"}`},
		{"error", "model", `{"step":3,"code":"GENERATION_FAILED","category":"output_error","type":"generation_failed","message":"not JSON","recoverable":true}`},
		{"step_end", "m1", `{"step":3,"outcome":"invalid","output_summary":"","duration_ms":1,"tokens":{"input":120,"output":9}}`},
		{"run_finished", "orchestrator", `{"status":"done","message":"listed","steps":3,"tokens":{"input":330,"output":44}}`},
	}
	events := make([]lctl.Event, 0, len(script))
	prev := ""
	for i, s := range script {
		var data map[string]any
		if err := json.Unmarshal([]byte(s.data), &data); err != nil {
			t.Fatalf("event %d data: %v", i+1, err)
		}
		e := lctl.Event{ChainID: "run-r1", Seq: uint64(i + 1), Type: s.typ, Agent: s.agent,
			Timestamp: fmt.Sprintf("2024-01-01T00:00:%02dZ", i), Data: data}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		events = append(events, e)
	}
	return events
}

func TestReplayXCTChain(t *testing.T) {
	events := xctChain(t)
	s := lctl.Replay("run-r1", events, 0)

	wantRun := &lctl.Run{
		RunID: "r1", Status: "done", Goal: "list files", Model: "m1", Principal: "alice",
		Labels: map[string]string{"team": "x"}, MaxSteps: 10, Message: "listed", Steps: 3,
		Tokens: &lctl.Tokens{Input: 330, Output: 44}, StartedSeq: 1, FinishedSeq: 13,
	}
	if !reflect.DeepEqual(s.Run, wantRun) {
		t.Errorf("run = %+v\nwant %+v", s.Run, wantRun)
	}
	wantSteps := []lctl.Step{
		{Step: 1, StepID: "s1", Tool: "list_dir", Intent: "look around", Decision: "allow", Reasons: []string{"read-ok"},
			Status: "success", Outcome: "success", DurationMS: 40, StartSeq: 2, EndSeq: 5},
		{Step: 2, StepID: "s2", Tool: "rm", Intent: "delete", Decision: "deny", Reasons: []string{"no-rm"},
			ErrorCode: "POLICY_DENIED", Outcome: "denied", DurationMS: 5, StartSeq: 6, EndSeq: 9},
		{Step: 3, ErrorCode: "GENERATION_FAILED", Outcome: "invalid", DurationMS: 1, StartSeq: 10, EndSeq: 12},
	}
	if !reflect.DeepEqual(s.Steps, wantSteps) {
		t.Errorf("steps = %+v\nwant  %+v", s.Steps, wantSteps)
	}
	if want := []string{"m1"}; !reflect.DeepEqual(s.Agents, want) {
		t.Errorf("agents = %v, want %v", s.Agents, want)
	}
	if s.Tokens != (lctl.Tokens{Input: 330, Output: 44}) || s.DurationMS != 46 {
		t.Errorf("tokens %+v duration %v", s.Tokens, s.DurationMS)
	}
	if len(s.ToolCalls) != 1 || s.ToolCalls[0].StepID != "s1" || *s.ToolCalls[0].Step != 1 || s.ToolCalls[0].Status != "success" {
		t.Errorf("tool calls = %+v", s.ToolCalls)
	}
	if len(s.Errors) != 2 || s.Errors[0].Code != "POLICY_DENIED" || !s.Errors[0].Recoverable ||
		s.Errors[1].Agent != "model" || s.Errors[1].Type != "generation_failed" {
		t.Errorf("errors = %+v", s.Errors)
	}
	if s.CurrentStep != nil {
		t.Errorf("current step = %+v, want none after the last step_end", s.CurrentStep)
	}

	// Mid-run: the second step was proposed and judged, not yet executed.
	mid := lctl.Replay("run-r1", events, 7)
	if mid.Run.Status != "running" || mid.Run.Steps != 2 || len(mid.Steps) != 2 {
		t.Fatalf("mid-run state: run %+v steps %+v", mid.Run, mid.Steps)
	}
	if st := mid.Steps[1]; st.Decision != "deny" || st.Outcome != "" {
		t.Errorf("step 2 at seq 7 = %+v", st)
	}
	if c := mid.CurrentStep; c == nil || c.Step == nil || *c.Step != 2 || c.Tool != "rm" || c.Model != "m1" {
		t.Errorf("current step at seq 7 = %+v", c)
	}
}

func TestFactHistory(t *testing.T) {
	events := []lctl.Event{
		{Seq: 1, Type: "fact_added", Agent: "a", Data: map[string]any{"id": "F1", "text": "t1", "confidence": 0.85, "source": "s", "tags": []any{"sql", 7}}},
		{Seq: 2, Type: "fact_modified", Agent: "b", Data: map[string]any{"id": "F1", "confidence": 0.95, "reason": "verified_by_consensus"}},
		{Seq: 3, Type: "fact_modified", Agent: "c", Data: map[string]any{"id": "F1", "text": "CONFIRMED", "confidence": "high"}},
		{Seq: 4, Type: "fact_modified", Agent: "c", Data: map[string]any{"id": "F2", "text": "never added", "confidence": 0.5}},
	}
	s := lctl.Replay("c", events, 0)
	f1 := s.Facts["F1"]
	if f1.Text != "CONFIRMED" || *f1.Confidence != 0.95 || f1.Source != "s" || !reflect.DeepEqual(f1.Tags, []string{"sql"}) {
		t.Errorf("F1 = %+v", f1)
	}
	var timeline []float64
	for _, h := range f1.History {
		timeline = append(timeline, *h.Confidence)
	}
	if !reflect.DeepEqual(timeline, []float64{0.85, 0.95, 0.95}) || f1.History[1].Reason != "verified_by_consensus" {
		t.Errorf("history = %+v", f1.History)
	}
	if f2 := s.Facts["F2"]; f2 == nil || f2.Text != "never added" || len(f2.History) != 1 {
		t.Errorf("F2 = %+v", f2)
	}
}

func TestUnknownTypesKept(t *testing.T) {
	events := specEvents(t)
	events = append(events,
		lctl.Event{Seq: 7, Type: "custom_review", Agent: "x", Data: map[string]any{"to": "y"}},
		lctl.Event{Seq: 8, Type: "contract_validation", Agent: "system", Data: map[string]any{"contract": "security-reviewer", "direction": "output", "status": "passed", "warnings": []any{}}},
		lctl.Event{Seq: 9, Type: "custom_review", Agent: "y"},
	)
	s := lctl.Replay("security-review-001", events, 0)
	if !reflect.DeepEqual(s.UnknownTypes, []uint64{7, 9}) || s.EventTypes["custom_review"] != 2 || s.EventCount != 9 || s.Seq != 9 {
		t.Errorf("unknown %v types %v count %d seq %d", s.UnknownTypes, s.EventTypes, s.EventCount, s.Seq)
	}
	if len(s.ContractValidations) != 1 || s.ContractValidations[0].Status != "passed" {
		t.Errorf("contract validations = %+v", s.ContractValidations)
	}
}

func TestStreamAndRouting(t *testing.T) {
	events := []lctl.Event{
		{Seq: 1, Type: "stream_start", Data: map[string]any{"expected_chunks": "unknown"}},
		{Seq: 2, Type: "stream_chunk", Data: map[string]any{"index": 0.0, "content": "Based", "tokens": 5.0}},
		{Seq: 3, Type: "stream_chunk", Data: map[string]any{"index": 1.0, "content": " on", "tokens": 4.0}},
	}
	s := lctl.Replay("c", events, 0)
	if !s.Stream.Active || s.Stream.Chunks != 2 || s.Stream.Tokens != 9 || s.Stream.Streams != 1 {
		t.Errorf("stream during = %+v", s.Stream)
	}
	s.Apply(&lctl.Event{Seq: 4, Type: "stream_end", Data: map[string]any{"total_chunks": 47.0, "total_tokens": 203.0, "duration_ms": 2340.0}})
	s.Apply(&lctl.Event{Seq: 5, Type: "model_routing", Agent: "orchestrator", Data: map[string]any{
		"decision": "route_to_opus", "reason": "code_generation_task", "alternatives_considered": []any{"gpt-4"}, "confidence": 0.85}})
	want := lctl.StreamStats{Streams: 1, Chunks: 2, Tokens: 9, ReportedChunks: 47, ReportedTokens: 203, DurationMS: 2340}
	if s.Stream != want {
		t.Errorf("stream = %+v, want %+v", s.Stream, want)
	}
	if len(s.ModelRoutings) != 1 || s.ModelRoutings[0].Decision != "route_to_opus" || *s.ModelRoutings[0].Confidence != 0.85 {
		t.Errorf("routings = %+v", s.ModelRoutings)
	}
}

func TestMalformedDataIgnored(t *testing.T) {
	bad := []any{nil, "x", -1.0, 1.5, 1e300, true, []any{1.0}, map[string]any{"input": "many"}, []any{map[string]any{}}}
	keys := []string{"id", "text", "confidence", "source", "tags", "tool", "step", "step_id", "duration_ms", "status",
		"tokens", "intent", "model", "category", "recoverable", "decision", "reasons", "labels", "max_steps", "steps",
		"state_hash", "warnings", "total_chunks", "total_tokens", "alternatives_considered", "outcome"}
	types := []string{"step_start", "step_end", "fact_added", "fact_modified", "tool_call", "error", "checkpoint",
		"contract_validation", "model_routing", "stream_start", "stream_chunk", "stream_end", "run_started",
		"verdict", "run_finished", "mystery"}
	s := lctl.NewState("c")
	seq := uint64(0)
	for _, typ := range types {
		for _, v := range bad {
			data := map[string]any{}
			for _, k := range keys {
				data[k] = v
			}
			seq++
			s.Apply(&lctl.Event{Seq: seq, Type: typ, Agent: "a", Data: data})
		}
		seq++
		s.Apply(&lctl.Event{Seq: seq, Type: typ}) // nil data
	}
	s.Apply(nil)
	if s.EventCount != int(seq) {
		t.Fatalf("event count %d, want %d", s.EventCount, seq)
	}
	// Only the step_end with duration_ms 1.5 counts: fractional milliseconds
	// are valid, nothing else in bad is a duration.
	if s.Tokens != (lctl.Tokens{}) || s.DurationMS != 1.5 {
		t.Errorf("bad numbers were counted: tokens %+v duration %v", s.Tokens, s.DurationMS)
	}
	if _, err := s.Hash(); err != nil {
		t.Fatalf("hash after malformed events: %v", err)
	}
}

func TestNewStateJSONShape(t *testing.T) {
	raw, err := json.Marshal(lctl.NewState("c"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"chain_id":"c","seq":0,"event_count":0,"last_timestamp":"","facts":{},"agents":[],"current_step":null,` +
		`"tool_calls":[],"errors":[],"tokens":{"input":0,"output":0},"duration_ms":0,"event_types":{},"unknown_types":[],` +
		`"last_checkpoint_seq":0,"contract_validations":[],"model_routings":[],"stream":{"streams":0,"active":false,` +
		`"chunks":0,"tokens":0,"reported_chunks":0,"reported_tokens":0,"duration_ms":0},"run":null,"steps":[]}`
	if string(raw) != want {
		t.Errorf("empty state JSON =\n%s\nwant\n%s", raw, want)
	}
}

func TestHashDeterministic(t *testing.T) {
	events := xctChain(t)
	h1, err := lctl.Replay("run-r1", events, 0).Hash()
	if err != nil {
		t.Fatal(err)
	}
	h2, err := lctl.Replay("run-r1", events, 0).Hash()
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 || !strings.HasPrefix(h1, "v2:sha256:") || len(h1) != len("v2:sha256:")+64 {
		t.Fatalf("hashes %q and %q", h1, h2)
	}
	if hp, _ := lctl.Replay("run-r1", events, 5).Hash(); hp == h1 {
		t.Error("a shorter replay has the same hash")
	}

	changed := xctChain(t)
	changed[4].Data["tokens"] = map[string]any{"input": 101.0, "output": 20.0}
	h3, err := lctl.Replay("run-r1", changed, 0).Hash()
	if err != nil {
		t.Fatal(err)
	}
	if h3 == h1 {
		t.Error("changing an event's tokens did not change the state hash")
	}
}

// TestReplayPrefixEqualsIncremental is the reducer's property: for random
// chains, replaying to the k-th event gives the state that applying the first
// k events one by one reaches.
func TestReplayPrefixEqualsIncremental(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
		events := randomChain(rng, 1+rng.IntN(60))
		inc := lctl.NewState("prop")
		for k := 1; k <= len(events); k++ {
			inc.Apply(&events[k-1])
			replayed := lctl.Replay("prop", events, events[k-1].Seq)
			hi, err := inc.Hash()
			if err != nil {
				t.Fatalf("seed %d k %d: %v", seed, k, err)
			}
			hr, _ := replayed.Hash()
			// (Clone: the states' hashers are not part of the state.)
			if hi != hr || !reflect.DeepEqual(inc.Clone(), replayed.Clone()) {
				a, _ := json.Marshal(inc)
				b, _ := json.Marshal(replayed)
				t.Fatalf("seed %d, k %d: incremental and replayed states differ\n%s\n%s", seed, k, a, b)
			}
		}
	}
}

func randomChain(rng *rand.Rand, n int) []lctl.Event {
	types := []string{"step_start", "step_end", "fact_added", "fact_modified", "tool_call", "error", "checkpoint",
		"contract_validation", "model_routing", "stream_start", "stream_chunk", "stream_end", "run_started",
		"verdict", "run_finished", "custom_type"}
	agents := []string{"m1", "validator", "executor", "orchestrator", "system", ""}
	values := func() any {
		switch rng.IntN(8) {
		case 0:
			return float64(rng.IntN(5))
		case 1:
			return rng.Float64()
		case 2:
			return fmt.Sprintf("v%d", rng.IntN(3))
		case 3:
			return map[string]any{"input": float64(rng.IntN(100)), "output": float64(rng.IntN(100))}
		case 4:
			return []any{map[string]any{"rule_id": "r"}, "t"}
		case 5:
			return nil
		case 6:
			return true
		default:
			return -2.5
		}
	}
	keys := []string{"id", "text", "confidence", "source", "tags", "tool", "step", "step_id", "duration_ms",
		"status", "tokens", "intent", "decision", "reasons", "outcome", "code", "run_id", "steps", "labels"}
	events := make([]lctl.Event, n)
	for i := range events {
		data := map[string]any{}
		for _, k := range keys {
			if rng.IntN(3) == 0 {
				data[k] = values()
			}
		}
		events[i] = lctl.Event{
			Seq:       uint64(i + 1),
			Type:      types[rng.IntN(len(types))],
			Timestamp: fmt.Sprintf("2024-01-01T00:00:%02dZ", i%60),
			Agent:     agents[rng.IntN(len(agents))],
			Data:      data,
		}
	}
	return events
}

// FuzzStateApply feeds arbitrary events to the reducer: it must not panic
// and its state must always hash.
func FuzzStateApply(f *testing.F) {
	f.Add([]byte(`{"seq":1,"type":"step_end","data":{"tokens":{"input":"x","output":-1},"duration_ms":"slow","step":1.5}}`))
	f.Add([]byte(`{"seq":2,"type":"fact_modified","data":{"id":"F1","confidence":7,"tags":"notalist"}}`))
	f.Add([]byte(`{"seq":3,"type":"verdict","data":{"step":1,"reasons":[1,{"rule_id":2}],"decision":{}}}`))
	f.Add([]byte(`{"seq":4,"type":"run_finished","data":{"tokens":[],"steps":1e308}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := lctl.DecodeEvent(raw)
		if err != nil {
			return
		}
		s := lctl.NewState("fuzz")
		s.Apply(&e)
		s.Apply(&e)
		if _, err := s.Hash(); err != nil {
			t.Fatalf("hash: %v", err)
		}
	})
}

// TestRecognizedTypesAreNotUnknown: the spec's handoff and XCT's extension
// types, signed_checkpoint among them, are counted but not listed as
// unknown; a type nobody defines is, by Apply and by Replay alike, and in
// a state rebuilt by a Timeline.
func TestRecognizedTypesAreNotUnknown(t *testing.T) {
	types := []string{lctl.TypeHandoff, lctl.TypeSignedCheckpoint, lctl.TypeApprovalRequested, lctl.TypeApprovalDecided,
		lctl.TypeStepInDoubt, lctl.TypeRunReleased, lctl.TypeRunResumed, lctl.TypeRollbackStarted,
		lctl.TypeRollbackFinished, "custom_thing", lctl.TypeHandoff}
	var events []lctl.Event
	for i, typ := range types {
		events = append(events, lctl.Event{Seq: uint64(i + 1), Type: typ, Agent: "a", Timestamp: "2026-01-01T00:00:00Z"})
	}
	applied := lctl.NewState("c")
	for i := range events {
		applied.Apply(&events[i])
	}
	tl := lctl.NewTimeline("c", 3)
	for _, e := range events {
		tl.Append(e)
	}
	for name, s := range map[string]*lctl.State{"apply": applied, "replay": lctl.Replay("c", events, 0), "timeline": tl.StateAt(0)} {
		if !reflect.DeepEqual(s.UnknownTypes, []uint64{10}) {
			t.Errorf("%s: unknown types %v, want [10] (custom_thing only)", name, s.UnknownTypes)
		}
		if s.EventTypes[lctl.TypeHandoff] != 2 || s.EventTypes[lctl.TypeSignedCheckpoint] != 1 || s.EventTypes["custom_thing"] != 1 {
			t.Errorf("%s: event types %v", name, s.EventTypes)
		}
		if got := lctl.HashedUnknown(s); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}) {
			t.Errorf("%s: hashed unknown_types %v, want every unfolded event", name, got)
		}
	}
	for _, typ := range types[:len(types)-2] {
		if !lctl.IsRecognizedType(typ) || lctl.IsKnownType(typ) {
			t.Errorf("%s: recognized %v, folded %v", typ, lctl.IsRecognizedType(typ), lctl.IsKnownType(typ))
		}
	}
	if lctl.IsRecognizedType("custom_thing") || !lctl.IsRecognizedType(lctl.TypeStepStart) {
		t.Error("IsRecognizedType: custom_thing recognized, or step_start not")
	}
}

// TestStateHashKeepsUnfoldedTypes: the state hash is what it was before
// the reducer recognized handoff and XCT's extension types. The chain in
// testdata was written (and its checkpoints' state_hash computed) by the
// reducer as it was then; replaying it to each checkpoint gives the same
// hash, with Replay, Apply and a Timeline.
func TestStateHashKeepsUnfoldedTypes(t *testing.T) {
	f, err := os.Open("cli/testdata/chains/legacy-state-hashes.lctl.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	file, err := lctl.DecodeFile(f, lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	events := file.Events
	tl := lctl.NewTimeline(file.Chain.ID, 3)
	for _, e := range events {
		tl.Append(e)
	}
	s := lctl.NewState(file.Chain.ID)
	checked := 0
	for i := range events {
		e := &events[i]
		if e.Type == lctl.TypeCheckpoint {
			want, _ := e.Data["state_hash"].(string)
			for name, st := range map[string]*lctl.State{"apply": s, "replay": lctl.Replay(file.Chain.ID, events[:i], 0), "timeline": tl.StateAt(events[i-1].Seq)} {
				got, err := st.HashV1()
				if err != nil || got != want {
					t.Errorf("%s: checkpoint %d: hash %s (%v), written %s", name, e.Seq, got, err, want)
				}
			}
			checked++
		}
		s.Apply(e)
	}
	if checked != 4 || !reflect.DeepEqual(s.UnknownTypes, []uint64{11}) {
		t.Errorf("checked %d checkpoints, unknown types %v", checked, s.UnknownTypes)
	}
}

// TestDeferTypeCounts: a state that counts the folded types in an array
// (DeferTypeCounts) and adds them at the end (FlushTypeCounts) is the
// state Apply gives, unknown and recognized types included, and its hash
// too; a flush with nothing deferred changes nothing.
func TestDeferTypeCounts(t *testing.T) {
	events := lctltest.Workflow("defer", 2000, lctltest.WorkflowOptions{Seal: true})
	events = append(events, lctl.Event{Seq: 2001, Type: "custom_thing", Agent: "x", Data: map[string]any{}},
		lctl.Event{Seq: 2002, Type: lctl.TypeHandoff, Agent: "x", Data: map[string]any{}})
	want, got := lctl.NewState("defer"), lctl.NewState("defer")
	got.DeferTypeCounts()
	for i := range events {
		want.Apply(&events[i])
		got.Apply(&events[i])
	}
	if got.EventTypes[lctl.TypeStepStart] != 0 {
		t.Fatalf("step_start counted in EventTypes while deferred: %d", got.EventTypes[lctl.TypeStepStart])
	}
	got.FlushTypeCounts()
	got.FlushTypeCounts()
	if !reflect.DeepEqual(got.EventTypes, want.EventTypes) {
		t.Fatalf("EventTypes %v, want %v", got.EventTypes, want.EventTypes)
	}
	wh, err1 := want.Hash()
	gh, err2 := got.Hash()
	if err1 != nil || err2 != nil || wh != gh {
		t.Fatalf("hash %s (%v), want %s (%v)", gh, err2, wh, err1)
	}
	// Applying after the flush counts in EventTypes again.
	e := lctl.Event{Seq: 2003, Type: lctl.TypeStepStart, Agent: "x", Data: map[string]any{}}
	got.Apply(&e)
	want.Apply(&e)
	if !reflect.DeepEqual(got.EventTypes, want.EventTypes) {
		t.Fatalf("after the flush: EventTypes %v, want %v", got.EventTypes, want.EventTypes)
	}
}
