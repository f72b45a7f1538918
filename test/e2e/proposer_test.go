package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/grpcx"
)

// externalAgent is a ProposerService outside the orchestrator: it writes a
// file, then says done, deciding only from the context it is sent.
type externalAgent struct {
	xctv1.UnimplementedProposerServiceServer
	sawTools chan []string
}

func (a *externalAgent) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	var names []string
	for _, t := range req.GetTools() {
		names = append(names, t.GetName())
	}
	select {
	case a.sawTools <- names:
	default:
	}
	if len(req.GetHistory()) == 0 {
		return &xctv1.ProposeResponse{
			Output: fmt.Sprintf(`{"next_step":{"tool":"fs.write","arguments":{"path":"from-grpc.txt","content":%q},"goal":"prove the adapter"}}`, req.GetGoal()),
			Usage:  &xctv1.Usage{InputTokens: 11, OutputTokens: 5},
			Model:  "external-1",
		}, nil
	}
	return &xctv1.ProposeResponse{Output: `{"done":true,"message":"written"}`, Model: "external-1"}, nil
}

func TestExternalGRPCProposer(t *testing.T) {
	agent := &externalAgent{sawTools: make(chan []string, 1)}
	srv := grpcx.NewServer("agent", slog.New(slog.NewTextHandler(io.Discard, nil)))
	xctv1.RegisterProposerServiceServer(srv.GRPC, agent)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Stop(context.Background()) })

	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.AllowGRPCProposers = []string{srv.Addr()}
	})
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "hello from outside", Model: "grpc:" + srv.Addr()})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || run.GetInputTokens() != 11 {
		t.Fatalf("run %s: %s (tokens %d)", run.GetStatus(), run.GetMessage(), run.GetInputTokens())
	}
	got, err := os.ReadFile(filepath.Join(c.workspace, "from-grpc.txt"))
	if err != nil || string(got) != "hello from outside" {
		t.Fatalf("file = %q, %v", got, err)
	}
	if tools := <-agent.sawTools; len(tools) < 3 {
		t.Fatalf("the agent was offered %v", tools)
	}
}
