package attack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
)

// A signed allow outliving the policy that gave it. An operator who sees a
// model write where it should not tightens the policy; the validator
// reloads it and denies such writes from then on. But the allow it signed
// a moment before the reload stayed good for its whole TTL (a minute here,
// five by default): on main, Execute with it wrote the file after the
// reload, though the policy in force denied the step. Now every validator
// that signs records a signed policy epoch (which policy, since when) at
// start and at every change, and the executor refuses a grant signed under
// another policy before that when it would start an attempt
// (FAILED_PRECONDITION, nothing written); a grant the new policy signs acts
// as before, and a step that already acted replays its outcome.
func TestAttackVerdictOutlivesPolicyReload(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(policy, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const allowWrites = "rules:\n  - {id: allow-writes, effect: allow, tools: [fs.write]}\n"
	write(allowWrites)
	c := startBindCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Validator.PolicyFile = policy
		cfg.Validator.PolicyReload = 20 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val, exec := c.validatorAs(t, "service:dev"), c.executorAs(t, "admin")
	const runID = "reload-run"
	allowed := func(step int, path string) (*xctv1.ExecuteRequest, *xctv1.Verdict) {
		t.Helper()
		vreq, ereq := proposal(t, runID, step, "fs.write", map[string]any{"path": path, "content": "x"})
		v, err := val.Validate(ctx, vreq)
		if err != nil {
			t.Fatal(err)
		}
		return ereq, v.GetVerdict()
	}
	// waitFor proposes a probe step until the validator decides it as want
	// (the reload is in force).
	probe := 100
	waitFor := func(want xctv1.VerdictDecision) {
		t.Helper()
		for {
			probe++
			_, v := allowed(probe, "probe.txt")
			if v.GetDecision() == want {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the validator never reloaded the policy (still %v)", v.GetDecision())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	held, v := allowed(1, "held.txt")
	if v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW || v.GetSigned() == nil {
		t.Fatalf("a write under the first policy: %v", v)
	}
	// The operator forbids writes; the held allow is still within its TTL.
	write("rules:\n  - {id: no-writes, effect: deny, tools: [fs.write]}\n")
	waitFor(xctv1.VerdictDecision_VERDICT_DECISION_DENY)
	_, err := exec.Execute(ctx, withVerdict(held, v.GetSigned()))
	if _, wrote := readWS(t, c.workspace, "held.txt"); wrote || err == nil {
		t.Fatalf("an allow signed before a reload that denies the step acted after it (error %v, written %v)", err, wrote)
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("refusal %v, want FAILED_PRECONDITION saying the policy was replaced", err)
	}

	// Writes allowed again (a new policy, its own version): an allow it
	// signs acts; the first policy's held allow stays refused, though the
	// policy in force would allow its step too (it is judged again).
	write(allowWrites + "  - {id: noop, effect: deny, tools: [fs.delete], when: 'false'}\n")
	waitFor(xctv1.VerdictDecision_VERDICT_DECISION_ALLOW)
	if _, err := exec.Execute(ctx, withVerdict(held, v.GetSigned())); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("the first policy's allow after a second reload: %v, want FAILED_PRECONDITION", err)
	}
	fresh, fv := allowed(2, "fresh.txt")
	if fv.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW || fv.GetSigned() == nil {
		t.Fatalf("a write under the third policy: %v", fv)
	}
	if resp, err := exec.Execute(ctx, withVerdict(fresh, fv.GetSigned())); err != nil || resp.GetResponse().GetError() != nil {
		t.Fatalf("an allow of the policy in force: %v %v", resp, err)
	}
	if got, _ := readWS(t, c.workspace, "fresh.txt"); got != "x" {
		t.Fatalf("fresh.txt = %q", got)
	}
	// A step that acted keeps its answer after a reload: its verdict
	// asked again (an answer lost on the way) replays the recorded
	// outcome, as before; only a new attempt is refused.
	write("rules:\n  - {id: no-writes, effect: deny, tools: [fs.write]}\n")
	waitFor(xctv1.VerdictDecision_VERDICT_DECISION_DENY)
	if resp, err := exec.Execute(ctx, withVerdict(fresh, fv.GetSigned())); err != nil || !resp.GetReplayed() || resp.GetResponse().GetError() != nil {
		t.Fatalf("the executed step asked again after a reload: %v %v, want its recorded outcome replayed", resp, err)
	}
}
