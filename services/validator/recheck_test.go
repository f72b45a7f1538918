package validator_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/validator"
)

// chainBuilder writes a chain the way the orchestrator does (docs/events.md).
type chainBuilder struct {
	tb     testing.TB
	id     string
	at     time.Time
	events []lctl.Event
}

func newChain(tb testing.TB, id string) *chainBuilder {
	c := &chainBuilder{tb: tb, id: id, at: time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)}
	c.add(lctl.TypeRunStarted, "orchestrator", map[string]any{
		"run_id": id, "goal": "switch to green", "model": "openai:gpt-4o-mini", "principal": "alice",
		"labels": map[string]any{"env": "prod"}, "max_steps": 50.0,
	})
	return c
}

func (c *chainBuilder) add(typ, agent string, data map[string]any) {
	c.events = append(c.events, lctl.Event{ChainID: c.id, Seq: uint64(len(c.events) + 1), Type: typ,
		Timestamp: lctl.FormatTime(c.at), Agent: agent, Data: data})
	c.at = c.at.Add(10 * time.Second)
}

// step records one step: proposal, verdicts, and its end.
func (c *chainBuilder) step(n int, tool string, arguments map[string]any, confidence *float64, outcome string, tokens float64, decisions ...string) {
	c.tb.Helper()
	a, err := structpb.NewStruct(arguments)
	if err != nil {
		c.tb.Fatal(err)
	}
	id := wire.StepID(c.id, n, tool, a)
	start := map[string]any{"step": float64(n), "step_id": id, "intent": "do it", "tool": tool, "arguments": arguments, "model": "gpt-4o-mini"}
	if confidence != nil {
		start["confidence"] = *confidence
	}
	c.add(lctl.TypeStepStart, "gpt-4o-mini", start)
	for _, d := range decisions {
		c.add(lctl.TypeVerdict, "validator", map[string]any{"step": float64(n), "step_id": id, "tool": tool, "decision": d,
			"reasons": []any{map[string]any{"rule_id": "old-rule", "message": "old"}}, "policy_version": "sha256:old"})
	}
	c.add(lctl.TypeStepEnd, "gpt-4o-mini", map[string]any{"step": float64(n), "step_id": id, "outcome": outcome,
		"tokens": map[string]any{"input": tokens, "output": 10.0}})
}

// invalid records model output that was not a decision.
func (c *chainBuilder) invalid(n int) {
	c.add(lctl.TypeStepStart, "gpt-4o-mini", map[string]any{"step": float64(n), "intent": "", "input_summary": "invalid model output", "raw": "Sure!"})
	c.add(lctl.TypeError, "gpt-4o-mini", map[string]any{"step": float64(n), "code": "GENERATION_FAILED"})
	c.add(lctl.TypeStepEnd, "gpt-4o-mini", map[string]any{"step": float64(n), "outcome": "invalid", "tokens": map[string]any{"input": 100.0, "output": 10.0}})
}

const recheckPolicy = `rules:
  - id: allow-read
    effect: allow
    effects: [read]
  - id: allow-fs-write
    effect: allow
    tools: ["fs.write"]
  - id: config-writes-need-approval
    effect: require_approval
    tools: ["fs.write"]
    when: 'args.path.startsWith("config/")'
  - id: no-shell-in-prod
    effect: deny
    tools: ["shell.*"]
    when: 'run.labels["env"] == "prod" && run.principal == "alice"'
`

// TestRecheck re-judges a recorded run under a new policy and reports what
// it would decide next to what the chain says was decided.
func TestRecheck(t *testing.T) {
	t.Parallel()
	c := newChain(t, "run-20261121-090000-abcd")
	c.step(1, "fs.read", map[string]any{"path": "config/app.yaml"}, nil, "success", 100, "allow")
	c.step(2, "fs.write", map[string]any{"path": "config/app.yaml", "content": "color: green\n"}, nil, "success", 100, "allow")
	c.invalid(3)
	c.step(4, "fs.write", map[string]any{"path": "docs/notes.md", "content": "done"}, nil, "success", 100, "allow")
	c.step(5, "shell.exec", map[string]any{"command": "kubectl rollout restart"}, nil, "success", 100, "needs_approval", "allow")
	c.step(6, "fs.write", map[string]any{"path": "docs/more.md", "content": "x"}, ptr(0.5), "success", 100, "allow")
	c.step(7, "fs.read", map[string]any{"path": "a"}, nil, "denied", 100, "deny")

	set, err := validator.NewPolicySet(mustParse(t, recheckPolicy))
	if err != nil {
		t.Fatal(err)
	}
	got, err := validator.Recheck(set, catalog.Static(testTools()...), c.events)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		step          int
		was, final    xctv1.VerdictDecision
		now           xctv1.VerdictDecision
		reasons       []string
		stricter      bool
		looser        bool
		changedReason string
	}
	want := []row{
		{1, allow, allow, allow, []string{"allow-read"}, false, false, ""},
		{2, allow, allow, approval, []string{"allow-fs-write", "config-writes-need-approval"}, true, false, ""},
		{4, allow, allow, allow, []string{"allow-fs-write"}, false, false, ""},
		{5, approval, allow, deny, []string{"no-shell-in-prod"}, true, false, ""},
		{6, allow, allow, approval, []string{"allow-fs-write", "builtin.confidence"}, true, false, ""},
		{7, deny, deny, allow, []string{"allow-read"}, false, true, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("%d steps rechecked, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		var ids []string
		for _, r := range g.Now.GetReasons() {
			ids = append(ids, r.GetRuleId())
		}
		if g.Step != w.step || g.Was != w.was || g.WasFinal != w.final || g.Now.GetDecision() != w.now || !slices.Equal(ids, w.reasons) ||
			g.Stricter() != w.stricter || g.Looser() != w.looser || g.Changed() != (w.was != w.now) {
			t.Errorf("step %d: was %v/%v now %v %v stricter=%v looser=%v; want %+v", g.Step, g.Was, g.WasFinal,
				g.Now.GetDecision(), ids, g.Stricter(), g.Looser(), w)
		}
		if g.WasPolicyVersion != "sha256:old" || g.Now.GetPolicyVersion() != set.Version() || g.StepID == "" || g.Tool == "" {
			t.Errorf("step %d: %+v", g.Step, g)
		}
	}
}

// TestRecheckRunContext checks that budgets, rate limits and "now" see the
// run as it was at each step.
func TestRecheckRunContext(t *testing.T) {
	t.Parallel()
	c := newChain(t, "run-ctx")
	c.step(1, "fs.read", map[string]any{"path": "a"}, nil, "success", 100, "allow") // 110 tokens, at +10s
	c.step(2, "fs.read", map[string]any{"path": "b"}, nil, "error", 100, "allow")   // 220
	c.step(3, "fs.read", map[string]any{"path": "c"}, nil, "denied", 100, "allow")  // 330, 1 error before
	c.step(4, "fs.read", map[string]any{"path": "d"}, nil, "success", 100, "allow") // 440, 2 errors before
	c.step(5, "fs.write", map[string]any{"path": "e", "content": ""}, nil, "success", 0, "allow")
	c.step(6, "fs.write", map[string]any{"path": "f", "content": ""}, nil, "success", 0, "allow")
	const text = `
budgets: {max_tokens: 400}
rate_limits:
  - {tool: "fs.write", per_run: 1/1m}
rules:
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
  - id: two-errors
    effect: deny
    when: 'run.consecutive_errors >= 2 && run.elapsed > duration("50s") && now > timestamp("2026-11-21T09:00:00Z")'
`
	set, err := validator.NewPolicySet(mustParse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	got, err := validator.Recheck(set, nil, c.events)
	if err != nil {
		t.Fatal(err)
	}
	var summary []string
	for _, r := range got {
		var ids []string
		for _, rs := range r.Now.GetReasons() {
			ids = append(ids, rs.GetRuleId())
		}
		summary = append(summary, r.Now.GetDecision().String()[len("VERDICT_DECISION_"):]+":"+strings.Join(ids, "+"))
	}
	want := []string{
		"ALLOW:allow-fs",
		"ALLOW:allow-fs",
		"ALLOW:allow-fs",
		"DENY:builtin.budget", // 440 tokens > 400
		"DENY:builtin.budget", // still
		"DENY:builtin.budget",
	}
	if !slices.Equal(summary, want) {
		t.Errorf("rechecked = %v\nwant        %v", summary, want)
	}

	// Without the token budget: the error streak and the rate limit.
	set, err = validator.NewPolicySet(mustParse(t, strings.Replace(text, "budgets: {max_tokens: 400}", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	got, err = validator.Recheck(set, nil, c.events)
	if err != nil {
		t.Fatal(err)
	}
	summary = summary[:0]
	for _, r := range got {
		var ids []string
		for _, rs := range r.Now.GetReasons() {
			ids = append(ids, rs.GetRuleId())
		}
		summary = append(summary, r.Now.GetDecision().String()[len("VERDICT_DECISION_"):]+":"+strings.Join(ids, "+"))
	}
	want = []string{
		"ALLOW:allow-fs",
		"ALLOW:allow-fs",
		"ALLOW:allow-fs",
		"DENY:allow-fs+two-errors",
		"ALLOW:allow-fs",
		"DENY:allow-fs+builtin.rate_limit", // 30s after the last write
	}
	if !slices.Equal(summary, want) {
		t.Errorf("rechecked = %v\nwant        %v", summary, want)
	}
}

// TestRecheckBadChain checks that unreadable events are errors naming them.
func TestRecheckBadChain(t *testing.T) {
	t.Parallel()
	c := newChain(t, "run-bad")
	c.step(1, "fs.read", map[string]any{"path": "a"}, nil, "success", 1, "maybe")
	set, _ := validator.NewPolicySet(validator.DefaultPolicy())
	_, err := validator.Recheck(set, nil, c.events)
	if !errors.Is(err, validator.ErrBadChain) || !strings.Contains(err.Error(), "event 3 (verdict)") {
		t.Errorf("err = %v", err)
	}
	c = newChain(t, "run-bad")
	c.add(lctl.TypeStepStart, "m", map[string]any{"step": 1.0, "tool": "fs.read", "arguments": "a"})
	if _, err := validator.Recheck(set, nil, c.events); !errors.Is(err, validator.ErrBadChain) {
		t.Errorf("err = %v", err)
	}
	if _, err := validator.Recheck(nil, nil, c.events); !errors.Is(err, validator.ErrNoPolicy) {
		t.Errorf("err = %v", err)
	}
	if got, err := validator.Recheck(set, nil, nil); err != nil || len(got) != 0 {
		t.Errorf("no events: %v, %v", got, err)
	}
}

// TestRecheckUndo: a rollback's undo steps are judged as RollbackRun has
// them judged (a system step, as the changes it makes, in the name of who
// rolled back), not as a model's proposal of a system tool, which is
// always denied: a policy's judgement of undos was hidden behind a
// "stricter" on every one. A model's own xct.undo in the run is still
// denied.
func TestRecheckUndo(t *testing.T) {
	t.Parallel()
	tools := append(testTools(),
		&xctv1.ToolDescriptor{Name: "fs.delete", InputSchema: `{"type": "object"}`, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
		&xctv1.ToolDescriptor{Name: "xct.undo", InputSchema: `{"type": "object"}`, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
	)
	const policy = `rules:
  - id: allow-reversible
    effect: allow
    effects: [reversible]
  - id: config-changes-need-approval
    effect: require_approval
    tools: ["fs.write", "fs.delete"]
    when: 'args.path.startsWith("config/")'
  - id: undo-by-operators
    effect: deny
    tools: ["xct.undo"]
    when: 'run.principal != "carol"'
`
	c := newChain(t, "run-undone")
	c.step(1, "fs.write", map[string]any{"path": "config/app.yaml", "content": "x: 2\n"}, nil, "success", 100, "needs_approval", "allow")
	c.step(2, "fs.write", map[string]any{"path": "notes.txt", "content": "n"}, nil, "success", 100, "allow")
	c.step(3, "xct.undo", map[string]any{"step_id": "x", "actions": []any{}}, nil, "denied", 100, "deny") // the model's
	c.add(lctl.TypeRunFinished, "orchestrator", map[string]any{"status": "completed"})
	c.add(lctl.TypeRollbackStarted, "carol", map[string]any{"principal": "carol", "to_step": 0.0, "steps": []any{2.0, 1.0}})
	c.step(4, "xct.undo", map[string]any{"step_id": "s2", "actions": []any{map[string]any{"op": "remove", "path": "notes.txt"}}}, nil, "success", 0, "allow")
	c.step(5, "xct.undo", map[string]any{"step_id": "s1", "actions": []any{map[string]any{"op": "restore", "path": "config/app.yaml"}}}, nil, "success", 0, "needs_approval", "allow")
	c.add(lctl.TypeRollbackFinished, "carol", map[string]any{"status": "completed", "undone": []any{2.0, 1.0}})

	set, err := validator.NewPolicySet(mustParse(t, policy))
	if err != nil {
		t.Fatal(err)
	}
	got, err := validator.Recheck(set, catalog.Static(tools...), c.events)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]xctv1.VerdictDecision{1: approval, 2: allow, 3: deny, 4: allow, 5: approval}
	if len(got) != len(want) {
		t.Fatalf("%d steps rechecked: %+v", len(got), got)
	}
	for _, g := range got {
		if g.Now.GetDecision() != want[g.Step] || g.Changed() {
			t.Errorf("step %d (%s): was %v, now %v %v; want %v, unchanged", g.Step, g.Tool, g.Was, g.Now.GetDecision(), g.Now.GetReasons(), want[g.Step])
		}
	}

	// Without a catalog, an undo and its actions are judged as tools
	// declaring no effect class, as the other steps are (the policy's
	// default deny here, as for the model's fs.write); nothing is refused
	// for a missing catalog, as a system tool, or as another principal's.
	got, err = validator.Recheck(set, nil, c.events)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.Step < 4 {
			continue
		}
		for _, r := range g.Now.GetReasons() {
			if r.GetRuleId() == "undo" || strings.HasPrefix(r.GetRuleId(), "builtin.") || r.GetRuleId() == "undo-by-operators" {
				t.Errorf("step %d without a catalog: %v %v", g.Step, g.Now.GetDecision(), g.Now.GetReasons())
			}
		}
	}
	if a, b := got[1], got[len(got)-1]; a.Now.GetDecision() != b.Now.GetDecision() {
		t.Errorf("without a catalog, the model's fs.write %v %v and the undo %v %v: one rule for tools of no effect class",
			a.Now.GetDecision(), a.Now.GetReasons(), b.Now.GetDecision(), b.Now.GetReasons())
	}
}
