package crew

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
)

// loop drives a Session exactly as the orchestrator's loop is to (the
// order of docs/crews.md, "The loop"), with a scripted crew: every event
// it appends is sealed onto a chain and observed, and nothing else
// changes the session.
type loop struct {
	t      testing.TB
	sess   *Session
	events []lctl.Event
	start  time.Time
	step   int
	// plans are the plans the live session gave, by step, to compare a
	// resumed session's with.
	snapshots []snapshot
}

// snapshot is what the live session answered after the events up to seq.
type snapshot struct {
	seq  int
	plan string
}

const chainID = "crew-run-1"

func newLoop(t testing.TB, c *Crew, every int) *loop {
	t.Helper()
	sess, err := NewSession(c, chainID, nil, SessionOptions{CheckpointEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	return &loop{t: t, sess: sess, start: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)}
}

// record appends one event (sealed, as the chain writer does) and
// observes it.
func (l *loop) record(agent string, ev interface {
	Type() string
	Data() map[string]any
}) {
	l.t.Helper()
	e := lctl.Event{ChainID: chainID, Seq: uint64(len(l.events) + 1), Type: ev.Type(), Agent: agent, Data: ev.Data(),
		Timestamp: lctl.FormatTime(l.start.Add(time.Duration(len(l.events)) * 500 * time.Millisecond))}
	prev := ""
	if len(l.events) > 0 {
		prev = l.events[len(l.events)-1].Hash
	}
	// Through JSON, as the chain stores it.
	raw, err := json.Marshal(e.Data)
	if err != nil {
		l.t.Fatal(err)
	}
	e.Data = nil
	if err := json.Unmarshal(raw, &e.Data); err != nil {
		l.t.Fatal(err)
	}
	if err := e.Seal(prev); err != nil {
		l.t.Fatal(err)
	}
	l.events = append(l.events, e)
	if err := l.sess.Observe(&l.events[len(l.events)-1]); err != nil {
		l.t.Fatal(err)
	}
}

type raw struct {
	typ  string
	data map[string]any
}

func (r raw) Type() string         { return r.typ }
func (r raw) Data() map[string]any { return r.data }

func planString(p Plan) string {
	s := fmt.Sprintf("agent=%s kind=%s model=%s", p.Agent.Name, p.Kind, p.Model)
	if p.Routing != nil {
		s += fmt.Sprintf(" routing=%v", p.Routing.Data())
	}
	if p.Signal != nil {
		s += " signal=" + p.Signal.Code
	}
	for _, f := range p.Context {
		s += fmt.Sprintf(" ctx=%s@%.4f", f.ID, f.Confidence)
	}
	return s + "\n" + p.Brief
}

// proposal is one scripted step: the model failures before it answers,
// then the tool it proposes.
type proposal struct {
	fail []string // failure codes of the models tried first
	tool string
	args map[string]any
	goal string
	conf *float64
	// want is the step's outcome: a signal code, or "" for success.
	want string
}

// play runs one step and returns the system tool's outcome (zero for a
// catalog tool).
func (l *loop) play(p proposal) Outcome {
	l.t.Helper()
	l.step++
	plan := l.sess.Plan()
	l.snapshots = append(l.snapshots, snapshot{len(l.events), planString(plan)})
	for _, code := range p.fail {
		if plan.Routing != nil {
			l.record(plan.Routing.Agent, plan.Routing)
		}
		plan = l.sess.Fallback(plan.Model, code)
		if plan.Signal != nil {
			l.t.Fatalf("step %d: no model after %s: %v", l.step, code, plan.Signal)
		}
	}
	if plan.Routing != nil {
		l.record(plan.Routing.Agent, plan.Routing)
	}
	if again := l.sess.Plan(); again.Routing != nil || again.Model != plan.Model {
		l.t.Fatalf("step %d: the routing on the chain is not recognized: %s", l.step, planString(again))
	}
	agent := plan.Agent.Name
	stepID := fmt.Sprintf("s%d", l.step)
	ss := map[string]any{"step": l.step, "step_id": stepID, "intent": p.goal, "input_summary": p.tool, "tool": p.tool, "arguments": p.args, "model": plan.Model}
	if p.conf != nil {
		ss["confidence"] = *p.conf
	}
	l.record(agent, Merge(raw{lctl.TypeStepStart, ss}, l.sess.StepStartFields(plan.Model)))
	cc := l.sess.CrewContext(p.tool, p.args, p.goal)
	if cc.GetAgent() != agent {
		l.t.Fatalf("crew context for %s: %v", agent, cc)
	}
	l.record("validator", raw{lctl.TypeVerdict, map[string]any{"step": l.step, "step_id": stepID, "tool": p.tool, "decision": "allow"}})
	var out Outcome
	if IsSystemTool(p.tool) {
		out = l.sess.Carry(agent, p.tool, p.args)
		for _, e := range out.Events {
			l.record(e.Agent, e)
		}
	}
	if out.Signal != nil {
		l.record(agent, Emit{Agent: agent, Payload: out.Signal})
		l.record(agent, raw{lctl.TypeStepEnd, map[string]any{"step": l.step, "step_id": stepID, "outcome": "error", "duration_ms": 1000.0}})
	} else {
		l.record("executor", raw{lctl.TypeToolCall, map[string]any{"step": l.step, "step_id": stepID, "tool": p.tool, "input": p.args, "output": out.Result, "duration_ms": 10.0, "status": "success"}})
		l.record(agent, raw{lctl.TypeStepEnd, map[string]any{"step": l.step, "step_id": stepID, "outcome": "success", "duration_ms": 1000.0 * float64(l.step),
			"tokens": map[string]any{"input": 100.0, "output": 20.0}}})
	}
	got := ""
	if out.Signal != nil {
		got = out.Signal.Code
	}
	if got != p.want {
		l.t.Fatalf("step %d (%s by %s): outcome %q, want %q (%v)", l.step, p.tool, agent, got, p.want, out.Signal)
	}
	cp, err := l.sess.Checkpoint()
	if err != nil {
		l.t.Fatal(err)
	}
	if cp != nil {
		l.record(cp.Agent, cp)
	}
	return out
}

// playSecurityReview plays the spec's scenario through a Session: a rate
// limit falls back to the analyzer's small model, a handoff refused by the
// analyzer's contract is repaired, the reviewer confirms by consensus, the
// fixer's step is routed by a rule and writes the fix.
func playSecurityReview(t testing.TB) *loop {
	l := newLoop(t, example(t), 0)
	l.play(proposal{fail: []string{"RATE_LIMITED"}, tool: ToolFactsAdd, goal: "record the injection",
		args: map[string]any{"id": "F1", "text": "SQL query constructed from user input at line 45", "confidence": 0.85, "tags": []any{"critical"}}})
	out := l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "security-reviewer", "summary": "Review F1 for exploitability"}, want: CodeContractViolated})
	if len(out.Events) != 2 || out.Events[0].Type() != lctl.TypeContractValidation {
		t.Fatalf("refused handoff events %+v", out.Events)
	}
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "F1", "source": "static-analysis", "reason": "contract: add the source"}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "security-reviewer", "summary": "Review F1 for exploitability"}})
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "F1", "text": "CONFIRMED: SQL injection vulnerability", "confidence": 0.95,
		"reason": "verified_by_consensus", "fields": map[string]any{"severity": "high"}}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "fix-implementer", "summary": "Fix F1"}})
	l.play(proposal{tool: "fs.write", args: map[string]any{"path": "UserController.py", "content": "parameterized query"}, goal: "fix F1.", conf: conf(0.9)})
	return l
}

func writeChain(t *testing.T, events []lctl.Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), chainID+".lctl.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.NewFile(chainID, events).Encode(f, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSessionPlaysTheScenario: the loop's calls, in order, give a chain
// that lctl verify, stats, confidence, query, validate --contracts and
// bottleneck read as the spec's scenario.
func TestSessionPlaysTheScenario(t *testing.T) {
	l := playSecurityReview(t)
	var types []string
	for _, e := range l.events {
		types = append(types, e.Agent+":"+e.Type)
	}
	got := strings.Join(types, " ")
	for _, want := range []string{
		// Step 1: the rate limit's routing, then the fact.
		"orchestrator:model_routing code-analyzer:step_start validator:verdict code-analyzer:fact_added executor:tool_call code-analyzer:step_end",
		// Step 2: the refused handoff: both validations, the signal.
		"system:contract_validation system:contract_validation code-analyzer:error code-analyzer:step_end",
		// Step 4: the handoff, then its checkpoint after the step_end.
		"system:contract_validation system:contract_validation code-analyzer:handoff executor:tool_call code-analyzer:step_end system:checkpoint",
		// Step 7: the fixer's routing rule before its step.
		"orchestrator:model_routing fix-implementer:step_start",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("chain lacks %q:\n%s", want, got)
		}
	}
	path := writeChain(t, l.events)
	if code, out := runLCTL(t, "verify", path); code != 0 || !strings.Contains(out, "2 checkpoints; state hashes and fact snapshots match the replay") {
		t.Fatalf("verify: %d %s", code, out)
	}
	var stats struct {
		Agents        []string       `json:"agents"`
		Facts         int            `json:"facts"`
		AvgConfidence *float64       `json:"avg_confidence"`
		Errors        int            `json:"errors"`
		EventTypes    map[string]int `json:"event_types"`
		Profiles      []struct {
			Agent, Type, Model string
		} `json:"agent_profiles"`
	}
	decode(t, path, &stats, "stats", "--json")
	// Three routings: the rate limit's fallback, the retry after the
	// refused handoff (cheapest model), the fixer's code-generation rule.
	if strings.Join(stats.Agents, ",") != "code-analyzer,security-reviewer,fix-implementer" ||
		stats.Facts != 1 || stats.AvgConfidence == nil || *stats.AvgConfidence != 0.95 || stats.Errors != 1 ||
		stats.EventTypes["model_routing"] != 3 || stats.EventTypes["contract_validation"] != 6 || stats.EventTypes["checkpoint"] != 2 {
		t.Fatalf("stats %+v", stats)
	}
	first := l.events[indexOfType(l.events, lctl.TypeStepStart)].Data["agent_profile"].(map[string]any)
	if first["model"] != "openai:analyzer-small" || first["type"] != "analyzer" {
		t.Fatalf("first step's profile %v", first)
	}
	if len(stats.Profiles) != 3 || stats.Profiles[0].Type != "analyzer" || stats.Profiles[2].Model != "openai:fixer-large" || stats.Profiles[1].Type != "reviewer" {
		t.Fatalf("profiles %+v", stats.Profiles)
	}
	var cr struct {
		Hops  int `json:"hops"`
		Facts []struct {
			ID        string
			Final     *float64
			Consensus *struct{ Assessors []string }
		} `json:"facts"`
	}
	decode(t, path, &cr, "confidence", "--json", "--decay", "0.95")
	if cr.Hops != l.sess.Facts().Hops() || len(cr.Facts) != 1 || !near(*cr.Facts[0].Final, l.sess.Facts().Fact("F1").Confidence) ||
		cr.Facts[0].Consensus == nil || len(cr.Facts[0].Consensus.Assessors) != 2 {
		t.Fatalf("confidence %+v (store: hops %d, F1 %v)", cr, l.sess.Facts().Hops(), l.sess.Facts().Fact("F1").Confidence)
	}
	var q struct {
		Total int `json:"total"`
	}
	decode(t, path, &q, "query", "--json", "SELECT * WHERE severity IN ('high', 'critical')")
	if q.Total != 1 {
		t.Fatalf("query %+v", q)
	}
	var vr struct {
		Violations int                                 `json:"violations"`
		Recorded   []struct{ Contract, Status string } `json:"recorded"`
	}
	if code := decodeCode(t, path, &vr, "validate", "--json", "--contracts", "../../examples/crews/security-review.yaml"); code != 1 || vr.Violations != 1 ||
		len(vr.Recorded) != 1 || vr.Recorded[0].Contract != "code-analyzer" {
		t.Fatalf("validate --contracts exit %d %+v", code, vr)
	}
	if code, out := runLCTL(t, "bottleneck", path); code != 0 || !strings.Contains(out, "fix-implementer") {
		t.Fatalf("bottleneck %d:\n%s", code, out)
	}
}

// TestSessionResumes: a session rebuilt from any prefix of the chain
// answers exactly as the live one did at that point (a run resumed by
// another orchestrator goes on in the same state), and its checkpoint is
// the one NewCheckpoint computes from the whole chain.
func TestSessionResumes(t *testing.T) {
	l := playSecurityReview(t)
	for _, snap := range l.snapshots {
		sess, err := NewSession(l.sess.crew, chainID, l.events[:snap.seq], SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := planString(sess.Plan()); got != snap.plan {
			t.Fatalf("after %d events the rebuilt session plans\n%s\nthe live one planned\n%s", snap.seq, got, snap.plan)
		}
	}
	// Resumed between a model_routing and the step it serves: the routing
	// is on the chain already and is not asked for again.
	i := indexOfType(l.events, lctl.TypeModelRouting)
	sess, err := NewSession(l.sess.crew, chainID, l.events[:i+1], SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := sess.Plan(); p.Routing != nil || p.Model != "openai:analyzer-small" {
		t.Fatalf("resumed after the routing: %s", planString(p))
	}
	// The live store and the rebuilt one agree.
	full, err := NewSession(l.sess.crew, chainID, l.events, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(full.Facts().Fact("F1"), l.sess.Facts().Fact("F1")) || !reflect.DeepEqual(full.Handoffs(), l.sess.Handoffs()) {
		t.Fatal("the rebuilt session differs from the live one")
	}
	// A chain read as a stream with its data as fields (no Data map).
	var buf bytes.Buffer
	if err := lctl.NewFile(chainID, l.events).Encode(&buf, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	var streamed []lctl.Event
	if err := lctl.Stream(&buf, lctl.StreamOptions{Fields: true}, func(*lctl.StreamHeader) error { return nil }, func(e *lctl.StreamEvent) error {
		if e.Data != nil {
			return fmt.Errorf("event %d has a Data map", e.Seq)
		}
		streamed = append(streamed, e.Event)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fromStream, err := NewSession(l.sess.crew, chainID, streamed, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if planString(fromStream.Plan()) != planString(l.sess.Plan()) || !reflect.DeepEqual(fromStream.Facts().Fact("F1"), l.sess.Facts().Fact("F1")) {
		t.Fatal("a session from the streamed chain differs from the live one")
	}
	// Checkpoints: every N events as well.
	every := newLoop(t, example(t), 5)
	every.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "t", "confidence": 0.9, "source": "s"}})
	cps := 0
	for j, e := range every.events {
		if e.Type == lctl.TypeCheckpoint {
			cps++
			want, err := NewCheckpoint(chainID, every.events[:j])
			if err != nil || !reflect.DeepEqual(e.Data, jsonValue(want.Data())) {
				t.Fatalf("checkpoint %v, NewCheckpoint %v (%v)", e.Data, want.Data(), err)
			}
		}
	}
	if cps != 1 {
		t.Fatalf("%d checkpoints after 6 events with CheckpointEvery 5", cps)
	}
	// An event out of order is refused.
	if err := every.sess.Observe(&every.events[0]); err == nil || !strings.Contains(err.Error(), "observed after event") {
		t.Fatalf("old event observed: %v", err)
	}
	if _, err := NewSession(example(t), chainID, nil, SessionOptions{CheckpointEvery: -1}); err == nil {
		t.Fatal("negative CheckpointEvery accepted")
	}
}

// TestSessionStepKindsAndRouting: the step kinds the routing rules see,
// the fallbacks and their end.
func TestSessionStepKindsAndRouting(t *testing.T) {
	l := newLoop(t, example(t), 0)
	p := l.sess.Plan()
	if p.Kind != KindStart || p.Model != "openai:analyzer-large" || p.Routing != nil || p.Agent.Name != "code-analyzer" {
		t.Fatalf("first plan %s", planString(p))
	}
	fb := l.sess.Fallback("openai:analyzer-large", "TIMEOUT")
	if fb.Model != "openai:analyzer-small" || fb.Routing == nil || fb.Routing.Data()["failure_code"] != "TIMEOUT" || fb.Routing.Agent != AgentOrchestrator {
		t.Fatalf("fallback %s", planString(fb))
	}
	l.record(fb.Routing.Agent, fb.Routing)
	if none := l.sess.Fallback("openai:analyzer-small", "RATE_LIMITED"); none.Signal == nil || none.Signal.Code != CodeNoModel || none.Model != "" {
		t.Fatalf("every model failed: %s", planString(none))
	}
	if other := l.sess.Fallback("openai:analyzer-small", "PERMISSION_DENIED"); other.Signal == nil || !strings.Contains(other.Signal.Message, "does not route around") {
		t.Fatalf("a failure not in fallback_on: %s", planString(other))
	}
	// An error outcome makes the next step a retry, routed to the cheapest
	// model by the crew's rule.
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "t", "confidence": 1.7}, want: CodeInvalidFact})
	if p := l.sess.Plan(); p.Kind != KindRetry || p.Model != "openai:analyzer-small" || p.Routing == nil || p.Routing.Data()["rule"] != "cheap-retries" {
		t.Fatalf("retry plan %s", planString(p))
	}
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "t", "confidence": 0.9, "source": "static-analysis"}})
	if p := l.sess.Plan(); p.Kind != KindContinue || p.Routing != nil {
		t.Fatalf("continue plan %s", planString(p))
	}
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "security-reviewer", "summary": "check F1"}})
	p = l.sess.Plan()
	if p.Kind != KindHandoff || p.Agent.Name != "security-reviewer" || len(p.Context) != 1 || p.Context[0].ID != "F1" || !near(p.Context[0].Confidence, 0.9*0.95) ||
		!strings.Contains(p.Brief, `code-analyzer handed control to you: "check F1"`) || !strings.Contains(p.Brief, `"band":"proceed"`) ||
		!strings.Contains(p.Brief, "You may hand control to: fix-implementer") {
		t.Fatalf("receiver's plan %s", planString(p))
	}
	// The hop has not happened in the store yet: it is the receiver's
	// step_start.
	if l.sess.Facts().Fact("F1").Confidence != 0.9 {
		t.Fatalf("F1 decayed before the receiver's step: %v", l.sess.Facts().Fact("F1").Confidence)
	}
}

// TestSessionCarryRefuses: each bad proposal the issue names is a signal
// with the taxonomy's code, and changes nothing.
func TestSessionCarryRefuses(t *testing.T) {
	cyc, err := Load("cyc.yaml", []byte(cycYAML))
	if err != nil {
		t.Fatal(err)
	}
	// Three handoffs reach max_depth 3: a fourth is chain_depth_exceeded.
	cl := newLoop(t, cyc, 0)
	cl.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "reviewer", "summary": "a"}})
	cl.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "fixer", "summary": "b"}})
	cl.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "reviewer", "summary": "c"}})
	if cl.sess.Handoffs().Depth != 3 || cl.sess.Current().Name != "reviewer" {
		t.Fatalf("handoffs %+v", cl.sess.Handoffs())
	}

	l := newLoop(t, example(t), 0)
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "t", "confidence": 0.9, "source": "static-analysis"}})
	before := len(l.events)
	cases := []struct {
		name  string
		s     *Session
		agent string
		tool  string
		args  map[string]any
		code  string
		want  string
	}{
		{"confidence 1.7", l.sess, "code-analyzer", ToolFactsAdd, map[string]any{"id": "F2", "text": "t", "confidence": 1.7}, CodeInvalidFact, "confidence 1.7 is not in [0, 1]"},
		{"fact exists", l.sess, "code-analyzer", ToolFactsAdd, map[string]any{"id": "F1", "text": "t", "confidence": 0.5}, CodeInvalidFact, "exists"},
		{"unknown fact", l.sess, "code-analyzer", ToolFactsUpdate, map[string]any{"id": "F9", "reason": "r"}, CodeUnknownFact, "no fact F9"},
		{"extra argument", l.sess, "code-analyzer", ToolFactsAdd, map[string]any{"id": "F2", "text": "t", "confidence": 0.5, "severity": "high"}, "SCHEMA_INVALID", "unknown field"},
		{"bad query", l.sess, "code-analyzer", ToolFactsQuery, map[string]any{"query": "DROP facts"}, CodeInvalidQuery, "query"},
		{"unknown agent", l.sess, "code-analyzer", ToolHandoff, map[string]any{"to": "ghost", "summary": "s"}, CodeUnknownAgent, `no agent "ghost"`},
		{"edge not allowed", l.sess, "code-analyzer", ToolHandoff, map[string]any{"to": "fix-implementer", "summary": "s"}, CodeHandoffNotAllowed, "may not hand to fix-implementer"},
		{"not in control", l.sess, "security-reviewer", ToolFactsUpdate, map[string]any{"id": "F1", "reason": "r"}, CodeNotInControl, "is not in control"},
		{"tool not allowed", l.sess, "fix-implementer", ToolHandoff, map[string]any{"to": "code-analyzer", "summary": "s"}, CodeToolNotAllowed, "may not propose xct.handoff"},
		{"agent not in crew", l.sess, "ghost", ToolFactsAdd, map[string]any{"id": "F2", "text": "t", "confidence": 0.5}, CodeUnknownAgent, "not in crew"},
		{"not a system tool", l.sess, "code-analyzer", "fs.read", map[string]any{"path": "x"}, "UNKNOWN_TOOL", "no system tool"},
		{"depth", cl.sess, "reviewer", ToolHandoff, map[string]any{"to": "fixer", "summary": "again"}, CodeChainDepthExceeded, "max_depth 3"},
		// A fact's fields are at the top level of its event's data: names
		// the chain's readers take for the event's own are refused.
		{"field step", l.sess, "code-analyzer", ToolFactsAdd, map[string]any{"id": "F2", "text": "t", "confidence": 0.5, "fields": map[string]any{"step": 1.0}}, CodeInvalidFact, `field "step"`},
		{"field step_id", l.sess, "code-analyzer", ToolFactsUpdate, map[string]any{"id": "F1", "reason": "r", "fields": map[string]any{"step_id": "s1"}}, CodeInvalidFact, `field "step_id"`},
		{"field tool", l.sess, "code-analyzer", ToolFactsUpdate, map[string]any{"id": "F1", "reason": "r", "fields": map[string]any{"tool": "fs.write"}}, CodeInvalidFact, `field "tool"`},
		{"field otel", l.sess, "code-analyzer", ToolFactsAdd, map[string]any{"id": "F2", "text": "t", "confidence": 0.5, "fields": map[string]any{"otel": "x"}}, CodeInvalidFact, `field "otel"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.s.Carry(tc.agent, tc.tool, tc.args)
			if out.Signal == nil || out.Signal.Code != tc.code || !strings.Contains(out.Signal.Message, tc.want) || out.Result != nil || len(out.Events) != 0 {
				t.Fatalf("outcome %+v (signal %+v), want %s %q", out, out.Signal, tc.code, tc.want)
			}
			e := out.Signal.Proto()
			if e.GetCode() != tc.code || e.GetCategory() == "" || e.GetType() == "" || e.GetMessage() != out.Signal.Message {
				t.Fatalf("proto %v", e)
			}
		})
	}
	if len(l.events) != before || l.sess.Facts().Fact("F2") != nil || len(l.sess.Facts().Facts()) != 1 {
		t.Fatal("a refused proposal changed the session")
	}

	// A chain written before those names were refused still resumes: the
	// refusal is the proposal's, not the store's.
	old := slices.Clone(l.events)
	old = append(old, lctl.Event{ChainID: chainID, Seq: uint64(len(old) + 1), Type: lctl.TypeFactAdded, Agent: "code-analyzer",
		Data: map[string]any{"id": "F3", "text": "t", "confidence": 0.5, "step": 1.0, "tool": "fs.write"}})
	if s, err := NewSession(example(t), chainID, old, SessionOptions{}); err != nil || s.Facts().Fact("F3") == nil {
		t.Fatalf("a chain with a fact field named step does not resume: %v", err)
	}

	// A cycle: with max_visits 2, fixer -> reviewer -> fixer -> reviewer
	// -> fixer would give fixer a third visit.
	cyc2, err := Load("cyc2.yaml", []byte(strings.Replace(cycYAML, "max_depth: 3", "max_depth: 10", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c2 := newLoop(t, cyc2, 0)
	for _, to := range []string{"reviewer", "fixer", "reviewer"} {
		c2.play(proposal{tool: ToolHandoff, args: map[string]any{"to": to, "summary": "s"}})
	}
	out := c2.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "fixer", "summary": "s"}, want: CodeCycleDetected})
	if out.Signal.Type != "cycle_detected" || !strings.Contains(out.Signal.Message, "fixer -> reviewer -> fixer -> reviewer -> fixer") {
		t.Fatalf("cycle signal %+v", out.Signal)
	}

	// A contract violation: the signal carries the violations, and both
	// validations are recorded (the refused handoff's record).
	v := newLoop(t, example(t), 0)
	v.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "t", "confidence": 0.3}})
	out = v.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "security-reviewer", "summary": "s"}, want: CodeContractViolated})
	if out.Signal.Details["direction"] != "output" || len(out.Events) != 2 || out.Events[0].Data()["status"] != StatusFailed ||
		!strings.Contains(out.Signal.Message, "missing required field source") || !strings.Contains(out.Signal.Message, "is below confidence_min 0.50") {
		t.Fatalf("contract signal %+v events %+v", out.Signal, out.Events)
	}
	if v.sess.Current().Name != "code-analyzer" {
		t.Fatal("control passed despite the violation")
	}
}

// cycYAML is a crew whose two agents hand to each other.
const cycYAML = `crew: cyc
agents:
  - name: fixer
    profile: {type: executor, capabilities: [tool_use], model: "openai:a"}
    tools: [facts.add, xct.handoff]
    hands_to: [reviewer]
  - name: reviewer
    profile: {type: reviewer, capabilities: [assessment], model: "openai:b"}
    tools: [facts.update, xct.handoff]
    hands_to: [fixer]
handoffs: {cycles: allow, max_visits: 2, max_depth: 3}
`

// TestSessionCatalogAndCrewContext: the agent's catalog, and what the
// validator is told.
func TestSessionCatalogAndCrewContext(t *testing.T) {
	l := newLoop(t, example(t), 0)
	cat := l.sess.Catalog([]*xctv1.ToolDescriptor{{Name: "fs.read"}, {Name: "fs.write"}, {Name: "shell.exec"}})
	var names []string
	for _, d := range cat {
		names = append(names, d.GetName())
	}
	// fs.list is listed by the crew but not in the run's catalog: left out.
	if strings.Join(names, ",") != "fs.read,facts.add,facts.update,facts.query,xct.handoff" {
		t.Fatalf("catalog %v", names)
	}
	for _, d := range cat[1:] {
		if d.GetSource() != "crew" || !json.Valid([]byte(d.GetInputSchema())) {
			t.Fatalf("system tool %v", d)
		}
	}
	err := l.sess.crew.CheckCatalog([]*xctv1.ToolDescriptor{{Name: "fs.read"}, {Name: "fs.write"}})
	if err == nil || err.Error() != "agent code-analyzer lists fs.list, which the tool catalog does not have" {
		t.Fatalf("CheckCatalog: %v", err)
	}
	if err := l.sess.crew.CheckCatalog([]*xctv1.ToolDescriptor{{Name: "fs.read"}, {Name: "fs.write"}, {Name: "fs.list"}}); err != nil {
		t.Fatalf("CheckCatalog of a full catalog: %v", err)
	}
	if SystemToolDescriptor("facts.query").GetIdempotent() != true || SystemToolDescriptor("fs.read") != nil {
		t.Fatal("system tool descriptors")
	}
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "t", "confidence": 0.45, "source": "static-analysis"}})
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F10", "text": "t", "confidence": 0.9, "source": "static-analysis"}})
	cc := l.sess.CrewContext("fs.read", map[string]any{"path": "see F1."}, "check F10, then")
	if cc.GetAgent() != "code-analyzer" || cc.GetAgentType() != "analyzer" || cc.GetVerifier() != "security-reviewer" || cc.GetCrewSha256() != l.sess.crew.SHA256 ||
		len(cc.GetCrewSha256()) != 64 || cc.GetThresholds().GetWarn() != 0.6 || len(cc.GetReliesOn()) != 2 || cc.GetReliesOn()[0].GetId() != "F1" ||
		cc.GetReliesOn()[0].GetConfidence() != 0.45 || cc.GetReliesOn()[1].GetId() != "F10" || strings.Join(cc.GetTools(), ",") != strings.Join(l.sess.Current().Tools, ",") {
		t.Fatalf("crew context %v", cc)
	}
	if got := l.sess.ReliesOn("fs.read", map[string]any{"path": "F100"}, "F1x"); len(got) != 0 {
		t.Fatalf("relies on %v", got)
	}
	if got := l.sess.ReliesOn(ToolFactsUpdate, map[string]any{"id": "F1"}, "F1"); got != nil {
		t.Fatalf("a system tool relies on %v", got)
	}
	g := GateOn(SpecThresholds, nil, []FactConfidence{{"F1", 0.45}}, cc.GetVerifier())
	if g.Action != GateVerify || g.Verifier != "security-reviewer" || g.Subject != "fact F1" {
		t.Fatalf("gate %+v", g)
	}
	if g := GateOn(SpecThresholds, conf(1.7), nil, ""); g.Action != GateBlock {
		t.Fatalf("gate on 1.7: %+v", g)
	}
	rs := RunStartedFields(l.sess.crew)["crew"].(map[string]any)
	if rs["name"] != "security-review" || rs["sha256"] != l.sess.crew.SHA256 || len(rs["agents"].([]any)) != 3 {
		t.Fatalf("run_started fields %v", rs)
	}
}

// TestGateReadsWhatTheOthersSay: the facts a step relies on are not the
// proposing model's choice, and an agent's own assessment never lifts,
// for its own steps, a fact the others doubt.
func TestGateReadsWhatTheOthersSay(t *testing.T) {
	l := newLoop(t, example(t), 0)
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "injection", "confidence": 0.85, "source": "static-analysis"}})
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "OWN", "text": "own", "confidence": 0.55, "source": "static-analysis", "fields": map[string]any{"severity": "high"}}})
	// Its own facts: only when named (its word, like its own confidence).
	if got := l.sess.CrewContext("fs.read", map[string]any{"path": "a.py"}, "read").GetReliesOn(); len(got) != 0 {
		t.Fatalf("the analyzer's step relies on %v", got)
	}
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "security-reviewer", "summary": "Review F1"}})
	// The reviewer doubts F1 (blocked at 0.30) and hands it on.
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "F1", "confidence": 0.30, "reason": "sanitized upstream", "fields": map[string]any{"severity": "high"}}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "fix-implementer", "summary": "F1 is doubtful"}})
	relied := func(goal string) map[string]float64 {
		out := map[string]float64{}
		for _, f := range l.sess.CrewContext("fs.write", map[string]any{"path": "UserController.py", "content": "x"}, goal).GetReliesOn() {
			out[f.GetId()] = f.GetConfidence()
		}
		return out
	}
	// Named or not, the fixer's write relies on F1 at 0.30 (blocked: no
	// decay) and on OWN (the analyzer's, decayed at the one hop so far:
	// the fixer's own step_start, the second, is not on the chain yet).
	for _, goal := range []string{"fix F1", "use the query builder"} {
		if got := relied(goal); len(got) != 2 || got["F1"] != 0.30 || math.Abs(got["OWN"]-0.55*0.95) > 1e-9 {
			t.Fatalf("%q relies on %v", goal, got)
		}
	}
	// The fixer assesses F1 itself at 0.99: refused since session 21 (it
	// may not lift the reviewer's doubt: authority.lift_doubts), and the
	// gate of its steps still reads the reviewer's word.
	out := l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "F1", "confidence": 0.99, "reason": "I checked it myself"}, want: CodeAssessmentNotAllowed})
	if d := out.Signal.Details; d["fact"] != "F1" || d["others_confidence"] != 0.3 || d["author"] != "code-analyzer" {
		t.Fatalf("signal details %v", d)
	}
	if f := l.sess.Facts().Fact("F1"); f.Confidence != 0.30 || !f.Blocked {
		t.Fatalf("F1 %+v", f)
	}
	if got := relied("use the query builder"); got["F1"] != 0.30 {
		t.Fatalf("after its own assessment, the fixer's step relies on F1 at %v", got["F1"])
	}
	if g := GateOn(SpecThresholds, nil, []FactConfidence{{"F1", relied("x")["F1"]}}, ""); g.Action != GateBlock {
		t.Fatalf("gate %+v", g)
	}
	// A lower word of its own counts: it only asks for more.
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "F1", "confidence": 0.1, "reason": "worse than thought"}})
	if got := relied("x"); got["F1"] != 0.1 {
		t.Fatalf("after lowering it, the fixer's step relies on F1 at %v", got["F1"])
	}
	// A session rebuilt from the chain tells the validator the same.
	again, err := NewSession(example(t), chainID, l.events, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := l.sess.CrewContext("fs.write", map[string]any{"path": "p"}, "g")
	if got := again.CrewContext("fs.write", map[string]any{"path": "p"}, "g"); !proto.Equal(got, want) {
		t.Fatalf("rebuilt session: %v, live: %v", got, want)
	}
}

// TestCrewContextPath (session 18): the crew context names the agents
// that held control, in the order of the handoffs, so the policy sees who
// asked the agent in control (crew.handed_by, crew.handoff_path).
func TestCrewContextPath(t *testing.T) {
	l := newLoop(t, example(t), 0)
	if got := l.sess.CrewContext("fs.read", nil, "").GetHandoffPath(); strings.Join(got, ",") != "code-analyzer" {
		t.Fatalf("the entry agent's path: %v", got)
	}
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "injection", "confidence": 0.85, "source": "static-analysis"}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "security-reviewer", "summary": "Review F1"}})
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "F1", "confidence": 0.95, "reason": "confirmed", "fields": map[string]any{"severity": "high"}}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "fix-implementer", "summary": "Fix F1"}})
	cc := l.sess.CrewContext("fs.write", map[string]any{"path": "a.py"}, "fix")
	if got := strings.Join(cc.GetHandoffPath(), ","); cc.GetAgent() != "fix-implementer" || got != "code-analyzer,security-reviewer,fix-implementer" {
		t.Fatalf("after two handoffs: agent %s, path %s", cc.GetAgent(), got)
	}
}

// TestHistoryOf (session 20): what each agent's model is shown of the
// run's turns. By default (history: own) an agent is shown the turns of
// its own steps only, never another agent's (a system step's neither);
// with history: shared every turn, as before. A session rebuilt from the
// chain answers the same, and an unknown value is refused at load.
func TestHistoryOf(t *testing.T) {
	if c := example(t); c.History != HistoryOwn {
		t.Fatalf("a crew file without history: %q, want %q", c.History, HistoryOwn)
	}
	play := func(c *Crew) *loop {
		l := newLoop(t, c, 0)
		l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "F1", "text": "injection", "confidence": 0.85, "source": "static-analysis"}})
		l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "security-reviewer", "summary": "Review F1"}})
		// A system step (a rollback's undo) between two of the reviewer's.
		l.record(AgentOrchestrator, raw{lctl.TypeStepStart, map[string]any{"step": 0, "tool": "fs.write"}})
		l.record(AgentOrchestrator, raw{lctl.TypeStepEnd, map[string]any{"outcome": "success"}})
		l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "F1", "confidence": 0.95, "reason": "confirmed", "fields": map[string]any{"severity": "high"}}})
		return l
	}
	for _, tc := range []struct {
		history string
		want    map[string]string
	}{
		{HistoryOwn, map[string]string{"code-analyzer": "[0 1]", "security-reviewer": "[3]", "fix-implementer": "[]"}},
		{HistoryShared, map[string]string{"code-analyzer": "[0 1 2 3]", "security-reviewer": "[0 1 2 3]", "fix-implementer": "[0 1 2 3]"}},
	} {
		src, err := os.ReadFile("../../examples/crews/security-review.yaml")
		if err != nil {
			t.Fatal(err)
		}
		c, err := Load("crew.yaml", append(src, []byte("\nhistory: "+tc.history+"\n")...))
		if err != nil {
			t.Fatal(err)
		}
		l := play(c)
		again, err := NewSession(c, chainID, l.events, SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.sess.Turns() != 4 || again.Turns() != 4 {
			t.Fatalf("%s: %d turns live, %d rebuilt; want 4", tc.history, l.sess.Turns(), again.Turns())
		}
		for agent, want := range tc.want {
			if got := fmt.Sprint(l.sess.HistoryOf(agent)); got != want {
				t.Errorf("%s: %s is shown turns %s, want %s", tc.history, agent, got, want)
			}
			if got := fmt.Sprint(again.HistoryOf(agent)); got != want {
				t.Errorf("%s, rebuilt from the chain: %s is shown turns %s, want %s", tc.history, agent, got, want)
			}
		}
		brief := l.sess.Plan().Brief
		if own := strings.Contains(brief, "your own steps only"); own != (tc.history == HistoryOwn) {
			t.Errorf("%s: the brief says it shows own steps only: %v\n%s", tc.history, own, brief)
		}
	}
}
