package crew

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func example(t testing.TB) *Crew {
	t.Helper()
	c, err := LoadFile("../../examples/crews/security-review.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func conf(v float64) *float64 { return &v }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestFactStoreAddUpdate(t *testing.T) {
	c := example(t)
	s := NewFactStore(c)
	s.BeginStep("code-analyzer")
	added, sig := s.Add("code-analyzer", FactInput{ID: "F1", Text: "SQL query constructed from user input at line 45", Confidence: conf(0.85), Source: "static-analysis", Tags: []string{"sql"}})
	if sig != nil {
		t.Fatal(sig)
	}
	d := added.Data()
	if d["id"] != "F1" || d["confidence"] != 0.85 || d["source"] != "static-analysis" || d["tags"].([]any)[0] != "sql" || added.EventType() != "fact_added" {
		t.Fatalf("fact_added data %v", d)
	}
	bad := []struct {
		name string
		in   FactInput
		add  bool
		code string
		want string
	}{
		{"confidence 1.7", FactInput{ID: "F2", Text: "x", Confidence: conf(1.7)}, true, CodeInvalidFact, "confidence 1.7 is not in [0, 1]"},
		{"negative confidence", FactInput{ID: "F2", Text: "x", Confidence: conf(-0.1)}, true, CodeInvalidFact, "is not in [0, 1]"},
		{"NaN confidence", FactInput{ID: "F2", Text: "x", Confidence: conf(math.NaN())}, true, CodeInvalidFact, "is not in [0, 1]"},
		{"no confidence", FactInput{ID: "F2", Text: "x"}, true, CodeInvalidFact, "has no confidence"},
		{"no text", FactInput{ID: "F2", Confidence: conf(0.5)}, true, CodeInvalidFact, "has no text"},
		{"bad id", FactInput{ID: "F 2", Text: "x", Confidence: conf(0.5)}, true, CodeInvalidFact, "fact id"},
		{"exists", FactInput{ID: "F1", Text: "x", Confidence: conf(0.5)}, true, CodeInvalidFact, "fact F1 exists"},
		{"reserved field", FactInput{ID: "F2", Text: "x", Confidence: conf(0.5), Fields: map[string]any{"confidence": 1.0}}, true, CodeInvalidFact, "reserved"},
		{"object field", FactInput{ID: "F2", Text: "x", Confidence: conf(0.5), Fields: map[string]any{"where": map[string]any{}}}, true, CodeInvalidFact, "must be a string, number or boolean"},
		{"update unknown", FactInput{ID: "F9", Reason: "r", Confidence: conf(0.5)}, false, CodeUnknownFact, "no fact F9"},
		{"update without reason", FactInput{ID: "F1", Confidence: conf(0.5)}, false, CodeInvalidFact, "needs a reason"},
		{"update 1.7", FactInput{ID: "F1", Reason: "r", Confidence: conf(1.7)}, false, CodeInvalidFact, "confidence 1.7"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			var sig *Signal
			if tc.add {
				_, sig = s.Add("code-analyzer", tc.in)
			} else {
				_, sig = s.Update("code-analyzer", tc.in)
			}
			if sig == nil || sig.Code != tc.code || !strings.Contains(sig.Message, tc.want) || sig.Category != "input_error" || !sig.Recoverable {
				t.Fatalf("signal %+v, want %s %q", sig, tc.code, tc.want)
			}
		})
	}
	if len(s.Facts()) != 1 || s.Fact("F1").Confidence != 0.85 || len(s.Fact("F1").History) != 1 {
		t.Fatalf("refused inputs changed the store: %+v", s.Fact("F1"))
	}
}

// TestFactStoreDecayAndConsensus follows the spec's scenario: F1 at 0.85,
// one hop (decay 0.95), the reviewer confirms at 0.95: a consensus of two
// assessors weighted by reliability.
func TestFactStoreDecayAndConsensus(t *testing.T) {
	c := example(t)
	s := NewFactStore(c)
	if s.BeginStep("code-analyzer") {
		t.Fatal("the first step is no hop")
	}
	if _, sig := s.Add("code-analyzer", FactInput{ID: "F1", Text: "SQL injection at line 45", Confidence: conf(0.85), Source: "static-analysis"}); sig != nil {
		t.Fatal(sig)
	}
	if s.BeginStep("code-analyzer") {
		t.Fatal("the same agent again is no hop")
	}
	if !s.BeginStep("security-reviewer") || s.Hops() != 1 {
		t.Fatal("another agent is a hop")
	}
	if f := s.Fact("F1"); !near(f.Confidence, 0.85*0.95) || f.History[1].Kind != ChangeHop {
		t.Fatalf("decayed %v", f.Confidence)
	}
	mod, sig := s.Update("security-reviewer", FactInput{ID: "F1", Text: "CONFIRMED: SQL injection vulnerability", Confidence: conf(0.95), Reason: "verified_by_consensus", Fields: map[string]any{"severity": "high"}})
	if sig != nil {
		t.Fatal(sig)
	}
	cb := mod.Consensus
	wantScore := (0.85*0.85 + 0.95*0.92) / (0.85 + 0.92)
	if cb == nil || strings.Join(cb.Assessors, ",") != "code-analyzer,security-reviewer" || !near(cb.ConsensusScore, round(wantScore)) ||
		!near(cb.ConflictLevel, 0.1) || !near(cb.Agreement, 0.9) {
		t.Fatalf("consensus %+v (score want %v)", cb, wantScore)
	}
	d := mod.Data()
	if d["reason"] != "verified_by_consensus" || d["severity"] != "high" || d["confidence"] != 0.95 || d["consensus"].(map[string]any)["agreement"] != 0.9 {
		t.Fatalf("fact_modified data %v", d)
	}
	// A fact below the verify threshold stops decaying.
	if _, sig := s.Add("security-reviewer", FactInput{ID: "F2", Text: "maybe XSS", Confidence: conf(0.41)}); sig != nil {
		t.Fatal(sig)
	}
	s.BeginStep("fix-implementer")
	f2 := s.Fact("F2")
	if !f2.Blocked || !near(f2.Confidence, 0.41*0.95) {
		t.Fatalf("F2 %+v", f2)
	}
	s.BeginStep("security-reviewer")
	if !near(f2.Confidence, 0.41*0.95) {
		t.Fatalf("a blocked fact decayed: %v", f2.Confidence)
	}
}

func TestFactStoreQuery(t *testing.T) {
	c := example(t)
	s := NewFactStore(c)
	s.BeginStep("code-analyzer")
	for _, in := range []FactInput{
		{ID: "F1", Text: "SQL query constructed from user input", Confidence: conf(0.85), Source: "static-analysis", Tags: []string{"critical"}},
		{ID: "F2", Text: "Logging of passwords", Confidence: conf(0.62), Source: "static-analysis"},
		{ID: "F3", Text: "Unused import", Confidence: conf(0.9), Source: "lint"},
	} {
		if _, sig := s.Add("code-analyzer", in); sig != nil {
			t.Fatal(sig)
		}
	}
	ids := func(fs []*Fact) string {
		var out []string
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return strings.Join(out, ",")
	}
	for q, want := range map[string]string{
		"SELECT * WHERE confidence >= 0.8":                                    "F1,F3",
		"SELECT * WHERE source = 'static-analysis' ORDER BY confidence DESC":  "F1,F2",
		"SELECT * WHERE tag = 'critical'":                                     "F1",
		"SELECT * FROM facts WHERE relevance('SQL injection') > 0.4 LIMIT 10": "F1",
		"SELECT * WHERE added_by = 'code-analyzer' LIMIT 2":                   "F1,F2",
	} {
		got, sig := s.Query(q)
		if sig != nil || ids(got) != want {
			t.Errorf("%s: %s %v, want %s", q, ids(got), sig, want)
		}
	}
	// After a hop the query sees decayed confidence: F1 0.85 → 0.8075.
	s.BeginStep("security-reviewer")
	if got, _ := s.Query("SELECT * WHERE confidence >= 0.85"); ids(got) != "F3" {
		t.Fatalf("after the hop: %s", ids(got))
	}
	for _, q := range []string{"SELECT * WHERE confidence >= 'high'", "DELETE FROM facts", "SELECT * WHERE severty = 'high'"} {
		if _, sig := s.Query(q); sig == nil || sig.Code != CodeInvalidQuery {
			t.Errorf("%s: %v, want INVALID_QUERY", q, sig)
		}
	}
	ctx, sig := s.ContextFor(c.Agent("security-reviewer"))
	if sig != nil || ids(ctx) != "F1,F2" {
		t.Fatalf("context %s %v", ids(ctx), sig)
	}
}

func TestGate(t *testing.T) {
	c := example(t)
	fact := func(v float64) *Fact { return &Fact{ID: "F1", Confidence: v} }
	tests := []struct {
		name     string
		agent    string
		proposal *float64
		facts    []*Fact
		action   string
		subject  string
		verifier string
	}{
		{"nothing to apply", "code-analyzer", nil, nil, GateProceed, "", ""},
		{"0.85 proceeds", "code-analyzer", conf(0.85), nil, GateProceed, "proposal", ""},
		{"exactly 0.80 proceeds", "code-analyzer", conf(0.80), nil, GateProceed, "proposal", ""},
		{"0.79 warns", "code-analyzer", conf(0.79), nil, GateWarn, "proposal", ""},
		{"exactly 0.60 warns", "code-analyzer", conf(0.60), nil, GateWarn, "proposal", ""},
		{"0.59 asks a reviewer", "code-analyzer", conf(0.59), nil, GateVerify, "proposal", "security-reviewer"},
		{"exactly 0.40 verifies, a human when no reviewer is reachable", "fix-implementer", conf(0.40), nil, GateVerify, "proposal", ""},
		{"0.39 blocks", "code-analyzer", conf(0.39), nil, GateBlock, "proposal", ""},
		{"the weakest fact decides", "code-analyzer", conf(0.95), []*Fact{fact(0.9), {ID: "F2", Confidence: 0.5}}, GateVerify, "fact F2", "security-reviewer"},
		{"a fact alone", "code-analyzer", nil, []*Fact{fact(0.3)}, GateBlock, "fact F1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := c.Gate(tc.agent, tc.proposal, tc.facts)
			if d.Action != tc.action || d.Subject != tc.subject || d.Verifier != tc.verifier || d.RuleID != "confidence."+tc.action || d.Reason == "" {
				t.Fatalf("%+v", d)
			}
		})
	}
}

func TestCheckTool(t *testing.T) {
	c := example(t)
	if sig := c.CheckTool("fix-implementer", "fs.write"); sig != nil {
		t.Fatal(sig)
	}
	if sig := c.CheckTool("code-analyzer", "fs.write"); sig == nil || sig.Code != CodeToolNotAllowed || !strings.Contains(sig.Message, "its tools: fs.read") {
		t.Fatalf("%v", sig)
	}
	if sig := c.CheckTool("fix-implementer", ToolHandoff); sig == nil || sig.Code != CodeToolNotAllowed {
		t.Fatalf("%v", sig)
	}
	if sig := c.CheckTool("mallory", "fs.read"); sig == nil || sig.Code != CodeUnknownAgent {
		t.Fatalf("%v", sig)
	}
}

func cyclic(t testing.TB, maxVisits, maxDepth int) *Crew {
	t.Helper()
	src := strings.Replace(base, "tools: [facts.update]", "tools: [facts.update, xct.handoff]\n    hands_to: [a]", 1) +
		"handoffs: {cycles: allow, max_visits: " + itoa(maxVisits) + ", max_depth: " + itoa(maxDepth) + "}\n"
	c, err := load(t, src)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestCheckHandoff(t *testing.T) {
	c := example(t)
	st := c.NewHandoffState()
	refusals := []struct {
		name, from, to, code, typ string
	}{
		{"not in control", "security-reviewer", "fix-implementer", CodeNotInControl, "delegation_rejected"},
		{"no such agent", "code-analyzer", "mallory", CodeUnknownAgent, "routing_failed"},
		{"edge not allowed", "code-analyzer", "fix-implementer", CodeHandoffNotAllowed, "delegation_rejected"},
	}
	for _, tc := range refusals {
		sig := c.CheckHandoff(st, tc.from, tc.to)
		if sig == nil || sig.Code != tc.code || sig.Type != tc.typ || sig.Category != "orchestration_error" {
			t.Errorf("%s: %+v", tc.name, sig)
		}
	}
	if sig := c.CheckHandoff(st, "code-analyzer", "security-reviewer"); sig != nil {
		t.Fatal(sig)
	}

	// Cycles allowed: each agent receives control at most max_visits times.
	cy := cyclic(t, 2, 9)
	st = cy.NewHandoffState()
	for _, to := range []string{"b", "a", "b"} {
		if sig := cy.CheckHandoff(st, st.Current, to); sig != nil {
			t.Fatalf("to %s: %v", to, sig)
		}
		st.Accept(to)
	}
	sig := cy.CheckHandoff(st, "b", "a")
	if sig == nil || sig.Code != CodeCycleDetected || sig.Type != "cycle_detected" || !strings.Contains(sig.Message, "a -> b -> a -> b -> a") {
		t.Fatalf("cycle: %+v", sig)
	}
	// Depth: max_depth handoffs, then chain_depth_exceeded.
	deep := cyclic(t, 9, 2)
	st = deep.NewHandoffState()
	for _, to := range []string{"b", "a"} {
		st.Accept(to)
	}
	sig = deep.CheckHandoff(st, "a", "b")
	if sig == nil || sig.Code != CodeChainDepthExceeded || sig.Type != "chain_depth_exceeded" {
		t.Fatalf("depth: %+v", sig)
	}
	if d := sig.Data(); d["category"] != "orchestration_error" || d["type"] != "chain_depth_exceeded" || d["code"] != CodeChainDepthExceeded || d["recoverable"] != true {
		t.Fatalf("error data %v", d)
	}
}

// TestHandoffContracts: the producer's outputs and the receiver's inputs
// are checked with the contracts at the handoff; a violation refuses it.
func TestHandoffContracts(t *testing.T) {
	c := example(t)
	s := NewFactStore(c)
	st := c.NewHandoffState()
	s.BeginStep("code-analyzer")

	// Nothing produced yet: the analyzer's output contract is not met.
	res := c.Handoff(st, s, "code-analyzer", "security-reviewer", "F1 needs review")
	if res.Allowed || res.Signal == nil || res.Signal.Code != CodeContractViolated || len(res.Validations) != 2 ||
		res.Validations[0].Passed() || !strings.Contains(res.Validations[0].Warnings[0], "no fact produced in this turn") {
		t.Fatalf("empty handoff: %+v", res)
	}
	// A fact without a source breaks required_fields.
	if _, sig := s.Add("code-analyzer", FactInput{ID: "F1", Text: "SQL query constructed from user input at line 45", Confidence: conf(0.85)}); sig != nil {
		t.Fatal(sig)
	}
	res = c.Handoff(st, s, "code-analyzer", "security-reviewer", "F1 needs review")
	v := res.Validations[0]
	if res.Allowed || v.Status != StatusFailed || v.Contract != "code-analyzer" || v.Direction != "output" || len(v.Violations) != 1 ||
		v.Violations[0].Message != "missing required field source" || !strings.HasSuffix(v.Violations[0].Rule, "security-review.yaml:56") {
		t.Fatalf("missing source: %+v", res)
	}
	if d := v.Data(); d["status"] != "failed" || d["direction"] != "output" || len(d["warnings"].([]any)) != 1 {
		t.Fatalf("contract_validation data %v", d)
	}
	if st.Depth != 0 || st.Current != "code-analyzer" {
		t.Fatalf("a refused handoff moved the state: %+v", st)
	}
	// Repaired: the handoff passes, both directions checked.
	if _, sig := s.Update("code-analyzer", FactInput{ID: "F1", Source: "static-analysis", Reason: "add the source"}); sig != nil {
		t.Fatal(sig)
	}
	res = c.Handoff(st, s, "code-analyzer", "security-reviewer", "F1 needs review")
	if !res.Allowed || res.Signal != nil || len(res.Validations) != 2 || !res.Validations[0].Passed() || !res.Validations[1].Passed() ||
		res.Validations[1].Direction != "input" || res.Validations[1].Contract != "security-reviewer" {
		t.Fatalf("repaired: %+v", res)
	}
	h := res.Handoff
	if h.From != "code-analyzer" || h.To != "security-reviewer" || h.Depth != 1 || strings.Join(h.Facts, ",") != "F1" || len(h.SuggestedQueries) != 2 {
		t.Fatalf("handoff %+v", h)
	}
	if d := h.Data(); d["to"] != "security-reviewer" || d["depth"] != 1.0 || d["facts"].([]any)[0] != "F1" || h.EventType() != "handoff" {
		t.Fatalf("handoff data %v", d)
	}
	if st.Current != "security-reviewer" || st.Depth != 1 {
		t.Fatalf("state %+v", st)
	}
	if s.Current() != "code-analyzer" {
		t.Fatal("Handoff changed the store: the receiver's step_start is the hop")
	}

	// The reviewer rates it low: its output contract holds (low is a
	// severity), but the fixer's input takes only high or critical.
	s.BeginStep("security-reviewer")
	if _, sig := s.Update("security-reviewer", FactInput{ID: "F1", Confidence: conf(0.9), Reason: "reviewed", Fields: map[string]any{"severity": "low"}}); sig != nil {
		t.Fatal(sig)
	}
	res = c.Handoff(st, s, "security-reviewer", "fix-implementer", "fix F1")
	if res.Allowed || len(res.Validations) != 2 || !res.Validations[0].Passed() || res.Validations[1].Passed() ||
		!strings.Contains(res.Validations[1].Warnings[0], "severity \"low\" is not one of high, critical") {
		t.Fatalf("input contract: %+v", res.Validations)
	}
	if res.Signal.Details["direction"] != "input" {
		t.Fatalf("signal %+v", res.Signal)
	}
	// A reviewer that promises an unknown severity breaks its own output.
	if _, sig := s.Update("security-reviewer", FactInput{ID: "F1", Reason: "reviewed", Fields: map[string]any{"severity": "urgent"}}); sig != nil {
		t.Fatal(sig)
	}
	res = c.Handoff(st, s, "security-reviewer", "fix-implementer", "fix F1")
	if res.Allowed || res.Validations[0].Passed() || len(res.Validations) != 2 || res.Validations[0].Violations[0].Subject != "fact F1" {
		t.Fatalf("output severity: %+v", res.Validations)
	}
	if _, sig := s.Update("security-reviewer", FactInput{ID: "F1", Reason: "reviewed", Fields: map[string]any{"severity": "high"}}); sig != nil {
		t.Fatal(sig)
	}
	res = c.Handoff(st, s, "security-reviewer", "fix-implementer", "fix F1")
	if !res.Allowed || len(res.Context) != 1 || res.Context[0].ID != "F1" {
		t.Fatalf("high: %+v", res)
	}
}

func TestRoute(t *testing.T) {
	c := example(t)
	tests := []struct {
		name     string
		req      RouteRequest
		model    string
		event    bool
		decision string
		reason   string
		alts     string
		conf     float64
		code     string
	}{
		{"primary by default", RouteRequest{Agent: "code-analyzer", StepKind: KindStart}, "openai:analyzer-large", false, "", "", "", 0, ""},
		{"fallback after a rate limit", RouteRequest{Agent: "code-analyzer", Failures: []ModelFailure{{"openai:analyzer-large", "RATE_LIMITED"}}},
			"openai:analyzer-small", true, "route_to_analyzer_small", "fallback_after_rate_limited", "openai:analyzer-large", 0.75, ""},
		{"a rule by agent type and step kind", RouteRequest{Agent: "fix-implementer", StepKind: KindHandoff},
			"openai:fixer-large", true, "route_to_fixer_large", "code_generation_task", "openai:fixer-small", 0.85, ""},
		{"a rule by cost", RouteRequest{Agent: "security-reviewer", StepKind: KindRetry},
			"openai:reviewer-small", true, "route_to_reviewer_small", "retry_on_the_cheapest_model", "", 0.8, ""},
		{"a rule and a failure", RouteRequest{Agent: "fix-implementer", StepKind: KindHandoff, Failures: []ModelFailure{{"openai:fixer-large", "TIMEOUT"}}},
			"openai:fixer-small", true, "route_to_fixer_small", "code_generation_task; fallback_after_timeout", "openai:fixer-large", 0.75, ""},
		{"every model failed", RouteRequest{Agent: "code-analyzer", Failures: []ModelFailure{{"openai:analyzer-large", "RATE_LIMITED"}, {"openai:analyzer-small", "GENERATION_FAILED"}}},
			"", false, "", "", "", 0, CodeNoModel},
		{"a failure not routed around", RouteRequest{Agent: "code-analyzer", Failures: []ModelFailure{{"openai:analyzer-large", "POLICY_DENIED"}}},
			"", false, "", "", "", 0, CodeNoModel},
		{"unknown agent", RouteRequest{Agent: "mallory"}, "", false, "", "", "", 0, CodeUnknownAgent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Route(tc.req)
			if tc.code != "" {
				if r.Signal == nil || r.Signal.Code != tc.code || r.Model != "" {
					t.Fatalf("%+v, want signal %s", r, tc.code)
				}
				return
			}
			if r.Signal != nil || r.Model != tc.model || (r.Event != nil) != tc.event {
				t.Fatalf("%+v %+v", r, r.Event)
			}
			if !tc.event {
				return
			}
			e := r.Event
			if e.Decision != tc.decision || e.Reason != tc.reason || strings.Join(e.AlternativesConsidered, ",") != tc.alts || !near(e.Confidence, tc.conf) || e.Model != tc.model {
				t.Fatalf("event %+v", e)
			}
			d := e.Data()
			if d["decision"] != tc.decision || d["confidence"] != tc.conf || e.EventType() != "model_routing" {
				t.Fatalf("data %v", d)
			}
		})
	}
}
