package e2e

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
)

// A second orchestrator on the same stream (another replica, or this one
// after a restart) sees every run from the chains alone.
func TestRunsVisibleToAnotherOrchestrator(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	c.writeScript(t, "two.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: a.txt, content: x}, goal: write}
    tokens: {input: 7, output: 3}
  - done: true
    message: all good
`)
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "replicated", Model: "scripted:two.yaml", Principal: "alice"})

	// A chain from another LCTL writer is not a run.
	nc, err := nats.Connect(c.nats.ClientURL(), testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log, err := eventlog.Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := log.NewChainWriter("foreign-chain")
	if _, err := w.Append(ctx, "step_start", "some-agent", map[string]any{"intent": "analyze"}); err != nil {
		t.Fatal(err)
	}

	var cfg app.Config
	cfg.NATSURL, cfg.NATSUsers = c.nats.ClientURL(), testutil.NATSUsers()
	cfg.OrchestratorListen = "127.0.0.1:0"
	cfg.Orchestrator.ValidatorAddr = c.app.Addr(app.TargetValidator)
	cfg.Orchestrator.ExecutorAddr = c.app.Addr(app.TargetExecutor)
	c.secure(t, &cfg)
	second, err := app.Start(ctx, cfg, []string{app.TargetOrchestrator}, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop(ctx)
	orch := xctv1.NewOrchestratorServiceClient(c.creds.Dial(t, second.Addr(app.TargetOrchestrator), "dave"))

	list, err := orch.ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRuns()) != 1 {
		t.Fatalf("listed %d runs: %v", len(list.GetRuns()), list.GetRuns())
	}
	got := list.GetRuns()[0]
	if got.GetRunId() != run.GetRunId() || got.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || got.GetPrincipal() != "alice" ||
		got.GetGoal() != "replicated" || got.GetMessage() != "all good" || got.GetInputTokens() != 7 || got.GetLastSeq() != run.GetLastSeq() {
		t.Fatalf("summary = %v\nwant like %v", got, run)
	}
	full, err := orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if len(full.GetRun().GetSteps()) != 1 || full.GetRun().GetSteps()[0].GetState() != xctv1.StepState_STEP_STATE_SUCCEEDED {
		t.Fatalf("steps = %v", full.GetRun().GetSteps())
	}
	if _, err := orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: "foreign-chain"}); err == nil {
		t.Fatal("a foreign chain was returned as a run")
	}
	// Watching an ended run from the other replica replays it to its end.
	events := (&cluster{orch: orch}).watch(t, ctx, run.GetRunId())
	if uint64(len(events)) != run.GetLastSeq() {
		t.Fatalf("watched %d events, want %d", len(events), run.GetLastSeq())
	}
}
