package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/validator"
)

// These tests run several orchestrator Services in one process against a
// real NATS JetStream, a real validator and a real executor over gRPC on
// loopback, and move runs between them: a graceful hand-over, an approval
// wait resumed by an orchestrator started later, a lease that expires while
// a tool runs, and two claimants racing a stale owner.

// countTool is an executor tool that counts its invocations per argument
// "n"; with a gate for an n, the first invocation of that n reports on
// entered and waits for the gate.
type countTool struct {
	name    string
	effect  xctv1.Effect
	timeout time.Duration // default a minute
	commit  bool          // commit the effect before waiting at a gate (executor.Commit)
	idem    bool          // the descriptor says idempotent

	mu      sync.Mutex
	calls   map[float64]int
	gates   map[float64]chan struct{}
	entered chan float64
}

func newCountTool(name string, effect xctv1.Effect) *countTool {
	return &countTool{name: name, effect: effect, calls: map[float64]int{}, gates: map[float64]chan struct{}{}, entered: make(chan float64, 16)}
}

func (c *countTool) Descriptor() *xctv1.ToolDescriptor {
	timeout := c.timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	return &xctv1.ToolDescriptor{Name: c.name, Description: "counts its calls", InputSchema: `{"type":"object"}`,
		Effect: c.effect, Timeout: durationpb.New(timeout), Idempotent: c.idem}
}

func (c *countTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	n, _ := args["n"].(float64)
	c.mu.Lock()
	c.calls[n]++
	gate := c.gates[n]
	first := c.calls[n] == 1
	c.mu.Unlock()
	if c.commit {
		if e := executor.Commit(ctx); e != nil {
			return nil, e
		}
	}
	if gate != nil && first {
		c.entered <- n
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	return map[string]any{"n": n}, nil
}

func (c *countTool) gate(n float64) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := make(chan struct{})
	c.gates[n] = g
	return g
}

func (c *countTool) count(n float64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[n]
}

// gatedModel proposes decisions[len(history)]; the first call for a gated
// turn reports on asked and waits for the gate (or its context).
type gatedModel struct {
	decisions []string

	mu    sync.Mutex
	gates map[int]chan struct{}
	calls map[int]int
	asked chan int
}

func newGatedModel(decisions ...string) *gatedModel {
	return &gatedModel{decisions: decisions, gates: map[int]chan struct{}{}, calls: map[int]int{}, asked: make(chan int, 16)}
}

func (m *gatedModel) gate(turn int) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := make(chan struct{})
	m.gates[turn] = g
	return g
}

func (m *gatedModel) Name() string { return "tester" }
func (m *gatedModel) Close() error { return nil }
func (m *gatedModel) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	turn := len(req.GetHistory())
	m.mu.Lock()
	m.calls[turn]++
	gate := m.gates[turn]
	first := m.calls[turn] == 1
	m.mu.Unlock()
	if gate != nil && first {
		m.asked <- turn
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := `{"done": true, "message": "finished"}`
	if turn < len(m.decisions) {
		out = m.decisions[turn]
	}
	return &xctv1.ProposeResponse{Output: out, Model: "tester", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

func step(tool string, n int) string {
	return fmt.Sprintf(`{"next_step": {"tool": %q, "arguments": {"n": %d}, "goal": "count %d"}}`, tool, n, n)
}

// fixture is NATS, an executor and a validator; orchestrators are added.
type fixture struct {
	t        *testing.T
	ns       *server.Server
	exec     *executor.Service
	val      *validator.Service
	execAddr string
	valAddr  string
	count    *countTool
	deploy   *countTool
	model    *gatedModel
	events   *eventlog.Log
	owners   jetstream.KeyValue
	creds    *grpcxtest.Creds
	verifier *verdict.Verifier // the executors' trust in the validator's verdicts
	signer   *verdict.Signer   // the validator's key, for another validator (a policy of the test's)
	ws       string            // the executor's workspace
}

func testLogger() *slog.Logger {
	if os.Getenv("XCT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func serveGRPC(t *testing.T, creds *grpcxtest.Creds, name string, register func(*grpcx.Server)) string {
	t.Helper()
	srv := grpcx.NewServer(name, testLogger(), creds.ServerOptions()...)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	register(srv)
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	return srv.Addr()
}

func connect(t *testing.T, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newFixture(t *testing.T, model *gatedModel) *fixture {
	t.Helper()
	f := &fixture{t: t, ns: testutil.RunJetStream(t), model: model,
		count:  newCountTool("test.count", xctv1.Effect_EFFECT_READ),
		deploy: newCountTool("test.deploy", xctv1.Effect_EFFECT_IRREVERSIBLE)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	signer, verifier, err := verdict.NewPair(0)
	if err != nil {
		t.Fatal(err)
	}
	f.verifier, f.signer, f.ws = verifier, signer, t.TempDir()
	ecfg := executor.Config{Workspace: f.ws, Verifier: verifier}
	ex, err := executor.New(ecfg, connect(t, f.ns), testLogger(), f.count, f.deploy)
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Stop(context.Background()) })
	f.exec = ex
	f.creds = grpcxtest.New(t)
	f.execAddr = serveGRPC(t, f.creds, "executor", func(s *grpcx.Server) { ex.Register(s.GRPC) })

	va, err := validator.New(validator.Config{Signer: signer}, connect(t, f.ns), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := va.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = va.Stop(context.Background()) })
	f.val = va
	f.valAddr = serveGRPC(t, f.creds, "validator", func(s *grpcx.Server) { va.Register(s.GRPC) })

	nc := connect(t, f.ns)
	if f.events, err = eventlog.Open(ctx, nc); err != nil {
		t.Fatal(err)
	}
	return f
}

// orchestrator starts an orchestrator on its own NATS connection; stop it
// with Stop (its cleanup only stops what is left).
func (f *fixture) orchestrator(name string, lease time.Duration) (*Service, *nats.Conn) {
	f.t.Helper()
	return f.launch(Config{RunLease: lease, DrainTimeout: 20 * time.Second, Instance: name, CallTimeout: time.Minute}, f.model)
}

// orchestratorVia is f.orchestrator calling its executor at exec and its
// validator at val (a test's relay; "" keeps the fixture's).
func (f *fixture) orchestratorVia(name string, lease time.Duration, exec, val string) (*Service, *nats.Conn) {
	f.t.Helper()
	realExec, realVal := f.execAddr, f.valAddr
	defer func() { f.execAddr, f.valAddr = realExec, realVal }()
	if exec != "" {
		f.execAddr = exec
	}
	if val != "" {
		f.valAddr = val
	}
	return f.orchestrator(name, lease)
}

// startDone starts a run on s and waits for it to end done.
func (f *fixture) startDone(s *Service) string {
	f.t.Helper()
	id := f.start(s)
	if events := f.waitEnd(id); events[len(events)-1].Data["status"] != "done" {
		f.t.Fatalf("run:\n%s", describe(events))
	}
	return id
}

// launch starts an orchestrator with cfg (the fixture's validator and
// executor filled in) on its own NATS connection, as the service
// principal, stopped when the test ends.
func (f *fixture) launch(cfg Config, model Proposer) (*Service, *nats.Conn) {
	f.t.Helper()
	cfg.ValidatorAddr, cfg.ExecutorAddr = f.valAddr, f.execAddr
	nc := connect(f.t, f.ns)
	s, err := New(cfg, nc, testLogger().With("instance", cfg.Instance), WithProposer("tester", model),
		WithDialOptions(grpcx.WithToken(f.creds.Token(f.t, grpcxtest.Service))))
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	if f.owners == nil {
		if f.owners, err = f.events.JetStream().KeyValue(ctx, OwnersBucket); err != nil {
			f.t.Fatal(err)
		}
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s, nc
}

func (f *fixture) start(s *Service) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "count", Model: "func:tester", Principal: "alice"})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.GetRun().GetRunId()
}

// startWaiting starts carol's write run on s and waits until its step
// asks a human: the run's id and the waiting step's.
func (f *fixture) startWaiting(ctx context.Context, s *Service) (id, stepID string) {
	f.t.Helper()
	resp, err := s.StartRun(as(ctx, "carol", auth.RoleOperator), &xctv1.StartRunRequest{Goal: "write", Model: "func:tester", Principal: "carol"})
	if err != nil {
		f.t.Fatal(err)
	}
	id = resp.GetRun().GetRunId()
	events := f.waitFor(id, "approval_requested", func(e lctl.Event) bool { return e.Type == TypeApprovalRequested })
	return id, str(events[len(events)-1].Data, "step_id")
}

// waitFor follows a chain until an event satisfies ok, and returns the
// events up to it.
func (f *fixture) waitFor(id string, what string, ok func(lctl.Event) bool) []lctl.Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var events []lctl.Event
	found := false
	err := f.events.Follow(ctx, id, eventlog.FollowOptions{}, func(e lctl.Event) error {
		events = append(events, e)
		if ok(e) {
			found = true
			return eventlog.ErrStop
		}
		return nil
	})
	if err != nil || !found {
		f.t.Fatalf("waiting for %s on %s: %v; events so far:\n%s", what, id, err, describe(events))
	}
	return events
}

func (f *fixture) waitEnd(id string) []lctl.Event {
	f.t.Helper()
	return f.waitFor(id, "run_finished", func(e lctl.Event) bool { return e.Type == lctl.TypeRunFinished })
}

func describe(events []lctl.Event) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "  %d %s %s %v\n", e.Seq, e.Type, e.Agent, e.Data)
	}
	return b.String()
}

// checkChain asserts what every takeover must leave: a chain that
// verifies, ends done, numbers its steps 1..n with one step_start each and
// executes each allowed step once, and an owner key that is gone.
func (f *fixture) checkChain(id string, events []lctl.Event, steps int) {
	f.t.Helper()
	if err := lctl.Verify(events); err != nil {
		f.t.Fatalf("chain does not verify: %v", err)
	}
	last := events[len(events)-1]
	if last.Type != lctl.TypeRunFinished || last.Data["status"] != "done" {
		f.t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
	}
	var numbers []int
	calls := map[string]int{}
	for _, e := range events {
		switch e.Type {
		case lctl.TypeStepStart:
			numbers = append(numbers, int(num(e.Data, "step")))
		case lctl.TypeToolCall:
			calls[str(e.Data, "step_id")]++
		}
	}
	for i, n := range numbers {
		if n != i+1 {
			f.t.Fatalf("step numbers %v are not 1..%d without gaps or repeats:\n%s", numbers, len(numbers), describe(events))
		}
	}
	if len(numbers) != steps {
		f.t.Fatalf("%d steps, want %d:\n%s", len(numbers), steps, describe(events))
	}
	for stepID, n := range calls {
		if n != 1 {
			f.t.Fatalf("step %s has %d tool_call events", stepID, n)
		}
		rec, doubt, err := f.exec.Step(context.Background(), stepID)
		if err != nil || doubt || rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED || rec.GetAttempt() != 1 {
			f.t.Fatalf("executor record of %s: %v (in doubt %v), %v", stepID, rec, doubt, err)
		}
	}
	testutil.Eventually(f.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := f.owners.Get(ctx, id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("owner key of an ended run: %w", err)
		}
		return nil
	})
}

func only(events []lctl.Event, typ string) []lctl.Event {
	var out []lctl.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// A stopping orchestrator lets the step in flight finish, records the
// hand-over at the next step boundary and releases the run; another
// replica takes it over at once and finishes it.
func TestGracefulStopHandsTheRunOver(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2), step("test.count", 3))
	f := newFixture(t, model)
	proposing2 := model.gate(1)
	a, _ := f.orchestrator("orch-a", time.Minute)
	b, _ := f.orchestrator("orch-b", time.Minute)
	id := f.start(a)
	if turn := <-model.asked; turn != 1 {
		t.Fatalf("asked for turn %d", turn)
	}
	// Step 2's proposal is in flight at A when A is told to stop.
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- a.Stop(ctx)
	}()
	testutil.Eventually(t, 30*time.Second, func() error {
		if !a.Stopping() {
			return errors.New("A is not stopping yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "g", Model: "func:tester"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("StartRun on a stopping orchestrator: %v", err)
	}
	close(proposing2)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	events := f.waitEnd(id)
	f.checkChain(id, events, 3)
	released, resumed := only(events, TypeRunReleased), only(events, TypeRunResumed)
	if len(released) != 1 || len(resumed) != 1 {
		t.Fatalf("released %d, resumed %d times:\n%s", len(released), len(resumed), describe(events))
	}
	rel, res := released[0], resumed[0]
	if str(rel.Data, "instance") != "orch-a" || num(rel.Data, "step") != 3 ||
		str(res.Data, "instance") != "orch-b" || str(res.Data, "previous_owner") != "orch-a" || str(res.Data, "reason") != "released" || num(res.Data, "step") != 3 {
		t.Fatalf("hand-over events: %v / %v", rel.Data, res.Data)
	}
	// Step 2 (in flight at the stop) was finished by A, before the hand-over.
	for _, e := range events {
		if e.Type == lctl.TypeStepEnd && num(e.Data, "step") == 2 && e.Seq > rel.Seq {
			t.Fatalf("step 2 ended after the hand-over:\n%s", describe(events))
		}
	}
	for n := 1.0; n <= 3; n++ {
		if c := f.count.count(n); c != 1 {
			t.Fatalf("count %v ran %d times", n, c)
		}
	}
	got, err := b.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil || got.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || got.GetRun().GetInputTokens() != 20 {
		t.Fatalf("run at B: %v, %v", got.GetRun(), err)
	}
}

// A run waiting for a human is handed over at once by a stopping
// orchestrator; one started later (a single-replica restart) claims it at
// start and waits for the same approval, which then lets the step run.
func TestApprovalWaitResumesAfterRestart(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.deploy", 1))
	f := newFixture(t, model)
	a, _ := f.orchestrator("orch-a", time.Minute)
	id := f.start(a)
	f.waitFor(id, "approval_requested", func(e lctl.Event) bool { return e.Type == TypeApprovalRequested })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.waitFor(id, "run_released", func(e lctl.Event) bool { return e.Type == TypeRunReleased })
	if f.deploy.count(1) != 0 {
		t.Fatal("the step ran without an approval")
	}

	b, _ := f.orchestrator("orch-b", time.Minute)
	f.waitFor(id, "run_resumed", func(e lctl.Event) bool { return e.Type == TypeRunResumed })
	// B waits again: the approval is still pending, and the run says so.
	testutil.Eventually(t, 30*time.Second, func() error {
		r, err := b.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
		if err != nil {
			return err
		}
		if r.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL {
			return fmt.Errorf("status %v", r.GetRun().GetStatus())
		}
		return nil
	})
	if _, err := f.val.DecideApproval(as(ctx, "bob", auth.RoleApprover), &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Approver: "bob", Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	events := f.waitEnd(id)
	f.checkChain(id, events, 1)
	if n := f.deploy.count(1); n != 1 {
		t.Fatalf("deploy ran %d times", n)
	}
	var trail []string
	for _, e := range events {
		switch e.Type {
		case lctl.TypeVerdict:
			trail = append(trail, "verdict "+str(e.Data, "decision"))
		case TypeApprovalRequested, TypeRunReleased, lctl.TypeToolCall:
			trail = append(trail, e.Type)
		case TypeRunResumed:
			trail = append(trail, e.Type+" "+str(e.Data, "reason"))
		case TypeApprovalDecided:
			trail = append(trail, e.Type+" "+str(e.Data, "decision")+" by "+e.Agent)
		}
	}
	want := "verdict needs_approval approval_requested run_released run_resumed released approval_decided approved by bob verdict allow tool_call"
	if strings.Join(trail, " ") != want {
		t.Fatalf("trail:\n%s\nwant:\n%s", strings.Join(trail, " "), want)
	}
}

// An owner that vanishes mid-tool (its NATS connection cut: no renewals,
// no appends) loses its run when the lease expires. The new owner finds
// the step allowed without an outcome and asks the executor with the same
// step id: the tool, still running, is not started again; its result is
// recorded once.
func TestExpiredLeaseTakeoverDoesNotRepeatAStep(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2))
	f := newFixture(t, model)
	release := f.count.gate(1)
	a, anc := f.orchestrator("orch-a", time.Second)
	b, _ := f.orchestrator("orch-b", time.Second)
	id := f.start(a)
	if n := <-f.count.entered; n != 1 {
		t.Fatalf("entered %v", n)
	}
	anc.Close() // A is gone for the cluster: no heartbeat, no append

	f.waitFor(id, "run_resumed", func(e lctl.Event) bool { return e.Type == TypeRunResumed })
	testutil.Eventually(t, 30*time.Second, func() error {
		if !b.owns(id) {
			return errors.New("B does not run the loop")
		}
		return nil
	})
	close(release) // the tool ends; the executor records its outcome once
	events := f.waitEnd(id)
	f.checkChain(id, events, 2)
	res := only(events, TypeRunResumed)
	if len(res) != 1 || str(res[0].Data, "reason") != "lease_expired" || str(res[0].Data, "previous_owner") != "orch-a" || num(res[0].Data, "step") != 1 {
		t.Fatalf("resumed: %v", res)
	}
	if len(only(events, TypeRunReleased)) != 0 {
		t.Fatal("a vanished owner cannot have recorded a hand-over")
	}
	if f.count.count(1) != 1 || f.count.count(2) != 1 {
		t.Fatalf("calls: 1→%d, 2→%d", f.count.count(1), f.count.count(2))
	}
}

// Two replicas claim the same run at the same revision while its owner
// still works (say it was paused past its lease): exactly one wins; the old
// owner's next append fails on the chain and it stops without writing.
func TestClaimRaceAndStaleOwner(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1), step("test.count", 2), step("test.count", 3))
	f := newFixture(t, model)
	proposing2 := model.gate(1)
	a, _ := f.orchestrator("orch-a", 10*time.Minute)
	b, _ := f.orchestrator("orch-b", 10*time.Minute)
	c, _ := f.orchestrator("orch-c", 10*time.Minute)
	id := f.start(a)
	<-model.asked // A is proposing step 2, blocked
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entry, err := f.owners.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, s := range []*Service{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.takeOver(ctx, id, entry.Revision(), "lease_expired", ownerRecord{Owner: "orch-a"})
		}()
	}
	wg.Wait()
	if b.owns(id) == c.owns(id) {
		// The winner may already have finished; the chain tells.
		events := f.waitEnd(id)
		if n := len(only(events, TypeRunResumed)); n != 1 {
			t.Fatalf("B owns %v, C owns %v, %d run_resumed:\n%s", b.owns(id), c.owns(id), n, describe(events))
		}
	}
	events := f.waitEnd(id)
	// The stale owner wakes up: its step_start conflicts, it stops quietly.
	close(proposing2)
	testutil.Eventually(t, 30*time.Second, func() error {
		if a.owns(id) {
			return errors.New("A still runs the loop")
		}
		return nil
	})
	all, err := f.events.ReadChain(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(events) {
		t.Fatalf("the stale owner wrote after the end:\n%s", describe(all))
	}
	f.checkChain(id, all, 3)
	if n := len(only(all, TypeRunResumed)); n != 1 {
		t.Fatalf("%d run_resumed events", n)
	}
	// A's view of the run is read from the chain again, not its own.
	got, err := a.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil || got.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || got.GetRun().GetLastSeq() != uint64(len(all)) {
		t.Fatalf("A's view: %v, %v", got.GetRun(), err)
	}
}

// An ended run cached by one replica is refreshed when another appends to
// its chain (a rollback).
func TestEndedRunRefreshedAcrossReplicas(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	a, _ := f.orchestrator("orch-a", time.Minute)
	b, _ := f.orchestrator("orch-b", time.Minute)
	id := f.start(a)
	events := f.waitEnd(id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := b.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil || before.GetRun().GetLastSeq() != uint64(len(events)) {
		t.Fatalf("B before: %v, %v", before.GetRun(), err)
	}
	list, err := b.ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil || len(list.GetRuns()) != 1 {
		t.Fatalf("list: %v, %v", list, err)
	}
	// Nothing to undo (a read), but the rollback is on the chain.
	testutil.Eventually(t, 30*time.Second, func() error {
		_, err := a.RollbackRun(as(ctx, "oscar", auth.RoleOperator), &xctv1.RollbackRunRequest{RunId: id, Principal: "oscar"})
		return err
	})
	after, err := f.events.ReadChain(ctx, id)
	if err != nil || len(after) <= len(events) {
		t.Fatalf("chain after rollback: %d events, %v", len(after), err)
	}
	got, err := b.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil || got.GetRun().GetLastSeq() != uint64(len(after)) {
		t.Fatalf("B after the rollback: last seq %d, want %d (%v)", got.GetRun().GetLastSeq(), len(after), err)
	}
	list, err = b.ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil || list.GetRuns()[0].GetLastSeq() != uint64(len(after)) {
		t.Fatalf("B's listing after the rollback: %v, %v", list, err)
	}
}

// A rollback asked for the moment a run's end is on its chain (a watcher
// saw run_finished) waits for the run's loop to leave the active set, not
// refuses it as "still running"; a run still in the set whose chain has not
// ended is refused.
func TestRollbackWaitsForAnEndedRunToLeave(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel(step("test.count", 1)))
	a, _ := f.orchestrator("orch-a", time.Minute)
	id := f.start(a)
	f.waitEnd(id)
	testutil.Eventually(t, 30*time.Second, func() error {
		if a.owns(id) {
			return errors.New("the run is still in the active set")
		}
		return nil
	})
	operator := as(context.Background(), "oscar", auth.RoleOperator)
	// The run's loop has returned, but it is still in the active set: as
	// between run_finished and the end of Service.launch.
	hold := func() *run {
		r := &run{runSpec: runSpec{id: id}, left: make(chan struct{})}
		a.mu.Lock()
		a.active[id] = r
		a.mu.Unlock()
		return r
	}
	leave := func(r *run) {
		a.mu.Lock()
		delete(a.active, id)
		a.mu.Unlock()
		close(r.left)
	}

	r := hold()
	ctx, cancel := context.WithTimeout(operator, 200*time.Millisecond)
	_, err := a.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id, Principal: "oscar"})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("rollback while the ended run is still in the active set = %v, want it to wait (deadline exceeded)", err)
	}
	leave(r)

	r = hold()
	done := make(chan error, 1)
	go func() {
		_, err := a.RollbackRun(operator, &xctv1.RollbackRunRequest{RunId: id, Principal: "oscar"})
		done <- err
	}()
	leave(r)
	if err := <-done; err != nil {
		t.Fatalf("rollback once the ended run left: %v", err)
	}
}

// Bad configuration is refused.
func TestLifecycleConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative lease", Config{ValidatorAddr: "x", ExecutorAddr: "y", RunLease: -time.Second}, "-run-lease"},
		{"negative drain", Config{ValidatorAddr: "x", ExecutorAddr: "y", DrainTimeout: -time.Second}, "-drain-timeout"},
		{"bad instance", Config{ValidatorAddr: "x", ExecutorAddr: "y", Instance: "a b"}, "-instance"},
		{"long instance", Config{ValidatorAddr: "x", ExecutorAddr: "y", Instance: strings.Repeat("a", 65)}, "-instance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	ok := Config{ValidatorAddr: "x", ExecutorAddr: "y"}
	if err := ok.Validate(); err != nil || ok.RunLease != 15*time.Second || ok.DrainTimeout != 15*time.Second {
		t.Fatalf("defaults: %v %v %v", err, ok.RunLease, ok.DrainTimeout)
	}
}

// foldResume finds where a chain stops, for every point a takeover can
// meet.
func TestFoldResume(t *testing.T) {
	t.Parallel()
	const run = "run-fold"
	args := map[string]any{"n": float64(1)}
	sargs, _ := structpb.NewStruct(args)
	id := wire.StepID(run, 1, "test.count", sargs)
	ev := func(typ, agent string, d map[string]any) lctl.Event {
		return lctl.Event{Type: typ, Agent: agent, Data: d}
	}
	start := ev(lctl.TypeRunStarted, "orchestrator", map[string]any{"goal": "g"})
	proposal := ev(lctl.TypeStepStart, "tester", map[string]any{"step": float64(1), "step_id": id, "tool": "test.count", "arguments": args, "intent": "one"})
	allow := ev(lctl.TypeVerdict, "validator", map[string]any{"step": float64(1), "decision": "allow"})
	approval := ev(lctl.TypeVerdict, "validator", map[string]any{"step": float64(1), "decision": "needs_approval", "code": "APPROVAL_REQUIRED"})
	call := ev(lctl.TypeToolCall, "executor", map[string]any{"step": float64(1), "step_id": id})
	end := func(outcome string) lctl.Event {
		return ev(lctl.TypeStepEnd, "tester", map[string]any{"step": float64(1), "outcome": outcome, "tokens": map[string]any{"input": float64(5), "output": float64(1)}})
	}
	inDoubt := ev(lctl.TypeError, "executor", map[string]any{"step": float64(1), "code": "IN_DOUBT", "message": "unknown"})
	budget := ev(lctl.TypeVerdict, "validator", map[string]any{"step": float64(1), "decision": "deny", "code": "BUDGET_EXCEEDED", "ends_run": true,
		"reasons": []any{map[string]any{"rule_id": "budget", "message": "no more"}}})
	redacted := ev(lctl.TypeStepStart, "tester", map[string]any{"step": float64(1), "step_id": id, "tool": "test.count", "arguments": map[string]any{"n": "[redacted]"}})
	raw := ev(lctl.TypeStepStart, "tester", map[string]any{"step": float64(1), "raw": "nonsense"})
	rejudged := func(decision string) lctl.Event {
		return ev(lctl.TypeVerdict, "validator", map[string]any{"step": float64(1), "decision": decision, "rejudged": true, "code": "APPROVAL_REQUIRED"})
	}
	tests := []struct {
		name   string
		events []lctl.Event
		check  func(*resumeState) string
	}{
		{"nothing yet", []lctl.Event{start}, func(rs *resumeState) string {
			return expect(rs.next == 1 && rs.open == nil && rs.endMessage == "", "want step 1")
		}},
		{"proposed only", []lctl.Event{start, proposal}, func(rs *resumeState) string {
			return expect(rs.open != nil && rs.open.verdict == nil && !rs.open.argsRedacted && rs.open.ns.GetTool() == "test.count", "want an open step without verdict")
		}},
		{"allowed, no outcome", []lctl.Event{start, proposal, allow}, func(rs *resumeState) string {
			return expect(rs.open.verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW && rs.open.outcome == "", "want allowed without outcome")
		}},
		{"waiting for approval", []lctl.Event{start, proposal, approval, ev(TypeApprovalRequested, "orchestrator", map[string]any{"step": float64(1), "expires_at": "2030-01-01T00:00:00Z"})}, func(rs *resumeState) string {
			return expect(rs.open.approvalRequested && rs.open.decided == "" && rs.open.approvalExpires.Year() == 2030, "want a wait")
		}},
		{"outcome, no step_end", []lctl.Event{start, proposal, allow, call}, func(rs *resumeState) string {
			return expect(rs.open.outcome == "success", "want the outcome kept")
		}},
		{"closed step", []lctl.Event{start, proposal, allow, call, end("success")}, func(rs *resumeState) string {
			return expect(rs.open == nil && rs.next == 2 && rs.tokensIn == 5 && rs.consecutiveErrors == 0, "want step 2 next")
		}},
		{"in doubt ended the run", []lctl.Event{start, proposal, allow, inDoubt, end("error")}, func(rs *resumeState) string {
			return expect(strings.Contains(rs.endMessage, "is in doubt") && rs.consecutiveErrors == 1, "want the run ended in doubt")
		}},
		{"budget ended the run", []lctl.Event{start, proposal, budget, ev(lctl.TypeError, "validator", map[string]any{"step": float64(1), "code": "BUDGET_EXCEEDED", "message": "budget used up"}), end("denied")}, func(rs *resumeState) string {
			return expect(rs.endMessage == "budget used up", "want the budget's message")
		}},
		{"error outside a step", []lctl.Event{start, ev(lctl.TypeError, "orchestrator", map[string]any{"step": float64(1), "message": "step budget used up"})}, func(rs *resumeState) string {
			return expect(rs.endMessage == "step budget used up", "want the run ended")
		}},
		{"invalid outputs in a row", []lctl.Event{start, raw, end("invalid")}, func(rs *resumeState) string {
			return expect(rs.invalidInARow == 1 && rs.next == 2, "want one invalid output counted")
		}},
		{"invalid output open", []lctl.Event{start, raw}, func(rs *resumeState) string {
			return expect(rs.open != nil && rs.open.invalid && !rs.open.errorRecorded, "want an open invalid step")
		}},
		{"rejudged, waiting for approval", []lctl.Event{start, proposal, allow, rejudged("needs_approval"), ev(TypeApprovalRequested, "orchestrator", map[string]any{"step": float64(1), "expires_at": "2030-01-01T00:00:00Z"})}, func(rs *resumeState) string {
			// the allow before a rejudged verdict did not act: the step waits as any step sent to a human
			return expect(rs.open.verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL && !rs.open.attempted && rs.open.approvalRequested, "want the approval waited for")
		}},
		{"rejudged, approved, no verdict after it yet", []lctl.Event{start, proposal, allow, rejudged("needs_approval"),
			ev(TypeApprovalRequested, "orchestrator", map[string]any{"step": float64(1), "expires_at": "2030-01-01T00:00:00Z"}),
			ev(TypeApprovalDecided, "bob", map[string]any{"step": float64(1), "decision": "approved"})}, func(rs *resumeState) string {
			// the next owner asks for the verdict after the decision, as the one that waited would have
			return expect(rs.open.verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL && rs.open.decided == "approved" && !rs.open.attempted, "want the decision acted on")
		}},
		{"rejudged, denied", []lctl.Event{start, proposal, allow, rejudged("deny")}, func(rs *resumeState) string {
			return expect(rs.open.verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_DENY && !rs.open.attempted, "want the new policy's refusal")
		}},
		{"rejudged after an earlier attempt", []lctl.Event{start, proposal, allow, allow, rejudged("deny")}, func(rs *resumeState) string {
			return expect(rs.open.verdict.GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW && rs.open.attempted, "want the earlier attempt's allow")
		}},
		{"redacted arguments", []lctl.Event{start, redacted, allow}, func(rs *resumeState) string {
			return expect(rs.open.argsRedacted, "want the redaction noticed")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if msg := tc.check(foldResume(run, tc.events)); msg != "" {
				t.Fatalf("%s: %+v", msg, foldResume(run, tc.events))
			}
		})
	}
}

func expect(ok bool, msg string) string {
	if ok {
		return ""
	}
	return msg
}
