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
// panic; it either returns a policy that decides every proposal, or an
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
		for _, e := range []xctv1.Effect{0, 1, 2, 3} {
			out, err := p.Evaluate(context.Background(), &validator.Input{Tool: &xctv1.ToolDescriptor{Name: "fs.read", Effect: e}})
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
