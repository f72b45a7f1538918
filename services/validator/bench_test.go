package validator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// BenchmarkValidate measures one in-process validation of an allowed
// fs.write proposal: catalog lookup, schema validation of a realistic
// schema (nested object, pattern, enum, array) and the default policy.
func BenchmarkValidate(b *testing.B) {
	s := newService(b, "")
	req := benchRequest(b)
	ctx := context.Background()
	resp, err := s.Validate(ctx, req)
	if err != nil || resp.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		b.Fatalf("Validate: %v, %v", resp, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Validate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateCEL50 measures the same validation under a policy of 50
// CEL rules (fifty50Policy), with budgets, prices, a rate limit and a
// confidence on the proposal: the validation a production policy makes.
func BenchmarkValidateCEL50(b *testing.B) {
	s, err := validator.NewWithCatalog(validator.Config{PolicyFile: writeFile(b, "policy.yaml", fifty50Policy())},
		catalog.Static(testTools()...), nil)
	if err != nil {
		b.Fatal(err)
	}
	req := benchRequest(b)
	ctx := context.Background()
	resp, err := s.Validate(ctx, req)
	if err != nil || resp.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		b.Fatalf("Validate: %v, %v", resp, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Validate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvaluateCEL50 measures the policy alone (no catalog, no
// schema): budgets, the 50 rules and the confidence gate.
func BenchmarkEvaluateCEL50(b *testing.B) {
	p := mustParse(b, fifty50Policy())
	req := benchRequest(b)
	in := &validator.Input{
		Run: req.GetRun(), Step: req.GetStep(), StepID: req.GetStepId(), Proposal: req.GetProposal(),
		Args: req.GetProposal().GetArguments().AsMap(),
		Tool: &xctv1.ToolDescriptor{Name: "fs.write", Effect: reversible},
	}
	ctx := context.Background()
	if out, err := p.Evaluate(ctx, in); err != nil || out.Decision != allow {
		b.Fatalf("Evaluate: %v, %v", out, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Evaluate(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRequest(tb testing.TB) *xctv1.ValidateRequest {
	req := request(tb, "fs.write", map[string]any{
		"path":    "reports/2026/summary.md",
		"content": "# Summary\n\nAll checks passed.\n",
		"mode":    "overwrite",
		"options": map[string]any{"mkdirs": true, "permissions": "0644"},
		"tags":    []any{"report", "weekly"},
	})
	req.Run.Labels = map[string]string{"team": "platform", "env": "staging"}
	req.Run.PrincipalRoles = []string{"developer"}
	req.Run.Model = "openai:gpt-4o-mini"
	req.Run.InputTokens, req.Run.OutputTokens = 12000, 3000
	req.Run.Elapsed = durationpb.New(90_000_000_000)
	c := 0.92
	req.Proposal.Confidence = &c
	return req
}

// fifty50Policy is a 50-rule policy: five kinds of rules over ten tool
// namespaces, most with a CEL condition; a dozen select fs.write.
func fifty50Policy() string {
	var b strings.Builder
	b.WriteString(`approval_ttl: 30m
budgets: {max_steps: 100, max_wall_time: 1h, max_tokens: 500000, max_cost_usd: 20, max_consecutive_errors: 5}
prices: {gpt-4o-mini: {input_per_1k: 0.00015, output_per_1k: 0.0006}}
rate_limits:
  - {tool: "http.*", per_run: 10/1m, global: 100/1m}
rules:
`)
	namespaces := []string{"fs", "http", "db", "mail", "shell", "git", "k8s", "s3", "slack", "jira"}
	for i, ns := range namespaces {
		fmt.Fprintf(&b, `  - id: allow-%[1]s-read
    effect: allow
    tools: ["%[1]s.*"]
    effects: [read]
  - id: allow-%[1]s-writes-in-staging
    effect: allow
    tools: ["%[1]s.*"]
    when: 'run.labels["env"] == "staging" && has(args.path) && !args.path.startsWith("/")'
  - id: approve-%[1]s-prod
    effect: require_approval
    tools: ["%[1]s.*"]
    when: 'run.labels["env"] == "prod" || (has(args.path) && args.path.startsWith("config/"))'
    message: %[1]s changes in production need a human
  - id: deny-%[1]s-secrets
    effect: deny
    when: 'tool.startsWith("%[1]s.") && has(args.path) && args.path.matches("(^|/)\\.(env|ssh|aws)(/|$)")'
    message: secrets are off limits
  - id: deny-%[1]s-budget-%[2]d
    effect: deny
    tools: ["%[1]s.*"]
    when: 'run.cost_usd > 10.0 || (run.tokens > 400000 && !("admin" in run.roles)) || confidence.orValue(1.0) < 0.3'
    message: the run is too expensive
`, ns, i)
	}
	return b.String()
}

// BenchmarkValidateSigned is BenchmarkValidate with a verdict key: each
// allow is signed over its grant (step id and arguments digest checked
// and computed first), as in a cluster.
func BenchmarkValidateSigned(b *testing.B) {
	signer, _, err := verdict.NewPair(time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	s, err := validator.NewWithCatalog(validator.Config{Signer: signer}, catalog.Static(testTools()...), nil)
	if err != nil {
		b.Fatal(err)
	}
	req := benchRequest(b)
	req.StepId = wire.StepID(req.GetRun().GetRunId(), int(req.GetStep()), req.GetProposal().GetTool(), req.GetProposal().GetArguments())
	ctx := context.Background()
	resp, err := s.Validate(ctx, req)
	if err != nil || resp.GetVerdict().GetSigned() == nil {
		b.Fatalf("Validate: %v, %v", resp, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Validate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateUndeclaredNames is the most names a model's decision
// can hold (256 KiB): 20,000 upper-case members the schema does not
// name, each compared with the schema's names (folded once) and with each
// other (KeyClash), before the schema refuses them.
func BenchmarkValidateUndeclaredNames(b *testing.B) {
	s := newService(b, "")
	a := map[string]any{"path": "a", "content": "b"}
	for i := range 20000 {
		a[fmt.Sprintf("K%05d", i)] = ""
	}
	req := request(b, "fs.write", a)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := s.Validate(ctx, req)
		if err != nil || resp.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_DENY {
			b.Fatalf("Validate: %v, %v", resp, err)
		}
	}
}
