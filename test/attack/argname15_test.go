package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/executor"
)

// structReadTool is a read tool whose server decodes its arguments into a
// struct with encoding/json, as a Go MCP or tool server does: a member
// name matches a field without regard to case (and with the long s and
// the Kelvin sign folded). Its schema, as many servers' are, names
// optional properties and says nothing of others.
type structReadTool struct{ ws string }

func (structReadTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "test.read", Description: "reads a file (README when no path is given)", Effect: xctv1.Effect_EFFECT_READ, Idempotent: true,
		InputSchema: `{"type":"object","properties":{"path":{"type":"string"},"opts":{"type":"object","properties":{"mask":{"type":"string"}}}}}`,
	}
}

func (t structReadTool) Invoke(_ context.Context, args map[string]any) (any, *xctv1.Error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "%v", err)
	}
	q := struct {
		Path string `json:"path"`
		Opts struct {
			Mask string `json:"mask"`
		} `json:"opts"`
	}{Path: "README"}
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "%v", err)
	}
	b, err := os.ReadFile(filepath.Join(t.ws, filepath.Clean("/"+q.Path)))
	if err != nil {
		return nil, wire.Errorf(wire.CodeToolFailure, "%v", err)
	}
	content := string(b)
	if q.Opts.Mask == "none" {
		return map[string]any{"content": content}, nil
	}
	return map[string]any{"content": strings.Repeat("*", len(content))}, nil
}

// An argument named otherwise than its schema names it. A deny rule
// guarded as docs/policy.md says (`has(args.path) && ...`) reads
// args.path; the proposal names it "PATH" (or "Path", or with the Kelvin
// sign "\u212A"), which a schema without additionalProperties: false lets
// through, so has(args.path) is false and the read is allowed; a Go
// server decoding into a struct reads "PATH" as path. Session 14's
// KeyClash refuses two such names in one object, not one alone.
func TestAttackArgumentNamedUnlikeItsSchema(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(`rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: no-secrets
    effect: deny
    tools: ["test.*"]
    when: 'has(args.path) && args.path.matches("(^|/)\\.env$")'
  - id: unmasked-needs-approval
    effect: deny
    tools: ["test.*"]
    when: 'has(args.opts) && has(args.opts.mask) && args.opts.mask == "none"'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var ws string
	c := startBindCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Validator.PolicyFile = policy
		ws = cfg.Executor.Workspace
		o.ExtraTools = []executor.Tool{structReadTool{ws: ws}}
	})
	for name, content := range map[string]string{".env": "TOKEN=hunter2", "README": "hello"} {
		if err := os.WriteFile(filepath.Join(c.workspace, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val, exec := c.validatorAs(t, "service:dev"), c.executorAs(t, "admin")

	// The plain spellings: the rules judge them.
	for i, a := range []map[string]any{{"path": ".env"}, {"opts": map[string]any{"mask": "none"}}} {
		vreq, _ := proposal(t, "argname-run", i+1, "test.read", a)
		v, err := val.Validate(ctx, vreq)
		if err != nil {
			t.Fatal(err)
		}
		if v.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_DENY {
			t.Fatalf("%v: %v, want the rules' deny", a, v.GetVerdict())
		}
	}
	vreq, _ := proposal(t, "argname-run", 3, "test.read", map[string]any{"path": "README"})
	if v, err := val.Validate(ctx, vreq); err != nil || v.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Fatalf("a plain read of README: %v %v", v, err)
	}

	for i, a := range []map[string]any{
		{"PATH": ".env"},
		{"Path": ".env"},
		{"opts": map[string]any{"MASK": "none"}, "path": "README"},
		{"opts": map[string]any{"mas\u212A": "none"}},            // the Kelvin sign
		{"PATH": ".env", "OPTS": map[string]any{"mask": "none"}}, // on main: TOKEN=hunter2
	} {
		vreq, ereq := proposal(t, "argname-run", 10+i, "test.read", a)
		v, err := val.Validate(ctx, vreq)
		if err != nil {
			t.Fatal(err)
		}
		verdict := v.GetVerdict()
		if verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
			resp, err := exec.Execute(ctx, withVerdict(ereq, verdict.GetSigned()))
			t.Errorf("%v: allowed; the tool returned %v (%v)", a, resp.GetResponse().GetSuccess().GetResult().AsInterface(), err)
			continue
		}
		if verdict.GetError().GetCode() != string(wire.CodeSchemaInvalid) || !strings.Contains(verdict.GetError().GetMessage(), "schema names") {
			t.Errorf("%v: %v, want a SCHEMA_INVALID deny naming the schema's name", a, verdict.GetError())
		}
	}
	// A member the schema does not name in any spelling is the schema's
	// business (this one lets it through), not a second name for one.
	vreq, _ = proposal(t, "argname-run", 20, "test.read", map[string]any{"list": []any{map[string]any{"PATH": ".env"}}, "path": "README"})
	if v, err := val.Validate(ctx, vreq); err != nil || v.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		t.Errorf("an undeclared member: %v %v, want allowed", v, err)
	}
}

// A header named in another case than the rule names it. HTTP header
// names are case-insensitive, and http.request sent {"authorization":
// ...} as Authorization, while a rule reading `"Authorization" in
// args.headers` (no credentials from the agent) did not see it: on main
// the server got the agent's bearer token. Now a header name is taken
// only in its canonical form (Go's, with "_" separating words as "-"
// does, which CGI servers read as one): "authorization" is refused,
// naming "Authorization", before anything is sent.
func TestAttackHeaderNamedInAnotherCase(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization")+r.Header.Get("Cookie"))
		mu.Unlock()
		fmt.Fprint(w, "hello")
	}))
	t.Cleanup(srv.Close)
	base := srv.URL
	policy := `rules:
  - {id: gets, effect: allow, tools: [http.request], when: 'args.method == "GET"'}
  - id: no-credentials
    effect: deny
    tools: [http.request]
    when: 'has(args.headers) && ("Authorization" in args.headers || "Cookie" in args.headers)'
`
	tools := fmt.Sprintf("http:\n  allow_hosts: [%q]\n  allow_addresses: [127.0.0.1/32]\n  timeout: 5s\n", strings.TrimPrefix(base, "http://"))
	c := startBindCluster(t, withTools(t, tools, policy))
	get := func(header, value string) string {
		return step("http.request", fmt.Sprintf("{method: GET, url: %q, headers: {%q: %q}}", base+"/x", header, value))
	}
	c.writeScript(t, "h.yaml", script(
		get("Authorization", "Bearer stolen"), // the rule's spelling: denied
		get("authorization", "Bearer stolen"),
		get("AUTHORIZATION", "Bearer stolen"),
		get("cookie", "session=stolen"),
		get("X-Request-Id", "fine"),
		get("X_Custom_Header", "fine"),
	))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:h.yaml"})
	mu.Lock()
	sent := append([]string(nil), got...)
	mu.Unlock()
	// X_Custom_Header is refused too since session 16 (a "_" is sent
	// only when the configuration lists the name). Since session 17 the
	// validator refuses the names the rule reads in another case
	// (SCHEMA_INVALID, naming the rule's "Authorization"), before the
	// executor's own refusal (INVALID_ARGUMENT, which X_Custom_Header
	// still meets) is reached.
	if fmt.Sprint(sent) != "[]" {
		t.Errorf("the server got %q, want one request without credentials", sent)
	}
	if errs := stepErrors(run); fmt.Sprint(errs) != "[POLICY_DENIED SCHEMA_INVALID SCHEMA_INVALID SCHEMA_INVALID  INVALID_ARGUMENT]" {
		t.Fatalf("steps: %v", errs)
	}
	if msg := run.GetSteps()[1].GetResponse().GetError().GetMessage(); !strings.Contains(msg, `"Authorization"`) {
		t.Errorf("the refusal %q does not name the canonical form", msg)
	}
}
