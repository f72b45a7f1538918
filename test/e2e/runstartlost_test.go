package e2e

import (
	"context"
	"errors"
	"io"
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
	// refused is how many StartRun calls after the first are answered
	// UNAVAILABLE without being passed on (an orchestrator that keeps
	// failing, say restarting).
	refused int32
	// follow relays WatchRun (else UNAVAILABLE: the client follows the
	// run at its next address).
	follow bool
	// lookup relays GetRun (else UNAVAILABLE).
	lookup bool
}

func (l *lostStartRelay) GetRun(ctx context.Context, req *xctv1.GetRunRequest) (*xctv1.GetRunResponse, error) {
	if !l.lookup {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	return l.to.GetRun(ctx, req)
}

func (l *lostStartRelay) StartRun(ctx context.Context, req *xctv1.StartRunRequest) (*xctv1.StartRunResponse, error) {
	n := l.starts.Add(1)
	if n > 1 && n <= 1+l.refused {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	resp, err := l.to.StartRun(ctx, req)
	if n == 1 && err == nil {
		return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
	}
	return resp, err
}

// serveRelay serves l on loopback and returns its address.
func serveRelay(t *testing.T, creds *grpcxtest.Creds, l *lostStartRelay) string {
	t.Helper()
	srv := grpcx.NewServer("orchestrator-relay", slog.New(slog.DiscardHandler), creds.ServerOptions()...)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	xctv1.RegisterOrchestratorServiceServer(srv.GRPC, l)
	go func() { _ = srv.Serve() }()
	t.Cleanup(srv.GRPC.Stop)
	return srv.Addr()
}

func (l *lostStartRelay) WatchRun(req *xctv1.WatchRunRequest, srv xctv1.OrchestratorService_WatchRunServer) error {
	if !l.follow {
		return status.Error(codes.Unavailable, "connection refused")
	}
	stream, err := l.to.WatchRun(srv.Context(), req)
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := srv.Send(ev); err != nil {
			return err
		}
	}
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
	t.Parallel()
	xct, orchAddr, creds, workspace := startLostCluster(t)
	relay := &lostStartRelay{to: xctv1.NewOrchestratorServiceClient(creds.Dial(t, orchAddr, "alice"))}
	relayAddr := serveRelay(t, creds, relay)

	runP := startProc(t, "xct run", xct, "run", "--addr", relayAddr+","+orchAddr, "--model", "scripted:once.yaml", "--goal", "append once",
		"--credentials", creds.Path, "--as", "alice")
	code, out := runP.wait(t, 90*time.Second)
	if code != 0 || !strings.Contains(out, "done: appended") {
		t.Fatalf("xct run, its start's answer lost, exited %d (a user retrying as told starts the goal again):\n%s", code, out)
	}
	if n := runsOf(t, creds, orchAddr, "append once"); n != 1 {
		t.Fatalf("%d run(s) of the goal; want one (%d StartRun calls)", n, relay.starts.Load())
	}
	got, err := os.ReadFile(filepath.Join(workspace, "once.txt"))
	if err != nil || string(got) != "x" {
		t.Fatalf("once.txt %q (%v); want one append", got, err)
	}
}

// Session 18 (faults18), faults17's leftover: `xct run` retried a start
// whose answer was lost for a fixed minute. The bound is --start-retry:
// given up, the error names the run id and says it may have started
// (it did, here); 0 retries until an orchestrator answers. Real
// processes, gRPC on loopback; the relay loses the first start's answer
// and then refuses the retries for a while.
func TestRunStartRetryIsBoundedByItsFlag(t *testing.T) {
	t.Parallel()
	xct, orchAddr, creds, _ := startLostCluster(t)
	// Refused for longer than the bound (every retry refused): given up,
	// naming the run, which did start.
	relay := &lostStartRelay{to: xctv1.NewOrchestratorServiceClient(creds.Dial(t, orchAddr, "alice")), refused: 1 << 20}
	runP := startProc(t, "xct run", xct, "run", "--addr", serveRelay(t, creds, relay), "--model", "scripted:once.yaml", "--goal", "bounded",
		"--run-id", "run-bounded", "--start-retry", "1s", "--credentials", creds.Path, "--as", "alice")
	code, out := runP.wait(t, 90*time.Second)
	if code == 0 || !strings.Contains(out, "start run run-bounded, retried for 1s (--start-retry; it may have started: see xct show run-bounded") {
		t.Fatalf("xct run --start-retry 1s against an orchestrator that stays unavailable exited %d; want a failure naming the run that may have started:\n%s", code, out)
	}
	if n := runsOf(t, creds, orchAddr, "bounded"); n != 1 {
		t.Fatalf("%d run(s) of the goal; want the one the first start made", n)
	}
	// Refused for a few retries, --start-retry 0: retried until the
	// orchestrator answers (ALREADY_EXISTS: its own run), then followed.
	relay = &lostStartRelay{to: xctv1.NewOrchestratorServiceClient(creds.Dial(t, orchAddr, "alice")), refused: 4, follow: true}
	runP = startProc(t, "xct run", xct, "run", "--addr", serveRelay(t, creds, relay), "--model", "scripted:once.yaml", "--goal", "unbounded",
		"--start-retry", "0", "--credentials", creds.Path, "--as", "alice")
	if code, out = runP.wait(t, 90*time.Second); code != 0 || !strings.Contains(out, "done: appended") {
		t.Fatalf("xct run --start-retry 0 exited %d; want the run followed to its end:\n%s", code, out)
	}
	if n := runsOf(t, creds, orchAddr, "unbounded"); n != 1 || relay.starts.Load() != 6 {
		t.Fatalf("%d run(s) of the goal after %d StartRun calls; want one", n, relay.starts.Load())
	}
}

// runsOf counts the runs of goal at the orchestrator at addr.
func runsOf(t *testing.T, creds *grpcxtest.Creds, addr, goal string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, err := xctv1.NewOrchestratorServiceClient(creds.Dial(t, addr, "alice")).ListRuns(ctx, &xctv1.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range runs.GetRuns() {
		if r.GetGoal() == goal {
			n++
		}
	}
	return n
}

// startLostCluster starts NATS, an executor, a validator and an
// orchestrator as processes, with the script once.yaml (one write, then
// done): the xct binary, the orchestrator's address, the credentials and
// the executor's workspace.
func startLostCluster(t *testing.T) (xct, orchAddr string, creds *grpcxtest.Creds, workspace string) {
	t.Helper()
	xct, natsBin := binaries(t)
	base := t.TempDir()
	script := "steps:\n  - next_step: {tool: fs.write, arguments: {path: once.txt, content: \"x\"}, goal: write}\n  - done: true\n    message: appended\n"
	workspace, scripts := processDirs(t, base, "once.yaml", []byte(script))
	ns := startProc(t, "nats-server", natsBin, "-c", testutil.NATSServerConfigFile(t), "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", filepath.Join(base, "nats"))
	natsURL := "nats://" + ns.waitFor(t, regexp.MustCompile(`Listening for client connections on (127\.0\.0\.1:\d+)`), 30*time.Second)
	provisionNATS(t, xct, natsURL)
	creds = grpcxtest.New(t)
	natsCreds := testutil.NATSCredentialsFile(t)
	serve := func(target string, extra ...string) string {
		args := append([]string{"serve", "--target", target, "--nats", natsURL, "--" + target + "-listen", "127.0.0.1:0",
			"--plaintext", "--auth-tokens", creds.Path, "--service-token", creds.Token(t, grpcxtest.Service), "--nats-credentials", natsCreds}, extra...)
		return startProc(t, target, xct, args...).waitFor(t, listening, 30*time.Second)
	}
	_, valKey, execTrust := verdictKeys(t)
	execAddr := serve("executor", append([]string{"--workspace", workspace}, execTrust...)...)
	valAddr := serve("validator", valKey...)
	orchAddr = serve("orchestrator", "--validator-addr", valAddr, "--executor-addr", execAddr, "--scripts-dir", scripts)
	return xct, orchAddr, creds, workspace
}

// Session 19 (faults19), faults18's leftover: `xct run` that gave up its
// start retries did not follow the run it started. The first start's
// answer is lost and every retry refused (an orchestrator that keeps
// refusing starts, draining or restarting, and still answers reads): on
// main `xct run --start-retry 1s` exited "retried for 1s ... it may have
// started" about a run that had started and that the orchestrator could
// show; the user was left to find it. Now, past the bound, the CLI asks
// the orchestrators for the run id and follows the run when one has it.
// Real processes (NATS, the services, the CLI), gRPC on loopback.
func TestRunStartGivenUpFollowsTheRunThatStarted(t *testing.T) {
	t.Parallel()
	xct, orchAddr, creds, workspace := startLostCluster(t)
	relay := &lostStartRelay{to: xctv1.NewOrchestratorServiceClient(creds.Dial(t, orchAddr, "alice")), refused: 1 << 20, follow: true, lookup: true}
	runP := startProc(t, "xct run", xct, "run", "--addr", serveRelay(t, creds, relay), "--model", "scripted:once.yaml", "--goal", "given up",
		"--run-id", "run-given-up", "--start-retry", "1s", "--credentials", creds.Path, "--as", "alice")
	code, out := runP.wait(t, 90*time.Second)
	if code != 0 || !strings.Contains(out, "done: appended") {
		t.Fatalf("xct run --start-retry 1s, its run started and its start refused since, exited %d; want the run followed to its end:\n%s", code, out)
	}
	if n := runsOf(t, creds, orchAddr, "given up"); n != 1 || relay.starts.Load() < 2 {
		t.Fatalf("%d run(s) of the goal after %d StartRun calls; want one, retried", n, relay.starts.Load())
	}
	got, err := os.ReadFile(filepath.Join(workspace, "once.txt"))
	if err != nil || string(got) != "x" {
		t.Fatalf("once.txt %q (%v); want one append", got, err)
	}
	// A run that never started is not followed: the relay refuses every
	// start, so none reaches the orchestrator; the first was sent (to
	// the relay), so the error names the id as one that may have started.
	relay = &lostStartRelay{to: xctv1.NewOrchestratorServiceClient(creds.Dial(t, orchAddr, "alice")), refused: 1 << 20, follow: true, lookup: true}
	relay.starts.Store(1) // the first start is refused too
	runP = startProc(t, "xct run", xct, "run", "--addr", serveRelay(t, creds, relay), "--model", "scripted:once.yaml", "--goal", "never started",
		"--run-id", "run-never-started", "--start-retry", "1s", "--credentials", creds.Path, "--as", "alice")
	if code, out = runP.wait(t, 90*time.Second); code == 0 || !strings.Contains(out, "it may have started: see xct show run-never-started") {
		t.Fatalf("xct run whose every start was refused exited %d; want a failure naming the run:\n%s", code, out)
	}
	if n := runsOf(t, creds, orchAddr, "never started"); n != 0 {
		t.Fatalf("%d run(s) of a goal never started", n)
	}
}
