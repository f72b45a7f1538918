package crew

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/cli"
)

// scenario plays the spec's security review with the crew's rules and
// records every event they produce, as the orchestrator's loop will: the
// analyzer's primary model is rate limited (a fallback), F1 is added
// without a source (the handoff is refused by the contract, then
// repaired), the reviewer confirms F1 by consensus, the fixer's step is
// routed by a rule and writes the fix.
type scenario struct {
	t      *testing.T
	c      *Crew
	store  *FactStore
	st     *HandoffState
	events []lctl.Event
	start  time.Time
}

func (s *scenario) add(p Payload, agent string, extra map[string]any) {
	s.t.Helper()
	e := NewEvent(p, agent)
	for k, v := range extra {
		e.Data[k] = v
	}
	s.record(e)
}

func (s *scenario) record(e lctl.Event) {
	s.t.Helper()
	e.ChainID = "security-review-001"
	e.Seq = uint64(len(s.events) + 1)
	e.Timestamp = lctl.FormatTime(s.start.Add(time.Duration(len(s.events)) * time.Second))
	prev := ""
	if len(s.events) > 0 {
		prev = s.events[len(s.events)-1].Hash
	}
	if err := e.Seal(prev); err != nil {
		s.t.Fatal(err)
	}
	s.events = append(s.events, e)
}

// step starts an agent's step on the routed model.
func (s *scenario) step(agent, kind, intent string, failures []ModelFailure) {
	s.t.Helper()
	r := s.c.Route(RouteRequest{Agent: agent, StepKind: kind, Failures: failures})
	if r.Signal != nil {
		s.t.Fatal(r.Signal)
	}
	if r.Event != nil {
		s.add(r.Event, "orchestrator", nil)
	}
	s.store.BeginStep(agent)
	s.add(s.c.Agent(agent).StepStartFor(intent, intent, r.Model), agent, nil)
}

func (s *scenario) end(agent string, ms float64) {
	s.record(lctl.Event{Type: lctl.TypeStepEnd, Agent: agent, Data: map[string]any{"outcome": "success", "duration_ms": ms,
		"tokens": map[string]any{"input": 500.0, "output": 200.0}}})
}

func (s *scenario) handoff(from, to, summary string) HandoffResult {
	s.t.Helper()
	res := s.c.Handoff(s.st, s.store, from, to, summary)
	for _, v := range res.Validations {
		s.add(v, "system", nil)
	}
	if res.Signal != nil {
		s.add(res.Signal, from, nil)
		return res
	}
	s.add(res.Handoff, from, nil)
	cp, err := NewCheckpoint("security-review-001", s.events)
	if err != nil {
		s.t.Fatal(err)
	}
	s.add(cp, "system", nil)
	return res
}

func playScenario(t *testing.T) *scenario {
	c := example(t)
	s := &scenario{t: t, c: c, store: NewFactStore(c), st: c.NewHandoffState(), start: time.Date(2026, 11, 25, 10, 30, 0, 0, time.UTC)}
	s.step("code-analyzer", KindStart, "analyze", []ModelFailure{{"openai:analyzer-large", "RATE_LIMITED"}})
	f1, sig := s.store.Add("code-analyzer", FactInput{ID: "F1", Text: "SQL query constructed from user input at line 45", Confidence: conf(0.85), Tags: []string{"critical"}})
	if sig != nil {
		t.Fatal(sig)
	}
	s.add(f1, "code-analyzer", nil)
	if res := s.handoff("code-analyzer", "security-reviewer", "Review F1 for exploitability"); res.Allowed {
		t.Fatal("a fact without a source passed the analyzer's contract")
	}
	fix, sig := s.store.Update("code-analyzer", FactInput{ID: "F1", Source: "static-analysis", Reason: "contract: add the source"})
	if sig != nil {
		t.Fatal(sig)
	}
	s.add(fix, "code-analyzer", nil)
	if res := s.handoff("code-analyzer", "security-reviewer", "Review F1 for exploitability"); !res.Allowed {
		t.Fatalf("repaired handoff refused: %v", res.Signal)
	}
	s.end("code-analyzer", 15000)

	s.step("security-reviewer", KindHandoff, "assess", nil)
	confirm, sig := s.store.Update("security-reviewer", FactInput{ID: "F1", Text: "CONFIRMED: SQL injection vulnerability", Confidence: conf(0.95),
		Reason: "verified_by_consensus", Fields: map[string]any{"severity": "high"}})
	if sig != nil || confirm.Consensus == nil {
		t.Fatalf("%v %+v", sig, confirm)
	}
	s.add(confirm, "security-reviewer", nil)
	if res := s.handoff("security-reviewer", "fix-implementer", "Fix F1"); !res.Allowed {
		t.Fatalf("handoff to the fixer refused: %v", res.Signal)
	}
	s.end("security-reviewer", 22500)

	s.step("fix-implementer", KindHandoff, "fix", nil)
	if g := c.Gate("fix-implementer", conf(0.9), []*Fact{s.store.Fact("F1")}); g.Action != GateProceed {
		t.Fatalf("gate %+v", g)
	}
	s.record(lctl.Event{Type: lctl.TypeToolCall, Agent: "executor", Data: map[string]any{"tool": "fs.write", "input": map[string]any{"path": "UserController.py"},
		"output": map[string]any{"bytes": 120.0}, "duration_ms": 40.0, "status": "success"}})
	s.end("fix-implementer", 7700)
	return s
}

func runLCTL(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, cli.Env{Stdout: &out, Stderr: &errOut})
	return code, out.String() + errOut.String()
}

// TestLCTLReadsCrewEvents: a chain made of the crew's events reads right
// in lctl: facts, confidence with decay and consensus, the query
// language, contracts (the crew file is the contracts file), handoffs and
// routing.
func TestLCTLReadsCrewEvents(t *testing.T) {
	s := playScenario(t)
	path := filepath.Join(t.TempDir(), "security-review-001.lctl.json")
	var buf bytes.Buffer
	if err := lctl.NewFile("security-review-001", s.events).Encode(&buf, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// verify recomputes the two checkpoints (state hash, facts snapshot).
	if code, out := runLCTL(t, "verify", path); code != 0 || !strings.Contains(out, "2 checkpoints; state hashes and fact snapshots match the replay") {
		t.Fatalf("verify: %d %s", code, out)
	}
	cp := s.events[indexOfType(s.events, lctl.TypeCheckpoint)]
	if snap := cp.Data["facts_snapshot"].(map[string]any)["F1"].(map[string]any); snap["confidence"] != 0.85 || !lctl.IsStateHash(cp.Data["state_hash"].(string)) {
		t.Fatalf("checkpoint %v", cp.Data)
	}

	// The reducer's state.
	state := lctl.Replay("security-review-001", s.events, 0)
	if strings.Join(state.Agents, ",") != "code-analyzer,security-reviewer,fix-implementer" {
		t.Fatalf("agents %v", state.Agents)
	}
	f1 := state.Facts["F1"]
	if f1 == nil || *f1.Confidence != 0.95 || f1.Source != "static-analysis" || len(f1.History) != 3 || f1.History[2].Reason != "verified_by_consensus" {
		t.Fatalf("F1 %+v", f1)
	}
	if len(state.ModelRoutings) != 2 || state.ModelRoutings[0].Decision != "route_to_analyzer_small" || state.ModelRoutings[0].Reason != "fallback_after_rate_limited" ||
		strings.Join(state.ModelRoutings[0].Alternatives, ",") != "openai:analyzer-large" || *state.ModelRoutings[0].Confidence != 0.75 ||
		state.ModelRoutings[1].Decision != "route_to_fixer_large" || state.ModelRoutings[1].Reason != "code_generation_task" {
		t.Fatalf("routings %+v", state.ModelRoutings)
	}
	var statuses []string
	for _, cv := range state.ContractValidations {
		statuses = append(statuses, cv.Contract+"/"+cv.Direction+"/"+cv.Status)
	}
	if got := strings.Join(statuses, " "); got != "code-analyzer/output/failed security-reviewer/input/passed code-analyzer/output/passed security-reviewer/input/passed security-reviewer/output/passed fix-implementer/input/passed" {
		t.Fatalf("contract validations %s", got)
	}
	if len(state.ContractValidations[0].Warnings) != 1 || !strings.Contains(state.ContractValidations[0].Warnings[0], "missing required field source") {
		t.Fatalf("warnings %v", state.ContractValidations[0].Warnings)
	}
	if state.EventTypes["handoff"] != 2 || state.EventTypes["error"] != 1 || len(state.Errors) != 1 || state.Errors[0].Code != CodeContractViolated ||
		state.Errors[0].Type != "validation_failed" || state.CurrentStep != nil {
		t.Fatalf("types %v errors %+v", state.EventTypes, state.Errors)
	}

	// lctl stats.
	var stats struct {
		Agents        []string       `json:"agents"`
		Facts         int            `json:"facts"`
		AvgConfidence *float64       `json:"avg_confidence"`
		Errors        int            `json:"errors"`
		EventTypes    map[string]int `json:"event_types"`
		Profiles      []struct {
			Agent, Type, Model string
			Reliability        *float64 `json:"reliability_score"`
		} `json:"agent_profiles"`
		DurationMS float64 `json:"duration_ms"`
	}
	decode(t, path, &stats, "stats", "--json")
	if len(stats.Agents) != 3 || stats.Facts != 1 || stats.AvgConfidence == nil || *stats.AvgConfidence != 0.95 || stats.Errors != 1 ||
		stats.EventTypes["model_routing"] != 2 || stats.EventTypes["contract_validation"] != 6 || stats.DurationMS != 45200 {
		t.Fatalf("stats %+v", stats)
	}
	if len(stats.Profiles) != 3 || stats.Profiles[0].Type != "analyzer" || stats.Profiles[0].Model != "openai:analyzer-small" ||
		stats.Profiles[1].Type != "reviewer" || *stats.Profiles[1].Reliability != 0.92 || stats.Profiles[2].Model != "openai:fixer-large" {
		t.Fatalf("profiles %+v", stats.Profiles)
	}

	// lctl confidence: the same decay and consensus as the store's.
	var cr struct {
		Hops  int `json:"hops"`
		Facts []struct {
			ID     string
			Final  *float64
			Band   string
			Labels []string
			Points []struct {
				Kind  string
				Value float64
			}
			Consensus *struct {
				Score, Conflict float64
				Agreement       *float64
				Assessors       []string
			}
		} `json:"facts"`
	}
	decode(t, path, &cr, "confidence", "--json", "--decay", "0.95")
	if cr.Hops != s.store.Hops() || len(cr.Facts) != 1 {
		t.Fatalf("confidence %+v", cr)
	}
	fc := cr.Facts[0]
	if !near(*fc.Final, s.store.Fact("F1").Confidence) || fc.Band != "proceed" {
		t.Fatalf("F1 final %v, the store says %v", *fc.Final, s.store.Fact("F1").Confidence)
	}
	var kinds []string
	for _, p := range fc.Points {
		kinds = append(kinds, p.Kind)
	}
	if strings.Join(kinds, ",") != "added,hop,modified,hop" || !near(fc.Points[1].Value, 0.85*0.95) {
		t.Fatalf("points %+v", fc.Points)
	}
	cb := s.events[indexOf(s.events, "verified_by_consensus")].Data["consensus"].(map[string]any)
	if fc.Consensus == nil || !near(round(fc.Consensus.Score), cb["consensus_score"].(float64)) || !near(fc.Consensus.Conflict, cb["conflict_level"].(float64)) ||
		*fc.Consensus.Agreement != cb["agreement"].(float64) || strings.Join(fc.Consensus.Assessors, ",") != "code-analyzer,security-reviewer" {
		t.Fatalf("consensus %+v, recorded %v", fc.Consensus, cb)
	}

	// lctl query: the same language the agents' suggested queries use.
	var q struct {
		Total int `json:"total"`
		Facts []struct {
			ID string `json:"id"`
		} `json:"facts"`
	}
	decode(t, path, &q, "query", "--json", "SELECT * WHERE severity IN ('high', 'critical') ORDER BY confidence DESC LIMIT 10")
	if q.Total != 1 || q.Facts[0].ID != "F1" {
		t.Fatalf("query %+v", q)
	}

	// lctl validate --contracts with the crew file: the one violation
	// that happened (F1 added without a source, then repaired) is found on
	// the chain, and the refused handoff's record is shown.
	var vr struct {
		OK         bool `json:"ok"`
		Violations int  `json:"violations"`
		Results    []struct {
			Agent, Direction string
			Violations       []struct {
				Seq     uint64
				Message string
			}
		} `json:"results"`
		Recorded []struct{ Contract, Status string } `json:"recorded"`
	}
	code := decodeCode(t, path, &vr, "validate", "--json", "--contracts", "../../examples/crews/security-review.yaml")
	if code != 1 || vr.OK || vr.Violations != 1 || len(vr.Results) != 4 || len(vr.Recorded) != 1 || vr.Recorded[0].Contract != "code-analyzer" {
		t.Fatalf("validate exit %d: %+v", code, vr)
	}
	for _, r := range vr.Results {
		if r.Agent == "code-analyzer" && (len(r.Violations) != 1 || r.Violations[0].Message != "missing required field source" || s.events[r.Violations[0].Seq-1].Type != "fact_added") {
			t.Fatalf("analyzer %+v", r)
		}
	}

	// lctl replay shows the crew's events for what they are.
	code, out := runLCTL(t, "replay", path)
	for _, want := range []string{
		"[1] orchestrator: model_routing route_to_analyzer_small (fallback_after_rate_limited, confidence: 0.75)",
		"code-analyzer: step_start (analyze, as analyzer: pattern_detection, static_analysis)",
		"system: contract_validation code-analyzer (output: failed, 1 warning)",
		"code-analyzer: error CONTRACT_VIOLATED (output_error/validation_failed",
		"security-reviewer: fact_modified F1 (confidence: 0.95, reason: verified_by_consensus, consensus: 2 assessors (code-analyzer, security-reviewer), agreement 0.90)",
		"[10] code-analyzer: handoff code-analyzer → security-reviewer (Review F1 for exploitability, fact F1, 2 suggested queries, depth 1)",
		"[17] security-reviewer: handoff security-reviewer → fix-implementer (Fix F1, fact F1, 1 suggested query, depth 2)",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("replay (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "unknown") {
		t.Fatalf("replay calls a crew event unknown:\n%s", out)
	}

	// lctl bottleneck: the three steps, the reviewer the slowest.
	code, out = runLCTL(t, "bottleneck", path)
	if code != 0 || !strings.Contains(out, "security-reviewer") || !strings.Contains(out, "22.5s") {
		t.Fatalf("bottleneck %d:\n%s", code, out)
	}
}

func indexOfType(events []lctl.Event, typ string) int {
	for i, e := range events {
		if e.Type == typ {
			return i
		}
	}
	return -1
}

func indexOf(events []lctl.Event, reason string) int {
	for i, e := range events {
		if e.Data["reason"] == reason {
			return i
		}
	}
	return -1
}

func decode(t *testing.T, path string, v any, args ...string) {
	t.Helper()
	if code := decodeCode(t, path, v, args...); code != 0 {
		t.Fatalf("lctl %v: exit %d", args, code)
	}
}

func decodeCode(t *testing.T, path string, v any, args ...string) int {
	t.Helper()
	code, out := runLCTL(t, append(args, path)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("lctl %v (exit %d): %v\n%s", args, code, err, out)
	}
	return code
}

// TestReplay: the store and the handoff state rebuilt from the chain are
// the ones the run had; a chain the rules would not have written is an
// error naming the event.
func TestReplay(t *testing.T) {
	s := playScenario(t)
	store, st, err := s.c.Replay(s.events)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != s.st.Current || st.Depth != s.st.Depth || strings.Join(st.Path, ",") != strings.Join(s.st.Path, ",") {
		t.Fatalf("state %+v, the run had %+v", st, s.st)
	}
	got, want := store.Fact("F1"), s.store.Fact("F1")
	if !near(got.Confidence, want.Confidence) || got.Text != want.Text || got.Fields["severity"] != "high" || got.Source != want.Source ||
		len(got.Assessments) != 2 || store.Hops() != s.store.Hops() || len(got.History) != len(want.History) {
		t.Fatalf("F1 %+v, the run had %+v", got, want)
	}
	bad := append([]lctl.Event{}, s.events...)
	i := indexOf(bad, "verified_by_consensus")
	e := bad[i]
	e.Data = map[string]any{"id": "F1", "confidence": 1.7, "reason": "edited"}
	bad[i] = e
	if _, _, err := s.c.Replay(bad); err == nil || !strings.Contains(err.Error(), "confidence 1.7 is not in [0, 1]") || !strings.Contains(err.Error(), "event ") {
		t.Fatalf("edited chain: %v", err)
	}
	skip := append(append([]lctl.Event{}, s.events[:3]...), lctl.Event{Seq: 4, Type: "handoff", Agent: "security-reviewer", Data: map[string]any{"from": "security-reviewer", "to": "fix-implementer"}})
	if _, _, err := s.c.Replay(skip); err == nil || !strings.Contains(err.Error(), "does not follow (in control: code-analyzer)") {
		t.Fatalf("handoff out of turn: %v", err)
	}
}
