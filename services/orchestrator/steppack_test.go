package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/lctl"
)

// Issue 14, session 20 (pack20): a step just proposed writes its
// step_start with its verdict and its outcome with its step_end, one
// stream message each (recordPack). The chain must hold the very events
// the one-event-a-message writes made: only their grouping in messages
// differs.

// chainMessages reads run id's chain as the stream holds it: the event
// types of each message, in order.
func (f *fixture) chainMessages(id string) [][]string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := f.events.JetStream().Stream(ctx, eventlog.StreamName)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	var out [][]string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			f.t.Fatal(err)
		}
		if m.Subject != eventlog.Subject(id) {
			continue
		}
		var types []string
		for _, line := range bytes.Split(m.Data, []byte("\n")) {
			var e struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(line, &e); err != nil {
				f.t.Fatalf("message %d of %s: %v", seq, id, err)
			}
			types = append(types, e.Type)
		}
		out = append(out, types)
	}
	return out
}

// startAs starts a run with the given id on s.
func (f *fixture) startAs(s *Service, id string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{RunId: id, Goal: "count", Model: "func:tester", Principal: "alice"}); err != nil {
		f.t.Fatal(err)
	}
}

// volatile are the data fields that are times of the run: they differ
// between any two runs of one script.
var volatile = []string{"duration_ms", "evaluated_at"}

func comparable(e lctl.Event) string {
	d := maps.Clone(e.Data)
	for _, k := range volatile {
		delete(d, k)
	}
	b, _ := json.Marshal(d)
	return fmt.Sprintf("%d %s %s %s", e.Seq, e.Type, e.Agent, b)
}

// The same script run by an orchestrator writing packs and one writing an
// event a message (Config.EventPerMessage) on two clusters, under one run
// id: the chains hold the same events event for event (their times
// aside), both verify, and only the messages differ: two a step allowed
// or denied (step_start with verdict, tool_call or error with step_end)
// against one an event.
func TestStepPacksHoldTheEventsOfOneEventAMessage(t *testing.T) {
	t.Parallel()
	script := []string{step("test.count", 1), step("test.nothing", 1), "not a decision", step("test.count", 2)}
	const id = "run-packed-or-not"
	chains := map[bool][]lctl.Event{}
	messages := map[bool][][]string{}
	for _, apart := range []bool{false, true} {
		f := newFixture(t, newGatedModel(script...))
		s, _ := f.launch(Config{RunLease: time.Minute, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute, EventPerMessage: apart}, f.model)
		f.startAs(s, id)
		chains[apart] = f.waitEnd(id)
		if err := lctl.Verify(chains[apart]); err != nil {
			t.Fatalf("chain (event per message %v) does not verify: %v", apart, err)
		}
		messages[apart] = f.chainMessages(id)
		if f.count.count(1) != 1 || f.count.count(2) != 1 {
			t.Fatalf("event per message %v: steps acted %d and %d times", apart, f.count.count(1), f.count.count(2))
		}
	}
	packed, apart := chains[false], chains[true]
	if len(packed) != len(apart) {
		t.Fatalf("%d events packed, %d one a message:\n%s\n%s", len(packed), len(apart), describe(packed), describe(apart))
	}
	for i := range packed {
		if p, a := comparable(packed[i]), comparable(apart[i]); p != a {
			t.Fatalf("event %d packed:\n  %s\none a message:\n  %s", i, p, a)
		}
	}
	var flat []string
	for _, m := range messages[false] {
		flat = append(flat, m...)
	}
	var types []string
	for _, e := range packed {
		types = append(types, e.Type)
	}
	if !slices.Equal(flat, types) {
		t.Fatalf("the packed messages hold %v, the chain read back %v", flat, types)
	}
	for _, m := range messages[true] {
		if len(m) != 1 {
			t.Fatalf("a message of %d events with EventPerMessage: %v", len(m), messages[true])
		}
	}
	want := [][]string{
		{lctl.TypeRunStarted},
		{lctl.TypeStepStart, lctl.TypeVerdict}, {lctl.TypeToolCall, lctl.TypeStepEnd}, // step 1: allowed
		{lctl.TypeStepStart, lctl.TypeVerdict}, {lctl.TypeError, lctl.TypeStepEnd}, // step 2: denied
		{lctl.TypeStepStart}, {lctl.TypeError}, {lctl.TypeStepEnd}, // step 3: not a decision, written as before
		{lctl.TypeStepStart, lctl.TypeVerdict}, {lctl.TypeToolCall, lctl.TypeStepEnd}, // step 4: allowed
		{lctl.TypeRunFinished},
	}
	if !reflect.DeepEqual(messages[false], want) {
		t.Fatalf("packed messages %v, want %v", messages[false], want)
	}
	// A step_start is timed when the step was proposed, before the
	// validator judged it, as when it was written before the verdict.
	for i, e := range packed {
		if e.Type != lctl.TypeVerdict {
			continue
		}
		start, judged := packed[i-1], str(e.Data, "evaluated_at")
		at, err1 := time.Parse(time.RFC3339Nano, start.Timestamp)
		when, err2 := time.Parse(time.RFC3339Nano, judged)
		if start.Type != lctl.TypeStepStart || err1 != nil || err2 != nil || at.After(when) {
			t.Fatalf("verdict evaluated at %s after %s %s:\n%s", judged, start.Type, start.Timestamp, describe(packed))
		}
	}
	if !strings.Contains(describe(packed), "test.nothing") {
		t.Fatalf("no step of test.nothing:\n%s", describe(packed))
	}
}

// heldValidate relays ValidatorService calls to the real validator and
// holds the Validate of step `at` until released.
type heldValidate struct {
	xctv1.UnimplementedValidatorServiceServer
	to      xctv1.ValidatorServiceClient
	at      int32
	entered chan struct{}
	release chan struct{}
}

func newHeldValidate(t *testing.T, f *fixture, at int32) (*heldValidate, string) {
	t.Helper()
	conn, err := grpcx.Dial(f.valAddr, grpcx.WithToken(f.creds.Token(t, grpcxtest.Service)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h := &heldValidate{to: xctv1.NewValidatorServiceClient(conn), at: at, entered: make(chan struct{}, 4), release: make(chan struct{})}
	addr := serveGRPC(t, f.creds, "validator-relay", func(s *grpcx.Server) { xctv1.RegisterValidatorServiceServer(s.GRPC, h) })
	return h, addr
}

func (h *heldValidate) Validate(ctx context.Context, req *xctv1.ValidateRequest) (*xctv1.ValidateResponse, error) {
	if req.GetStep() == h.at {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.to.Validate(ctx, req)
}

func (h *heldValidate) RequestApproval(ctx context.Context, req *xctv1.RequestApprovalRequest) (*xctv1.RequestApprovalResponse, error) {
	return h.to.RequestApproval(ctx, req)
}

func (h *heldValidate) WithdrawApproval(ctx context.Context, req *xctv1.WithdrawApprovalRequest) (*xctv1.WithdrawApprovalResponse, error) {
	return h.to.WithdrawApproval(ctx, req)
}

// stepEvents are the events of step n, and whether each came after the
// run's first takeover.
func stepEvents(events []lctl.Event, n int64) (before, after []string) {
	resumed := false
	for _, e := range events {
		if e.Type == TypeRunResumed {
			resumed = true
		}
		if _, ok := e.Data["step"]; !ok || num(e.Data, "step") != n || e.Type == TypeRunResumed {
			continue
		}
		if resumed {
			after = append(after, e.Type)
		} else {
			before = append(before, e.Type)
		}
	}
	return before, after
}

// The owner is gone (its NATS connection closed: a crash for the
// cluster) while the validator judges step 2: the pack of step 2's
// step_start and verdict cannot be written. Nothing of step 2 is on the
// chain; the orchestrator that takes the run over proposes step 2 again
// (counting the lost owner's model call as unrecorded), it is judged and
// acts once, and the run ends done.
func TestCrashBeforeTheStepStartPackLeavesNothingOfTheStep(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2))
	f := newFixture(t, model)
	held, relay := newHeldValidate(t, f, 2)
	a, anc := f.orchestratorVia("orch-a", time.Second, "", relay)
	id := f.start(a)
	<-held.entered // step 2 proposed, its step_start held for the verdict
	anc.Close()
	_, _ = f.orchestrator("orch-b", time.Second)
	close(held.release) // (A's verdict comes back to a writer that cannot write)
	events := f.waitEnd(id)
	f.checkChain(id, events, 2)
	before, after := stepEvents(events, 2)
	if len(before) != 0 {
		t.Fatalf("the crashed owner left %v of step 2 on the chain:\n%s", before, describe(events))
	}
	want := []string{lctl.TypeStepStart, lctl.TypeVerdict, lctl.TypeToolCall, lctl.TypeStepEnd}
	if !slices.Equal(after, want) {
		t.Fatalf("step 2 after the takeover: %v, want %v:\n%s", after, want, describe(events))
	}
	res := only(events, TypeRunResumed)
	if len(res) != 1 || num(res[0].Data, "unrecorded_calls") != 1 {
		t.Fatalf("run_resumed %v: the lost owner's model call of step 2 is not counted:\n%s", res, describe(events))
	}
	if f.count.count(1) != 1 || f.count.count(2) != 1 {
		t.Fatalf("calls: 1→%d, 2→%d", f.count.count(1), f.count.count(2))
	}
}

// The owner is gone after the executor ran step 2 and before the pack of
// its tool_call and step_end was written: the step acted and the chain
// does not say so (its step_start and allow verdict are there, in their
// pack). The orchestrator that takes the run over learns the outcome from
// the executor's record: the tool_call is recorded once, the step is not
// run again, and the run ends done.
func TestCrashBeforeTheOutcomePackIsSettledFromTheRecord(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2))
	f := newFixture(t, model)
	release := f.count.gate(2)
	a, anc := f.orchestrator("orch-a", time.Second)
	id := f.start(a)
	for n := range f.count.entered {
		if n == 2 {
			break
		}
	}
	anc.Close() // A is gone: the tool's outcome cannot reach the chain
	close(release)
	_, _ = f.orchestrator("orch-b", time.Second)
	events := f.waitEnd(id)
	f.checkChain(id, events, 2)
	before, after := stepEvents(events, 2)
	if !slices.Equal(before, []string{lctl.TypeStepStart, lctl.TypeVerdict}) {
		t.Fatalf("before the takeover step 2 has %v, want its step_start and verdict:\n%s", before, describe(events))
	}
	if !slices.Equal(after, []string{lctl.TypeToolCall, lctl.TypeStepEnd}) {
		t.Fatalf("after the takeover step 2 has %v, want its tool_call and step_end:\n%s", after, describe(events))
	}
	if f.count.count(1) != 1 || f.count.count(2) != 1 {
		t.Fatalf("calls: 1→%d, 2→%d", f.count.count(1), f.count.count(2))
	}
}
