package attack

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/executor"
)

// openReadTool is structReadTool (argname15_test.go) with the schema many
// MCP and gRPC tool servers give: an object, nothing declared.
type openReadTool struct{ structReadTool }

func (t openReadTool) Descriptor() *xctv1.ToolDescriptor {
	d := t.structReadTool.Descriptor()
	d.InputSchema = `{"type":"object"}`
	return d
}

// An argument named otherwise than the policy reads it, for a tool whose
// schema names nothing. Session 15's check compares a member's name with
// the schema's names; with none, a deny rule guarded by has(args.path)
// read {"PATH": ".env"} as no path and the read was allowed on main, and
// the tool's Go server (encoding/json into a struct) read .env. Now the
// names the tool's rules read are the names compared: SCHEMA_INVALID
// naming the policy's name, nothing executed.
func TestAttackArgumentNamedUnlikeThePolicyReadsIt(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(`rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: no-secrets
    effect: deny
    tools: ["test.*"]
    when: 'has(args.path) && args.path.matches("(^|/)\\.env$")'
  - id: unmasked
    effect: deny
    tools: ["test.*"]
    when: 'has(args.opts) && has(args.opts.mask) && args.opts.mask == "none"'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startBindCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Validator.PolicyFile = policy
		o.ExtraTools = []executor.Tool{openReadTool{structReadTool{ws: cfg.Executor.Workspace}}}
	})
	for name, content := range map[string]string{".env": "TOKEN=hunter2", "README": "hello"} {
		if err := os.WriteFile(filepath.Join(c.workspace, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val, exec := c.validatorAs(t, "service:dev"), c.executorAs(t, "admin")

	vreq, ereq := proposal(t, "argname17-run", 1, "test.read", map[string]any{"path": "README"})
	v, err := val.Validate(ctx, vreq)
	if err != nil || v.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Fatalf("a plain read of README: %v %v", v, err)
	}
	resp, err := exec.Execute(ctx, withVerdict(ereq, v.GetVerdict().GetSigned()))
	if err != nil || !strings.Contains(resp.GetResponse().GetSuccess().GetResult().AsInterface().(map[string]any)["content"].(string), "*****") {
		t.Fatalf("README: %v %v", resp, err)
	}
	for i, a := range []map[string]any{
		{"path": ".env"},
		{"PATH": ".env"},
		{"Path": ".env"},
		{"opts": map[string]any{"MASK": "none"}, "path": "README"},
		{"PATH": ".env", "OPTS": map[string]any{"mask": "none"}}, // on main: TOKEN=hunter2
	} {
		vreq, ereq := proposal(t, "argname17-run", 10+i, "test.read", a)
		v, err := val.Validate(ctx, vreq)
		if err != nil {
			t.Fatal(err)
		}
		verdict := v.GetVerdict()
		if verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
			resp, err := exec.Execute(ctx, withVerdict(ereq, verdict.GetSigned()))
			got, _ := json.Marshal(resp.GetResponse().GetSuccess().GetResult().AsInterface())
			t.Errorf("%v: allowed; the tool returned %s (%v)", a, got, err)
			continue
		}
		if _, plain := a["path"]; plain && a["opts"] == nil {
			if verdict.GetError().GetCode() != string(wire.CodePolicyDenied) {
				t.Errorf("%v: %v, want the rule's deny", a, verdict.GetError())
			}
			continue
		}
		if verdict.GetError().GetCode() != string(wire.CodeSchemaInvalid) || !strings.Contains(verdict.GetError().GetMessage(), "the policy reads") {
			t.Errorf("%v: %v, want a SCHEMA_INVALID deny naming the policy's name", a, verdict.GetError())
		}
	}
}

// truthyDeleteTool deletes a path of the workspace, a tree when
// "recursive" is true as a Python or JavaScript server reads it (`if
// args.get("recursive")`: any non-empty string, non-zero number, object or
// list). Its schema, as many servers' are, types nothing.
type truthyDeleteTool struct{ ws string }

func (truthyDeleteTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "test.delete", Description: "deletes a path (a tree with recursive)", Effect: xctv1.Effect_EFFECT_REVERSIBLE,
		InputSchema: `{"type":"object"}`,
	}
}

func (t truthyDeleteTool) Invoke(_ context.Context, args map[string]any) (any, *xctv1.Error) {
	p, _ := args["path"].(string)
	target := filepath.Join(t.ws, filepath.Clean("/"+p))
	truthy := false
	switch r := args["recursive"].(type) {
	case bool:
		truthy = r
	case string:
		truthy = r != ""
	case float64:
		truthy = r != 0
	case map[string]any, []any:
		truthy = true
	}
	var err error
	if truthy {
		err = os.RemoveAll(target)
	} else {
		err = os.Remove(target)
	}
	if err != nil {
		return nil, wire.Errorf(wire.CodeToolFailure, "%v", err)
	}
	return map[string]any{"deleted": p, "tree": truthy}, nil
}

// A value of another type than the policy compares it with. CEL's ==
// across types is false, not an error: under a deny rule
// `has(args.recursive) && args.recursive == true`, {"recursive": "true"}
// (or "false", or 1) was allowed on main for a tool whose schema does not
// type it, and a server reading it as Python does deleted the tree. Now
// SCHEMA_INVALID, nothing executed; a boolean false deletes one file.
func TestAttackArgumentOfAnotherTypeThanThePolicyComparesItWith(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(`rules:
  - {id: deletes, effect: allow, tools: ["test.delete"]}
  - id: no-trees
    effect: deny
    tools: ["test.delete"]
    when: 'has(args.recursive) && args.recursive == true'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startBindCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Validator.PolicyFile = policy
		o.ExtraTools = []executor.Tool{truthyDeleteTool{ws: cfg.Executor.Workspace}}
	})
	tree := filepath.Join(c.workspace, "data")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data/a.txt", "data/sub/b.txt", "one.txt"} {
		if err := os.WriteFile(filepath.Join(c.workspace, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val, exec := c.validatorAs(t, "service:dev"), c.executorAs(t, "admin")
	for i, a := range []map[string]any{
		{"path": "data", "recursive": true},
		{"path": "data", "recursive": "true"}, // on main: the tree deleted
		{"path": "data", "recursive": "false"},
		{"path": "data", "recursive": 1.0},
		{"path": "data", "recursive": map[string]any{"yes": true}},
	} {
		vreq, ereq := proposal(t, "argtype17-run", 1+i, "test.delete", a)
		v, err := val.Validate(ctx, vreq)
		if err != nil {
			t.Fatal(err)
		}
		verdict := v.GetVerdict()
		if verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
			resp, err := exec.Execute(ctx, withVerdict(ereq, verdict.GetSigned()))
			got, _ := json.Marshal(resp.GetResponse().GetSuccess().GetResult().AsInterface())
			t.Errorf("%v: allowed; the tool returned %s (%v)", a, got, err)
			continue
		}
		want := wire.CodeSchemaInvalid
		if a["recursive"] == true {
			want = wire.CodePolicyDenied
		}
		if verdict.GetError().GetCode() != string(want) {
			t.Errorf("%v: %v, want %s", a, verdict.GetError(), want)
		}
	}
	if _, err := os.Stat(filepath.Join(tree, "sub", "b.txt")); err != nil {
		t.Errorf("the tree: %v", err)
	}
	vreq, ereq := proposal(t, "argtype17-run", 20, "test.delete", map[string]any{"path": "one.txt", "recursive": false})
	v, err := val.Validate(ctx, vreq)
	if err != nil || v.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Fatalf("one file: %v %v", v, err)
	}
	if resp, err := exec.Execute(ctx, withVerdict(ereq, v.GetVerdict().GetSigned())); err != nil || resp.GetResponse().GetSuccess() == nil {
		t.Fatalf("one file: %v %v", resp, err)
	}
	if _, err := os.Stat(filepath.Join(c.workspace, "one.txt")); err == nil {
		t.Error("one.txt is still there")
	}
}
