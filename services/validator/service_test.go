package validator_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// newService builds a validator over the test tools with the built-in
// policy, or with policy (YAML) when it is not empty.
func newService(tb testing.TB, policy string, tools ...*xctv1.ToolDescriptor) *validator.Service {
	tb.Helper()
	if tools == nil {
		tools = testTools()
	}
	cfg := validator.Config{}
	if policy != "" {
		cfg.PolicyFile = writeFile(tb, "policy.yaml", policy)
	}
	s, err := validator.NewWithCatalog(cfg, catalog.Static(tools...), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func validate(tb testing.TB, s *validator.Service, req *xctv1.ValidateRequest) *xctv1.Verdict {
	tb.Helper()
	resp, err := s.Validate(context.Background(), req)
	if err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	return resp.GetVerdict()
}

// checkVerdict checks what every verdict promises, then its decision, code
// and reasons.
func checkVerdict(tb testing.TB, v *xctv1.Verdict, want xctv1.VerdictDecision, code wire.Code, reasons ...string) {
	tb.Helper()
	if v.GetDecision() != want {
		tb.Errorf("decision = %v, want %v (verdict %v)", v.GetDecision(), want, v)
	}
	if v.GetPolicyVersion() == "" || !strings.HasPrefix(v.GetPolicyVersion(), "sha256:") {
		tb.Errorf("policy version = %q", v.GetPolicyVersion())
	}
	if at := v.GetEvaluatedAt().AsTime(); time.Since(at) > 2*time.Hour || time.Until(at) > 2*time.Hour { // tests with a fake clock move it by an hour or so
		tb.Errorf("evaluated_at = %v", at)
	}
	if want == allow {
		if v.GetError() != nil {
			tb.Errorf("allow carries an error: %v", v.GetError())
		}
	} else {
		e := v.GetError()
		if e.GetCode() != string(code) || e.GetMessage() == "" || e.GetCategory() == "" {
			tb.Errorf("error = %v, want code %s with a message and a category", e, code)
		}
	}
	if got := reasonIDs(v); !slices.Equal(got, reasons) {
		tb.Errorf("reasons = %v, want %v", got, reasons)
	}
}

func TestValidateDefaultPolicy(t *testing.T) {
	t.Parallel()
	s := newService(t, "")
	checkVerdict(t, validate(t, s, request(t, "fs.read", map[string]any{"path": "a.txt"})),
		allow, "", "allow-read")
	checkVerdict(t, validate(t, s, request(t, "fs.write", map[string]any{"path": "a.txt", "content": "hi", "mode": "create"})),
		allow, "", "allow-reversible")
	v := validate(t, s, request(t, "shell.exec", map[string]any{"command": "ls"}))
	checkVerdict(t, v, approval, wire.CodeApprovalRequired, "approve-irreversible")
	if !strings.Contains(v.GetError().GetMessage(), "approval") {
		t.Errorf("approval message = %q", v.GetError().GetMessage())
	}
	if ids := v.GetError().GetDetails().AsMap()["rule_ids"]; fmt.Sprint(ids) != "[approve-irreversible]" {
		t.Errorf("details rule_ids = %v", ids)
	}
	checkVerdict(t, validate(t, s, request(t, "legacy.tool", map[string]any{})),
		approval, wire.CodeApprovalRequired, "approve-irreversible")
	if got, want := validate(t, s, request(t, "fs.read", map[string]any{"path": "a"})).GetPolicyVersion(), validator.DefaultPolicy().Version(); got != want {
		t.Errorf("policy version = %s, want the default's %s", got, want)
	}
}

func TestValidatePolicyFile(t *testing.T) {
	t.Parallel()
	s := newService(t, `
rules:
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
  - id: no-writes
    effect: deny
    message: this agent is read-only
    effects: [reversible, irreversible]
`)
	checkVerdict(t, validate(t, s, request(t, "fs.read", map[string]any{"path": "a"})), allow, "", "allow-fs")
	v := validate(t, s, request(t, "fs.write", map[string]any{"path": "a", "content": ""}))
	checkVerdict(t, v, deny, wire.CodePolicyDenied, "allow-fs", "no-writes")
	if !strings.Contains(v.GetError().GetMessage(), "this agent is read-only") {
		t.Errorf("deny message = %q", v.GetError().GetMessage())
	}
	v = validate(t, s, request(t, "legacy.tool", map[string]any{}))
	checkVerdict(t, v, deny, wire.CodePolicyDenied, "no-writes")
}

func TestValidateDefaultDeny(t *testing.T) {
	t.Parallel()
	s := newService(t, "rules:\n  - id: allow-fs\n    effect: allow\n    tools: [\"fs.*\"]\n")
	v := validate(t, s, request(t, "shell.exec", map[string]any{"command": "ls"}))
	checkVerdict(t, v, deny, wire.CodePolicyDenied, "default-deny")
	if !strings.Contains(v.GetError().GetMessage(), `no policy rule allows tool "shell.exec"`) {
		t.Errorf("message = %q", v.GetError().GetMessage())
	}
}

func TestValidateUnknownTool(t *testing.T) {
	t.Parallel()
	s := newService(t, "")
	v := validate(t, s, request(t, "fs.reed", map[string]any{"path": "a"}))
	checkVerdict(t, v, deny, wire.CodeUnknownTool, "builtin.catalog")
	msg := v.GetError().GetMessage()
	if !strings.Contains(msg, `"fs.reed" is not in the catalog`) || !strings.Contains(msg, `did you mean "fs.read"`) {
		t.Errorf("message = %q", msg)
	}
	if got := fmt.Sprint(v.GetError().GetDetails().AsMap()["did_you_mean"]); !strings.Contains(got, "fs.read") {
		t.Errorf("did_you_mean = %s", got)
	}
	// Nothing close: no suggestion, and a huge name is not echoed in full.
	huge := strings.Repeat("x", 10000)
	v = validate(t, s, request(t, huge, map[string]any{}))
	checkVerdict(t, v, deny, wire.CodeUnknownTool, "builtin.catalog")
	if n := len(v.GetError().GetMessage()); n > 400 {
		t.Errorf("message is %d bytes", n)
	}
	if strings.Contains(v.GetError().GetMessage(), "did you mean") {
		t.Errorf("unexpected suggestion: %q", v.GetError().GetMessage())
	}
}

func TestValidateSchemaInvalid(t *testing.T) {
	t.Parallel()
	s := newService(t, "")
	tests := []struct {
		name     string
		tool     string
		args     map[string]any
		location string // of the first violation
		message  string // substring of the first violation's message
	}{
		{"wrong type", "fs.read", map[string]any{"path": 42.0}, "/path", "want string"},
		{"missing required", "fs.read", map[string]any{}, "", "missing property 'path'"},
		{"additional property", "fs.read", map[string]any{"path": "a", "recursive": true}, "", "additional properties 'recursive' not allowed"},
		{"not an integer", "fs.read", map[string]any{"path": "a", "max_bytes": 1.5}, "/max_bytes", "want integer"},
		{"below minimum", "fs.read", map[string]any{"path": "a", "max_bytes": 0.0}, "/max_bytes", "minimum"},
		{"enum", "fs.write", map[string]any{"path": "a", "content": "", "mode": "truncate"}, "/mode", "value must be one of"},
		{"nested", "fs.write", map[string]any{"path": "a", "content": "", "options": map[string]any{"permissions": "777"}}, "/options/permissions", "does not match pattern"},
		{"array item", "shell.exec", map[string]any{"command": "ls", "args": []any{"-l", 3.0}}, "/args/1", "want string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := validate(t, s, request(t, tt.tool, tt.args))
			checkVerdict(t, v, deny, wire.CodeSchemaInvalid, "builtin.schema")
			details := v.GetError().GetDetails().AsMap()
			list, _ := details["violations"].([]any)
			if len(list) == 0 {
				t.Fatalf("no violations in details %v", details)
			}
			first, _ := list[0].(map[string]any)
			if first["location"] != tt.location || !strings.Contains(fmt.Sprint(first["message"]), tt.message) {
				t.Errorf("first violation = %v, want location %q and message containing %q", first, tt.location, tt.message)
			}
			if e := v.GetError(); e.GetSuggestedAction() != "fix_arguments" || !e.GetRecoverable() {
				t.Errorf("taxonomy = %v", e)
			}
		})
	}
	// Integral numbers are integers, whatever their JSON spelling.
	checkVerdict(t, validate(t, s, request(t, "fs.read", map[string]any{"path": "a", "max_bytes": 10.0})), allow, "", "allow-read")
}

func TestValidateViolationsAreBounded(t *testing.T) {
	t.Parallel()
	props := map[string]any{}
	for i := range 50 {
		props[fmt.Sprintf("extra%02d", i)] = float64(i)
	}
	tool := &xctv1.ToolDescriptor{
		Name:        "strict.tool",
		Effect:      read,
		InputSchema: `{"type":"object","patternProperties":{"^extra":{"type":"string"}}}`,
	}
	s := newService(t, "", tool)
	v := validate(t, s, request(t, "strict.tool", props))
	checkVerdict(t, v, deny, wire.CodeSchemaInvalid, "builtin.schema")
	details := v.GetError().GetDetails().AsMap()
	if list := details["violations"].([]any); len(list) != 8 {
		t.Errorf("%d violations reported, want 8", len(list))
	}
	if details["more_violations"] != 42.0 {
		t.Errorf("more_violations = %v, want 42", details["more_violations"])
	}
}

func TestValidateUnusableSchema(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		schema string
		reason string
	}{
		{"empty", "", "no input schema"},
		{"not JSON", `{"type": "object"`, "not JSON"},
		{"invalid schema", `{"type": "thing"}`, "does not compile"},
		{"file reference", `{"$ref": "file:///etc/passwd"}`, "does not compile"},
		{"remote reference", `{"$ref": "https://example.com/schema.json"}`, "does not compile"},
		{"relative reference", `{"$ref": "other.json"}`, "does not compile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, "", &xctv1.ToolDescriptor{Name: "bad.tool", Effect: read, InputSchema: tt.schema})
			for range 2 { // the second call uses the cached failure
				v := validate(t, s, request(t, "bad.tool", map[string]any{}))
				checkVerdict(t, v, deny, wire.CodePolicyDenied, "builtin.schema")
				if r := v.GetReasons()[0].GetMessage(); !strings.Contains(r, tt.reason) {
					t.Errorf("reason = %q, want it to contain %q", r, tt.reason)
				}
			}
		})
	}
}

func TestValidateMalformedRequest(t *testing.T) {
	t.Parallel()
	s := newService(t, "")
	for _, req := range []*xctv1.ValidateRequest{
		nil,
		{},
		{Proposal: &xctv1.NextStep{}},
	} {
		_, err := s.Validate(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("Validate(%v) err = %v, want InvalidArgument", req, err)
		}
	}
	// Arguments may be omitted: they are the empty object.
	req := &xctv1.ValidateRequest{Proposal: &xctv1.NextStep{Tool: "legacy.tool"}}
	checkVerdict(t, validate(t, s, req), approval, wire.CodeApprovalRequired, "approve-irreversible")
}

// policyFunc is a Policy for tests.
type policyFunc func(*validator.Input) (validator.Outcome, error)

func (policyFunc) Version() string { return "sha256:test" }
func (f policyFunc) Evaluate(_ context.Context, in *validator.Input) (validator.Outcome, error) {
	return f(in)
}

func TestSetPolicy(t *testing.T) {
	t.Parallel()
	s := newService(t, "")
	if err := s.SetPolicy(nil); !errors.Is(err, validator.ErrNoPolicy) {
		t.Fatalf("SetPolicy(nil) = %v", err)
	}
	var seen *validator.Input
	tests := []struct {
		name    string
		policy  policyFunc
		want    xctv1.VerdictDecision
		code    wire.Code
		reasons []string
	}{
		{"error denies", func(*validator.Input) (validator.Outcome, error) {
			return validator.Outcome{}, errors.New("engine down")
		}, deny, wire.CodePolicyDenied, []string{"builtin.policy"}},
		{"unspecified denies", func(*validator.Input) (validator.Outcome, error) {
			return validator.Outcome{Reasons: []*xctv1.Reason{{RuleId: "odd", Message: "?"}}}, nil
		}, deny, wire.CodePolicyDenied, []string{"odd", "builtin.policy"}},
		{"unknown decision denies", func(*validator.Input) (validator.Outcome, error) {
			return validator.Outcome{Decision: 99}, nil
		}, deny, wire.CodePolicyDenied, []string{"builtin.policy"}},
		{"deny without reasons gets one", func(*validator.Input) (validator.Outcome, error) {
			return validator.Outcome{Decision: deny}, nil
		}, deny, wire.CodePolicyDenied, []string{"builtin.policy"}},
		{"allow sees the input", func(in *validator.Input) (validator.Outcome, error) {
			seen = in
			return validator.Outcome{Decision: allow, Reasons: []*xctv1.Reason{{RuleId: "ok", Message: "fine"}}}, nil
		}, allow, "", []string{"ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.SetPolicy(tt.policy); err != nil {
				t.Fatal(err)
			}
			v := validate(t, s, request(t, "fs.read", map[string]any{"path": "a"}))
			checkVerdict(t, v, tt.want, tt.code, tt.reasons...)
			if v.GetPolicyVersion() != "sha256:test" {
				t.Errorf("policy version = %s", v.GetPolicyVersion())
			}
		})
	}
	if seen == nil || seen.Tool.GetName() != "fs.read" || seen.Args["path"] != "a" || seen.Run.GetRunId() != "run-1" ||
		seen.Step != 1 || seen.StepID == "" || seen.Proposal.GetGoal() != "test" {
		t.Errorf("policy input = %+v", seen)
	}
}

func TestConcurrentValidate(t *testing.T) {
	t.Parallel()
	s := newService(t, "")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				tool, a := "fs.read", map[string]any{"path": "a"}
				if (i+j)%2 == 0 {
					tool, a = "fs.write", map[string]any{"path": "a", "content": 1.0}
				}
				resp, err := s.Validate(context.Background(), request(t, tool, a))
				if err != nil || resp.GetVerdict().GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED {
					t.Errorf("Validate: %v, %v", resp, err)
				}
			}
		})
	}
	// Swap the policy while proposals are being judged.
	if err := s.SetPolicy(validator.DefaultPolicy()); err != nil {
		t.Error(err)
	}
	wg.Wait()
}

func TestNewBrokenPolicyFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		line       int
	}{
		{"syntax error", "rules:\n  - id: a\n    effect: [allow\n", 3},
		{"unknown field", "rules:\n  - id: a\n    effect: allow\n    tool: [x]\n", 4},
		{"bad effect value", "rules:\n  - id: a\n    effect: allow\n    effects: [destructive]\n", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "broken.yaml", tt.text)
			cfg := validator.Config{PolicyFile: path}
			_, err := validator.NewWithCatalog(cfg, catalog.Static(), nil)
			if err == nil || !errors.Is(err, validator.ErrInvalidPolicy) {
				t.Fatalf("err = %v, want an invalid policy", err)
			}
			if want := fmt.Sprintf("%s:%d: ", path, tt.line); !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want it to name %s", err, want)
			}
			// New checks the policy the same way (before it needs NATS).
			s := testutil.RunJetStream(t)
			if _, err := validator.New(cfg, testutil.Connect(t, s), nil); !errors.Is(err, validator.ErrInvalidPolicy) {
				t.Fatalf("New: err = %v", err)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	var cfg validator.Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-policy", "p.yaml"}); err != nil {
		t.Fatal(err)
	}
	if cfg.PolicyFile != "p.yaml" {
		t.Fatalf("PolicyFile = %q", cfg.PolicyFile)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{-1, 6} {
		bad := validator.Config{Replicas: r}
		if err := bad.Validate(); !errors.Is(err, validator.ErrBadConfig) {
			t.Errorf("replicas %d: err = %v", r, err)
		}
		if _, err := validator.NewWithCatalog(bad, catalog.Static(), nil); !errors.Is(err, validator.ErrBadConfig) {
			t.Errorf("NewWithCatalog with replicas %d: err = %v", r, err)
		}
	}
	if _, err := validator.New(validator.Config{}, nil, nil); !errors.Is(err, validator.ErrNoNATS) {
		t.Errorf("New without NATS: err = %v", err)
	}
	if _, err := validator.NewWithCatalog(validator.Config{}, nil, nil); !errors.Is(err, validator.ErrNoCatalog) {
		t.Errorf("NewWithCatalog without catalog: err = %v", err)
	}
}

func TestGRPCRoundTrip(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := validator.NewWithCatalog(validator.Config{}, catalog.Static(testTools()...), log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("validator", log, creds.ServerOptions()...)
	s.Register(srv.GRPC)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		srv.Stop(stopCtx)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := s.Stop(stopCtx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	client := xctv1.NewValidatorServiceClient(creds.Dial(t, srv.Addr(), grpcxtest.Service))

	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Verdicts are for XCT's services only.
	alice := xctv1.NewValidatorServiceClient(creds.Dial(t, srv.Addr(), "alice"))
	if _, err := alice.Validate(callCtx, request(t, "fs.read", map[string]any{"path": "notes.txt"})); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Validate as a submitter: %v", err)
	}
	resp, err := client.Validate(callCtx, request(t, "fs.read", map[string]any{"path": "notes.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	checkVerdict(t, resp.GetVerdict(), allow, "", "allow-read")

	resp, err = client.Validate(callCtx, request(t, "fs.read", map[string]any{"path": 1.0}))
	if err != nil {
		t.Fatal(err)
	}
	checkVerdict(t, resp.GetVerdict(), deny, wire.CodeSchemaInvalid, "builtin.schema")
	if resp.GetVerdict().GetError().GetDetails() == nil {
		t.Error("schema violations lost on the wire")
	}

	_, err = client.Validate(callCtx, &xctv1.ValidateRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty request: err = %v, want InvalidArgument", err)
	}
}

func TestStartWithJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := testutil.RunJetStream(t)
	nc := testutil.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := validator.New(validator.Config{Replicas: 1}, nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	readArgs := map[string]any{"path": "a.txt"}

	// Before Start the catalog is unknown: fail safe.
	checkVerdict(t, validate(t, s, request(t, "fs.read", readArgs)), deny, wire.CodeValidatorUnavailable, "builtin.catalog")

	// Start's context bounds only the start; the watch lives until Stop.
	startCtx, startCancel := context.WithTimeout(ctx, 10*time.Second)
	err = s.Start(startCtx)
	startCancel()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); !errors.Is(err, validator.ErrAlreadyStarted) {
		t.Fatalf("second Start = %v", err)
	}
	checkVerdict(t, validate(t, s, request(t, "fs.read", readArgs)), deny, wire.CodeUnknownTool, "builtin.catalog")

	tool := &xctv1.ToolDescriptor{Name: "fs.read", InputSchema: fsReadSchema, Effect: read}
	if err := catalog.Publish(ctx, js, []*xctv1.ToolDescriptor{tool}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if d := validate(t, s, request(t, "fs.read", readArgs)).GetDecision(); d != allow {
			return fmt.Errorf("decision is %v", d)
		}
		return nil
	})

	// A changed schema is recompiled: the old arguments no longer fit.
	changed := &xctv1.ToolDescriptor{Name: "fs.read", Effect: read,
		InputSchema: `{"type":"object","properties":{"file":{"type":"string"}},"required":["file"],"additionalProperties":false}`}
	if err := catalog.Publish(ctx, js, []*xctv1.ToolDescriptor{changed}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if d := validate(t, s, request(t, "fs.read", readArgs)).GetDecision(); d != deny {
			return fmt.Errorf("decision is %v", d)
		}
		return nil
	})
	checkVerdict(t, validate(t, s, request(t, "fs.read", map[string]any{"file": "a.txt"})), allow, "", "allow-read")

	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
	checkVerdict(t, validate(t, s, request(t, "fs.read", readArgs)), deny, wire.CodeValidatorUnavailable, "builtin.catalog")
}

// Protobuf numbers may be NaN or infinite, which JSON has not. Arguments are
// judged as their JSON view (structpb renders these as strings), the same
// view the executor gets, and judging them must not fail.
func TestValidateNonFiniteNumbers(t *testing.T) {
	t.Parallel()
	s := newService(t, "")
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		req := request(t, "fs.read", map[string]any{"path": "a"})
		req.Proposal.Arguments.Fields["max_bytes"] = structpb.NewNumberValue(f)
		checkVerdict(t, validate(t, s, req), deny, wire.CodeSchemaInvalid, "builtin.schema")
	}
}
