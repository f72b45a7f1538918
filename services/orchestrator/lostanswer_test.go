package orchestrator

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
)

// Issue 12, session 11: a tool whose effect happened but whose answer was
// lost (an http.request whose connection broke after the request was sent,
// an MCP server or tool server that died mid-call) says so: its error
// carries outcome_unknown. For a tool that is neither read-only nor
// idempotent that is a step in doubt, for a human to settle.

// lostAnswerTool acts, then reports that it cannot tell whether it did:
// what http.request, MCP and remote tools answer when the call was sent
// and its answer lost.
type lostAnswerTool struct{ calls atomic.Int32 }

func (l *lostAnswerTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{Name: "test.post", Description: "posts, and loses the answer", InputSchema: `{"type":"object"}`,
		Effect: xctv1.Effect_EFFECT_REVERSIBLE, Timeout: durationpb.New(time.Minute)}
}

func (l *lostAnswerTool) Invoke(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
	if e := executor.Commit(ctx); e != nil {
		return nil, e
	}
	l.calls.Add(1)
	return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "request to the ledger failed: connection reset by peer (the request was sent)"),
		map[string]any{"outcome_unknown": true})
}

// Before the fix the executor recorded such a step as FAILED: the run
// ended on it ("in doubt: decide with xct resolve"), and xct resolve
// refused to record what a human found (a recorded failure is not
// overwritten), while the run's view said the step failed although it
// had acted. Now the record is IN_DOUBT: the run waits visibly, the human's
// decision is taken, and the run goes on with it; the tool acted once.
func TestLostAnswerWaitsForAHuman(t *testing.T) {
	t.Parallel()
	model := newGatedModel(`{"next_step": {"tool": "test.post", "arguments": {"amount": 5}, "goal": "post"}}`)
	f := newFixture(t, model)
	tool := &lostAnswerTool{}
	ex := f.serveExecutor("executor-post", tool)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, _ := (&outcomeFixture{fixture: f}).orch("orch-a", model)
	id := f.start(a)

	events := f.waitFor(id, "step_in_doubt or run_finished", func(e lctl.Event) bool {
		return e.Type == TypeStepInDoubt || e.Type == lctl.TypeRunFinished
	})
	if last := events[len(events)-1]; last.Type != TypeStepInDoubt {
		t.Fatalf("the run ended instead of waiting for a human:\n%s", describe(events))
	}
	stepID := str(events[len(events)-1].Data, "step_id")
	rec, doubt, err := ex.Step(ctx, stepID)
	if err != nil || !doubt {
		t.Fatalf("record %v (in doubt %v), %v", rec, doubt, err)
	}
	if _, err := ex.ResolveStep(ctx, stepID, executor.Resolution{Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		ResolvedBy: "carol", Reason: "the ledger has the entry", Result: map[string]any{"posted": 5.0}}); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	events = f.waitEnd(id)
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.Data["status"] != "done" {
		t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
	}
	calls := only(events, lctl.TypeToolCall)
	if len(calls) != 1 || str(calls[0].Data, "step_id") != stepID {
		t.Fatalf("want the human's outcome as step 1's tool_call:\n%s", describe(events))
	}
	if n := tool.calls.Load(); n != 1 {
		t.Fatalf("the tool acted %d times", n)
	}
}

// serveExecutor starts an executor of the given tools alone, served over
// gRPC as name, and makes it the fixture's executor for the orchestrators
// launched after.
func (f *fixture) serveExecutor(name string, tools ...executor.Tool) *executor.Service {
	f.t.Helper()
	ex, err := executor.New(executor.Config{Workspace: f.t.TempDir(), Verifier: f.verifier}, connect(f.t, f.ns), testLogger(), tools...)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = ex.Stop(context.Background()) })
	f.execAddr = serveGRPC(f.t, f.creds, name, func(s *grpcx.Server) { ex.Register(s.GRPC) })
	f.validatorKnows(tools...)
	return ex
}

// validatorKnows waits until the fixture's validator has each tool in its
// catalog (its watch may trail an executor that has just started: a
// proposal in between is denied UNKNOWN_TOOL).
func (f *fixture) validatorKnows(tools ...executor.Tool) {
	f.t.Helper()
	testutil.Eventually(f.t, time.Minute, func() error {
		for _, tool := range tools {
			if name := tool.Descriptor().GetName(); !f.val.KnowsTool(name) {
				return fmt.Errorf("the validator's catalog does not have %s yet", name)
			}
		}
		return nil
	})
}
