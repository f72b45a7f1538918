package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/session"
)

// The example chains under testdata/chains are written by the SDK from the
// code below (go test ./lctl/cli -run TestExamples -update), so the golden
// files test the SDK's output too. They tell the story of the spec's part 8:
// a security review by three agents (v1), the same review run again with a
// different outcome (v2), an XCT run, and a chain from another
// implementation.

// clock is a fake clock that each event moves forward.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }
func (c *clock) at(sec float64) {
	c.t = time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC).Add(time.Duration(sec * float64(time.Second)))
}

// reviewChain records the security review; v2 changes what the spec's diff
// example changes (F3's confidence) and a few things more.
func reviewChain(t testing.TB, v2 bool) []lctl.Event {
	t.Helper()
	ctx := context.Background()
	var c clock
	c.at(0)
	id := "security-review-001"
	if v2 {
		id = "security-review-002"
	}
	s, err := session.New(id, session.Options{Agent: "orchestrator", Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	check := func(_ lctl.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	conf := func(f float64) *float64 { return &f }
	analyzer, reviewer, fixer := s.Agent("code-analyzer"), s.Agent("security-reviewer"), s.Agent("fix-implementer")

	step, err := analyzer.StepStart(ctx, "analyze", "UserController.py - 200 lines", map[string]any{"model": "claude-3-haiku"})
	if err != nil {
		t.Fatal(err)
	}
	c.at(2)
	check(analyzer.AddFact(ctx, session.Fact{ID: "F1", Text: "SQL query constructed from user input at line 45", Confidence: 0.85,
		Source: "static-analysis", Tags: []string{"sql", "critical"}}))
	c.at(3)
	check(analyzer.ToolCall(ctx, session.ToolCall{Tool: "grep", Input: map[string]any{"pattern": "execute.*user", "file": "UserController.py"},
		Output: map[string]any{"matches": 3, "lines": []any{45, 67, 89}}, Duration: 50 * time.Millisecond}))
	c.at(9)
	check(analyzer.AddFact(ctx, session.Fact{ID: "F2", Text: "User input reaches the query without sanitization", Confidence: 0.90,
		Source: "static-analysis", Tags: []string{"input-validation"}}))
	c.at(15)
	check(step.End(ctx, "success", "Found 1 potential SQL injection", lctl.Tokens{Input: 500, Output: 200}))
	c.at(15.5)
	check(s.Record(ctx, lctl.TypeModelRouting, "orchestrator", map[string]any{"decision": "route_to_opus", "reason": "code_generation_task",
		"alternatives_considered": []any{"gpt-4", "claude-3-sonnet"}, "confidence": 0.85}))

	c.at(16)
	step, err = reviewer.StepStart(ctx, "assess", "Review F1 for exploitability", map[string]any{
		"model": map[string]any{"id": "claude-3-opus", "role": "review"}, "agent_profile": map[string]any{"type": "reviewer", "reliability_score": 0.92}})
	if err != nil {
		t.Fatal(err)
	}
	c.at(28)
	check(reviewer.ToolCall(ctx, session.ToolCall{Tool: "sqlmap", Input: map[string]any{"target": "/login"}, Output: map[string]any{"injectable": true}, Duration: 12 * time.Second}))
	if v2 {
		c.at(28.5)
		check(reviewer.ToolCall(ctx, session.ToolCall{Tool: "curl", Input: map[string]any{"url": "/login?user='"}, Output: map[string]any{"status": 500}, Duration: 200 * time.Millisecond}))
	}
	c.at(30)
	f3 := 0.70
	if v2 {
		f3 = 0.85
	}
	check(reviewer.AddFact(ctx, session.Fact{ID: "F3", Text: "Injection is reachable from the public login form", Confidence: f3,
		Source: "security-reviewer", Fields: map[string]any{"severity": "high"}}))
	c.at(33)
	check(reviewer.ModifyFact(ctx, session.FactChange{ID: "F1", Text: "CONFIRMED: SQL injection vulnerability", Confidence: conf(0.95), Reason: "verified_by_consensus",
		Fields: map[string]any{"severity": "critical", "consensus": map[string]any{"assessors": []any{"code-analyzer", "security-reviewer"}, "agreement": 1.0}}}))
	c.at(36)
	severity := "critical"
	if v2 {
		severity = "urgent"
	}
	check(reviewer.AddFact(ctx, session.Fact{ID: "F4", Text: "Session tokens are predictable", Confidence: 0.35, Source: "security-reviewer",
		Fields: map[string]any{"severity": severity}}))
	c.at(38.5)
	check(step.End(ctx, "success", "F1 confirmed exploitable", lctl.Tokens{Input: 700, Output: 400}))
	c.at(38.6)
	check(s.Record(ctx, lctl.TypeContractValidation, "system", map[string]any{"contract": "security-reviewer", "direction": "output", "status": "passed", "warnings": []any{}}))
	c.at(38.7)
	check(s.Checkpoint(ctx))

	c.at(39)
	step, err = fixer.StepStart(ctx, "fix", "Patch F1 with a parameterized query", map[string]any{"model": "gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	c.at(40)
	check(fixer.ToolCall(ctx, session.ToolCall{Tool: "read_file", Input: map[string]any{"path": "UserController.py"}, Output: map[string]any{"bytes": 8123}, Duration: 120 * time.Millisecond}))
	c.at(41)
	check(s.Record(ctx, lctl.TypeStreamStart, "fix-implementer", map[string]any{"expected_chunks": "unknown"}))
	c.at(42)
	check(s.Record(ctx, lctl.TypeStreamChunk, "fix-implementer", map[string]any{"index": 0, "content": "Replacing string concatenation", "tokens": 4}))
	c.at(43)
	check(s.Record(ctx, lctl.TypeStreamChunk, "fix-implementer", map[string]any{"index": 1, "content": " with a bound parameter", "tokens": 5}))
	c.at(43.1)
	check(s.Record(ctx, lctl.TypeStreamEnd, "fix-implementer", map[string]any{"total_chunks": 2, "total_tokens": 9, "duration_ms": 2000}))
	if v2 {
		c.at(43.5)
		check(fixer.Error(ctx, session.ErrorInfo{Category: "execution_error", Type: "tool_failure", Message: "patch does not apply: hunk 1 failed at line 45",
			Recoverable: true, SuggestedAction: "retry_with_fresh_context"}))
	}
	c.at(44)
	check(fixer.ToolCall(ctx, session.ToolCall{Tool: "apply_patch", Input: map[string]any{"path": "UserController.py"}, Output: map[string]any{"hunks": 1}, Duration: 300 * time.Millisecond}))
	c.at(45)
	check(fixer.AddFact(ctx, session.Fact{ID: "F5", Text: "Line 45 now uses a parameterized query", Confidence: 0.92, Source: "fix-implementer"}))
	c.at(46.7)
	tokens := lctl.Tokens{Input: 300, Output: 240}
	if v2 {
		tokens = lctl.Tokens{Input: 350, Output: 260}
	}
	check(step.End(ctx, "success", "1 file patched", tokens))
	c.at(47)
	check(s.Record(ctx, "handoff", "orchestrator", map[string]any{"to": "human-review", "facts": []any{"F4"}, "reason": "F4 is below the block threshold"}))
	c.at(47.1)
	check(s.Checkpoint(ctx))
	return s.Events()
}

// xctChain records a run the way XCT's orchestrator does (docs/events.md).
func xctChain(t testing.TB) []lctl.Event {
	t.Helper()
	ctx := context.Background()
	var c clock
	c.at(0)
	s, err := session.New("run-20240115-103000-4f2a9c1e", session.Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	sec := 0.0
	rec := func(typ, agent string, data map[string]any) {
		t.Helper()
		sec += 0.25
		c.at(sec)
		if _, err := s.Record(ctx, typ, agent, data); err != nil {
			t.Fatal(err)
		}
	}
	rec("run_started", "orchestrator", map[string]any{"run_id": "run-20240115-103000-4f2a9c1e", "goal": "Switch the checkout service's deployment from blue to green",
		"model": "demo-agent", "principal": "alice", "labels": map[string]any{"team": "platform"}, "max_steps": 50})
	type stepSpec struct {
		tool, intent, decision, rule, code, msg, outcome string
		ms                                               float64
	}
	steps := []stepSpec{
		{"fs.list", "See what is in the workspace", "allow", "allow-read", "", "", "success", 120},
		{"fs.write", "Write the deployment configuration", "allow", "allow-reversible", "", "", "success", 340},
		{"fs.read", "Read the host's user list", "allow", "allow-read", "PERMISSION_DENIED", `path "../../etc/passwd" is outside the workspace`, "error", 90},
		{"shell.exec", "Restart the service", "deny", "builtin.catalog", "UNKNOWN_TOOL", `tool "shell.exec" is not in the catalog`, "denied", 60},
		{"fs.read", "Check the configuration", "allow", "allow-read", "", "", "success", 110},
	}
	for i, st := range steps {
		n := i + 1
		id := lctl.FormatTime(time.Unix(int64(n), 0))[:10] + "-step"
		rec("step_start", "demo-agent", map[string]any{"step": n, "step_id": id, "intent": st.intent, "input_summary": st.tool + " path=config/app.yaml",
			"tool": st.tool, "arguments": map[string]any{"path": "config/app.yaml"}, "model": "demo-agent"})
		rec("verdict", "validator", map[string]any{"step": n, "step_id": id, "tool": st.tool, "decision": st.decision,
			"reasons": []any{map[string]any{"rule_id": st.rule, "message": "matched"}}, "policy_version": "sha256:ffc512819825"})
		switch {
		case st.code == "":
			rec("tool_call", "executor", map[string]any{"step": n, "step_id": id, "tool": st.tool, "input": map[string]any{"path": "config/app.yaml"},
				"output": map[string]any{"size": 47}, "duration_ms": st.ms / 2, "status": "success"})
		case st.decision == "deny":
			rec("error", "validator", map[string]any{"step": n, "step_id": id, "code": st.code, "category": "input_error", "type": "invalid_format",
				"message": st.msg, "recoverable": true, "suggested_action": "choose_a_tool_from_the_catalog"})
		default:
			rec("error", "executor", map[string]any{"step": n, "step_id": id, "code": st.code, "category": "execution_error", "type": "tool_failure",
				"message": st.msg, "recoverable": true, "suggested_action": "stay_inside_the_workspace"})
		}
		rec("step_end", "demo-agent", map[string]any{"step": n, "step_id": id, "outcome": st.outcome, "output_summary": st.outcome,
			"duration_ms": st.ms, "tokens": map[string]any{"input": 400 + 50*n, "output": 40 + 5*n}})
	}
	rec("run_finished", "orchestrator", map[string]any{"status": "done", "message": "Deployment switched from blue to green in config/app.yaml",
		"steps": 5, "tokens": map[string]any{"input": 2750, "output": 275}})
	return s.Events()
}

// otherImplementation is a chain as another LCTL implementation writes it:
// no hashes, ISO timestamps without a zone, a seq as a string, tokens as
// {in, out}, a type of its own.
const otherImplementation = `{
  "lctl": "4.0",
  "chain": {"id": "langchain-run-7"},
  "events": [
    {"seq": 1, "type": "step_start", "timestamp": "2024-01-15T10:30:00.123456", "agent": "researcher", "data": {"intent": "search", "input_summary": "LCTL spec"}},
    {"seq": "2", "type": "llm_trace", "timestamp": "2024-01-15T10:30:01.500000", "agent": "researcher", "data": {"model": "gpt-4o", "prompt_tokens": 812}},
    {"seq": 3, "type": "fact_added", "timestamp": "2024-01-15T10:30:02", "agent": "researcher", "data": {"id": "R1", "text": "LCTL v4.0 is event-sourced", "confidence": 0.9, "source": "web"}},
    {"seq": 4, "type": "step_end", "timestamp": "2024-01-15T10:30:04.250000", "agent": "researcher", "data": {"outcome": "success", "duration_ms": 4127, "tokens": {"in": 812, "out": 140}}},
    {"seq": 5, "type": "step_start", "timestamp": "2024-01-15T10:30:04.300000", "agent": "writer", "data": {"intent": "summarize"}},
    {"seq": 6, "type": "fact_modified", "timestamp": "2024-01-15T10:30:06", "agent": "writer", "data": {"id": "R1", "confidence": 0.55, "reason": "single source"}},
    {"seq": 7, "type": "step_end", "timestamp": "2024-01-15T10:30:07", "agent": "writer", "data": {"outcome": "success", "tokens": {"in": 300, "out": 90}}}
  ]
}
`

// copyEvents deep-copies events so each bad variant starts from the
// original.
func copyEvents(t testing.TB, events []lctl.Event) []lctl.Event {
	t.Helper()
	raw, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	var out []lctl.Event
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExamples writes the example chains with -update and checks that the
// stored ones are what the code produces now.
func TestExamples(t *testing.T) {
	dir := filepath.Join("testdata", "chains")
	v1 := reviewChain(t, false)
	files := map[string]func() []byte{}
	encode := func(name, chainID string, events []lctl.Event) {
		files[name] = func() []byte {
			var buf bytes.Buffer
			if err := lctl.NewFile(chainID, events).Encode(&buf, lctl.FormatForPath(name)); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
	}
	encode("review-v1.lctl.json", "security-review-001", v1)
	encode("review-v1.lctl.yaml", "security-review-001", v1)
	encode("review-v2.lctl.json", "security-review-002", reviewChain(t, true))
	encode("xct-run.lctl.json", "run-20240115-103000-4f2a9c1e", xctChain(t))
	files["other-implementation.lctl.json"] = func() []byte { return []byte(otherImplementation) }

	// Bad inputs, each from the intact v1.
	bad := func(name string, mutate func([]lctl.Event) []lctl.Event) {
		encode(filepath.Join("bad", name), "security-review-001", mutate(copyEvents(t, v1)))
	}
	bad("edited.lctl.json", func(e []lctl.Event) []lctl.Event { e[8].Data["confidence"] = 0.99; return e })
	bad("removed.lctl.json", func(e []lctl.Event) []lctl.Event { return append(e[:5], e[6:]...) })
	bad("reordered.lctl.json", func(e []lctl.Event) []lctl.Event { e[7], e[8] = e[8], e[7]; return e })
	bad("resealed.lctl.json", func(e []lctl.Event) []lctl.Event {
		e[2].Data["output"] = map[string]any{"matches": 0.0}
		_ = e[2].Seal(e[1].Hash) // the forger seals the edit, but event 4 still links to the original
		return e
	})
	bad("duplicate-seq.lctl.json", func(e []lctl.Event) []lctl.Event {
		return append(e[:4], append([]lctl.Event{e[3]}, e[4:]...)...)
	})
	bad("time-backwards.lctl.json", func(e []lctl.Event) []lctl.Event { e[10].Timestamp = "2024-01-15T10:29:00Z"; return e })
	bad("checkpoint.lctl.json", func(e []lctl.Event) []lctl.Event {
		// An event before the checkpoint is changed and the whole chain
		// re-sealed: the hash chain verifies, the checkpoint does not.
		e[3].Data["confidence"] = 0.5
		prev := ""
		for i := range e {
			_ = e[i].Seal(prev)
			prev = e[i].Hash
		}
		return e
	})
	files["bad/truncated.lctl.json"] = func() []byte {
		var buf bytes.Buffer
		_ = lctl.NewFile("security-review-001", v1).Encode(&buf, lctl.FormatJSON)
		return buf.Bytes()[:buf.Len()*2/3]
	}
	files["bad/wrong-version.lctl.json"] = func() []byte {
		return []byte(`{"lctl": "3.0", "chain": {"id": "old"}, "trace": []}` + "\n")
	}

	for name, content := range files {
		path := filepath.Join(dir, name)
		want := content()
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to write the examples)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the generator writes now (run with -update)", path)
		}
	}
}
