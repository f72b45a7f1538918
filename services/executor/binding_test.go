package executor

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// binder signs verdicts the way the validator does, for tests that call
// Execute through its handler.
type binder struct {
	key    ed25519.PrivateKey
	signer *verdict.Signer
	step   atomic.Int32
	svc    *Service // the service that trusts b (trust)
}

func newBinder(tb testing.TB) *binder {
	tb.Helper()
	key, err := verdict.GenerateKey()
	must(tb, err)
	s, err := verdict.NewSigner(key, time.Minute)
	must(tb, err)
	return &binder{key: key, signer: s}
}

// trust makes s act on b's verdicts.
func (b *binder) trust(tb testing.TB, s *Service) {
	tb.Helper()
	v, err := verdict.NewVerifier(b.signer.Public())
	must(tb, err)
	s.verifier = v
	b.svc = s
}

// toolDigest is the digest of tool as the trusted service serves it: what
// a validator judging its catalog signs ("" before trust).
func (b *binder) toolDigest(tool string) string {
	if b.svc == nil {
		return ""
	}
	if st, ok := b.svc.tool(tool); ok {
		return verdict.ToolDigest(st.desc)
	}
	return ""
}

// request is an ExecuteRequest for the next step of runID with its real
// step id and a signed verdict for it.
func (b *binder) request(tb testing.TB, runID, tool string, args map[string]any) *xctv1.ExecuteRequest {
	tb.Helper()
	return b.requestAt(tb, runID, int(b.step.Add(1)), tool, args, false)
}

func (b *binder) requestAt(tb testing.TB, runID string, step int, tool string, args map[string]any, system bool) *xctv1.ExecuteRequest {
	tb.Helper()
	st, err := structpb.NewStruct(args)
	must(tb, err)
	id := wire.StepID(runID, step, tool, st)
	digest, err := verdict.StructDigest(st)
	must(tb, err)
	sv, err := b.signer.Sign(&xctv1.VerdictGrant{RunId: runID, Step: int32(step), StepId: id, Tool: tool, ArgumentsDigest: digest, SystemStep: system, ToolDigest: b.toolDigest(tool)}, time.Now())
	must(tb, err)
	return &xctv1.ExecuteRequest{RunId: runID, StepId: id, Tool: tool, Arguments: st, Verdict: sv}
}

// resign signs g (altered by the caller) with b's key, as a validator
// that signed it would.
func (b *binder) resign(tb testing.TB, g *xctv1.VerdictGrant) *xctv1.SignedVerdict {
	tb.Helper()
	raw, err := proto.Marshal(g)
	must(tb, err)
	return &xctv1.SignedVerdict{KeyId: b.signer.KeyID(), Grant: raw, Signature: ed25519.Sign(b.key, append([]byte("xct.verdict.v1\x00"), raw...))}
}

// TestExecuteActsOnlyOnItsVerdict calls the handler as admin with every
// kind of bad verdict: nothing acts, nothing is recorded; the real one
// acts once, and a second Execute with it replays.
func TestExecuteActsOnlyOnItsVerdict(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	tool := testTool("test.count", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
		calls.Add(1)
		return map[string]any{"n": 1}, nil
	})
	s := newService(t, t.TempDir(), tool)
	b := newBinder(t)
	h := &handler{s: s}
	ctx := auth.NewContext(context.Background(), auth.Principal{Name: "admin", Roles: []string{auth.RoleAdmin}})
	args := map[string]any{"x": "a"}

	b.svc = s // the grants name the tool as s serves it
	good := b.requestAt(t, "run-a", 1, "test.count", args, false)
	refused := func(name string, req *xctv1.ExecuteRequest, want codes.Code, msg string) {
		t.Helper()
		_, err := h.Execute(ctx, req)
		if status.Code(err) != want || !strings.Contains(status.Convert(err).Message(), msg) {
			t.Errorf("%s: %v, want %v with %q", name, err, want, msg)
		}
	}
	// An executor that trusts no key acts on nothing, even a good verdict.
	refused("no trusted key", good, codes.FailedPrecondition, "trusts no verdict key")
	b.trust(t, s)

	noVerdict := proto.CloneOf(good)
	noVerdict.Verdict = nil
	refused("no verdict", noVerdict, codes.PermissionDenied, "no signed verdict")

	forger := newBinder(t)
	forged := proto.CloneOf(good)
	forged.Verdict = forger.resign(t, testGrant(t, good))
	forged.Verdict.KeyId = b.signer.KeyID() // claims the trusted key
	refused("forged", forged, codes.PermissionDenied, "does not verify")

	foreignKey := proto.CloneOf(good)
	foreignKey.Verdict = forger.resign(t, testGrant(t, good))
	refused("unknown key", foreignKey, codes.PermissionDenied, "does not trust")

	otherArgs := proto.CloneOf(good)
	otherArgs.Arguments, _ = structpb.NewStruct(map[string]any{"x": "b"})
	refused("other arguments", otherArgs, codes.PermissionDenied, "arguments")

	otherStep := b.requestAt(t, "run-a", 2, "test.count", map[string]any{"x": "c"}, false)
	stepB := proto.CloneOf(otherStep)
	stepB.Verdict = good.Verdict // step A's verdict for step B
	refused("verdict of another step", stepB, codes.PermissionDenied, "step id")

	otherRun := proto.CloneOf(good)
	otherRun.RunId = "run-b"
	refused("another run", otherRun, codes.PermissionDenied, "run")

	g := testGrant(t, good)
	g.ExpiresAt = timestamppb.New(time.Now().Add(-time.Second))
	expired := proto.CloneOf(good)
	expired.Verdict = b.resign(t, g)
	refused("expired", expired, codes.FailedPrecondition, "expired")

	g = testGrant(t, good)
	g.Step = 7 // a step number the step id is not made from
	wrongNumber := proto.CloneOf(good)
	wrongNumber.Verdict = b.resign(t, g)
	refused("step number", wrongNumber, codes.PermissionDenied, "step number")

	tampered := proto.CloneOf(good)
	tampered.Verdict = proto.CloneOf(good.Verdict)
	tampered.Verdict.Grant = append(append([]byte{}, good.Verdict.Grant...), 0x50, 0x01) // an extra field
	refused("tampered grant", tampered, codes.PermissionDenied, "does not verify")

	undo := b.requestAt(t, "run-a", 3, UndoToolName, undoArgs(t, s, good.GetStepId()), false)
	refused("system tool without a system grant", undo, codes.PermissionDenied, "system tool")

	// The grant binds the tool as the validator judged it (session 10,
	// trust10a): a grant for another description of the tool (another
	// effect class, schema, origin), or for none, does not act.
	for name, digest := range map[string]string{"tool judged otherwise": verdict.ToolDigest(&xctv1.ToolDescriptor{Name: "test.count", InputSchema: "{}", Effect: xctv1.Effect_EFFECT_READ}),
		"no tool digest": ""} {
		g := testGrant(t, good)
		g.ToolDigest = digest
		other := proto.CloneOf(good)
		other.Verdict = b.resign(t, g)
		refused(name, other, codes.PermissionDenied, "described by")
	}

	if n := calls.Load(); n != 0 {
		t.Fatalf("the tool ran %d times on refused verdicts", n)
	}
	if _, _, err := s.steps.Get(context.Background(), good.GetStepId()); err == nil {
		t.Fatal("a refused Execute left a step record")
	}

	resp, err := h.Execute(ctx, good)
	must(t, err)
	if resp.GetReplayed() || calls.Load() != 1 {
		t.Fatalf("first execute: replayed %v, calls %d", resp.GetReplayed(), calls.Load())
	}
	again, err := h.Execute(ctx, good)
	must(t, err)
	if !again.GetReplayed() || calls.Load() != 1 {
		t.Fatalf("second execute with the same verdict: replayed %v, calls %d", again.GetReplayed(), calls.Load())
	}
}

func testGrant(tb testing.TB, req *xctv1.ExecuteRequest) *xctv1.VerdictGrant {
	tb.Helper()
	g := &xctv1.VerdictGrant{}
	must(tb, proto.Unmarshal(req.GetVerdict().GetGrant(), g))
	return g
}

// TestUndoOnlyWithinItsRun: a system step of run B cannot undo a step of
// run A, even with a system grant.
func TestUndoOnlyWithinItsRun(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	s := newService(t, ws)
	b := newBinder(t)
	b.trust(t, s)
	h := &handler{s: s}
	ctx := context.Background()
	write := b.requestAt(t, "run-a", 1, "fs.write", map[string]any{"path": "a.txt", "content": "mine"}, false)
	if resp, err := h.Execute(ctx, write); err != nil || resp.GetResponse().GetError() != nil {
		t.Fatalf("write: %v %v", resp, err)
	}
	undoB := b.requestAt(t, "run-b", 1, UndoToolName, undoArgs(t, s, write.GetStepId()), true)
	resp, err := h.Execute(ctx, undoB)
	must(t, err)
	if codeOf(resp.GetResponse()) != string(wire.CodePermissionDenied) || !strings.Contains(resp.GetResponse().GetError().GetMessage(), "another run") {
		t.Fatalf("undo from another run: %v", resp.GetResponse())
	}
	if got := wsFile(t, ws, "a.txt"); got != "mine" {
		t.Fatalf("a.txt = %q after a refused undo", got)
	}
	undoA := b.requestAt(t, "run-a", 2, UndoToolName, undoArgs(t, s, write.GetStepId()), true)
	resp, err = h.Execute(ctx, undoA)
	must(t, err)
	if resp.GetResponse().GetError() != nil {
		t.Fatalf("undo within its run: %v", resp.GetResponse())
	}
}

func wsFile(tb testing.TB, dir, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	must(tb, err)
	return string(b)
}

// A human's result for a step is bounded like a tool's: deeper than the
// limit is refused before anything is recorded.
func TestResolveRefusesADeepResult(t *testing.T) {
	t.Parallel()
	s := newService(t, t.TempDir())
	h := &handler{s: s}
	var v any = "leaf"
	for range wire.MaxDepth + 1 {
		v = []any{v}
	}
	deep, err := structpb.NewValue(v)
	must(t, err)
	ctx := auth.NewContext(context.Background(), auth.Principal{Name: "carol", Roles: []string{auth.RoleOperator}})
	_, err = h.ResolveStep(ctx, &xctv1.ResolveStepRequest{StepId: "s", Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, Result: deep})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("deep result: %v", err)
	}
}

// A verdict starts at most one attempt: after a human releases a failed
// step for a retry, the same verdict is refused and a new one acts.
func TestAVerdictStartsOneAttempt(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	tool := testTool("test.flaky", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
		if calls.Add(1) == 1 {
			return nil, wire.Errorf(wire.CodeToolFailure, "first try fails")
		}
		return "ok", nil
	})
	s := newService(t, t.TempDir(), tool)
	b := newBinder(t)
	b.trust(t, s)
	h := &handler{s: s}
	ctx := context.Background()
	first := b.requestAt(t, "run-r", 1, "test.flaky", map[string]any{}, false)
	resp, err := h.Execute(ctx, first)
	must(t, err)
	if codeOf(resp.GetResponse()) != string(wire.CodeToolFailure) {
		t.Fatalf("first attempt: %v", resp.GetResponse())
	}
	op := auth.NewContext(ctx, auth.Principal{Name: "carol", Roles: []string{auth.RoleOperator}})
	if _, err := h.ResolveStep(op, &xctv1.ResolveStepRequest{StepId: first.GetStepId(), Decision: xctv1.StepDecision_STEP_DECISION_RETRY, Reason: "transient"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Execute(ctx, first); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "new verdict") {
		t.Fatalf("retry with the spent verdict: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("the spent verdict ran the tool: %d calls", calls.Load())
	}
	second := b.requestAt(t, "run-r", 1, "test.flaky", map[string]any{}, false) // a new grant, same step
	resp, err = h.Execute(ctx, second)
	must(t, err)
	if resp.GetResponse().GetError() != nil || resp.GetAttempt() != 2 || calls.Load() != 2 {
		t.Fatalf("retry with a new verdict: %v (attempt %d, calls %d)", resp.GetResponse(), resp.GetAttempt(), calls.Load())
	}
	rec, _, err := s.steps.Get(ctx, first.GetStepId())
	must(t, err)
	if g := rec.GetVerdictGrants(); len(g) != 2 || g[0] != testGrant(t, first).GetGrantId() || g[1] != testGrant(t, second).GetGrantId() {
		t.Fatalf("verdict grants on the record: %v", g)
	}
	// Replays answer any valid verdict of the step.
	again, err := h.Execute(ctx, first)
	if err != nil || !again.GetReplayed() {
		t.Fatalf("replay with the first verdict: %v %v", again, err)
	}
}

// TestStepCallers: a preview reads workspace files (an fs.write's diff
// shows the file it would replace), and any of XCT's services may call
// the executor; with --step-callers only the services named execute or
// preview a step, so a taken-over tracer reads nothing through it. Without
// the flag any service may, as before.
func TestStepCallers(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "config"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "config", "app.yaml"), []byte("password: hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := func(name string) context.Context {
		return auth.NewContext(context.Background(), auth.Principal{Name: name, Roles: []string{auth.RoleService}, Service: true})
	}
	args, err := structpb.NewStruct(map[string]any{"path": "config/app.yaml", "content": "password: changed\n"})
	must(t, err)
	preview := &xctv1.PreviewStepRequest{Tool: "fs.write", Arguments: args}

	s, err := New(Config{Workspace: ws, MaxOutputBytes: 1024, StepCallers: []string{"service:orchestrator"}}, nil, nil)
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	h := &handler{s: s}
	if _, err := h.PreviewStep(svc("service:tracer"), preview); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "service:tracer") {
		t.Fatalf("the tracer's preview: %v, want PermissionDenied naming it", err)
	}
	st, err := structpb.NewStruct(map[string]any{"path": "x.txt"})
	must(t, err)
	if _, err := h.Execute(svc("service:tracer"), &xctv1.ExecuteRequest{RunId: "run-a", StepId: "s1", Tool: "fs.read", Arguments: st}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the tracer's Execute: %v, want PermissionDenied", err)
	}
	if _, err := h.GetStep(svc("service:tracer"), &xctv1.GetStepRequest{StepId: "s1", Fence: true}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the tracer's fence: %v, want PermissionDenied", err)
	}
	if _, err := h.GetStep(svc("service:tracer"), &xctv1.GetStepRequest{StepId: "s1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the tracer reading a step: %v, want NotFound", err)
	}
	resp, err := h.PreviewStep(svc("service:orchestrator"), preview)
	must(t, err)
	if !strings.Contains(resp.GetPreview().GetContent(), "hunter2") {
		t.Fatalf("the orchestrator's preview does not show the file it replaces: %q", resp.GetPreview().GetContent())
	}

	open := &handler{s: newService(t, ws)}
	if _, err := open.PreviewStep(svc("service:tracer"), preview); err != nil {
		t.Fatalf("without --step-callers a service's preview: %v", err)
	}
}

// TestExecuteActsOnWhatItsVerdictDigests: a verdict's arguments digest is
// of their canonical JSON (RFC 8785), which writes -0 as 0, so a verdict
// for {"n": 0} also verifies for {"n": -0}, a different structpb value
// that a tool is handed as is (a remote tool or an MCP server gets
// "-0"; fmt prints "-0"). A caller holding the verdict for one (a
// taken-over orchestrator) could have the tool act on the other. The
// executor acts on the arguments as digested: every -0 is 0.
func TestExecuteActsOnWhatItsVerdictDigests(t *testing.T) {
	t.Parallel()
	var seen atomic.Value
	tool := testTool("test.echo", 0, 0, func(_ context.Context, args map[string]any) (any, *xctv1.Error) {
		seen.Store(fmt.Sprint(args))
		return map[string]any{"ok": true}, nil
	})
	s := newService(t, t.TempDir(), tool)
	b := newBinder(t)
	b.trust(t, s)
	h := &handler{s: s}
	ctx := auth.NewContext(context.Background(), auth.Principal{Name: "service:orchestrator", Roles: []string{auth.RoleService}})

	negZero := math.Copysign(0, -1)
	req := b.requestAt(t, "run-z", 1, "test.echo",
		map[string]any{"n": 0.0, "list": []any{0.0}, "obj": map[string]any{"m": 0.0}}, false)
	// The same verdict and step id, the arguments holding -0 instead.
	st, err := structpb.NewStruct(map[string]any{"n": negZero, "list": []any{negZero}, "obj": map[string]any{"m": negZero}})
	must(t, err)
	req.Arguments = st
	resp, err := h.Execute(ctx, req)
	if err != nil {
		// Refusing it would hold too.
		t.Logf("refused: %v", err)
		return
	}
	if resp.GetResponse().GetError() != nil {
		t.Fatalf("execute: %v", resp.GetResponse().GetError())
	}
	got, _ := seen.Load().(string)
	if strings.Contains(got, "-0") {
		t.Errorf("the tool acted on %s under a verdict for zeros: the executor must act on the arguments its verdict digests", got)
	}
}
