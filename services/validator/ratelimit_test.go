package validator_test

import (
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// TestRateLimits checks per-run and global limits in sliding windows:
// allowed calls count, refusals are RATE_LIMITED with when to retry, and
// the window slides with the (fake) clock.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := newServiceWith(t, []string{`
rate_limits:
  - {tool: "fs.*", per_run: 2/1m, global: 3/1m}
rules:
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
  - id: no-etc
    effect: deny
    when: 'has(args.path) && args.path.startsWith("/etc")'
`}, validator.WithClock(clock.Now))
	read := func(run string, n int, path string) *xctv1.Verdict {
		return validate(t, s, stepRequest(t, run, n, "fs.read", map[string]any{"path": path}))
	}

	checkVerdict(t, read("run-a", 1, "a"), allow, "", "allow-fs")
	clock.Advance(10 * time.Second)
	checkVerdict(t, read("run-a", 2, "b"), allow, "", "allow-fs")
	// The same step asked again is not counted twice.
	checkVerdict(t, read("run-a", 2, "b"), allow, "", "allow-fs")
	// A denied proposal uses nothing up.
	checkVerdict(t, read("run-a", 3, "/etc/passwd"), deny, wire.CodePolicyDenied, "allow-fs", "no-etc")

	clock.Advance(10 * time.Second)
	v := read("run-a", 3, "c")
	checkVerdict(t, v, deny, wire.CodeRateLimited, "allow-fs", "builtin.rate_limit")
	e := v.GetError()
	if e.GetCategory() != "execution_error" || e.GetType() != "rate_limited" || !e.GetRecoverable() || e.GetSuggestedAction() != "wait_and_retry_later" {
		t.Errorf("taxonomy = %v", e)
	}
	d := e.GetDetails().AsMap()
	if d["scope"] != "per_run" || d["retry_after_ms"] != 40000.0 || d["limit"] != 2.0 || d["window"] != "1m0s" {
		t.Errorf("details = %v, want per_run, retry after 40s", d)
	}
	if v.GetEndsRun() {
		t.Error("a rate limit ends the run")
	}

	// Another run has its own per-run window, but shares the global one.
	checkVerdict(t, read("run-b", 1, "a"), allow, "", "allow-fs")
	v = read("run-b", 2, "b")
	checkVerdict(t, v, deny, wire.CodeRateLimited, "allow-fs", "builtin.rate_limit")
	if d := v.GetError().GetDetails().AsMap(); d["scope"] != "global" {
		t.Errorf("details = %v, want the global limit", d)
	}

	// A minute after the first call, one call has left both windows.
	clock.Advance(40 * time.Second)
	checkVerdict(t, read("run-a", 3, "c"), allow, "", "allow-fs")
	// Tools the limit does not name are not limited.
	checkVerdict(t, validate(t, s, stepRequest(t, "run-a", 4, "shell.exec", map[string]any{"command": "ls"})),
		deny, wire.CodePolicyDenied, "default-deny")
}

// TestRateLimitBeforeApproval checks that a step that needs approval but
// would be rate limited is refused before a human is asked, and that
// asking does not use a call up.
func TestRateLimitBeforeApproval(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := newServiceWith(t, []string{`
rate_limits:
  - {tool: "shell.*", per_run: 1/1h}
rules:
  - id: approve-shell
    effect: require_approval
    tools: ["shell.*"]
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
`}, validator.WithClock(clock.Now))
	for n := 1; n <= 3; n++ {
		v := validate(t, s, stepRequest(t, "run-a", n, "shell.exec", map[string]any{"command": "ls"}))
		checkVerdict(t, v, approval, wire.CodeApprovalRequired, "approve-shell")
	}
}

// TestRateLimitPerPrincipal (session 18): a per_run limit bounds one run,
// so a principal's parallel runs multiply it (five runs at 2 deletes an
// hour are 10), and a global one is shared by every principal, so one
// principal's runs can use it up for all the others. per_principal counts
// the calls of every run of one principal together: alice's third run
// is refused her third write, bob still has his two.
func TestRateLimitPerPrincipal(t *testing.T) {
	t.Parallel()
	s := newServiceWith(t, []string{`
rate_limits:
  - {tool: "fs.write", per_run: 2/1h, per_principal: 2/1h}
rules:
  - {id: allow-fs, effect: allow, tools: ["fs.*"]}
`})
	del := func(who, run string, n int) *xctv1.Verdict {
		req := stepRequest(t, run, n, "fs.write", map[string]any{"path": run + "-" + string(rune('a'+n)), "content": "x"})
		req.Run.Principal = who
		return validate(t, s, req)
	}
	checkVerdict(t, del("alice", "run-a1", 1), allow, "", "allow-fs")
	checkVerdict(t, del("alice", "run-a2", 1), allow, "", "allow-fs")
	v := del("alice", "run-a3", 1)
	checkVerdict(t, v, deny, wire.CodeRateLimited, "allow-fs", "builtin.rate_limit")
	if d := v.GetError().GetDetails().AsMap(); d["scope"] != "per_principal" || d["limit"] != 2.0 {
		t.Errorf("details = %v, want per_principal, limit 2", d)
	}
	checkVerdict(t, del("bob", "run-b1", 1), allow, "", "allow-fs")
	checkVerdict(t, del("bob", "run-b1", 2), allow, "", "allow-fs")
	checkVerdict(t, del("bob", "run-b1", 3), deny, wire.CodeRateLimited, "allow-fs", "builtin.rate_limit")
}
