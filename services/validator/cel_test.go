package validator_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/services/validator"
)

// celInput is a proposal with every variable a condition can read set.
func celInput(mutate ...func(*validator.Input)) *validator.Input {
	conf := 0.9
	in := &validator.Input{
		Run: &xctv1.RunContext{
			RunId: "run-7", Principal: "alice", PrincipalRoles: []string{"developer"},
			Labels:    map[string]string{"env": "staging", "team": "platform"},
			StepsUsed: 3, ConsecutiveErrors: 1, InputTokens: 1500, OutputTokens: 500,
			Model: "openai:gpt-4o-mini", Elapsed: durationpb.New(90 * time.Second),
		},
		Step:     3,
		StepID:   "0123456789abcdef0123456789abcdef",
		Proposal: &xctv1.NextStep{Tool: "fs.write", Goal: "update the deployment", Confidence: &conf},
		Args:     map[string]any{"path": "config/app.yaml", "content": "color: green\n", "size": 12.0, "tags": []any{"a", "b"}},
		Tool:     &xctv1.ToolDescriptor{Name: "fs.write", Effect: reversible, Idempotent: true},
		Now:      time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), // a Saturday
	}
	for _, m := range mutate {
		m(in)
	}
	return in
}

// TestConditionVariables checks each variable a condition can read: the
// rule matches (allow) exactly when its condition holds.
func TestConditionVariables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		when  string
		match bool
	}{
		{"tool", `tool == "fs.write"`, true},
		{"tool string functions", `tool.startsWith("fs.") && tool.endsWith("write")`, true},
		{"args field", `args.path.startsWith("config/")`, true},
		{"args field is not there", `has(args.mode)`, false},
		{"args presence guard", `has(args.mode) && args.mode == "append"`, false},
		{"args index", `args["content"].contains("green")`, true},
		{"args number compares with an int", `args.size > 10 && args.size == 12`, true},
		{"args list", `"b" in args.tags && size(args.tags) == 2`, true},
		{"args iteration", `args.tags.all(t, t.size() == 1)`, true},
		{"goal", `goal.contains("deployment")`, true},
		{"confidence present", `confidence.hasValue() && confidence.value() >= 0.9`, true},
		{"confidence default", `confidence.orValue(0.0) < 0.5`, false},
		{"effect", `effect == "reversible"`, true},
		{"idempotent", `idempotent`, true},
		{"now", `now.getDayOfWeek() == 6 && now > timestamp("2026-01-01T00:00:00Z")`, true},
		{"run id", `run.id == "run-7"`, true},
		{"run principal", `run.principal == "alice"`, true},
		{"run roles", `"developer" in run.roles && !("admin" in run.roles)`, true},
		{"run labels", `run.labels["env"] == "staging" && !("prod" in run.labels)`, true},
		{"run label absent", `has(run.labels.owner)`, false},
		{"run step", `run.step == 3`, true},
		{"run steps used", `run.steps_used >= 3`, true},
		{"run consecutive errors", `run.consecutive_errors == 1`, true},
		{"run tokens", `run.input_tokens == 1500 && run.output_tokens == 500 && run.tokens == 2000`, true},
		{"run cost", `run.cost_usd > 0.0005 && run.cost_usd < 0.001`, true},
		{"run model", `run.model.endsWith("gpt-4o-mini")`, true},
		{"run elapsed", `run.elapsed > duration("1m") && run.elapsed < duration("2m")`, true},
		{"strings extension", `args.path.lowerAscii().split("/")[0] == "config"`, true},
		{"regex", `args.path.matches("^config/[a-z]+\\.yaml$")`, true},
	}
	prices := "prices: {gpt-4o-mini: {input_per_1k: 0.00015, output_per_1k: 0.0006}}\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, prices+"rules:\n  - id: r\n    effect: allow\n    when: '"+strings.ReplaceAll(tt.when, "'", "''")+"'\n")
			out, err := p.Evaluate(context.Background(), celInput())
			if err != nil {
				t.Fatal(err)
			}
			want := deny
			if tt.match {
				want = allow
			}
			if out.Decision != want {
				t.Errorf("decision = %v, want %v (reasons %v)", out.Decision, want, out.Reasons)
			}
		})
	}
}

// TestConditionWithoutRun checks that a proposal without a run context
// reads zero values, not errors.
func TestConditionWithoutRun(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `rules:
  - id: r
    effect: allow
    when: 'run.id == "" && run.tokens == 0 && run.cost_usd == 0.0 && size(run.labels) == 0 && size(run.roles) == 0 && !confidence.hasValue() && size(args) == 0'
`)
	out, err := p.Evaluate(context.Background(), &validator.Input{Tool: &xctv1.ToolDescriptor{Name: "x"}})
	if err != nil || out.Decision != allow {
		t.Fatalf("Evaluate = %v, %v", out, err)
	}
}

// TestRuleSelectorsAndConditions checks that a rule matches when every
// selector takes in the tool and its condition holds, and the conflict
// resolution across conditional rules.
func TestRuleSelectorsAndConditions(t *testing.T) {
	t.Parallel()
	const policy = `
rules:
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
  - id: config-needs-approval
    effect: require_approval
    tools: ["fs.write"]
    when: 'args.path.startsWith("config/")'
    message: writes under config/ need a human
  - id: no-secrets
    effect: deny
    when: 'has(args.path) && args.path.contains(".env")'
    message: secrets are off limits
  - id: reads-of-prod-need-approval
    effect: require_approval
    effects: [read]
    when: 'run.labels["env"] == "prod"'
`
	p := mustParse(t, policy)
	tests := []struct {
		name    string
		in      *validator.Input
		want    xctv1.VerdictDecision
		reasons []string
		message string
	}{
		{"condition holds", celInput(), approval, []string{"allow-fs", "config-needs-approval"}, "writes under config/ need a human"},
		{"condition fails", celInput(func(in *validator.Input) { in.Args["path"] = "docs/a.md" }), allow, []string{"allow-fs"}, ""},
		{"selector excludes before the condition runs", celInput(func(in *validator.Input) {
			in.Tool = &xctv1.ToolDescriptor{Name: "fs.read", Effect: read}
		}), allow, []string{"allow-fs"}, ""},
		{"deny wins", celInput(func(in *validator.Input) { in.Args["path"] = "config/.env" }), deny,
			[]string{"allow-fs", "config-needs-approval", "no-secrets"}, "secrets are off limits"},
		{"condition-only rule applies to every tool", celInput(func(in *validator.Input) {
			in.Tool = &xctv1.ToolDescriptor{Name: "net.get", Effect: read}
			in.Args = map[string]any{"path": ".env"}
		}), deny, []string{"no-secrets"}, ""},
		{"effects and condition", celInput(func(in *validator.Input) {
			in.Tool = &xctv1.ToolDescriptor{Name: "db.query", Effect: read}
			in.Args = map[string]any{}
			in.Run.Labels = map[string]string{"env": "prod"}
		}), approval, []string{"reads-of-prod-need-approval"}, ""},
		{"nothing matches", celInput(func(in *validator.Input) {
			in.Tool = &xctv1.ToolDescriptor{Name: "db.query", Effect: read}
			in.Args = map[string]any{}
		}), deny, []string{"default-deny"}, "no policy rule allows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := p.Evaluate(context.Background(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision != tt.want {
				t.Errorf("decision = %v, want %v", out.Decision, tt.want)
			}
			if got := outcomeIDs(out); !slices.Equal(got, tt.reasons) {
				t.Errorf("reasons = %v, want %v", got, tt.reasons)
			}
			if !strings.Contains(out.Message, tt.message) {
				t.Errorf("message = %q, want it to contain %q", out.Message, tt.message)
			}
			if tt.want == approval && out.ApprovalTTL != validator.DefaultApprovalTTL {
				t.Errorf("approval TTL = %v", out.ApprovalTTL)
			}
		})
	}
}

// TestConditionErrorDenies checks that a rule whose condition fails at
// evaluation denies, whatever its effect: the validator never fails open.
func TestConditionErrorDenies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, rule, reason string
	}{
		{"missing key", "effect: allow\n    when: 'args.mode == \"x\"'", "no such key"},
		{"wrong type at runtime", "effect: allow\n    when: 'args.size.startsWith(\"1\")'", "no such overload"},
		{"division by zero", "effect: deny\n    when: '1 / (run.step - 3) == 1'", "division by zero"},
		{"dyn result that is not a bool", "effect: allow\n    when: 'args.path'", "must be a bool"},
		{"too costly", "effect: allow\n    when: 'args.tags.all(a, args.tags.all(b, args.tags.all(c, args.tags.all(d, true))))'", "cost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, "rules:\n  - id: allow-all\n    effect: allow\n  - id: r\n    "+tt.rule+"\n")
			in := celInput()
			if tt.reason == "cost" {
				tags := make([]any, 200)
				for i := range tags {
					tags[i] = "x"
				}
				in.Args["tags"] = tags
			}
			out, err := p.Evaluate(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision != deny {
				t.Fatalf("decision = %v, want deny", out.Decision)
			}
			last := out.Reasons[len(out.Reasons)-1]
			if last.GetRuleId() != "r" || !strings.Contains(last.GetMessage(), tt.reason) || !strings.Contains(last.GetMessage(), "denies") {
				t.Errorf("reason = %v, want rule r explaining %q", last, tt.reason)
			}
			if ids, _ := out.Details["failed_rules"].([]any); len(ids) != 1 || ids[0] != "r" {
				t.Errorf("details = %v", out.Details)
			}
		})
	}
}

// TestConditionCompileErrors checks that syntax and type errors are load
// errors naming the file, the line inside the file and the rule.
func TestConditionCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		line       int
		msg        string
	}{
		{"syntax error", "rules:\n  - id: a\n    effect: allow\n    when: 'args.path.startsWith(\"x\"'\n", 4, "Syntax error"},
		{"undeclared variable", "rules:\n  - id: a\n    effect: allow\n    when: 'argz.path == \"x\"'\n", 4, "undeclared reference to 'argz'"},
		{"misspelt run field", "rules:\n  - id: a\n    effect: allow\n    when: 'run.stpe > 1'\n", 4, "did you mean 'run.step'"},
		{"type error", "rules:\n  - id: a\n    effect: allow\n    when: 'run.step == \"three\"'\n", 4, "no matching overload"},
		{"not a bool", "rules:\n  - id: a\n    effect: allow\n    when: 'run.step + 1'\n", 4, "must be a bool expression, not int"},
		{"unknown function", "rules:\n  - id: a\n    effect: allow\n    when: 'glob(tool, \"fs.*\")'\n", 4, "undeclared reference to 'glob'"},
		{"bad regex", "rules:\n  - id: a\n    effect: allow\n    when: 'tool.matches(\"[\")'\n", 4, "missing closing ]"},
		{"error on the second line of a block", "rules:\n  - id: a\n    effect: allow\n    when: |\n      tool == \"x\" &&\n        nope\n", 6, "undeclared reference to 'nope'"},
		{"empty condition", "rules:\n  - id: a\n    effect: allow\n    when: ''\n", 4, "when is empty"},
		{"too long", "rules:\n  - id: a\n    effect: allow\n    when: '" + strings.Repeat("true && ", 600) + "true'\n", 4, "longer than"},
		{"not a string", "rules:\n  - id: a\n    effect: allow\n    when: [x]\n", 4, "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := validator.ParseRules("policy.yaml", []byte(tt.text))
			var pe *validator.PolicyError
			if !errors.As(err, &pe) || !errors.Is(err, validator.ErrInvalidPolicy) {
				t.Fatalf("err = %v, want a *PolicyError", err)
			}
			if pe.File != "policy.yaml" || pe.Line != tt.line || !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("got %s:%d: %s; want line %d with %q", pe.File, pe.Line, pe.Msg, tt.line, tt.msg)
			}
			if tt.msg != "cannot unmarshal" && !strings.Contains(pe.Msg, `rule "a"`) {
				t.Errorf("message %q does not name the rule", pe.Msg)
			}
		})
	}
}

func outcomeIDs(out validator.Outcome) []string {
	var ids []string
	for _, r := range out.Reasons {
		ids = append(ids, r.GetRuleId())
	}
	return ids
}
