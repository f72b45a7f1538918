package validator_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

const (
	baseFile = `# base: file tools
approval_ttl: 2h
budgets: {max_steps: 50}
rules:
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
`
	teamFile = `# team: nothing under prod/
approval_ttl: 20m
budgets: {max_steps: 5}
rules:
  - id: no-prod
    effect: deny
    tools: ["fs.write"]
    when: 'args.path.startsWith("prod/")'
    message: prod is off limits
  - id: shell-needs-approval
    effect: require_approval
    tools: ["shell.*"]
`
)

// TestPolicySetCombinesFiles checks that enforced files act as one policy:
// rules evaluated together (deny wins across files) and the strictest
// settings, and that the version covers every file in order.
func TestPolicySetCombinesFiles(t *testing.T) {
	t.Parallel()
	s := newServiceWith(t, []string{baseFile, teamFile})
	checkVerdict(t, validate(t, s, request(t, "fs.write", map[string]any{"path": "docs/a", "content": ""})), allow, "", "allow-fs")
	v := validate(t, s, request(t, "fs.write", map[string]any{"path": "prod/a", "content": ""}))
	checkVerdict(t, v, deny, wire.CodePolicyDenied, "allow-fs", "no-prod")
	if !strings.Contains(v.GetError().GetMessage(), "prod is off limits") {
		t.Errorf("message = %q", v.GetError().GetMessage())
	}
	// The smaller step budget and approval TTL apply.
	req := request(t, "fs.read", map[string]any{"path": "a"})
	req.Run.StepsUsed = 6
	checkVerdict(t, validate(t, s, req), deny, wire.CodeBudgetExceeded, "builtin.budget")
	v = validate(t, s, request(t, "shell.exec", map[string]any{"command": "ls"}))
	checkVerdict(t, v, approval, wire.CodeApprovalRequired, "shell-needs-approval")
	if v.GetApprovalTtl().AsDuration() != 20*time.Minute {
		t.Errorf("approval_ttl = %v, want the smaller 20m", v.GetApprovalTtl().AsDuration())
	}

	h := sha256.New()
	for _, text := range []string{baseFile, teamFile} {
		sum := sha256.Sum256([]byte(text))
		h.Write(sum[:])
	}
	if want := "sha256:" + hex.EncodeToString(h.Sum(nil)); s.PolicyVersion() != want {
		t.Errorf("version = %s, want %s", s.PolicyVersion(), want)
	}
	// A setting only one file gives is that file's, not the stricter
	// default's.
	lax := newServiceWith(t, []string{"confidence: {proceed: 0.5, warn: 0.3, verify: 0.1}\nrules: []\n", baseFile})
	req = request(t, "fs.read", map[string]any{"path": "a"})
	req.Proposal.Confidence = ptr(0.55)
	checkVerdict(t, validate(t, lax, req), allow, "", "allow-fs")
	if newServiceWith(t, []string{teamFile, baseFile}).PolicyVersion() == s.PolicyVersion() {
		t.Error("the order of the files does not change the version")
	}
	// One file: the version is its content hash, as before.
	sum := sha256.Sum256([]byte(baseFile))
	if got := newServiceWith(t, []string{baseFile}).PolicyVersion(); got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("one file's version = %s", got)
	}
}

// TestPolicySetConflicts checks what several files may not disagree on.
func TestPolicySetConflicts(t *testing.T) {
	t.Parallel()
	a := writeFile(t, "a.yaml", "prices: {m: {input_per_1k: 1, output_per_1k: 1}}\nrules:\n  - id: r1\n    effect: allow\n")
	b := writeFile(t, "b.yaml", "prices:\n  m: {input_per_1k: 2, output_per_1k: 1}\nrules:\n  - id: r2\n    effect: allow\n  - id: r1\n    effect: deny\n")
	_, err := validator.LoadPolicyFiles(a, b)
	if !errors.Is(err, validator.ErrInvalidPolicy) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{b + `:6: rule "r1": duplicate id, first used at ` + a + ":3", b + ":2: prices.m disagrees"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Every broken file is reported, not only the first.
	c := writeFile(t, "c.yaml", "rules:\n  - id: x\n    effect: maybe\n")
	_, err = validator.LoadPolicyFiles(c, writeFile(t, "d.yaml", "rules: [\n"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:") || !strings.Contains(err.Error(), "d.yaml:2:") {
		t.Errorf("err = %v, want both files' problems", err)
	}
	if _, err := validator.NewPolicySet(); !errors.Is(err, validator.ErrNoPolicy) {
		t.Errorf("empty set: err = %v", err)
	}
}

// TestShadowMode checks that a shadow file's verdicts are recorded beside
// the enforced verdict and never enforced.
func TestShadowMode(t *testing.T) {
	t.Parallel()
	const shadow = `mode: shadow
rate_limits:
  - {tool: "fs.read", per_run: 1/1h}
rules:
  - id: allow-reads
    effect: allow
    effects: [read]
  - id: writes-need-approval
    effect: require_approval
    tools: ["fs.write"]
`
	clock := newFakeClock()
	s := newServiceWith(t, []string{baseFile, shadow}, validator.WithClock(clock.Now))
	shadowVersion := mustParse(t, shadow).Version()

	v := validate(t, s, stepRequest(t, "run-1", 1, "fs.write", map[string]any{"path": "a", "content": ""}))
	checkVerdict(t, v, allow, "", "allow-fs")
	checkShadow(t, v, shadowVersion, approval, "writes-need-approval")

	v = validate(t, s, stepRequest(t, "run-1", 2, "fs.read", map[string]any{"path": "a"}))
	checkVerdict(t, v, allow, "", "allow-fs")
	checkShadow(t, v, shadowVersion, allow, "allow-reads")
	// The shadow's rate limit counts its own would-have-been calls only.
	v = validate(t, s, stepRequest(t, "run-1", 3, "fs.read", map[string]any{"path": "b"}))
	checkVerdict(t, v, allow, "", "allow-fs")
	checkShadow(t, v, shadowVersion, deny, "allow-reads", "builtin.rate_limit")

	// A proposal the builtin checks refuse is refused the same way.
	v = validate(t, s, stepRequest(t, "run-1", 4, "fs.reed", map[string]any{"path": "a"}))
	checkVerdict(t, v, deny, wire.CodeUnknownTool, "builtin.catalog")
	checkShadow(t, v, shadowVersion, deny, "builtin.catalog")

	// Only shadow files: the built-in default is enforced beside them.
	only := newServiceWith(t, []string{shadow})
	v = validate(t, only, request(t, "shell.exec", map[string]any{"command": "ls"}))
	checkVerdict(t, v, approval, wire.CodeApprovalRequired, "approve-irreversible")
	checkShadow(t, v, shadowVersion, deny, "default-deny")
	if only.PolicyVersion() == validator.DefaultPolicy().Version() || only.PolicyVersion() == shadowVersion {
		t.Errorf("version %s does not cover the default and the shadow file", only.PolicyVersion())
	}

	// A lone shadow file given to SetPolicy is recorded, not enforced.
	if err := only.SetPolicy(mustParse(t, shadow)); err != nil {
		t.Fatal(err)
	}
	v = validate(t, only, request(t, "legacy.tool", map[string]any{}))
	checkVerdict(t, v, approval, wire.CodeApprovalRequired, "approve-irreversible")
	checkShadow(t, v, shadowVersion, deny, "default-deny")
}

func checkShadow(tb testing.TB, v *xctv1.Verdict, version string, want xctv1.VerdictDecision, reasons ...string) {
	tb.Helper()
	if len(v.GetShadow()) != 1 {
		tb.Fatalf("shadow = %v, want one shadow verdict", v.GetShadow())
	}
	sv := v.GetShadow()[0]
	var ids []string
	for _, r := range sv.GetReasons() {
		ids = append(ids, r.GetRuleId())
	}
	if sv.GetPolicyVersion() != version || sv.GetDecision() != want || !slices.Equal(ids, reasons) {
		tb.Errorf("shadow = %s %v %v, want %s %v %v", sv.GetPolicyVersion(), sv.GetDecision(), ids, version, want, reasons)
	}
}

// TestPolicyFlag checks that -policy is repeatable and takes lists.
func TestPolicyFlag(t *testing.T) {
	t.Parallel()
	var cfg validator.Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if cfg.PolicyReload != validator.DefaultPolicyReload {
		t.Errorf("reload default = %v", cfg.PolicyReload)
	}
	if err := fs.Parse([]string{"-policy", "a.yaml", "-policy", "b.yaml, c.yaml", "-policy-reload", "0"}); err != nil {
		t.Fatal(err)
	}
	if got := cfg.PolicyFiles(); !slices.Equal(got, []string{"a.yaml", "b.yaml", "c.yaml"}) {
		t.Errorf("files = %v", got)
	}
	if cfg.PolicyReload != 0 {
		t.Errorf("reload = %v", cfg.PolicyReload)
	}
	for _, d := range []time.Duration{-time.Second, time.Millisecond} {
		bad := validator.Config{PolicyReload: d}
		if err := bad.Validate(); !errors.Is(err, validator.ErrBadConfig) {
			t.Errorf("reload %v: err = %v", d, err)
		}
	}
}
