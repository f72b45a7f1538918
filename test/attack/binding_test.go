package attack

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// signRaw signs a grant as a holder of key would, whatever it says.
func signRaw(t *testing.T, key ed25519.PrivateKey, keyID string, g *xctv1.VerdictGrant) *xctv1.SignedVerdict {
	t.Helper()
	raw, err := proto.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return &xctv1.SignedVerdict{KeyId: keyID, Grant: raw, Signature: ed25519.Sign(key, append([]byte("xct.verdict.v1\x00"), raw...))}
}

// Attack 5 (issue #11): the admin role called ExecutorService/Execute
// directly and the tool acted with no verdict and no event on any chain.
// Now the executor acts only on the validator's signed allow for exactly
// that step: no verdict, a forged one, one for other arguments, one for
// another step, an expired one are all refused, and nothing is written.
func TestAttackExecuteWithoutAVerdict(t *testing.T) { eachPolicy(t, attackExecuteWithoutAVerdict) }

func attackExecuteWithoutAVerdict(t *testing.T, policy bindOption) {
	c := startBindCluster(t, policy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.executorAs(t, "admin")
	const runID = "attack-run"
	args := map[string]any{"path": "owned.txt", "content": "pwned"}
	vreq, ereq := proposal(t, runID, 1, "fs.write", args)

	// A real allow from the validator, as the orchestrator gets it.
	v, err := c.validatorAs(t, "service:dev").Validate(ctx, vreq)
	if err != nil {
		t.Fatal(err)
	}
	if v.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW || v.GetVerdict().GetSigned() == nil {
		t.Fatalf("the validator's verdict on a reversible write: %v", v.GetVerdict())
	}
	good := v.GetVerdict().GetSigned()
	// An admin may ask the validator too (to try a policy), but gets the
	// decision unsigned: only the orchestrator, which records verdicts on
	// the run's chain, gets verdicts an executor acts on.
	asAdmin, err := c.validatorAs(t, "admin").Validate(ctx, vreq)
	if err != nil {
		t.Fatal(err)
	}
	if asAdmin.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW || asAdmin.GetVerdict().GetSigned() != nil {
		t.Fatalf("admin's Validate: %v", asAdmin.GetVerdict())
	}
	grant := &xctv1.VerdictGrant{}
	if err := proto.Unmarshal(good.GetGrant(), grant); err != nil {
		t.Fatal(err)
	}
	if grant.GetRunId() != runID || grant.GetStep() != 1 || grant.GetStepId() != ereq.GetStepId() || grant.GetTool() != "fs.write" {
		t.Fatalf("grant: %v", grant)
	}

	_, forgerKey, _ := ed25519.GenerateKey(nil)
	expired := proto.CloneOf(grant)
	expired.IssuedAt = timestamppb.New(time.Now().Add(-2 * time.Hour))
	expired.ExpiresAt = timestamppb.New(time.Now().Add(-time.Hour))
	otherArgs, _ := structpb.NewStruct(map[string]any{"path": "owned.txt", "content": "something else"})
	_, stepB := proposal(t, runID, 2, "fs.write", map[string]any{"path": "other.txt", "content": "b"})

	attacks := []struct {
		name string
		req  *xctv1.ExecuteRequest
		code codes.Code
		says string
	}{
		{"no verdict", ereq, codes.PermissionDenied, "no signed verdict"},
		{"forged with another key claiming the validator's key id", withVerdict(ereq, signRaw(t, forgerKey, c.key.KeyID(), grant)), codes.PermissionDenied, "does not verify"},
		{"signed by an untrusted key", withVerdict(ereq, signRaw(t, forgerKey, verdict.KeyID(forgerKey.Public().(ed25519.PublicKey)), grant)), codes.PermissionDenied, "does not trust"},
		{"the verdict of other arguments", withArgs(withVerdict(ereq, good), otherArgs), codes.PermissionDenied, "differ"},
		{"step A's verdict for step B", withVerdict(stepB, good), codes.PermissionDenied, "step id"},
		{"expired (signed with the real key)", withVerdict(ereq, signRaw(t, ed25519.PrivateKey(c.keyRaw), c.key.KeyID(), expired)), codes.FailedPrecondition, "expired"},
		{"a signature over another grant", withVerdict(ereq, &xctv1.SignedVerdict{KeyId: good.GetKeyId(), Grant: stepBGrant(t, c, stepB), Signature: good.GetSignature()}), codes.PermissionDenied, "does not verify"},
	}
	for _, a := range attacks {
		_, err := admin.Execute(ctx, a.req)
		if status.Code(err) != a.code || !strings.Contains(err.Error(), a.says) {
			t.Errorf("%s: %v, want %v saying %q", a.name, err, a.code, a.says)
		}
		if _, ok := readWS(t, c.workspace, "owned.txt"); ok {
			t.Fatalf("%s: the file was written", a.name)
		}
	}
	if _, err := admin.GetStep(ctx, &xctv1.GetStepRequest{StepId: ereq.GetStepId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused Execute left a step record: %v", err)
	}

	// The genuine verdict acts once; the same verdict again never acts again.
	resp, err := admin.Execute(ctx, withVerdict(ereq, good))
	if err != nil || resp.GetResponse().GetError() != nil {
		t.Fatalf("execute with the validator's verdict: %v %v", resp, err)
	}
	if got, _ := readWS(t, c.workspace, "owned.txt"); got != "pwned" {
		t.Fatalf("owned.txt = %q", got)
	}
	if err := os.Remove(filepath.Join(c.workspace, "owned.txt")); err != nil {
		t.Fatal(err)
	}
	again, err := admin.Execute(ctx, withVerdict(ereq, good))
	if err != nil || !again.GetReplayed() {
		t.Fatalf("second execute with the same verdict: %v %v", again, err)
	}
	if _, ok := readWS(t, c.workspace, "owned.txt"); ok {
		t.Fatal("the second execute with the same verdict acted again")
	}
}

// stepBGrant is a real grant for step B, signed by the validator: its
// bytes with step A's signature must not verify.
func stepBGrant(t *testing.T, c *bindCluster, stepB *xctv1.ExecuteRequest) []byte {
	t.Helper()
	digest, err := verdict.StructDigest(stepB.GetArguments())
	if err != nil {
		t.Fatal(err)
	}
	sv, err := c.key.Sign(&xctv1.VerdictGrant{RunId: stepB.GetRunId(), Step: 2, StepId: stepB.GetStepId(), Tool: stepB.GetTool(), ArgumentsDigest: digest}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return sv.GetGrant()
}

func withVerdict(r *xctv1.ExecuteRequest, sv *xctv1.SignedVerdict) *xctv1.ExecuteRequest {
	out := proto.CloneOf(r)
	out.Verdict = sv
	return out
}

func withArgs(r *xctv1.ExecuteRequest, args *structpb.Struct) *xctv1.ExecuteRequest {
	out := proto.CloneOf(r)
	out.Arguments = args
	return out
}

// undoSpy is a model that proposes xct.undo of a given step id, and
// records the catalog it was shown.
type undoSpy struct {
	mu     sync.Mutex
	target string
	shown  []string
}

func (p *undoSpy) Name() string { return "undo-spy" }
func (p *undoSpy) Close() error { return nil }
func (p *undoSpy) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(req.GetHistory()) > 0 {
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "tried"}`}, nil
	}
	for _, t := range req.GetTools() {
		p.shown = append(p.shown, t.GetName())
	}
	return &xctv1.ProposeResponse{Output: fmt.Sprintf(`{"next_step": {"tool": "xct.undo", "arguments": {"step_id": %q}}}`, p.target)}, nil
}

// Attack 2 (issue #11): a model proposed xct.undo with another user's
// step id; the default policy allowed it and the file was deleted, with
// nothing on that run's chain. Now xct.undo is not in a model's catalog,
// its proposal is a validation error signal, nothing changes on disk and
// the other run's chain is untouched.
func TestAttackModelProposesUndo(t *testing.T) { eachPolicy(t, attackModelProposesUndo) }

func attackModelProposesUndo(t *testing.T, policy bindOption) {
	spy := &undoSpy{}
	c := startBindCluster(t, policy, withProposer("undo-spy", spy))
	c.writeScript(t, "write.yaml", "steps:\n  - next_step: {tool: fs.write, arguments: {path: bob.txt, content: \"bob's\"}}\n  - done: true\n")
	victim := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "write", Model: "scripted:write.yaml"})
	if victim.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || len(victim.GetSteps()) == 0 {
		t.Fatalf("victim run: %v", victim)
	}
	spy.target = victim.GetSteps()[0].GetStepId()

	attacker := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "undo someone's work", Model: "func:undo-spy"})
	if got, _ := readWS(t, c.workspace, "bob.txt"); got != "bob's" {
		t.Fatalf("bob.txt = %q after the attack", got)
	}
	for _, name := range spy.shown {
		if wire.IsSystemTool(name) {
			t.Fatalf("the model was shown system tool %s (catalog %v)", name, spy.shown)
		}
	}
	if len(spy.shown) == 0 {
		t.Fatal("the model was shown no tools")
	}
	steps := attacker.GetSteps()
	if len(steps) == 0 {
		t.Fatalf("attacker run has no steps: %v", attacker)
	}
	e := steps[0].GetResponse().GetError()
	if steps[0].GetState() != xctv1.StepState_STEP_STATE_DENIED || e.GetCode() != string(wire.CodeUnknownTool) || !strings.Contains(e.GetMessage(), "system") {
		t.Fatalf("the undo proposal: state %v, error %v", steps[0].GetState(), e)
	}
	// The victim's run is as it was.
	after, err := c.orchestratorAs(t, "alice").GetRun(context.Background(), &xctv1.GetRunRequest{RunId: victim.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetRun().GetLastSeq() != victim.GetLastSeq() {
		t.Fatalf("the victim's chain changed: seq %d → %d", victim.GetLastSeq(), after.GetRun().GetLastSeq())
	}
}

// A rollback undoes only steps of the run rolled back: even a system step
// (what only the orchestrator's rollback asks for), allowed and signed,
// cannot undo a step of another run. Without the system flag the
// validator refuses the undo outright.
func TestAttackUndoOfAnotherRunsStep(t *testing.T) { eachPolicy(t, attackUndoOfAnotherRunsStep) }

func attackUndoOfAnotherRunsStep(t *testing.T, policy bindOption) {
	c := startBindCluster(t, policy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.writeScript(t, "write.yaml", "steps:\n  - next_step: {tool: fs.write, arguments: {path: bob.txt, content: \"bob's\"}}\n  - done: true\n")
	victim := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "write", Model: "scripted:write.yaml"})
	target := victim.GetSteps()[0].GetStepId()

	svc := c.validatorAs(t, "service:dev")
	// The undo names the target's actions as they are (the executor
	// lists them): what refuses it is the run, not what it would do.
	actions := []any{map[string]any{"op": "remove", "path": "bob.txt"}}
	vreq, ereq := proposal(t, "other-run", 1, "xct.undo", map[string]any{"step_id": target, "actions": actions})
	v, err := svc.Validate(ctx, vreq)
	if err != nil {
		t.Fatal(err)
	}
	if v.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_DENY || v.GetVerdict().GetError().GetCode() != string(wire.CodeUnknownTool) {
		t.Fatalf("xct.undo proposed as a model's step: %v", v.GetVerdict())
	}
	vreq.SystemStep = true
	v, err = svc.Validate(ctx, vreq)
	if err != nil || v.GetVerdict().GetSigned() == nil {
		t.Fatalf("xct.undo as a system step: %v %v", v, err)
	}
	resp, err := c.executorAs(t, "service:dev").Execute(ctx, withVerdict(ereq, v.GetVerdict().GetSigned()))
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.GetResponse().GetError(); e.GetCode() != string(wire.CodePermissionDenied) || !strings.Contains(e.GetMessage(), "another run") {
		t.Fatalf("undo of another run's step: %v", resp.GetResponse())
	}
	if got, _ := readWS(t, c.workspace, "bob.txt"); got != "bob's" {
		t.Fatalf("bob.txt = %q", got)
	}
	// The operator's rollback of the victim's own run still works.
	rb, err := c.orchestratorAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: victim.GetRunId()})
	if err != nil || rb.GetStatus() != "done" || len(rb.GetUndone()) != 1 {
		t.Fatalf("rollback: %v %v", rb, err)
	}
	if _, ok := readWS(t, c.workspace, "bob.txt"); ok {
		t.Fatal("the rollback left bob.txt")
	}
}
