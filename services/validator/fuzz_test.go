package validator_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/services/validator"
)

// FuzzParseRules feeds arbitrary text to the policy loader. It must never
// panic; it either returns a policy that decides every proposal (CEL
// conditions, budgets and the confidence gate included), or an
// invalid-policy error that names the file.
func FuzzParseRules(f *testing.F) {
	f.Add([]byte(validator.DefaultPolicyYAML))
	f.Add([]byte("rules: []\n"))
	f.Add([]byte("rules:\n  - id: a\n    effect: deny\n    tools: [\"fs.*\", \"?x*\"]\n    effects: [read]\n"))
	f.Add([]byte("rules:\n  - id: a\n    effect: [allow\n"))
	f.Add([]byte("rules:\n  - id: a\n    effect: allow\n    colour: red\n"))
	f.Add([]byte("rules:\n  - &r {id: a, effect: allow}\n  - *r\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("rules: !!binary aGVsbG8=\n"))
	f.Add([]byte("---\nrules: []\n---\n"))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte("mode: shadow\napproval_ttl: 5m\nconfidence: {proceed: 0.9, warn: 0.5, verify: 0.1}\nrules:\n  - id: a\n    effect: allow\n    when: 'args.path.startsWith(\"x\")'\n"))
	f.Add([]byte("budgets: {max_steps: 3, max_wall_time: 1m, max_tokens: 10, max_cost_usd: 0.1, max_consecutive_errors: 2}\nprices: {\"*\": {input_per_1k: 1, output_per_1k: 2}}\nrules: []\n"))
	f.Add([]byte("rate_limits:\n  - {tool: \"fs.*\", per_run: 10/m, global: 5/1h}\nrules: []\n"))
	f.Add([]byte("rules:\n  - id: a\n    effect: deny\n    when: |\n      args.all(k, k.size() > 1) &&\n      run.labels.exists(k, k == \"x\")\n"))
	f.Add([]byte("rules:\n  - id: a\n    effect: allow\n    when: 'confidence.orValue(0.0) > 0.5 ? true : 1 / 0 == 1'\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := validator.ParseRules("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, validator.ErrInvalidPolicy) || !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error %q is not an invalid-policy error naming the file", err)
			}
			return
		}
		if !strings.HasPrefix(p.Version(), "sha256:") {
			t.Fatalf("version %q", p.Version())
		}
		conf := 0.5
		for _, e := range []xctv1.Effect{0, 1, 2, 3} {
			in := &validator.Input{Tool: &xctv1.ToolDescriptor{Name: "fs.read", Effect: e}}
			if e%2 == 1 {
				in = celInput(func(in *validator.Input) {
					in.Tool.Effect = e
					in.Proposal.Confidence = &conf
				})
			}
			out, err := p.Evaluate(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			switch out.Decision {
			case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW, xctv1.VerdictDecision_VERDICT_DECISION_DENY, xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
			default:
				t.Fatalf("decision %v", out.Decision)
			}
			if out.Decision != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW && len(out.Reasons) == 0 {
				t.Fatal("a refusal without reasons")
			}
		}
	})
}
