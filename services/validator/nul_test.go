package validator_test

import (
	"context"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// TestNULInAServersArgument: a policy reads a string whole, a tool server
// in C (or one passing the string to a C library: open(2), a resolver)
// up to its first NUL. Under a rule denying paths that end in ".env",
// {"path": ".env\u0000.txt"} was allowed on main and such a server opens
// .env; a host rule on ".example.org" allowed "evil.test\u0000.example.org".
// Now a proposal of a server's tool (MCP, gRPC: source set) with a NUL in
// any string or member name is denied, SCHEMA_INVALID naming where; the
// built-in tools' (Go, which refuse a NUL where it matters) are judged as
// before.
func TestNULInAServersArgument(t *testing.T) {
	schema := `{"type": "object"}`
	cat := catalog.Static(
		&xctv1.ToolDescriptor{Name: "files.read", InputSchema: schema, Effect: xctv1.Effect_EFFECT_READ, Source: "mcp:files"},
		&xctv1.ToolDescriptor{Name: "net.fetch", InputSchema: schema, Effect: xctv1.Effect_EFFECT_READ, Source: "grpc:net"},
		&xctv1.ToolDescriptor{Name: "fs.write", InputSchema: schema, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
	)
	policy := writeFile(t, "policy.yaml", `rules:
  - {id: allow, effect: allow, effects: [read, reversible]}
  - {id: no-env, effect: deny, tools: ["files.*"], when: 'has(args.path) && args.path.endsWith(".env")'}
  - {id: only-example, effect: deny, tools: ["net.*"], when: '!args.host.endsWith(".example.org")'}
`)
	s, err := validator.NewWithCatalog(validator.Config{PolicyFile: policy}, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		tool  string
		args  map[string]any
		allow bool
		where string
	}{
		{"files.read", map[string]any{"path": ".env\u0000.txt"}, false, `"path"`},
		{"files.read", map[string]any{"opts": map[string]any{"list": []any{"a", "b\u0000"}}, "path": "README"}, false, `"opts.list[1]"`},
		{"files.read", map[string]any{"pa\u0000th": ".env"}, false, `pa\x00th`},
		{"net.fetch", map[string]any{"host": "evil.test\u0000.example.org"}, false, `"host"`},
		{"files.read", map[string]any{"path": "README"}, true, ""},
		{"net.fetch", map[string]any{"host": "api.example.org"}, true, ""},
		{"fs.write", map[string]any{"path": "a.txt", "content": "x\u0000y"}, true, ""}, // a built-in: its own checks
	} {
		resp, err := s.Validate(context.Background(), stepRequest(t, "nul-run", i+1, c.tool, c.args))
		if err != nil {
			t.Fatal(err)
		}
		v := resp.GetVerdict()
		if got := v.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW; got != c.allow {
			t.Errorf("%s %q: allowed %v, want %v (%v)", c.tool, c.args, got, c.allow, v.GetError())
			continue
		}
		if !c.allow && (v.GetError().GetCode() != string(wire.CodeSchemaInvalid) || !strings.Contains(v.GetError().GetMessage(), c.where)) {
			t.Errorf("%s %q: %v, want SCHEMA_INVALID naming %s", c.tool, c.args, v.GetError(), c.where)
		}
	}
}
