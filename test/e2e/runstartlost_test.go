package e2e

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
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
)

// lostStartRelay stands in front of an orchestrator: it passes StartRun
// on, and the first time the orchestrator answers, it answers the client
// UNAVAILABLE instead, as a client sees an orchestrator that dies after
// it recorded the run and before its answer left (or a connection cut
// then). Everything else is UNAVAILABLE (the client follows the run at
// its next address).
type lostStartRelay struct {
	xctv1.UnimplementedOrchestratorServiceServer
	to     xctv1.OrchestratorServiceClient
	starts atomic.Int32
}

func (l *lostStartRelay) StartRun(ctx context.Context, req *xctv1.StartRunRequest) (*xctv1.StartRunResponse, error) {
	resp, err := l.to.StartRun(ctx, req)
	if l.starts.Add(1) == 1 && err == nil {
		return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
	}
	return resp, err
}

func (l *lostStartRelay) WatchRun(*xctv1.WatchRunRequest, xctv1.OrchestratorService_WatchRunServer) error {
	return status.Error(codes.Unavailable, "connection refused")
}

// Session 17 (faults17), issue 12: a client retrying as it is told. The
// orchestrator started the run, and its answer was lost. On main `xct run`
// left the run id to the orchestrator and ended on the UNAVAILABLE
// ("start run ... Unavailable"): the run went on unseen, and a user who
// ran the command again, as UNAVAILABLE tells, started the goal a second
// time, its steps acting twice. Now the CLI makes the run id, retries the
// start with it, takes ALREADY_EXISTS to a retry for its own run and
// follows it: one run, its step acted once. Real processes (NATS, the
// services, the CLI), gRPC on loopback.
func TestRunStartWhoseAnswerWasLostIsRetriedAsTheSameRun(t *testing.T) {
	xct, natsBin := binaries(t)
	base := t.TempDir()
	script := "steps:\n  - next_step: {tool: fs.write, arguments: {path: once.txt, content: \"x\"}, goal: write}\n  - done: true\n    message: appended\n"
	workspace, scripts := processDirs(t, base, "once.yaml", []byte(script))
	ns := startProc(t, "nats-server", natsBin, "-c", testutil.NATSServerConfigFile(t), "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", filepath.Join(base, "nats"))
	natsURL := "nats://" + ns.waitFor(t, regexp.MustCompile(`Listening for client connections on (127\.0\.0\.1:\d+)`), 30*time.Second)
	provisionNATS(t, xct, natsURL)
	creds := grpcxtest.New(t)
	natsCreds := testutil.NATSCredentialsFile(t)
	serve := func(target string, extra ...string) string {
		args := append([]string{"serve", "--target", target, "--nats", natsURL, "--" + target + "-listen", "127.0.0.1:0",
			"--plaintext", "--auth-tokens", creds.Path, "--service-token", creds.Token(t, grpcxtest.Service), "--nats-credentials", natsCreds}, extra...)
		return startProc(t, target, xct, args...).waitFor(t, listening, 30*time.Second)
	}
	_, valKey, execTrust := verdictKeys(t)
	execAddr := serve("executor", append([]string{"--workspace", workspace}, execTrust...)...)
	valAddr := serve("validator", valKey...)
	orchAddr := serve("orchestrator", "--validator-addr", valAddr, "--executor-addr", execAddr, "--scripts-dir", scripts)

	relay := &lostStartRelay{to: xctv1.NewOrchestratorServiceClient(creds.Dial(t, orchAddr, "alice"))}
	srv := grpcx.NewServer("orchestrator-relay", slog.New(slog.DiscardHandler), creds.ServerOptions()...)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	xctv1.RegisterOrchestratorServiceServer(srv.GRPC, relay)
	go func() { _ = srv.Serve() }()
	t.Cleanup(srv.GRPC.Stop)

	runP := startProc(t, "xct run", xct, "run", "--addr", srv.Addr()+","+orchAddr, "--model", "scripted:once.yaml", "--goal", "append once",
		"--credentials", creds.Path, "--as", "alice")
	code, out := runP.wait(t, 90*time.Second)
	if code != 0 || !strings.Contains(out, "done: appended") {
		t.Fatalf("xct run, its start's answer lost, exited %d (a user retrying as told starts the goal again):\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, err := xctv1.NewOrchestratorServiceClient(creds.Dial(t, orchAddr, "alice")).ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range runs.GetRuns() {
		if r.GetGoal() == "append once" {
			n++
		}
	}
	got, err := os.ReadFile(filepath.Join(workspace, "once.txt"))
	if n != 1 || err != nil || string(got) != "x" {
		t.Fatalf("%d run(s) of the goal, once.txt %q (%v); want one run, one append (%d StartRun calls)", n, got, err, relay.starts.Load())
	}
}
