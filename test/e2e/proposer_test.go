package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
)

// externalAgent is a ProposerService outside the orchestrator: it writes a
// file, then says done, deciding only from the context it is sent.
type externalAgent struct {
	xctv1.UnimplementedProposerServiceServer
	sawTools chan []string
	// sawToken counts calls that carried an authorization header: XCT
	// never sends its service token to a model outside it.
	sawToken atomic.Int64
}

func (a *externalAgent) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "authorization")) > 0 {
		a.sawToken.Add(1)
	}
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
	t.Parallel()
	agent := &externalAgent{sawTools: make(chan []string, 1)}
	// The agent is someone else's server, with its own (here: no) security.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	xctv1.RegisterProposerServiceServer(srv, agent)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.AllowGRPCProposers = []string{addr}
	})
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "hello from outside", Model: "grpc:" + addr})
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
	if n := agent.sawToken.Load(); n != 0 {
		t.Fatalf("%d calls to the external agent carried a token", n)
	}
}
