package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
)

// Issue 12, session 21 (faults21): a cancel must be durable and honest.
// CancelRun cancelled the owner's loop context and answered; run_finished
// came later, if at all. An owner killed right after answering, or a
// stream too full to take run_finished, left the owner key to expire, and
// the takeover resumed the run from a chain that held no cancel: the run
// went on after the user was told it was cancelled. And a replica that
// did not own the run answered FAILED_PRECONDITION, so behind round-robin
// `xct cancel` failed half the time. Now the cancel is recorded in the
// owner key before the answer, where every owner and takeover reads it.

// cancelClient is a client of the orchestrators at addrs that asks each in
// turn, as a client behind round-robin does, and asks again while the
// answer says UNAVAILABLE ("ask again"): every answer, in order.
func cancelRetrying(t *testing.T, ctx context.Context, clients []xctv1.OrchestratorServiceClient, id, reason string) ([]error, *xctv1.CancelRunResponse) {
	t.Helper()
	var answers []error
	for i := 0; i < 20; i++ {
		resp, err := clients[i%len(clients)].CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: reason})
		answers = append(answers, err)
		if status.Code(err) != codes.Unavailable {
			return answers, resp
		}
	}
	t.Fatalf("CancelRun still unavailable after 20 tries: %v", answers)
	return nil, nil
}

// checkCancelled asserts that the chain verifies and ends cancelled by who
// with reason, with steps step_starts and each of them ended.
func checkCancelled(t *testing.T, events []lctl.Event, who, reason string, steps int) {
	t.Helper()
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain does not verify: %v", err)
	}
	last := events[len(events)-1]
	if last.Type != lctl.TypeRunFinished || str(last.Data, "status") != "cancelled" ||
		!strings.Contains(str(last.Data, "message"), "cancelled by "+who+": "+reason) {
		t.Fatalf("run ended %v, want cancelled by %s: %s:\n%s", last.Data, who, reason, describe(events))
	}
	if n := len(only(events, lctl.TypeStepStart)); n != steps {
		t.Fatalf("%d steps started, want %d:\n%s", n, steps, describe(events))
	}
	if n := len(only(events, lctl.TypeStepEnd)); n != steps {
		t.Fatalf("%d steps ended, want %d:\n%s", n, steps, describe(events))
	}
	if n := len(only(events, lctl.TypeRunFinished)); n != 1 {
		t.Fatalf("%d run_finished:\n%s", n, describe(events))
	}
}

// The owner is gone for the cluster (its NATS connection closed, as a
// SIGKILL leaves it) right after CancelRun answered, while step 1's tool
// call is in flight: the call finishes, and the next owner records its
// outcome and the cancel instead of resuming the run. On main the next
// owner resumed it: step 2 ran, the run ended done.
func TestCancelHoldsWhenTheOwnerDiesRightAfterAnswering(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2), step("test.count", 3))
	f := newFixture(t, model)
	gate := f.count.gate(1)
	a, anc := f.orchestrator("orch-a", time.Second)
	carol := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(a).Addr(), "carol"))
	id := f.start(a)
	entered(t, f.count.entered) // step 1's tool is running, called by A

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := carol.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "wrong goal"}); err != nil {
		t.Fatal(err)
	}
	anc.Close() // A is gone for the cluster: no append, no heartbeat
	close(gate) // the tool call in flight finishes (its record says so)
	f.orchestrator("orch-b", time.Second)

	events := f.waitEnd(id)
	checkCancelled(t, events, "carol", "wrong goal", 1)
	if c := f.count.count(1); c != 1 {
		t.Fatalf("step 1 ran %d times", c)
	}
	if c := f.count.count(2); c != 0 {
		t.Fatalf("step 2 ran %d times after the cancel was answered:\n%s", c, describe(events))
	}
	// Step 1's outcome is the executor's record, recorded by orch-b.
	calls := only(events, lctl.TypeToolCall)
	if len(calls) != 1 || calls[0].Agent != agentExecutor {
		t.Fatalf("tool_call events %v:\n%s", calls, describe(events))
	}
	resumed := only(events, TypeRunResumed)
	if len(resumed) != 1 || str(resumed[0].Data, "instance") != "orch-b" {
		t.Fatalf("run_resumed %v:\n%s", resumed, describe(events))
	}
	f.waitOwnerGone(id)
}

// CancelRun asked of a replica that does not own the run cancels it: the
// owner stops before the answer and records the end. On main: "owned by
// another orchestrator".
func TestCancelOnAReplicaThatDoesNotOwnTheRun(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2))
	f := newFixture(t, model)
	proposing2 := model.gate(1)
	defer close(proposing2)
	a, _ := f.orchestrator("orch-a", time.Minute)
	b, _ := f.orchestrator("orch-b", time.Minute)
	carolB := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(b).Addr(), "carol"))
	id := f.start(a)
	if turn := <-model.asked; turn != 1 {
		t.Fatalf("asked for turn %d", turn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := carolB.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "not needed"})
	if err != nil {
		t.Fatalf("CancelRun on the replica that does not own the run: %v", err)
	}
	if resp.GetRun().GetRunId() != id {
		t.Fatalf("answer %v", resp.GetRun())
	}
	// Answered once A stopped the loop: A's run is cancelled by now.
	if r := a.owner(id); r != nil {
		var c errCancelled
		if !errors.As(context.Cause(r.ctx), &c) || c.by != "carol" {
			t.Fatalf("answered while A's loop is not cancelled (%v)", context.Cause(r.ctx))
		}
	}
	events := f.waitEnd(id)
	checkCancelled(t, events, "carol", "not needed", 1)
	if c := f.count.count(2); c != 0 {
		t.Fatalf("step 2 ran %d times after the cancel", c)
	}
	if len(only(events, TypeRunResumed)) != 0 {
		t.Fatalf("the run moved:\n%s", describe(events))
	}
	f.waitOwnerGone(id)
	// Asked again (a client that did not see the answer): the run has ended cancelled.
	if _, err := carolB.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "not needed"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("CancelRun of the cancelled run: %v", err)
	}
}

// The owner lost NATS before CancelRun reached it: it cannot record the
// cancel, and says so (UNAVAILABLE, nothing changed) instead of answering
// OK; the client asks again, as told, of the next replica, which records
// it and answers once the takeover has claimed the run with it; the run
// ends cancelled without another step. On main A answered OK, and B
// resumed the run after the lease: step 2 ran.
func TestCancelNotRecordableIsSaidSoAndItsRetryHolds(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2))
	f := newFixture(t, model)
	proposing2 := model.gate(1)
	defer close(proposing2)
	a, anc := f.orchestrator("orch-a", time.Second)
	b, _ := f.orchestrator("orch-b", time.Second)
	clients := []xctv1.OrchestratorServiceClient{
		xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(a).Addr(), "carol")),
		xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(b).Addr(), "carol")),
	}
	id := f.start(a)
	if turn := <-model.asked; turn != 1 {
		t.Fatalf("asked for turn %d", turn)
	}
	anc.Close() // A is cut off from NATS, its loop still waiting for the model

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answers, _ := cancelRetrying(t, ctx, clients, id, "stop it")
	if len(answers) < 2 || status.Code(answers[0]) != codes.Unavailable || !strings.Contains(status.Convert(answers[0]).Message(), "not recorded") {
		t.Fatalf("answers %v: want A's UNAVAILABLE saying the cancel was not recorded first", answers)
	}
	if err := answers[len(answers)-1]; err != nil {
		t.Fatalf("answers %v", answers)
	}
	events := f.waitEnd(id)
	checkCancelled(t, events, "carol", "stop it", 1)
	if c := f.count.count(2); c != 0 {
		t.Fatalf("step 2 ran %d times after the cancel was answered:\n%s", c, describe(events))
	}
	// A was in a model call when it was cut off: a call the endpoint may
	// have billed, which no event holds. The takeover that ends the run
	// charges it in run_finished's totals (step 1's call is 5 tokens in),
	// as one that goes on charges it on its next call.
	resumed := only(events, TypeRunResumed)
	if len(resumed) != 1 || num(resumed[0].Data, "unrecorded_calls") != 1 {
		t.Fatalf("run_resumed %v, want 1 unrecorded call", resumed)
	}
	fin := events[len(events)-1]
	if tokens, _ := fin.Data["tokens"].(map[string]any); num(tokens, "input") < 10 || num(tokens, "output") < 2 {
		t.Fatalf("run_finished charges %v: the call A was in is not charged", fin.Data["tokens"])
	}
	f.waitOwnerGone(id)
}

// The event log is full when the run is cancelled: the cancel is recorded
// in the owner key and answered, the owner cannot append run_finished,
// GetRun says cancelled and not yet on the chain, and once there is room
// the takeover records the cancel instead of resuming. On main GetRun said
// FAILED "event log unavailable" and the takeover resumed the run: step 2
// ran.
func TestCancelWhileTheStreamIsFull(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2))
	f := newFixture(t, model)
	proposing2 := model.gate(1)
	defer close(proposing2)
	a, _ := f.orchestrator("orch-a", time.Second)
	carol := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(a).Addr(), "carol"))
	id := f.start(a)
	if turn := <-model.asked; turn != 1 {
		t.Fatalf("asked for turn %d", turn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setLimit := func(maxBytes int64) {
		t.Helper()
		st, err := f.events.JetStream().Stream(ctx, "LCTL")
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		c.MaxBytes, c.Discard = maxBytes, jetstream.DiscardNew
		if _, err := f.events.JetStream().UpdateStream(ctx, c); err != nil {
			t.Fatalf("update LCTL: %v", err)
		}
	}
	setLimit(64) // full: no room for one more event
	if _, err := carol.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "full"}); err != nil {
		t.Fatal(err)
	}
	// The owner's loop ended; its end is not on the chain, and GetRun says so.
	testutil.Eventually(t, 30*time.Second, func() error {
		if a.owns(id) {
			return errors.New("A still runs the loop")
		}
		return nil
	})
	got, err := carol.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	if r := got.GetRun(); r.GetStatus() != xctv1.RunStatus_RUN_STATUS_CANCELLED || !strings.Contains(r.GetMessage(), "cancelled by carol: full") ||
		!strings.Contains(r.GetMessage(), "not on the chain yet") {
		t.Fatalf("GetRun while the end cannot be recorded: %v %q", r.GetStatus(), r.GetMessage())
	}
	// Another replica reads the chain (no end yet) and the owner key.
	// (B's takeovers fail meanwhile: one in its instant between claiming
	// the run and failing to append is served from B's cache.)
	b, _ := f.orchestrator("orch-b", time.Second)
	carolB := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(b).Addr(), "carol"))
	testutil.Eventually(t, 30*time.Second, func() error {
		got, err := carolB.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
		if err != nil {
			return err
		}
		if r := got.GetRun(); !live(r.GetStatus()) || !strings.Contains(r.GetMessage(), "cancelled by carol: full: the cancel is recorded") {
			return fmt.Errorf("GetRun at another replica while the end cannot be recorded: %v %q", r.GetStatus(), r.GetMessage())
		}
		return nil
	})
	// A takeover cannot record anything either; then there is room.
	setLimit(-1)
	events := f.waitEnd(id)
	checkCancelled(t, events, "carol", "full", 1)
	if c := f.count.count(2); c != 0 {
		t.Fatalf("step 2 ran %d times after the cancel was answered:\n%s", c, describe(events))
	}
	f.waitOwnerGone(id)
}

// heldDone is a model whose answer for turn `at` waits for a gate whatever
// its context says: the answer "done" arrives after the cancel was
// answered, the run's own end racing the cancel at its worst (its loop
// has its end in hand and has not recorded it).
type heldDone struct {
	*gatedModel
	at    int
	asked chan struct{}
	gate  chan struct{}
}

func (m *heldDone) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if len(req.GetHistory()) == m.at {
		m.asked <- struct{}{}
		<-m.gate
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "all counted"}`, Model: "tester", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
	}
	return m.gatedModel.Propose(ctx, req)
}

// A cancel answered while the run's own end (the model's "done") is on its
// way: the chain says cancelled, as the answer did (on main: OK, then the
// chain said done). A cancel asked after the end is refused, naming it.
func TestCancelRacingTheRunsOwnEnd(t *testing.T) {
	t.Parallel()
	model := &heldDone{gatedModel: newGatedModel(step("test.count", 1)), at: 1, asked: make(chan struct{}, 1), gate: make(chan struct{})}
	f := newFixture(t, model.gatedModel)
	a, _ := f.launch(Config{RunLease: time.Minute, Instance: "orch-a", CallTimeout: time.Minute}, model)
	carol := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(a).Addr(), "carol"))
	id := f.start(a)
	<-model.asked
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := carol.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "late"}); err != nil {
		t.Fatal(err)
	}
	close(model.gate)
	events := f.waitEnd(id)
	checkCancelled(t, events, "carol", "late", 1)
	if msg := str(events[len(events)-1].Data, "message"); !strings.Contains(msg, "was ending done: all counted") {
		t.Fatalf("run_finished message %q does not say what the run was ending with", msg)
	}

	// The other order: the run ended done, then the cancel.
	id2 := f.startDone(a)
	_, err := carol.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id2, Reason: "too late"})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "DONE") {
		t.Fatalf("CancelRun of a run that ended done: %v", err)
	}
}

// waitOwnerGone waits until the run's owner key is deleted.
func (f *fixture) waitOwnerGone(id string) {
	f.t.Helper()
	testutil.Eventually(f.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if e, err := f.owners.Get(ctx, id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			if err == nil {
				return fmt.Errorf("owner key of an ended run: %s", e.Value())
			}
			return fmt.Errorf("owner key of an ended run: %w", err)
		}
		return nil
	})
}

// A run whose loop stopped because the event log was full (its step 2
// could not be recorded) is live on its chain: a takeover continues it
// once there is room. Its owner said "FAILED" and refused to cancel it
// (main: FAILED_PRECONDITION "is RUN_STATUS_FAILED"); now the cancel is
// recorded, answered once a takeover claimed the run with it, and the run
// ends cancelled when there is room, step 2 never run.
func TestCancelARunStoppedByAFullStream(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2))
	f := newFixture(t, model)
	proposing2 := model.gate(1)
	a, _ := f.orchestrator("orch-a", time.Second)
	carol := xctv1.NewOrchestratorServiceClient(f.creds.Dial(t, f.serveOrchestrator(a).Addr(), "carol"))
	id := f.start(a)
	if turn := <-model.asked; turn != 1 {
		t.Fatalf("asked for turn %d", turn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setLimit := func(maxBytes int64) {
		t.Helper()
		st, err := f.events.JetStream().Stream(ctx, "LCTL")
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		c.MaxBytes, c.Discard = maxBytes, jetstream.DiscardNew
		if _, err := f.events.JetStream().UpdateStream(ctx, c); err != nil {
			t.Fatalf("update LCTL: %v", err)
		}
	}
	setLimit(64)
	close(proposing2) // step 2 cannot be recorded: A's loop stops
	testutil.Eventually(t, 30*time.Second, func() error {
		if a.owns(id) {
			return errors.New("A still runs the loop")
		}
		return nil
	})
	f.orchestrator("orch-b", time.Second) // its takeovers fail while the log is full
	if _, err := carol.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "no room"}); err != nil {
		t.Fatalf("CancelRun of a run stopped by a full log: %v", err)
	}
	setLimit(-1)
	events := f.waitEnd(id)
	checkCancelled(t, events, "carol", "no room", 1)
	if c := f.count.count(2); c != 0 {
		t.Fatalf("step 2 ran %d times after the cancel was answered:\n%s", c, describe(events))
	}
	f.waitOwnerGone(id)
}
