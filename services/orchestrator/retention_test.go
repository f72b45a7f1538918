package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
)

// stepReads is an executor's gRPC API in front of a real executor: it
// forwards every call and counts the GetStep calls per step id, so a test
// knows that the orchestrator has looked at a record.
type stepReads struct {
	xctv1.UnimplementedExecutorServiceServer
	to xctv1.ExecutorServiceClient
	mu sync.Mutex
	n  map[string]int
}

func (s *stepReads) reads(stepID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[stepID]
}

func (s *stepReads) ListTools(ctx context.Context, req *xctv1.ListToolsRequest) (*xctv1.ListToolsResponse, error) {
	return s.to.ListTools(ctx, req)
}

func (s *stepReads) Execute(ctx context.Context, req *xctv1.ExecuteRequest) (*xctv1.ExecuteResponse, error) {
	return s.to.Execute(ctx, req)
}

func (s *stepReads) PreviewStep(ctx context.Context, req *xctv1.PreviewStepRequest) (*xctv1.PreviewStepResponse, error) {
	return s.to.PreviewStep(ctx, req)
}

func (s *stepReads) ResolveStep(ctx context.Context, req *xctv1.ResolveStepRequest) (*xctv1.ResolveStepResponse, error) {
	return s.to.ResolveStep(ctx, req)
}

func (s *stepReads) GetStep(ctx context.Context, req *xctv1.GetStepRequest) (*xctv1.GetStepResponse, error) {
	s.mu.Lock()
	s.n[req.GetStepId()]++
	s.mu.Unlock()
	return s.to.GetStep(ctx, req)
}

// A step's record outlived by the wait for a human (issue 12): a step in
// doubt waits, IN_DOUBT, until a human decides it, however long that is,
// but the executor's records are kept for --step-retention (the KV
// bucket's age limit; an operator may set a day). Once the record had
// expired, the orchestrator's next read of it fenced the step, which
// records a step without a record as not executed: the model was told
// "not executed" about a charge that may have gone through, proposed it
// again, and it acted twice. A record the orchestrator has read once and
// misses later is now no proof of anything: the step stays in doubt until
// a human's decision, which is recorded as for a step with no record.
// TestInDoubtRecordExpiredUnreadIsNotNotExecuted is the same for an
// orchestrator that never read the record (one that took the run over).
func TestInDoubtRecordPastItsRetentionIsNotNotExecuted(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, 300*time.Millisecond)
	gate := f.charge.gate(1)
	a, _ := f.orchLease("orch-a", retryModel{newGatedModel()})
	id := f.startWith(a)
	entered(t, f.charge.entered)
	f.proxy.Cut() // the executor "dies" mid-charge: its outcome is never recorded
	f.es.kill()
	close(gate)
	ex2 := f.executorOn(t, f.ns.ClientURL(), f.charge)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The orchestrator's executor address serves ex2 through stepReads.
	conn, err := grpcx.Dial(serveGRPC(t, f.creds, "executor", func(s *grpcx.Server) { ex2.Register(s.GRPC) }),
		grpcx.WithToken(f.creds.Token(t, grpcxtest.Service)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sr := &stepReads{to: xctv1.NewExecutorServiceClient(conn), n: map[string]int{}}
	srv := grpcx.NewServer("executor", testLogger(), f.creds.ServerOptions()...)
	f.es.release()
	if err := srv.Listen(f.es.addr); err != nil {
		t.Fatal(err)
	}
	xctv1.RegisterExecutorServiceServer(srv.GRPC, sr)
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.GRPC.Stop() })

	events := f.waitFor(id, "step_in_doubt", func(e lctl.Event) bool { return e.Type == TypeStepInDoubt })
	stepID := str(only(events, TypeStepInDoubt)[0].Data, "step_id")
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, doubt, err := ex2.Step(ctx, stepID); err != nil || !doubt {
			return fmt.Errorf("record not in doubt yet: %w", err)
		}
		return nil
	})

	// The orchestrator has read the record in doubt (it polls while the
	// run waits, through the forwarder).
	read := sr.reads(stepID)
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := sr.reads(stepID); n < read+1 {
			return errors.New("the orchestrator has not read the record in doubt yet")
		}
		return nil
	})
	// The records' retention passes: the admin shortens the bucket's age
	// limit (as a short --step-retention would have it), and JetStream
	// removes the record.
	setStepsAge(t, f, 2*time.Second)
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, _, err := ex2.Step(ctx, stepID); !errors.Is(err, executor.ErrStepNotFound) {
			return fmt.Errorf("the record has not expired yet: %w", err)
		}
		return nil
	})
	// The orchestrator reads the step twice more; a fence at the first
	// read would have recorded it not executed (and the model would have
	// charged again).
	seen := sr.reads(stepID)
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, _, err := ex2.Step(ctx, stepID); !errors.Is(err, executor.ErrStepNotFound) {
			return nil // a record again: checked below
		}
		if n := sr.reads(stepID); n < seen+2 {
			return fmt.Errorf("the orchestrator read the step %d times since its record expired", n-seen)
		}
		return nil
	})
	if rec, _, err := ex2.Step(ctx, stepID); !errors.Is(err, executor.ErrStepNotFound) {
		t.Fatalf("the step in doubt was recorded %v (%v) once its record expired: %v", rec.GetState(), rec.GetResponse(), err)
	}
	f.runStatus(a, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
	if n := f.charge.count(1); n != 1 {
		t.Fatalf("the charge acted %d times", n)
	}
	// A human's decision settles it, recorded as for a step with no record
	// (and kept).
	if _, err := ex2.ResolveStep(ctx, stepID, executor.Resolution{Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		ResolvedBy: "carol", Reason: "seen in the ledger", Result: map[string]any{"n": 1.0}, RunID: id}); err != nil {
		t.Fatal(err)
	}
	setStepsAge(t, f, 0)
	f.es.ex = ex2
	f.agree(id, f.waitEnd(id))
}

// orchLease is f.orch with a run lease that a loaded machine (the race
// detector, other packages' tests) does not lose while the test waits.
func (f *outcomeFixture) orchLease(name string, model Proposer) (*Service, *nats.Conn) {
	f.t.Helper()
	return f.launch(Config{RunLease: 10 * time.Second, DrainTimeout: 5 * time.Second, Instance: name, CallTimeout: time.Minute,
		TakeoverTimeout: 2 * time.Second, SettleTimeout: 500 * time.Millisecond, SettlePoll: 200 * time.Millisecond}, model)
}

// setStepsAge sets the age limit of the executor's step records (the
// bucket's MaxAge, as `xct nats provision --step-retention` or an
// operator's `nats stream edit` sets it; 0: kept for ever).
func setStepsAge(t *testing.T, f *outcomeFixture, age time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(connect(t, f.ns))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+executor.StepsBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = age, 2*time.Minute
	if age > 0 {
		cfg.Duplicates = min(age, 2*time.Minute)
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// A step in doubt whose record expired before this orchestrator ever read
// it (it took the run over, or the executor was out of its reach until
// then): a step older than the records are kept and without one may have
// acted, so it is not fenced either. Before, the first read fenced it
// "not executed" and the charge acted twice.
func TestInDoubtRecordExpiredUnreadIsNotNotExecuted(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, 300*time.Millisecond)
	setStepsAge(t, f, 3*time.Second)
	gate := f.charge.gate(1)
	a, _ := f.orchLease("orch-a", retryModel{newGatedModel()})
	id := f.startWith(a)
	entered(t, f.charge.entered)
	f.proxy.Cut()
	f.es.kill() // the orchestrator cannot reach an executor until the forwarder serves
	close(gate)
	ex2 := f.executorOn(t, f.ns.ClientURL(), f.charge)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stepID := stepIDOf(t, f, id)
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, _, err := ex2.Step(ctx, stepID); !errors.Is(err, executor.ErrStepNotFound) {
			return fmt.Errorf("the record has not expired yet: %w", err)
		}
		return nil
	})
	f.runStatus(a, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)

	conn, err := grpcx.Dial(serveGRPC(t, f.creds, "executor", func(s *grpcx.Server) { ex2.Register(s.GRPC) }),
		grpcx.WithToken(f.creds.Token(t, grpcxtest.Service)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sr := &stepReads{to: xctv1.NewExecutorServiceClient(conn), n: map[string]int{}}
	srv := grpcx.NewServer("executor", testLogger(), f.creds.ServerOptions()...)
	f.es.release()
	if err := srv.Listen(f.es.addr); err != nil {
		t.Fatal(err)
	}
	xctv1.RegisterExecutorServiceServer(srv.GRPC, sr)
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.GRPC.Stop() })
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, _, err := ex2.Step(ctx, stepID); !errors.Is(err, executor.ErrStepNotFound) {
			return nil // a record again: checked below
		}
		if n := sr.reads(stepID); n < 2 {
			return fmt.Errorf("the orchestrator read the step %d times", n)
		}
		return nil
	})
	if rec, _, err := ex2.Step(ctx, stepID); !errors.Is(err, executor.ErrStepNotFound) {
		t.Fatalf("the step in doubt was recorded %v (%v) although its record may have expired: %v", rec.GetState(), rec.GetResponse(), err)
	}
	f.runStatus(a, id, xctv1.RunStatus_RUN_STATUS_IN_DOUBT)
	if n := f.charge.count(1); n != 1 {
		t.Fatalf("the charge acted %d times", n)
	}
	if _, err := ex2.ResolveStep(ctx, stepID, executor.Resolution{Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		ResolvedBy: "carol", Reason: "seen in the ledger", Result: map[string]any{"n": 1.0}, RunID: id}); err != nil {
		t.Fatal(err)
	}
	setStepsAge(t, f, 0) // the decision is kept
	f.es.ex = ex2
	f.agree(id, f.waitEnd(id))
}
