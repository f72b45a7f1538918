// Package e2e tests XCT end to end: the four services on loopback gRPC with
// a real JetStream server, in one process (this file) and as separate OS
// processes (process_test.go).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
	"github.com/xct-dev/xct/services/orchestrator"
)

// cluster is the embedded cluster of one test.
type cluster struct {
	nats      *server.Server
	app       *app.App
	workspace string
	scripts   string
	// creds are the cluster's tokens file (the development principals:
	// dev, alice, bob, carol, dave, admin and the services' own).
	creds *grpcxtest.Creds
	// orch calls as alice (a submitter), tracer as dave (an auditor).
	orch   xctv1.OrchestratorServiceClient
	tracer lctlv1.TracerServiceClient
}

type clusterOption func(*app.Config, *app.Options)

func startCluster(t testing.TB, opts ...clusterOption) *cluster {
	t.Helper()
	return startClusterOn(t, testutil.RunJetStream(t), opts...)
}

// startClusterOn is startCluster on a JetStream server the test started.
func startClusterOn(t testing.TB, ns *server.Server, opts ...clusterOption) *cluster {
	t.Helper()
	c := &cluster{nats: ns, creds: grpcxtest.New(t)}
	base := t.TempDir()
	c.workspace = filepath.Join(base, "workspace")
	c.scripts = filepath.Join(base, "scripts")
	for _, d := range []string{c.workspace, c.scripts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var cfg app.Config
	cfg.NATSURL, cfg.NATSUsers = c.nats.ClientURL(), testutil.NATSUsers()
	cfg.Replicas = 1
	cfg.OrchestratorListen, cfg.ValidatorListen, cfg.ExecutorListen, cfg.TracerListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Orchestrator.ScriptsDir = c.scripts
	cfg.Executor.Workspace = c.workspace
	cfg.Tracer.DataDir = filepath.Join(base, "tracer")
	c.secure(t, &cfg)
	var o app.Options
	for _, opt := range opts {
		opt(&cfg, &o)
	}
	// An option removes a target by clearing its listen address.
	var targets []string
	for _, t := range app.StartOrder {
		if addr := map[string]string{
			app.TargetExecutor: cfg.ExecutorListen, app.TargetValidator: cfg.ValidatorListen,
			app.TargetTracer: cfg.TracerListen, app.TargetOrchestrator: cfg.OrchestratorListen,
		}[t]; addr != "" {
			targets = append(targets, t)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a, err := app.Start(context.Background(), cfg, targets, log, o)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	c.app = a
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a.Stop(ctx)
		// Every service's NATS user has what the service needs.
		if n := a.NATSRefusals(); n != 0 {
			t.Errorf("NATS refused the services %d requests (permissions violations; see natsauth)", n)
		}
	})
	c.orch = c.orchAs(t, "alice")
	if addr := a.Addr(app.TargetTracer); addr != "" {
		c.tracer = lctlv1.NewTracerServiceClient(c.creds.Dial(t, addr, "dave"))
	}
	return c
}

// secure configures authentication as in production, over plaintext
// loopback: the cluster's tokens file, and the service token the services
// call each other with.
func (c *cluster) secure(t testing.TB, cfg *app.Config) {
	cfg.Auth.TokensFile = c.creds.Path
	cfg.Security = grpcx.Security{Plaintext: true, ServiceToken: c.creds.Token(t, grpcxtest.Service),
		RateLimit: grpcx.DefaultRateLimit, RateBurst: grpcx.DefaultRateBurst}
}

// orchAs is an orchestrator client calling as principal.
func (c *cluster) orchAs(t testing.TB, principal string) xctv1.OrchestratorServiceClient {
	return xctv1.NewOrchestratorServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetOrchestrator), principal))
}

// validatorAs is a validator client calling as principal.
func (c *cluster) validatorAs(t testing.TB, principal string) xctv1.ValidatorServiceClient {
	return xctv1.NewValidatorServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetValidator), principal))
}

// dial connects without credentials (health needs none).
func dial(t testing.TB, addr string, opts ...grpcx.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpcx.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (c *cluster) writeScript(t testing.TB, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.scripts, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runToEnd starts a run and collects its events through WatchRun.
func (c *cluster) runToEnd(t testing.TB, req *xctv1.StartRunRequest) (*xctv1.Run, []lctl.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, req)
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	id := resp.GetRun().GetRunId()
	events := c.watch(t, ctx, id)
	got, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatalf("get run: %v", err)
	}
	return got.GetRun(), events
}

func (c *cluster) watch(t testing.TB, ctx context.Context, id string) []lctl.Event {
	t.Helper()
	return c.watchWith(t, ctx, c.orch, id)
}

// watchWith collects a run's events through client.
func (c *cluster) watchWith(t testing.TB, ctx context.Context, client xctv1.OrchestratorServiceClient, id string) []lctl.Event {
	t.Helper()
	stream, err := client.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	var events []lctl.Event
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return events
		}
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		events = append(events, lctlpb.FromProto(msg.GetEvent()))
	}
}

// step renders an event as "type/agent" plus the fields that matter for the
// order of a step's transitions.
func step(e lctl.Event) string {
	s := e.Type + "/" + e.Agent
	switch e.Type {
	case lctl.TypeVerdict:
		s += " " + e.Data["decision"].(string)
	case lctl.TypeError:
		s += " " + e.Data["code"].(string)
	case lctl.TypeStepStart, lctl.TypeToolCall:
		if tool, ok := e.Data["tool"].(string); ok {
			s += " " + tool
		}
	case lctl.TypeRunFinished:
		s += " " + e.Data["status"].(string)
	}
	return s
}

func TestDemoRunThroughTheCluster(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	demo, err := os.ReadFile("../../examples/demo/script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.writeScript(t, "demo.yaml", string(demo))
	// A file next to the workspace that the demo tries to reach.
	sentinel := filepath.Join(filepath.Dir(c.workspace), "outside.txt")
	if err := os.WriteFile(sentinel, []byte("untouched"), 0o600); err != nil {
		t.Fatal(err)
	}

	run, events := c.runToEnd(t, &xctv1.StartRunRequest{
		Goal: "switch to green", Model: "scripted:demo.yaml", Principal: "alice", Labels: map[string]string{"team": "platform"},
	})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || run.GetMessage() != "Deployment switched from blue to green in config/app.yaml" {
		t.Fatalf("run ended %s: %s", run.GetStatus(), run.GetMessage())
	}

	want := []string{
		"run_started/orchestrator",
		// 1: list
		"step_start/demo-agent fs.list", "verdict/validator allow", "tool_call/executor fs.list", "step_end/demo-agent",
		// 2: write blue
		"step_start/demo-agent fs.write", "verdict/validator allow", "tool_call/executor fs.write", "step_end/demo-agent",
		// 3: read outside the workspace: allowed by policy, refused by the sandbox
		"step_start/demo-agent fs.read", "verdict/validator allow", "error/executor PERMISSION_DENIED", "step_end/demo-agent",
		// 4: the model reacts to the error
		"step_start/demo-agent fs.read", "verdict/validator allow", "tool_call/executor fs.read", "step_end/demo-agent",
		// 5: schema-invalid arguments: never reach the executor
		"step_start/demo-agent fs.write", "verdict/validator deny", "error/validator SCHEMA_INVALID", "step_end/demo-agent",
		// 6: output that is not a decision
		"step_start/demo-agent", "error/demo-agent GENERATION_FAILED", "step_end/demo-agent",
		// 7: repaired
		"step_start/demo-agent fs.write", "verdict/validator allow", "tool_call/executor fs.write", "step_end/demo-agent",
		// 8: a tool that is not in the catalog
		"step_start/demo-agent shell.exec", "verdict/validator deny", "error/validator UNKNOWN_TOOL", "step_end/demo-agent",
		// 9: confirm
		"step_start/demo-agent fs.read", "verdict/validator allow", "tool_call/executor fs.read", "step_end/demo-agent",
		"run_finished/orchestrator done",
	}
	var got []string
	for _, e := range events {
		got = append(got, step(e))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			mark := ""
			if g != w {
				mark = "   <-- differs"
			}
			t.Logf("%2d got %-40s want %s%s", i+1, g, w, mark)
		}
		t.Fatal("event chain differs")
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("hash chain: %v", err)
	}
	for _, e := range events {
		if e.ChainID != run.GetRunId() {
			t.Fatalf("event %d on chain %q", e.Seq, e.ChainID)
		}
	}

	// What the run did to the world: the config is green, nothing outside
	// the workspace changed.
	cfg, err := os.ReadFile(filepath.Join(c.workspace, "config", "app.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg) != "service: checkout\nreplicas: 3\ndeployment: green\n" {
		t.Fatalf("config = %q", cfg)
	}
	if b, _ := os.ReadFile(sentinel); string(b) != "untouched" {
		t.Fatalf("file outside the workspace = %q", b)
	}

	// The verdicts carry their reasons and the policy version.
	for _, e := range events {
		if e.Type != lctl.TypeVerdict {
			continue
		}
		if v, _ := e.Data["policy_version"].(string); len(v) < 10 {
			t.Fatalf("verdict %d has no policy version: %v", e.Seq, e.Data)
		}
		if rs, _ := e.Data["reasons"].([]any); len(rs) == 0 {
			t.Fatalf("verdict %d has no reasons: %v", e.Seq, e.Data)
		}
	}
	// fs.write's result is the spec's example shape.
	write := events[7].Data["output"].(map[string]any)
	if write["bytes_written"] != float64(len("service: checkout\nreplicas: 3\ndeployment: blue\n")) {
		t.Fatalf("fs.write result = %v", write)
	}
	if _, ok := write["checksum"].(string); !ok {
		t.Fatalf("fs.write result has no checksum: %v", write)
	}

	// The run record as GetRun materializes it from the chain.
	if run.GetPrincipal() != "alice" || run.GetLabels()["team"] != "platform" || len(run.GetSteps()) != 9 {
		t.Fatalf("run = %v", run)
	}
	wantStates := []xctv1.StepState{
		xctv1.StepState_STEP_STATE_SUCCEEDED, xctv1.StepState_STEP_STATE_SUCCEEDED, xctv1.StepState_STEP_STATE_FAILED,
		xctv1.StepState_STEP_STATE_SUCCEEDED, xctv1.StepState_STEP_STATE_DENIED, xctv1.StepState_STEP_STATE_INVALID,
		xctv1.StepState_STEP_STATE_SUCCEEDED, xctv1.StepState_STEP_STATE_DENIED, xctv1.StepState_STEP_STATE_SUCCEEDED,
	}
	for i, st := range run.GetSteps() {
		if st.GetState() != wantStates[i] {
			t.Errorf("step %d state %s, want %s", i+1, st.GetState(), wantStates[i])
		}
	}
	if run.GetInputTokens() == 0 || run.GetOutputTokens() == 0 {
		t.Errorf("tokens not recorded: %d/%d", run.GetInputTokens(), run.GetOutputTokens())
	}

	// The tracer materialized the same chain from the stream.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last := events[len(events)-1].Seq
	if err := c.app.Tracer.WaitForSeq(ctx, run.GetRunId(), last); err != nil {
		t.Fatal(err)
	}
	chain, err := c.tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if len(chain.GetEvents()) != len(events) || !chain.GetSummary().GetVerified() {
		t.Fatalf("tracer has %d events, verified=%v", len(chain.GetEvents()), chain.GetSummary().GetVerified())
	}
	for i, e := range chain.GetEvents() {
		if e.GetHash() != events[i].Hash {
			t.Fatalf("tracer event %d hash differs", i+1)
		}
	}
	exported, err := c.tracer.ExportChain(ctx, &lctlv1.ExportChainRequest{ChainId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	f, err := lctl.DecodeFile(bytesReader(exported.GetContent()), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if f.LCTL != "4.0" || f.Chain.ID != run.GetRunId() || lctl.Verify(f.Events) != nil {
		t.Fatalf("export: version %q chain %q", f.LCTL, f.Chain.ID)
	}
	replay, err := c.tracer.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: run.GetRunId(), ToSeq: 9})
	if err != nil {
		t.Fatal(err)
	}
	if replay.GetSeq() != 9 {
		t.Fatalf("replay to seq 9 applied up to %d", replay.GetSeq())
	}
	if n := len(replay.GetState().AsMap()["tool_calls"].([]any)); n != 2 {
		t.Fatalf("state at seq 9 has %d tool calls, want 2", n)
	}

	list, err := c.orch.ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRuns()) != 1 || list.GetRuns()[0].GetRunId() != run.GetRunId() || len(list.GetRuns()[0].GetSteps()) != 0 {
		t.Fatalf("list = %v", list.GetRuns())
	}
}

func TestRepairBudgetEndsTheRunCleanly(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	c.writeScript(t, "babble.yaml", `
steps:
  - raw: "I think I should write the file."
  - raw: '{"next_step": {"tool": "fs.write"}}'
  - raw: '{"next_step": {"tool": "fs.write", "arguments": [], "goal": "x"}}'
  - next_step: {tool: fs.write, arguments: {path: never.txt, content: x}, goal: too late}
`)
	run, events := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:babble.yaml"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_FAILED {
		t.Fatalf("status %s", run.GetStatus())
	}
	if want := "the model produced 3 invalid outputs in a row (repair budget 3)"; run.GetMessage() != want {
		t.Fatalf("message %q", run.GetMessage())
	}
	errorsSeen := 0
	for _, e := range events {
		if e.Type == lctl.TypeError && e.Data["code"] == "GENERATION_FAILED" && e.Data["category"] == "output_error" && e.Data["type"] == "generation_failed" {
			errorsSeen++
		}
		if e.Type == lctl.TypeToolCall || e.Type == lctl.TypeVerdict {
			t.Fatalf("invalid output reached %s", e.Type)
		}
	}
	if errorsSeen != 3 {
		t.Fatalf("%d generation_failed errors", errorsSeen)
	}
	if _, err := os.Stat(filepath.Join(c.workspace, "never.txt")); !os.IsNotExist(err) {
		t.Fatal("a file was written after the repair budget was used up")
	}
}

func TestRepairBudgetCountsOnlyInvalidOutputsInARow(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	c.writeScript(t, "mixed.yaml", `
steps:
  - raw: "a"
  - raw: "b"
  - next_step: {tool: fs.list, arguments: {}, goal: valid in between}
  - raw: "c"
  - raw: "d"
  - done: true
    message: ok
`)
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:mixed.yaml"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("status %s: %s", run.GetStatus(), run.GetMessage())
	}
}

func TestStepBudget(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	c.writeScript(t, "loop.yaml", `
steps:
  - next_step: {tool: fs.list, arguments: {}, goal: one}
  - next_step: {tool: fs.list, arguments: {}, goal: two}
  - next_step: {tool: fs.list, arguments: {}, goal: three}
`)
	run, events := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:loop.yaml", MaxSteps: 2})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_FAILED || len(run.GetSteps()) != 2 {
		t.Fatalf("status %s after %d steps: %s", run.GetStatus(), len(run.GetSteps()), run.GetMessage())
	}
	last := events[len(events)-2]
	if last.Type != lctl.TypeError || last.Data["code"] != "BUDGET_EXCEEDED" {
		t.Fatalf("event before the end = %s %v", last.Type, last.Data)
	}
}

func TestValidatorUnreachableIsADeny(t *testing.T) {
	t.Parallel()
	// No validator runs; the orchestrator points at a port nobody listens on.
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.ValidatorListen = ""
		cfg.Orchestrator.ValidatorAddr = "127.0.0.1:1"
		// The executor trusts a validator key, as it must to start; no
		// verdict ever comes.
		_, trust, err := verdict.NewPair(0)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Executor.Verifier = trust
	})
	c.writeScript(t, "w.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: a.txt, content: x}, goal: write}
  - done: true
`)
	run, events := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("status %s", run.GetStatus())
	}
	if st := run.GetSteps()[0]; st.GetState() != xctv1.StepState_STEP_STATE_DENIED || st.GetResponse().GetError().GetCode() != "VALIDATOR_UNAVAILABLE" {
		t.Fatalf("step = %v", st)
	}
	for _, e := range events {
		if e.Type == lctl.TypeToolCall {
			t.Fatal("a step executed without a verdict")
		}
	}
	if _, err := os.Stat(filepath.Join(c.workspace, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("file written without a verdict")
	}
}

// blockingProposer proposes after release is closed, or gives up when its
// context ends.
type blockingProposer struct{ entered chan struct{} }

func (p *blockingProposer) Name() string { return "blocker" }
func (p *blockingProposer) Close() error { return nil }
func (p *blockingProposer) Propose(ctx context.Context, _ *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestCancelRun(t *testing.T) {
	t.Parallel()
	p := &blockingProposer{entered: make(chan struct{}, 1)}
	c := startCluster(t, func(_ *app.Config, o *app.Options) {
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("block", p))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "func:block"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	<-p.entered // the model is thinking
	if _, err := c.orch.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "operator said stop"}); err != nil {
		t.Fatal(err)
	}
	events := c.watch(t, ctx, id)
	last := events[len(events)-1]
	if last.Type != lctl.TypeRunFinished || last.Data["status"] != "cancelled" || last.Data["message"] != "cancelled by alice: operator said stop" {
		t.Fatalf("last event = %s %v", last.Type, last.Data)
	}
	if _, err := c.orch.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("cancel a finished run: %v", err)
	}
}

// nextProposer returns one fixed decision and runs a hook first.
type hookProposer struct {
	before func(turn int)
	output func(turn int) string
}

func (p *hookProposer) Name() string { return "hook" }
func (p *hookProposer) Close() error { return nil }
func (p *hookProposer) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	turn := len(req.GetHistory())
	p.before(turn)
	return &xctv1.ProposeResponse{Output: p.output(turn)}, nil
}

func TestNATSLostMidRunExecutesNothingUnrecorded(t *testing.T) {
	t.Parallel()
	var c *cluster
	p := &hookProposer{
		before: func(turn int) {
			if turn == 1 {
				// The log goes away while the model thinks.
				c.nats.Shutdown()
				c.nats.WaitForShutdown()
			}
		},
		output: func(turn int) string {
			return fmt.Sprintf(`{"next_step":{"tool":"fs.write","arguments":{"path":"f%d.txt","content":"x"},"goal":"write"}}`, turn)
		},
	}
	c = startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Orchestrator.AppendTimeout = time.Second
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("hook", p))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "func:hook"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	testutil.Eventually(t, 45*time.Second, func() error {
		r, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
		if err != nil {
			return err
		}
		if r.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_FAILED {
			return fmt.Errorf("status %s", r.GetRun().GetStatus())
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(c.workspace, "f0.txt")); err != nil {
		t.Fatalf("the first step, recorded before NATS went away, did not run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.workspace, "f1.txt")); !os.IsNotExist(err) {
		t.Fatal("a step ran that could not be recorded")
	}
}

func TestRPCErrors(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	c.writeScript(t, "ok.yaml", "steps:\n  - done: true\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"unknown run", func() error { _, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: "nope"}); return err }, codes.NotFound},
		{"bad run id", func() error { _, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: "../x"}); return err }, codes.InvalidArgument},
		{"watch unknown run", func() error {
			s, err := c.orch.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: "nope"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.NotFound},
		{"cancel unknown run", func() error { _, err := c.orch.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: "nope"}); return err }, codes.NotFound},
		{"no goal", func() error {
			_, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Model: "scripted:ok.yaml"})
			return err
		}, codes.InvalidArgument},
		{"bad model kind", func() error {
			_, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "magic:thing"})
			return err
		}, codes.InvalidArgument},
		{"missing script", func() error {
			_, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:missing.yaml"})
			return err
		}, codes.InvalidArgument},
		{"grpc proposer not allowed", func() error {
			_, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "grpc:127.0.0.1:9"})
			return err
		}, codes.InvalidArgument},
		{"tracer unknown chain", func() error { _, err := c.tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "nope"}); return err }, codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code := status.Code(tc.call()); code != tc.want {
				t.Fatalf("code %s, want %s", code, tc.want)
			}
		})
	}
	// The same run id twice: the second start cannot fork the chain.
	if _, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:ok.yaml", RunId: "twice"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:ok.yaml", RunId: "twice"})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second start: %v", err)
	}
}
