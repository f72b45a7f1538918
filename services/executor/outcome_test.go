package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

// Honest outcomes (issue 12): the executor never answers an outcome its
// record does not hold, and never says "not executed" when it could not
// read the record.

// outcomeFixture is an executor on a NATS server the test can stop and
// start, served over real gRPC on loopback, with a non-idempotent tool
// that blocks on its gate until the test opens it.
type outcomeFixture struct {
	js      *testutil.JetStream
	b       *binder
	svc     *Service
	client  xctv1.ExecutorServiceClient
	calls   atomic.Int64
	entered chan struct{}
	gate    chan struct{}
}

func newOutcomeFixture(t *testing.T) *outcomeFixture {
	t.Helper()
	f := &outcomeFixture{js: testutil.RestartableJetStream(t), entered: make(chan struct{}, 4), gate: make(chan struct{})}
	charge := testTool("test.charge", time.Minute, 0, func(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
		if e := Commit(ctx); e != nil {
			return nil, e
		}
		n := f.calls.Add(1)
		f.entered <- struct{}{}
		<-f.gate
		return map[string]any{"charged": n}, nil
	})
	charge.desc.Effect = xctv1.Effect_EFFECT_IRREVERSIBLE
	s, err := New(Config{Workspace: t.TempDir(), RecordTimeout: time.Second}, f.js.Connect(t), testLogger(t), charge)
	must(t, err)
	f.b = newBinder(t)
	f.b.trust(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must(t, s.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	f.svc = s
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("executor", testLogger(t), creds.ServerOptions()...)
	s.Register(srv.GRPC)
	must(t, srv.Listen("127.0.0.1:0"))
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Stop(context.Background()) })
	f.client = xctv1.NewExecutorServiceClient(creds.Dial(t, srv.Addr(), grpcxtest.Service))
	return f
}

// execute runs step n of the run "run" (its real step id, a signed
// verdict).
func (f *outcomeFixture) execute(ctx context.Context, t *testing.T, n int) (*xctv1.ExecuteResponse, error) {
	return f.client.Execute(ctx, f.b.requestAt(t, "run", n, "test.charge", map[string]any{}, false))
}

// stepID is the step id of step n of the run "run".
func (f *outcomeFixture) stepID(t *testing.T, n int) string {
	return f.b.requestAt(t, "run", n, "test.charge", map[string]any{}, false).GetStepId()
}

// Finding 3: the tool acted but its outcome could not be recorded (NATS
// went away mid-call). The executor used to answer success while the record
// stayed pending forever; now it answers that the outcome is not recorded
// yet, keeps writing it, and the record holds the real result once NATS is
// back: what a reader is told and what the record says agree.
func TestActedButUnrecordedIsNotReportedAsSuccess(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		resp *xctv1.ExecuteResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := f.execute(ctx, t, 1)
		done <- result{resp, err}
	}()
	entered(t, f.entered)
	f.js.Stop() // the store goes away while the tool acts
	close(f.gate)
	r := <-done
	if r.err == nil {
		t.Fatalf("Execute answered %v while the outcome is not recorded", r.resp)
	}
	if st := status.Convert(r.err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "acted") || strings.Contains(st.Message(), "nothing was executed") {
		t.Fatalf("Execute error: %v", r.err)
	}
	f.js.Start()
	testutil.Eventually(t, 30*time.Second, func() error {
		got, err := f.client.GetStep(ctx, &xctv1.GetStepRequest{StepId: f.stepID(t, 1)})
		if err != nil {
			return err
		}
		if got.GetStep().GetState() != stateSucceeded {
			return fmt.Errorf("record is %s", stateName(got.GetStep().GetState()))
		}
		if v := got.GetStep().GetResponse().GetSuccess().GetResult().GetStructValue().GetFields()["charged"].GetNumberValue(); v != 1 {
			return fmt.Errorf("recorded result %v", got.GetStep().GetResponse())
		}
		return nil
	})
	// Asked again, the step answers from its record and does not act.
	resp, err := f.execute(ctx, t, 1)
	must(t, err)
	if !resp.GetReplayed() || resp.GetResponse().GetSuccess() == nil || f.calls.Load() != 1 {
		t.Fatalf("second Execute: %v (calls %d)", resp, f.calls.Load())
	}
}

// Finding 2 (executor side): a step that ran and is recorded succeeded is
// asked again while the store cannot be read. The answer used to be
// Unavailable "nothing was executed", which a caller took as "not
// executed"; now both Execute and GetStep say the outcome is unknown, and
// once the store is back the recorded result is replayed, never re-run.
func TestUnreadableRecordIsUnknownNotNotExecuted(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t)
	close(f.gate)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := f.execute(ctx, t, 2); err != nil {
		t.Fatal(err)
	}
	entered(t, f.entered)
	f.js.Stop()
	for _, call := range []func() error{
		func() error { _, err := f.execute(ctx, t, 2); return err },
		func() error {
			_, err := f.client.GetStep(ctx, &xctv1.GetStepRequest{StepId: f.stepID(t, 2)})
			return err
		},
		func() error {
			_, err := f.client.GetStep(ctx, &xctv1.GetStepRequest{StepId: f.stepID(t, 2), Fence: true})
			return err
		},
	} {
		err := call()
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "outcome unknown") || strings.Contains(st.Message(), "nothing was executed") {
			t.Fatalf("with the store down: %v", err)
		}
	}
	f.js.Start()
	testutil.Eventually(t, 30*time.Second, func() error {
		resp, err := f.execute(ctx, t, 2)
		if err != nil {
			return err
		}
		if !resp.GetReplayed() || resp.GetResponse().GetSuccess() == nil {
			return fmt.Errorf("answer %v", resp)
		}
		return nil
	})
	if f.calls.Load() != 1 {
		t.Fatalf("the tool acted %d times", f.calls.Load())
	}
}

// A fence proves "not executed": a step without a record is recorded as
// not executed, and a call of it that arrives afterwards replays that
// instead of acting; a fence on a step with a record only reads it.
func TestFenceMakesNotExecutedFinal(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t)
	close(f.gate)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := f.client.GetStep(ctx, &xctv1.GetStepRequest{StepId: f.stepID(t, 3), Fence: true})
	must(t, err)
	if !NotExecuted(got.GetStep()) || got.GetInDoubt() {
		t.Fatalf("fence: %v", got)
	}
	resp, err := f.execute(ctx, t, 3)
	must(t, err)
	if e := resp.GetResponse().GetError(); e.GetCode() != string(wire.CodeExecutorUnavailable) || !resp.GetReplayed() || f.calls.Load() != 0 {
		t.Fatalf("late call after the fence: %v (calls %d)", resp, f.calls.Load())
	}
	// A fence cannot be resolved into an outcome that did not happen...
	_, err = f.svc.ResolveStep(ctx, f.stepID(t, 3), Resolution{Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, ResolvedBy: "carol"})
	if !errors.Is(err, ErrNotInDoubt) {
		t.Fatalf("resolve a fenced step as succeeded: %v", err)
	}
	// ...and a fence on a recorded step reads the record.
	if _, err := f.execute(ctx, t, 4); err != nil {
		t.Fatal(err)
	}
	got, err = f.client.GetStep(ctx, &xctv1.GetStepRequest{StepId: f.stepID(t, 4), Fence: true})
	must(t, err)
	if got.GetStep().GetState() != stateSucceeded || NotExecuted(got.GetStep()) {
		t.Fatalf("fence of a recorded step: %v", got)
	}
}

// entered waits for a tool to report that it acts, or fails the test.
func entered[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was not called")
	}
}
