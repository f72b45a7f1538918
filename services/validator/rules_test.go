package validator_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/services/validator"
)

const (
	allow    = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
	deny     = xctv1.VerdictDecision_VERDICT_DECISION_DENY
	approval = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL

	read         = xctv1.Effect_EFFECT_READ
	reversible   = xctv1.Effect_EFFECT_REVERSIBLE
	irreversible = xctv1.Effect_EFFECT_IRREVERSIBLE
	unspecified  = xctv1.Effect_EFFECT_UNSPECIFIED
)

func mustParse(tb testing.TB, text string) *validator.RulesPolicy {
	tb.Helper()
	p, err := validator.ParseRules("test.yaml", []byte(text))
	if err != nil {
		tb.Fatalf("parse policy: %v", err)
	}
	return p
}

func TestRulesSemantics(t *testing.T) {
	t.Parallel()
	const globs = `
rules:
  - id: allow-fs
    effect: allow
    message: file tools are fine
    tools: ["fs.*"]
  - id: allow-net-get
    effect: allow
    tools: ["net.get", "net.hea?"]
`
	const effects = `
rules:
  - id: allow-read
    effect: allow
    effects: [read]
  - id: fs-reversible
    effect: allow
    tools: ["fs.*"]
    effects: [reversible]
`
	const denyWins = `
rules:
  - id: allow-all
    effect: allow
  - id: approve-shell
    effect: require_approval
    message: shell needs a human
    tools: ["shell.*"]
  - id: deny-shell-rm
    effect: deny
    message: never remove files from a shell
    tools: ["shell.rm"]
`
	const approvalOverAllow = `
rules:
  - id: allow-all
    effect: allow
  - id: approve-irreversible
    effect: require_approval
    message: a human must look first
    effects: [irreversible]
`
	const onlyReadAndReversible = `
rules:
  - id: allow-safe
    effect: allow
    effects: [read, reversible]
`
	tests := []struct {
		name        string
		policy      string
		tool        string
		effect      xctv1.Effect
		want        xctv1.VerdictDecision
		wantReasons []string
		wantMessage string // substring of Outcome.Message
	}{
		{"glob matches namespace", globs, "fs.read", read, allow, []string{"allow-fs"}, ""},
		{"glob star crosses dots", globs, "fs.dir.list", irreversible, allow, []string{"allow-fs"}, ""},
		{"glob is anchored", globs, "xfs.read", read, deny, []string{"default-deny"}, `no policy rule allows tool "xfs.read"`},
		{"glob prefix needs the dot", globs, "fsx", read, deny, []string{"default-deny"}, ""},
		{"exact pattern", globs, "net.get", reversible, allow, []string{"allow-net-get"}, ""},
		{"question mark is one character", globs, "net.head", reversible, allow, []string{"allow-net-get"}, ""},
		{"question mark is not two", globs, "net.heads", reversible, deny, []string{"default-deny"}, ""},
		{"effects selector matches", effects, "db.query", read, allow, []string{"allow-read"}, ""},
		{"effects selector excludes", effects, "db.update", reversible, deny, []string{"default-deny"}, ""},
		{"every selector must match", effects, "fs.write", reversible, allow, []string{"fs-reversible"}, ""},
		{"one selector failing is no match", effects, "fs.delete", irreversible, deny, []string{"default-deny"}, ""},
		{"deny wins over approval and allow", denyWins, "shell.rm", irreversible, deny,
			[]string{"allow-all", "approve-shell", "deny-shell-rm"}, "never remove files from a shell"},
		{"approval wins over allow", denyWins, "shell.ls", read, approval,
			[]string{"allow-all", "approve-shell"}, "shell needs a human"},
		{"allow without conflict", denyWins, "fs.read", read, allow, []string{"allow-all"}, ""},
		{"approval for irreversible", approvalOverAllow, "mail.send", irreversible, approval,
			[]string{"allow-all", "approve-irreversible"}, "a human must look first"},
		{"unspecified effect is irreversible", approvalOverAllow, "legacy.tool", unspecified, approval,
			[]string{"allow-all", "approve-irreversible"}, ""},
		{"unknown effect value is irreversible", approvalOverAllow, "future.tool", xctv1.Effect(42), approval,
			[]string{"allow-all", "approve-irreversible"}, ""},
		{"unspecified effect is not read", onlyReadAndReversible, "legacy.tool", unspecified, deny, []string{"default-deny"}, ""},
		{"empty rules deny everything", "rules: []\n", "fs.read", read, deny, []string{"default-deny"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.policy)
			out, err := p.Evaluate(context.Background(), &validator.Input{
				Tool: &xctv1.ToolDescriptor{Name: tt.tool, Effect: tt.effect},
			})
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision != tt.want {
				t.Errorf("decision = %v, want %v", out.Decision, tt.want)
			}
			var ids []string
			for _, r := range out.Reasons {
				ids = append(ids, r.GetRuleId())
				if r.GetMessage() == "" {
					t.Errorf("reason %s has no message", r.GetRuleId())
				}
			}
			if !slices.Equal(ids, tt.wantReasons) {
				t.Errorf("reasons = %v, want %v", ids, tt.wantReasons)
			}
			if tt.want != allow && out.Message == "" {
				t.Error("a non-allow outcome has no message")
			}
			if !strings.Contains(out.Message, tt.wantMessage) {
				t.Errorf("message = %q, want it to contain %q", out.Message, tt.wantMessage)
			}
		})
	}
}

func TestRulesPolicyRejectsMissingTool(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "rules: []\n")
	if _, err := p.Evaluate(context.Background(), &validator.Input{}); !errors.Is(err, validator.ErrNoToolDescriptor) {
		t.Fatalf("err = %v, want ErrNoToolDescriptor", err)
	}
}

func TestPolicyVersionIsContentHash(t *testing.T) {
	t.Parallel()
	text := "rules:\n  - id: a\n    effect: allow\n"
	sum := sha256.Sum256([]byte(text))
	if got, want := mustParse(t, text).Version(), "sha256:"+hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("version = %s, want %s", got, want)
	}
	// Any change of the text, even a comment, is a new version.
	if mustParse(t, text+"# note\n").Version() == mustParse(t, text).Version() {
		t.Fatal("different texts have the same version")
	}
}

func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	p := validator.DefaultPolicy()
	sum := sha256.Sum256([]byte(validator.DefaultPolicyYAML))
	if want := "sha256:" + hex.EncodeToString(sum[:]); p.Version() != want {
		t.Fatalf("version = %s, want %s", p.Version(), want)
	}
	for _, tt := range []struct {
		effect xctv1.Effect
		want   xctv1.VerdictDecision
	}{
		{read, allow},
		{reversible, allow},
		{irreversible, approval},
		{unspecified, approval},
	} {
		out, err := p.Evaluate(context.Background(), &validator.Input{Tool: &xctv1.ToolDescriptor{Name: "x.y", Effect: tt.effect}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Decision != tt.want {
			t.Errorf("effect %v: decision %v, want %v", tt.effect, out.Decision, tt.want)
		}
	}
	// The example shipped with the repository is the same policy.
	example, err := validator.LoadRulesFile(filepath.Join("..", "..", "examples", "policies", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if example.Version() != p.Version() {
		t.Fatal("examples/policies/default.yaml differs from DefaultPolicyYAML")
	}
}

func TestParseRulesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		text     string
		wantLine int
		wantMsg  string
	}{
		{"syntax error", "rules:\n  - id: a\n    effect: [allow\n", 3, "did not find expected ',' or ']'"},
		{"bad indentation", "rules:\n  - id: a\n   effect: allow\n", 2, "did not find expected '-' indicator"},
		{"unclosed at the end of the file", "rules: [\n", 2, "did not find expected node content"},
		{"missing key", "rules:\n  - id: a\n    effect: allow\n  tools: [x]\n", 2, ""},
		{"scanner error", "rules:\n  - id: a\n    effect: allow\n    message: a: b\n", 4, "mapping values are not allowed"},
		{"tab indentation", "rules:\n\t- id: a\n", 2, "cannot start any token"},
		{"unknown field in a rule", "rules:\n  - id: a\n    effect: allow\n    colour: red\n", 4, `unknown field "colour" in a rule`},
		{"unknown top-level field", "version: 2\nrules: []\n", 1, `unknown field "version" at the top level`},
		{"bad effect value", "rules:\n  - id: a\n    effect: permit\n", 3, `effect "permit" is not one of allow, deny, require_approval`},
		{"bad effect kind", "rules:\n  - id: a\n    effect: [allow]\n", 3, "effect (not a plain value)"},
		{"bad effects entry", "rules:\n  - id: a\n    effect: allow\n    effects:\n      - read\n      - wrtie\n", 6, `effects entry "wrtie"`},
		{"tools is not a list", "rules:\n  - id: a\n    effect: allow\n    tools: fs.*\n", 4, "cannot unmarshal"},
		{"duplicate key", "rules:\n  - id: a\n    id: b\n    effect: allow\n", 3, "already defined"},
		{"missing id", "rules:\n  - effect: allow\n", 2, "rule 1: id is required"},
		{"bad id", "rules:\n  - id: a b\n    effect: allow\n", 2, "id must be"},
		{"reserved id", "rules:\n  - id: default-deny\n    effect: allow\n", 2, "reserved"},
		{"reserved builtin id", "rules:\n  - id: builtin.schema\n    effect: allow\n", 2, "reserved"},
		{"duplicate id", "rules:\n  - id: a\n    effect: allow\n  - id: a\n    effect: deny\n", 4, "duplicate id, first used at line 2"},
		{"missing effect", "rules:\n  - id: a\n    tools: [x]\n", 2, "effect is required"},
		{"empty tools", "rules:\n  - id: a\n    effect: allow\n    tools: []\n", 2, "tools is an empty list"},
		{"empty effects", "rules:\n  - id: a\n    effect: allow\n    effects: []\n", 2, "effects is an empty list"},
		{"empty pattern", "rules:\n  - id: a\n    effect: allow\n    tools: ['']\n", 2, "is empty"},
		{"pattern with space", "rules:\n  - id: a\n    effect: allow\n    tools: ['fs. read']\n", 2, "white space"},
		{"missing rules", "{}\n", 1, `"rules" is required`},
		{"null rules", "\n\nrules:\n", 3, `"rules" is required`},
		{"not a mapping", "- a\n", 1, "cannot unmarshal"},
		{"two documents", "rules: []\n---\nrules: []\n", 2, "only one YAML document"},
		{"empty file", "", 0, "the policy is empty"},
		{"only comments", "# nothing\n", 0, "the policy is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := validator.ParseRules("policy.yaml", []byte(tt.text))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, validator.ErrInvalidPolicy) {
				t.Errorf("error %v does not wrap ErrInvalidPolicy", err)
			}
			var pe *validator.PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *PolicyError", err)
			}
			if pe.File != "policy.yaml" || pe.Line != tt.wantLine {
				t.Errorf("position = %s:%d, want policy.yaml:%d (%v)", pe.File, pe.Line, tt.wantLine, err)
			}
			if !strings.Contains(pe.Msg, tt.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", pe.Msg, tt.wantMsg)
			}
			prefix := "policy.yaml: "
			if tt.wantLine > 0 {
				prefix = "policy.yaml:" + strconv.Itoa(tt.wantLine) + ": "
			}
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error text %q does not start with %q", err, prefix)
			}
		})
	}
}

func TestParseRulesReportsEveryProblem(t *testing.T) {
	t.Parallel()
	text := "rules:\n  - id: a\n    effect: permit\n  - id: b\n    effect: allow\n    effects: [sometimes]\n"
	_, err := validator.ParseRules("p.yaml", []byte(text))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"p.yaml:3: ", "p.yaml:6: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLoadRulesFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "broken.yaml", "rules:\n  - id: a\n    effect: allow\n    colour: red\n")
	_, err := validator.LoadRulesFile(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":4: ") {
		t.Fatalf("err = %v, want it to start with %s:4:", err, path)
	}
	if _, err := validator.LoadRulesFile(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
	big := writeFile(t, "big.yaml", "rules: []\n"+strings.Repeat("#", 2<<20))
	if _, err := validator.LoadRulesFile(big); !errors.Is(err, validator.ErrInvalidPolicy) {
		t.Fatalf("oversized file: err = %v", err)
	}
}
