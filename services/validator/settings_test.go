package validator_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// TestBudgets checks each run budget: under it the rules decide; over it
// the step is denied with BUDGET_EXCEEDED before any rule, and the run ends
// unless the budget can recover.
func TestBudgets(t *testing.T) {
	t.Parallel()
	const policy = `
budgets:
  max_steps: 10
  max_wall_time: 30m
  max_tokens: 20000
  max_cost_usd: 0.5
  max_consecutive_errors: 3
prices:
  gpt-4o-mini: {input_per_1k: 0.01, output_per_1k: 0.03}
  "scripted:demo.yaml": {input_per_1k: 0, output_per_1k: 0}
  "grpc:*": {input_per_1k: 1, output_per_1k: 1}
rules:
  - id: allow-all
    effect: allow
`
	p := mustParse(t, policy)
	run := func(m func(r *xctv1.RunContext)) *validator.Input {
		in := &validator.Input{Tool: &xctv1.ToolDescriptor{Name: "fs.read", Effect: read}, Run: &xctv1.RunContext{
			StepsUsed: 10, ConsecutiveErrors: 2, InputTokens: 10000, OutputTokens: 5000,
			Model: "openai:gpt-4o-mini", Elapsed: durationpb.New(30 * time.Minute),
		}}
		m(in.Run)
		return in
	}
	tests := []struct {
		name    string
		in      *validator.Input
		budget  string // "" when the rules decide
		code    wire.Code
		endsRun bool
		message string
	}{
		{"every budget at its limit", run(func(*xctv1.RunContext) {}), "", "", false, ""},
		{"steps", run(func(r *xctv1.RunContext) { r.StepsUsed = 11 }), "max_steps", wire.CodeBudgetExceeded, true, "step 11 of at most 10"},
		{"wall time", run(func(r *xctv1.RunContext) { r.Elapsed = durationpb.New(31 * time.Minute) }), "max_wall_time", wire.CodeBudgetExceeded, true, "31m0s elapsed of at most 30m0s"},
		{"tokens", run(func(r *xctv1.RunContext) { r.OutputTokens = 10001 }), "max_tokens", wire.CodeBudgetExceeded, true, "20001 tokens of at most 20000"},
		{"cost", run(func(r *xctv1.RunContext) { r.InputTokens, r.OutputTokens = 4000, 16000 }), "max_cost_usd", wire.CodeBudgetExceeded, true, "$0.52 of at most $0.5"},
		{"cost by the model name without its adapter", run(func(r *xctv1.RunContext) { r.Model = "gpt-4o-mini"; r.InputTokens, r.OutputTokens = 4000, 16000 }),
			"max_cost_usd", wire.CodeBudgetExceeded, true, "cost budget"},
		{"an exact model reference is priced", run(func(r *xctv1.RunContext) { r.Model = "scripted:demo.yaml"; r.InputTokens = 10000 }), "", "", false, ""},
		{"no price and tokens used", run(func(r *xctv1.RunContext) { r.Model = "openai:o9" }), "max_cost_usd", wire.CodePolicyDenied, true, `no price for model "openai:o9"`},
		{"an adapter's every model", run(func(r *xctv1.RunContext) { r.Model = "grpc:127.0.0.1:9000" }), "max_cost_usd", wire.CodeBudgetExceeded, true, "$15 of at most $0.5"},
		// Session 7: a crew run ("crew:NAME") was priced at "*" or not at all.
		{"a crew run at the dearest of its models", run(func(r *xctv1.RunContext) {
			r.Model, r.Models, r.InputTokens, r.OutputTokens = "crew:review", []string{"scripted:demo.yaml", "openai:gpt-4o-mini"}, 4000, 16000
		}), "max_cost_usd", wire.CodeBudgetExceeded, true, "$0.52 of at most $0.5"},
		{"a crew run within its budget", run(func(r *xctv1.RunContext) {
			r.Model, r.Models = "crew:review", []string{"scripted:demo.yaml", "gpt-4o-mini"}
		}), "", "", false, ""},
		{"a crew model without a price", run(func(r *xctv1.RunContext) {
			r.Model, r.Models = "crew:review", []string{"openai:o9", "scripted:demo.yaml"}
		}),
			"max_cost_usd", wire.CodePolicyDenied, true, `no price for model "openai:o9"`},
		{"no price and no tokens", run(func(r *xctv1.RunContext) { r.Model = "openai:o9"; r.InputTokens, r.OutputTokens = 0, 0 }), "", "", false, ""},
		{"consecutive errors reach the limit", run(func(r *xctv1.RunContext) { r.ConsecutiveErrors = 3 }), "max_consecutive_errors", wire.CodeBudgetExceeded, false, "3 errors in a row"},
		{"consecutive errors after the warning", run(func(r *xctv1.RunContext) { r.ConsecutiveErrors = 4 }), "max_consecutive_errors", wire.CodeBudgetExceeded, true, "finish with done"},
		{"steps come first", run(func(r *xctv1.RunContext) { r.StepsUsed, r.ConsecutiveErrors = 12, 9 }), "max_steps", wire.CodeBudgetExceeded, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := p.Evaluate(context.Background(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if tt.budget == "" {
				if out.Decision != allow {
					t.Fatalf("decision = %v (%v), want allow", out.Decision, out.Reasons)
				}
				return
			}
			if out.Decision != deny || out.Code != tt.code || out.EndsRun != tt.endsRun {
				t.Fatalf("outcome = %v %s ends_run=%v, want deny %s ends_run=%v", out.Decision, out.Code, out.EndsRun, tt.code, tt.endsRun)
			}
			if ids := outcomeIDs(out); len(ids) != 1 || ids[0] != "builtin.budget" {
				t.Errorf("reasons = %v, want only builtin.budget", ids)
			}
			if out.Details["budget"] != tt.budget {
				t.Errorf("details = %v, want budget %s", out.Details, tt.budget)
			}
			if !strings.Contains(out.Message, tt.message) {
				t.Errorf("message = %q, want it to contain %q", out.Message, tt.message)
			}
		})
	}
}

// TestBudgetVerdict checks the verdict a budget makes through the service:
// the code's taxonomy and ends_run.
func TestBudgetVerdict(t *testing.T) {
	t.Parallel()
	s := newService(t, "budgets: {max_steps: 2}\nrules:\n  - id: allow-all\n    effect: allow\n")
	req := request(t, "fs.read", map[string]any{"path": "a"})
	req.Run.StepsUsed = 3
	v := validate(t, s, req)
	checkVerdict(t, v, deny, wire.CodeBudgetExceeded, "builtin.budget")
	if !v.GetEndsRun() || v.GetError().GetRecoverable() || v.GetError().GetSuggestedAction() != "finish_with_done" {
		t.Errorf("verdict = %v, want ends_run with an unrecoverable finish_with_done", v)
	}
	if d := v.GetError().GetDetails().AsMap(); d["used"] != 3.0 || d["limit"] != 2.0 || d["budget"] != "max_steps" {
		t.Errorf("details = %v", d)
	}
}

// TestConfidenceGate checks the LCTL thresholds, default and configured.
func TestConfidenceGate(t *testing.T) {
	t.Parallel()
	const allowAll = "rules:\n  - id: allow-all\n    effect: allow\n"
	custom := "confidence: {proceed: 0.9, warn: 0.7, verify: 0.5}\n" + allowAll
	off := "confidence: {proceed: 0, warn: 0, verify: 0}\n" + allowAll
	tests := []struct {
		name       string
		policy     string
		confidence *float64
		want       xctv1.VerdictDecision
		reasons    []string
		message    string
	}{
		{"no confidence, no gate", allowAll, nil, allow, []string{"allow-all"}, ""},
		{"proceed at 0.80", allowAll, ptr(0.80), allow, []string{"allow-all"}, ""},
		{"proceed at 1", allowAll, ptr(1), allow, []string{"allow-all"}, ""},
		{"warn just below 0.80", allowAll, ptr(0.79), allow, []string{"allow-all", "builtin.confidence"}, "warn"},
		{"warn at 0.60", allowAll, ptr(0.60), allow, []string{"allow-all", "builtin.confidence"}, "warn"},
		{"verify just below 0.60", allowAll, ptr(0.59), approval, []string{"allow-all", "builtin.confidence"}, "a human must verify"},
		{"verify at 0.40", allowAll, ptr(0.40), approval, []string{"allow-all", "builtin.confidence"}, ""},
		{"block just below 0.40", allowAll, ptr(0.39), deny, []string{"allow-all", "builtin.confidence"}, "blocked"},
		{"block at 0", allowAll, ptr(0), deny, []string{"allow-all", "builtin.confidence"}, "blocked"},
		{"above 1 is blocked", allowAll, ptr(1.5), deny, []string{"allow-all", "builtin.confidence"}, "not a number between 0 and 1"},
		{"negative is blocked", allowAll, ptr(-0.1), deny, []string{"allow-all", "builtin.confidence"}, ""},
		{"NaN is blocked", allowAll, ptr(math.NaN()), deny, []string{"allow-all", "builtin.confidence"}, ""},
		{"custom proceed", custom, ptr(0.85), allow, []string{"allow-all", "builtin.confidence"}, "below 0.9"},
		{"custom verify", custom, ptr(0.65), approval, []string{"allow-all", "builtin.confidence"}, ""},
		{"custom block", custom, ptr(0.45), deny, []string{"allow-all", "builtin.confidence"}, ""},
		{"gate off", off, ptr(0), allow, []string{"allow-all"}, ""},
		{"gate does not allow what the rules deny", "rules: []\n", ptr(0.95), deny, []string{"default-deny"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := celInput(func(in *validator.Input) { in.Proposal.Confidence = tt.confidence })
			out, err := mustParse(t, tt.policy).Evaluate(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision != tt.want {
				t.Errorf("decision = %v, want %v (%v)", out.Decision, tt.want, out.Reasons)
			}
			if got := outcomeIDs(out); strings.Join(got, ",") != strings.Join(tt.reasons, ",") {
				t.Errorf("reasons = %v, want %v", got, tt.reasons)
			}
			var all strings.Builder
			for _, r := range out.Reasons {
				all.WriteString(r.GetMessage() + "|")
			}
			if !strings.Contains(all.String(), tt.message) {
				t.Errorf("reasons %q do not say %q", all.String(), tt.message)
			}
		})
	}
}

func ptr(f float64) *float64 { return &f }

// TestApprovalTTLSetting checks that the policy's approval_ttl reaches the
// verdict of a step that needs approval.
func TestApprovalTTLSetting(t *testing.T) {
	t.Parallel()
	s := newService(t, "approval_ttl: 15m\nrules:\n  - id: approve\n    effect: require_approval\n")
	v := validate(t, s, request(t, "fs.read", map[string]any{"path": "a"}))
	checkVerdict(t, v, approval, wire.CodeApprovalRequired, "approve")
	if got := v.GetApprovalTtl().AsDuration(); got != 15*time.Minute {
		t.Errorf("approval_ttl = %v, want 15m", got)
	}
	v = validate(t, newService(t, "rules:\n  - id: approve\n    effect: require_approval\n"), request(t, "fs.read", map[string]any{"path": "a"}))
	if got := v.GetApprovalTtl().AsDuration(); got != time.Hour {
		t.Errorf("default approval_ttl = %v, want 1h", got)
	}
}

// TestSettingsErrors checks that a bad setting is a load error at its line.
func TestSettingsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		line       int
		msg        string
	}{
		{"bad mode", "mode: dry-run\nrules: []\n", 1, `mode "dry-run" is not one of enforce, shadow`},
		{"ttl without unit", "approval_ttl: 3600\nrules: []\n", 1, "not a duration with a unit"},
		{"ttl too long", "approval_ttl: 1000h\nrules: []\n", 1, "approval_ttl 1000h0m0s is not between"},
		{"negative ttl", "approval_ttl: -1h\nrules: []\n", 1, "is not between"},
		{"confidence out of range", "confidence:\n  warn: 1.5\nrules: []\n", 2, "confidence.warn 1.5 is not between 0 and 1"},
		{"confidence out of order", "confidence: {proceed: 0.5, warn: 0.6}\nrules: []\n", 1, "verify <= warn <= proceed"},
		{"unknown confidence field", "confidence: {block: 0.2}\nrules: []\n", 1, `unknown field "block" in confidence`},
		{"negative budget", "budgets:\n  max_steps: -1\nrules: []\n", 2, "budgets.max_steps -1 is negative"},
		{"budget of the wrong type", "budgets:\n  max_steps: many\nrules: []\n", 2, "into an integer"},
		{"unknown budget", "budgets:\n  max_money: 5\nrules: []\n", 2, `unknown field "max_money" in budgets`},
		{"wall time without unit", "budgets: {max_wall_time: 30}\nrules: []\n", 1, "not a duration with a unit"},
		{"negative cost", "budgets: {max_cost_usd: -5}\nrules: []\n", 1, "max_cost_usd -5 is not a non-negative number"},
		{"incomplete price", "prices:\n  gpt-4o: {input_per_1k: 0.01}\nrules: []\n", 2, "needs both input_per_1k and output_per_1k"},
		{"negative price", "prices:\n  gpt-4o: {input_per_1k: -1, output_per_1k: 1}\nrules: []\n", 2, "non-negative"},
		{"duplicate price", "prices:\n  a: {input_per_1k: 1, output_per_1k: 1}\n  a: {input_per_1k: 2, output_per_1k: 1}\nrules: []\n", 3, "already defined"},
		{"unknown price field", "prices:\n  a: {input: 1}\nrules: []\n", 2, `unknown field "input" in a price`},
		{"rate without slash", "rate_limits:\n  - {tool: x, per_run: 10}\nrules: []\n", 2, "has no '/'"},
		{"rate count", "rate_limits:\n  - {tool: x, per_run: 0/1m}\nrules: []\n", 2, "count that is not between 1"},
		{"rate window", "rate_limits:\n  - {tool: x, global: 5/1ms}\nrules: []\n", 2, "window that is not a duration between 1s and 24h"},
		{"rate limit without a rate", "rate_limits:\n  - tool: x\nrules: []\n", 2, "give per_run, per_principal, global or more than one"},
		{"rate limit without a tool", "rate_limits:\n  - per_run: 1/m\nrules: []\n", 2, "tool pattern \"\" is empty"},
		{"unknown rate limit field", "rate_limits:\n  - {tool: x, per_step: 1/m}\nrules: []\n", 2, `unknown field "per_step" in a rate limit`},
		{"reserved approval id", "rules:\n  - id: approval\n    effect: allow\n", 2, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := validator.ParseRules("p.yaml", []byte(tt.text))
			var pe *validator.PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *PolicyError", err)
			}
			if pe.Line != tt.line || !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("got %v; want line %d with %q", err, tt.line, tt.msg)
			}
		})
	}
}

// TestRateSyntax checks the accepted spellings of a rate.
func TestRateSyntax(t *testing.T) {
	t.Parallel()
	for _, r := range []string{"10/1m", "10/m", "1/s", "100/h", "5/30s", "100000/24h"} {
		if _, err := validator.ParseRules("p.yaml", []byte("rate_limits:\n  - {tool: x, per_run: "+r+"}\nrules: []\n")); err != nil {
			t.Errorf("rate %s: %v", r, err)
		}
	}
}
