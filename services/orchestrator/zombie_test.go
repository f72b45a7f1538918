package orchestrator

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Issue 12, session 11: the previous owner of a run as a zombie writer. Its
// Execute call left it before it was paused (SIGSTOP, a long GC, a slow
// network), the run was taken over, and the call reaches the executor only
// after the new owner has settled the step. Whatever the new owner told
// the model about the step must then still be true.

// heldExecutor relays ExecutorService calls to the real executor over gRPC
// and holds the first Execute until released: a request already sent that
// arrives late. The relay is the network, not a stand-in for the executor:
// every call is answered by the real one.
type heldExecutor struct {
	xctv1.UnimplementedExecutorServiceServer
	to xctv1.ExecutorServiceClient

	once     sync.Once
	entered  chan struct{} // closed when the first Execute arrives
	release  chan struct{} // closed to let it through
	released sync.Once
	done     chan error // the held call's result, once it reached the executor
}

func newHeldExecutor(t *testing.T, f *fixture, execAddr string) (*heldExecutor, string) {
	t.Helper()
	conn, err := grpcx.Dial(execAddr, grpcx.WithToken(f.creds.Token(t, grpcxtest.Service)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h := &heldExecutor{to: xctv1.NewExecutorServiceClient(conn), entered: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	t.Cleanup(h.let)
	addr := serveGRPC(t, f.creds, "executor-relay", func(s *grpcx.Server) { xctv1.RegisterExecutorServiceServer(s.GRPC, h) })
	return h, addr
}

// let releases the held call.
func (h *heldExecutor) let() { h.released.Do(func() { close(h.release) }) }

func (h *heldExecutor) ListTools(ctx context.Context, req *xctv1.ListToolsRequest) (*xctv1.ListToolsResponse, error) {
	return h.to.ListTools(ctx, req)
}

func (h *heldExecutor) GetStep(ctx context.Context, req *xctv1.GetStepRequest) (*xctv1.GetStepResponse, error) {
	return h.to.GetStep(ctx, req)
}

func (h *heldExecutor) PreviewStep(ctx context.Context, req *xctv1.PreviewStepRequest) (*xctv1.PreviewStepResponse, error) {
	return h.to.PreviewStep(ctx, req)
}

func (h *heldExecutor) Execute(ctx context.Context, req *xctv1.ExecuteRequest) (*xctv1.ExecuteResponse, error) {
	first := false
	h.once.Do(func() { first = true })
	if !first {
		return h.to.Execute(ctx, req)
	}
	close(h.entered)
	<-h.release
	// The request is on its way: its sender's fate no longer matters.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	resp, err := h.to.Execute(cctx, req)
	h.done <- err
	return resp, err
}

// deadAddr is a loopback address where nothing listens (a process that is
// down: connections are refused).
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// The old owner's Execute of step 1 is on its way when the owner vanishes
// (its NATS connection gone: it is paused, for the cluster). The new owner
// resumes step 1: the executor has no record of it yet, and the validator,
// asked for a fresh signed verdict, cannot be reached, so the new owner
// records the refusal as the step's outcome ("not executed") and the run
// goes on. Then the old call arrives with its still valid verdict. Before
// the fix it acted: a step the chain, the model and the run's answer call
// not executed had acted, and a model retrying as told would act again.
// Now "not executed" is said only once a fence proves it: the late call
// finds the fence and replays "not executed".
func TestZombieCallAfterARefusedResumeDoesNotAct(t *testing.T) {
	t.Parallel()
	f := newOutcomeFixture(t, time.Minute)
	model := newGatedModel(step("test.charge", 1))
	relay, relayAddr := newHeldExecutor(t, f.fixture, f.execAddr)

	realExec, realVal := f.execAddr, f.valAddr
	f.execAddr = relayAddr // A's calls to the executor go through the relay
	a, anc := f.orch("orch-a", model)
	f.execAddr = realExec
	f.valAddr = deadAddr(t) // B's validator is down
	b, _ := f.orch("orch-b", model)
	f.valAddr = realVal

	id := f.startWith(a)
	entered(t, relay.entered) // A's Execute of step 1 is on its way
	anc.Close()               // A vanishes from the cluster: its lease expires, B takes over

	events := f.waitEnd(id)
	if !b.owns(id) && len(only(events, TypeRunResumed)) != 1 {
		t.Fatalf("B did not take the run over:\n%s", describe(events))
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain does not verify: %v", err)
	}
	if len(only(events, lctl.TypeToolCall)) != 0 {
		t.Fatalf("no tool_call expected:\n%s", describe(events))
	}
	var stepID string
	for _, e := range only(events, lctl.TypeStepEnd) {
		if num(e.Data, "step") == 1 {
			stepID = str(e.Data, "step_id")
			if o := str(e.Data, "outcome"); o == xctevent.OutcomeSuccess {
				t.Fatalf("step 1 ended %s:\n%s", o, describe(events))
			}
		}
	}
	if stepID == "" {
		t.Fatalf("step 1 has no step_end:\n%s", describe(events))
	}

	relay.let() // the old owner's call arrives
	select {
	case err := <-relay.done:
		t.Logf("the held call returned: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the held call did not return")
	}
	if n := f.charge.count(1); n != 0 {
		t.Fatalf("step 1 acted %d time(s) after the chain closed it as not executed:\n%s", n, describe(events))
	}
	rec, _, err := f.es.ex.Step(context.Background(), stepID)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := rec.GetResponse().GetError().GetDetails().AsMap()["not_executed"].(bool); rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_FAILED || !d {
		t.Fatalf("record of step 1 is not a fence: %v", rec)
	}
}
