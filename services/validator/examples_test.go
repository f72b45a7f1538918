package validator_test

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// exampleTools are the executor's file tools (schemas trimmed to what the
// policies read) and an irreversible tool.
func exampleTools() []*xctv1.ToolDescriptor {
	path := `{"type": "string", "minLength": 1}`
	return []*xctv1.ToolDescriptor{
		{Name: "fs.read", Effect: read, Idempotent: true,
			InputSchema: `{"type": "object", "properties": {"path": ` + path + `}, "required": ["path"], "additionalProperties": false}`},
		{Name: "fs.list", Effect: read, Idempotent: true,
			InputSchema: `{"type": "object", "properties": {"path": ` + path + `}, "additionalProperties": false}`},
		{Name: "fs.write", Effect: reversible,
			InputSchema: `{"type": "object", "properties": {"path": ` + path + `, "content": {"type": "string"}, "create_dirs": {"type": "boolean"}}, "required": ["path", "content"], "additionalProperties": false}`},
		{Name: "fs.delete", Effect: reversible,
			InputSchema: `{"type": "object", "properties": {"path": ` + path + `, "recursive": {"type": "boolean"}}, "required": ["path"], "additionalProperties": false}`},
		{Name: "fs.move", Effect: reversible,
			InputSchema: `{"type": "object", "properties": {"from": ` + path + `, "to": ` + path + `}, "required": ["from", "to"], "additionalProperties": false}`},
		{Name: "shell.exec", Effect: irreversible, InputSchema: shellSchema},
	}
}

// exampleCase is one proposal to an example policy and what it decides.
type exampleCase struct {
	name    string
	tool    string
	args    map[string]any
	run     func(*xctv1.RunContext)
	conf    *float64
	want    xctv1.VerdictDecision
	code    wire.Code
	reasons []string
}

// TestExamplePolicies runs each policy in examples/policies through the
// validator, and lints it against the example tools: what users start from
// must do what its comments say.
func TestExamplePolicies(t *testing.T) {
	t.Parallel()
	examples := map[string][]exampleCase{
		"default.yaml": {
			{name: "read", tool: "fs.read", args: map[string]any{"path": "a"}, want: allow, reasons: []string{"allow-read"}},
			{name: "write", tool: "fs.write", args: map[string]any{"path": "a", "content": "x"}, want: allow, reasons: []string{"allow-reversible"}},
			{name: "shell", tool: "shell.exec", args: map[string]any{"command": "ls"}, want: approval, code: wire.CodeApprovalRequired, reasons: []string{"approve-irreversible"}},
		},
		"read-only.yaml": {
			{name: "read", tool: "fs.read", args: map[string]any{"path": "src/main.go"}, want: allow, reasons: []string{"allow-read"}},
			{name: "list the workspace", tool: "fs.list", args: map[string]any{}, want: allow, reasons: []string{"allow-read"}},
			{name: "write", tool: "fs.write", args: map[string]any{"path": "a", "content": "x"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"default-deny"}},
			{name: "delete", tool: "fs.delete", args: map[string]any{"path": "a"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"default-deny"}},
			{name: "shell", tool: "shell.exec", args: map[string]any{"command": "ls"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"default-deny"}},
			{name: "env file", tool: "fs.read", args: map[string]any{"path": "app/.env"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-read", "no-secrets"}},
			{name: "ssh dir", tool: "fs.list", args: map[string]any{"path": ".ssh"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-read", "no-secrets"}},
			{name: "key", tool: "fs.read", args: map[string]any{"path": "certs/server.key"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-read", "no-secrets"}},
			{name: "env-like name", tool: "fs.read", args: map[string]any{"path": "docs/environment.md"}, want: allow, reasons: []string{"allow-read"}},
			// Session 7: the rule matched .env only as a whole name, and in
			// lower case: .env.production and SERVER.KEY were read.
			{name: "env file of a stage", tool: "fs.read", args: map[string]any{"path": "app/.env.production"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-read", "no-secrets"}},
			{name: "local env file", tool: "fs.read", args: map[string]any{"path": ".env.local"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-read", "no-secrets"}},
			{name: "key in capitals", tool: "fs.read", args: map[string]any{"path": "certs/SERVER.KEY"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-read", "no-secrets"}},
			{name: "env dir in capitals", tool: "fs.list", args: map[string]any{"path": ".SSH"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-read", "no-secrets"}},
		},
		"config-approval.yaml": {
			{name: "read config", tool: "fs.read", args: map[string]any{"path": "config/app.yaml"}, want: allow, reasons: []string{"allow-read"}},
			{name: "list the workspace", tool: "fs.list", args: map[string]any{"path": "."}, want: allow, reasons: []string{"allow-read"}},
			{name: "absolute path", tool: "fs.read", args: map[string]any{"path": "/etc/passwd"}, want: deny, code: wire.CodePolicyDenied,
				reasons: []string{"allow-read", "plain-paths-only"}},
			{name: "write docs", tool: "fs.write", args: map[string]any{"path": "docs/a.md", "content": "x"}, want: allow, reasons: []string{"allow-reversible"}},
			{name: "write config", tool: "fs.write", args: map[string]any{"path": "config/app.yaml", "content": "x"}, want: approval, code: wire.CodeApprovalRequired,
				reasons: []string{"allow-reversible", "config-changes-need-approval"}},
			{name: "delete the config dir", tool: "fs.delete", args: map[string]any{"path": "config", "recursive": true}, want: approval, code: wire.CodeApprovalRequired,
				reasons: []string{"allow-reversible", "config-changes-need-approval"}},
			{name: "configs is not config", tool: "fs.write", args: map[string]any{"path": "configs/a", "content": "x"}, want: allow, reasons: []string{"allow-reversible"}},
			{name: "move into config", tool: "fs.move", args: map[string]any{"from": "tmp/app.yaml", "to": "config/app.yaml"}, want: approval, code: wire.CodeApprovalRequired,
				reasons: []string{"allow-reversible", "config-moves-need-approval"}},
			{name: "dot dot into config", tool: "fs.write", args: map[string]any{"path": "docs/../config/app.yaml", "content": "x"}, want: deny, code: wire.CodePolicyDenied,
				reasons: []string{"allow-reversible", "plain-paths-only"}},
			{name: "dot slash", tool: "fs.write", args: map[string]any{"path": "./config/app.yaml", "content": "x"}, want: deny, code: wire.CodePolicyDenied,
				reasons: []string{"allow-reversible", "plain-paths-only"}},
			{name: "double slash", tool: "fs.move", args: map[string]any{"from": "a", "to": "config//b"}, want: deny, code: wire.CodePolicyDenied,
				reasons: []string{"allow-reversible", "config-moves-need-approval", "plain-paths-only"}},
			{name: "dots in a name are fine", tool: "fs.write", args: map[string]any{"path": "docs/v1..2.md", "content": "x"}, want: allow, reasons: []string{"allow-reversible"}},
			{name: "shell", tool: "shell.exec", args: map[string]any{"command": "ls"}, want: approval, code: wire.CodeApprovalRequired, reasons: []string{"approve-irreversible"}},
		},
		"no-deletes.yaml": {
			{name: "read", tool: "fs.read", args: map[string]any{"path": "a"}, want: allow, reasons: []string{"allow-read"}},
			{name: "write", tool: "fs.write", args: map[string]any{"path": "a", "content": "x"}, want: allow, reasons: []string{"allow-reversible"}},
			{name: "move", tool: "fs.move", args: map[string]any{"from": "a", "to": "b"}, want: allow, reasons: []string{"allow-reversible"}},
			{name: "delete", tool: "fs.delete", args: map[string]any{"path": "a"}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-reversible", "no-deletes"}},
			{name: "truncate", tool: "fs.write", args: map[string]any{"path": "a", "content": ""}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"allow-reversible", "no-truncating-writes"}},
			{name: "shell", tool: "shell.exec", args: map[string]any{"command": "ls"}, want: approval, code: wire.CodeApprovalRequired, reasons: []string{"approve-irreversible"}},
		},
		"production.yaml": {
			{name: "read", tool: "fs.read", args: map[string]any{"path": "a"}, want: allow, reasons: []string{"allow-read"}},
			// A label never asks for less: a submitter's "staging" is its own word.
			{name: "a submitter's write labelled staging", tool: "fs.write", args: map[string]any{"path": "a", "content": "x"}, run: env("staging"), want: approval, code: wire.CodeApprovalRequired,
				reasons: []string{"changes-need-approval"}},
			{name: "a submitter's write", tool: "fs.write", args: map[string]any{"path": "a", "content": "x"}, want: approval, code: wire.CodeApprovalRequired,
				reasons: []string{"changes-need-approval"}},
			{name: "an operator's write", tool: "fs.write", args: map[string]any{"path": "a", "content": "x"}, run: func(r *xctv1.RunContext) {
				r.PrincipalRoles = []string{"operator"}
			}, want: allow, reasons: []string{"allow-changes-by-operators"}},
			{name: "an operator's write labelled Prod", tool: "fs.write", args: map[string]any{"path": "a", "content": "x"}, run: func(r *xctv1.RunContext) {
				env("Prod")(r)
				r.PrincipalRoles = []string{"operator"}
			}, want: approval, code: wire.CodeApprovalRequired, reasons: []string{"allow-changes-by-operators", "prod-changes-need-approval"}},
			{name: "shell without the operator role", tool: "shell.exec", args: map[string]any{"command": "ls"}, run: env("staging"), want: deny, code: wire.CodePolicyDenied,
				reasons: []string{"changes-need-approval", "irreversible-needs-an-operator", "approve-irreversible"}},
			{name: "shell by an operator", tool: "shell.exec", args: map[string]any{"command": "ls"}, run: func(r *xctv1.RunContext) {
				env("staging")(r)
				r.PrincipalRoles = []string{"operator"}
			}, want: approval, code: wire.CodeApprovalRequired, reasons: []string{"approve-irreversible"}},
			{name: "low confidence", tool: "fs.read", args: map[string]any{"path": "a"}, conf: ptr(0.5), want: approval, code: wire.CodeApprovalRequired,
				reasons: []string{"allow-read", "builtin.confidence"}},
			{name: "too many tokens", tool: "fs.read", args: map[string]any{"path": "a"}, run: func(r *xctv1.RunContext) {
				r.Model, r.InputTokens, r.OutputTokens = "openai:gpt-4o", 150000, 60000
			}, want: deny, code: wire.CodeBudgetExceeded, reasons: []string{"builtin.budget"}},
			{name: "scripted models cost nothing", tool: "fs.read", args: map[string]any{"path": "a"}, run: func(r *xctv1.RunContext) {
				r.Model, r.InputTokens = "scripted:demo.yaml", 150000
			}, want: allow, reasons: []string{"allow-read"}},
			// Session 9 (trust9b): "*" at 0 priced every model the table
			// does not name, so a submitter who named a model of its
			// choosing (a dated snapshot of a listed one, a dearer one)
			// ran free of max_cost_usd. Only scripted models are free now;
			// another model without a price is refused once it used tokens.
			{name: "an unlisted model is not free", tool: "fs.read", args: map[string]any{"path": "a"}, run: func(r *xctv1.RunContext) {
				r.Model, r.InputTokens, r.OutputTokens = "openai:o1", 150000, 40000
			}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"builtin.budget"}},
			{name: "a dated snapshot of a listed model is not free", tool: "fs.read", args: map[string]any{"path": "a"}, run: func(r *xctv1.RunContext) {
				r.Model, r.InputTokens = "openai:gpt-4o-2024-08-06", 150000
			}, want: deny, code: wire.CodePolicyDenied, reasons: []string{"builtin.budget"}},
			{name: "a crew of scripted agents costs nothing", tool: "fs.read", args: map[string]any{"path": "a"}, run: func(r *xctv1.RunContext) {
				r.Model, r.Models, r.InputTokens = "crew:review", []string{"scripted:crew-demo.yaml#fixer", "scripted:crew-demo.yaml#reviewer"}, 150000
			}, want: allow, reasons: []string{"allow-read"}},
			{name: "out of time", tool: "fs.read", args: map[string]any{"path": "a"}, run: func(r *xctv1.RunContext) {
				r.Elapsed = durationpb.New(31 * 60e9)
			}, want: deny, code: wire.CodeBudgetExceeded, reasons: []string{"builtin.budget"}},
		},
		"shadow-candidate.yaml": {
			// Alone, a shadow file is recorded beside the built-in default.
			{name: "write elsewhere", tool: "fs.write", args: map[string]any{"path": "src/a.go", "content": "x"}, want: allow, reasons: []string{"allow-reversible"}},
		},
	}
	entries, err := filepath.Glob(filepath.Join("..", "..", "examples", "policies", "*.yaml"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("examples: %v, %v", entries, err)
	}
	cat := catalog.Static(exampleTools()...)
	for _, path := range entries {
		name := filepath.Base(path)
		cases, ok := examples[name]
		if !ok {
			t.Errorf("example %s has no test cases", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			findings, err := validator.LintFiles(cat, path)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range findings {
				t.Errorf("lint: %s", f)
			}
			s, err := validator.NewWithCatalog(validator.Config{PolicyFile: path}, cat, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					req := request(t, c.tool, c.args)
					if c.run != nil {
						c.run(req.Run)
					}
					req.Proposal.Confidence = c.conf
					checkVerdict(t, validate(t, s, req), c.want, c.code, c.reasons...)
				})
			}
		})
	}
}

// TestShadowCandidateExample runs the shadow example beside the default,
// as its comment says to.
func TestShadowCandidateExample(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "examples", "policies")
	s, err := validator.NewWithCatalog(validator.Config{PolicyFile: filepath.Join(dir, "default.yaml") + "," + filepath.Join(dir, "shadow-candidate.yaml")},
		catalog.Static(exampleTools()...), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path   string
		shadow xctv1.VerdictDecision
	}{{"docs/a.md", allow}, {"src/a.go", approval}} {
		resp, err := s.Validate(context.Background(), request(t, "fs.write", map[string]any{"path": c.path, "content": "x"}))
		if err != nil {
			t.Fatal(err)
		}
		v := resp.GetVerdict()
		if v.GetDecision() != allow || len(v.GetShadow()) != 1 || v.GetShadow()[0].GetDecision() != c.shadow {
			t.Errorf("%s: verdict %v, shadow %v; want allow, shadow %v", c.path, v.GetDecision(), v.GetShadow(), c.shadow)
		}
	}
}

func env(e string) func(*xctv1.RunContext) {
	return func(r *xctv1.RunContext) { r.Labels = map[string]string{"env": e} }
}
