package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

// gateServer is a ToolService whose tool "count" keeps a ledger of its
// invocations by idempotency key (the step id) and argument n. The first
// invocation with n == hold reports on entered and waits for release, so a
// test can stop an orchestrator while a step is in flight.
type gateServer struct {
	xctv1.UnimplementedToolServiceServer
	hold    float64
	entered chan struct{}
	release chan struct{}

	mu     sync.Mutex
	ledger map[string]int // idempotency key → invocations
	byN    map[float64]int
}

func (g *gateServer) Describe(context.Context, *xctv1.DescribeRequest) (*xctv1.DescribeResponse, error) {
	return &xctv1.DescribeResponse{Tools: []*xctv1.ToolDescriptor{{Name: "count", Description: "counts", InputSchema: `{"type":"object"}`,
		Effect: xctv1.Effect_EFFECT_READ, Timeout: durationpb.New(time.Minute)}}}, nil
}

func (g *gateServer) Invoke(_ context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
	n := req.GetArguments().GetFields()["n"].GetNumberValue()
	g.mu.Lock()
	g.ledger[req.GetIdempotencyKey()]++
	g.byN[n]++
	first := g.byN[n] == 1
	g.mu.Unlock()
	if n == g.hold && first {
		g.entered <- struct{}{}
		<-g.release // like a remote system: it finishes whatever the caller does
	}
	return success(structpb.NewNumberValue(n)), nil
}

func (g *gateServer) counts() (map[string]int, map[float64]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, b := map[string]int{}, map[float64]int{}
	for k, v := range g.ledger {
		l[k] = v
	}
	for k, v := range g.byN {
		b[k] = v
	}
	return l, b
}

// takeoverCluster is every service as its own OS process, with two
// orchestrators, and the gate tool server in the test process.
type takeoverCluster struct {
	xct     string
	natsURL string
	gate    *gateServer
	orch    [2]*proc
	addr    [2]string
	exec    xctv1.ExecutorServiceClient
	events  *eventlog.Log
	// creds is the tokens file every process authenticates with.
	creds string
	// checkpointPub verifies the chains: both orchestrators sign their
	// checkpoints with one key, as replicas sharing a Secret do.
	checkpointPub string
}

const takeoverScript = `
steps:
  - next_step: {tool: gate.count, arguments: {n: 1}, goal: one}
  - next_step: {tool: gate.count, arguments: {n: 2}, goal: two}
  - next_step: {tool: gate.count, arguments: {n: 3}, goal: three}
  - done: true
    message: counted to three
`

// drainTimeout bounds orch-a's hand-over after SIGTERM: the step in flight
// must finish within 90% of it. It is a safety net for a loaded machine, not
// a measure (a drain ends when its runs are handed over), and it stays under
// proctest.StopTimeout so a clean-up stop never kills a draining process.
const drainTimeout = 25 * time.Second

// runLease is the orchestrators' --run-lease: short, so the SIGKILL test's
// takeover comes soon, but long enough that a loaded machine does not hold
// orch-a's renewals (every third of it) back so long that orch-b takes over
// a run orch-a still owns.
const runLease = 5 * time.Second

func startTakeoverCluster(t *testing.T) *takeoverCluster {
	xct, natsBin := binaries(t)
	base := t.TempDir()
	scripts := filepath.Join(base, "scripts")
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scripts, "takeover.yaml"), []byte(takeoverScript), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &takeoverCluster{xct: xct, gate: &gateServer{hold: 2, entered: make(chan struct{}, 1), release: make(chan struct{}),
		ledger: map[string]int{}, byN: map[float64]int{}}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	xctv1.RegisterToolServiceServer(g, c.gate)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	tools := filepath.Join(base, "tools.yaml")
	if err := os.WriteFile(tools, []byte("servers:\n  - name: gate\n    address: "+lis.Addr().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	ns := startProc(t, "nats-server", natsBin, "-c", testutil.NATSServerConfigFile(t), "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", filepath.Join(base, "nats"))
	c.natsURL = "nats://" + ns.waitFor(t, regexp.MustCompile(`Listening for client connections on (127\.0\.0\.1:\d+)`), 30*time.Second)
	provisionNATS(t, xct, c.natsURL) // the admin makes the streams; the services only bind
	creds := grpcxtest.New(t)
	c.creds = creds.Path
	natsCreds := testutil.NATSCredentialsFile(t)
	serve := func(name, target string, extra ...string) (*proc, string) {
		args := append([]string{"serve", "--target", target, "--nats", c.natsURL, "--" + target + "-listen", "127.0.0.1:0",
			"--plaintext", "--auth-tokens", creds.Path, "--service-token", creds.Token(t, grpcxtest.Service), "--nats-credentials", natsCreds}, extra...)
		p := startProc(t, name, xct, args...)
		return p, p.waitFor(t, listening, 30*time.Second)
	}
	_, valKey, execTrust := verdictKeys(t)
	_, execAddr := serve("executor", "executor", append([]string{"--workspace", filepath.Join(base, "ws"), "--tools-config", tools}, execTrust...)...)
	_, valAddr := serve("validator", "validator", valKey...)
	serve("tracer", "tracer", "--tracer-data", filepath.Join(base, "tracer"), "--tracer-http-listen", "127.0.0.1:0")
	cpKey, cpPub := writeKey(t, base, "xct-takeover") // signed_checkpoint_test.go
	c.checkpointPub = cpPub
	for i, name := range []string{"orch-a", "orch-b"} {
		c.orch[i], c.addr[i] = serve(name, "orchestrator", "--validator-addr", valAddr, "--executor-addr", execAddr, "--scripts-dir", scripts,
			"--instance", name, "--run-lease", runLease.String(), "--drain-timeout", drainTimeout.String(), "--log-level", "info",
			"--checkpoint-key-file", cpKey, "--checkpoint-every", "5")
	}
	c.exec = xctv1.NewExecutorServiceClient(creds.Dial(t, execAddr, grpcxtest.Service))
	nc, err := nats.Connect(c.natsURL, testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.events, err = eventlog.Open(ctx, nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitEvent follows the run's chain until an event of type typ.
func (c *takeoverCluster) waitEvent(t *testing.T, id, typ string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	found := false
	err := c.events.Follow(ctx, id, eventlog.FollowOptions{}, func(e lctl.Event) error {
		if e.Type == typ {
			found = true
			return eventlog.ErrStop
		}
		return nil
	})
	if err != nil || !found {
		t.Fatalf("no %s on %s: %v", typ, id, err)
	}
}

// check asserts what a takeover must leave: the chain verifies (lctl
// verify, as its own process), steps 1..steps each proposed once, each
// step acted on by the tool exactly once and recorded once (attempt 1) by
// the executor, and the run ended with status.
func (c *takeoverCluster) check(t *testing.T, id string, steps int, status string) []lctl.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events, err := c.events.ReadChain(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "run.lctl.json")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.NewFile(id, events).Encode(f, lctl.FormatForPath(file)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	// Both owners' parts are proven: every event up to the checkpoint
	// after run_finished is what the cluster's key signed.
	v := startProc(t, "lctl verify", lctlBinary(t), "verify", "--key", c.checkpointPub, file)
	if code, out := v.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("lctl verify exited %d:\n%s", code, out)
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain: %v", err)
	}
	var numbers []int
	outcomes := map[string]int{}
	for _, e := range events {
		switch e.Type {
		case lctl.TypeStepStart:
			n, _ := e.Data["step"].(float64)
			numbers = append(numbers, int(n))
		case lctl.TypeToolCall, lctl.TypeError:
			id, _ := e.Data["step_id"].(string)
			outcomes[id]++
		}
	}
	want := make([]int, steps)
	for i := range want {
		want[i] = i + 1
	}
	if fmt.Sprint(numbers) != fmt.Sprint(want) {
		t.Fatalf("step numbers %v, want %v", numbers, want)
	}
	ledger, byN := c.gate.counts()
	if len(ledger) != steps {
		t.Fatalf("tool ledger %v: want %d steps acted on", ledger, steps)
	}
	for n := 1; n <= steps; n++ {
		if byN[float64(n)] != 1 {
			t.Fatalf("tool ledger by n %v: every step must act exactly once", byN)
		}
	}
	for stepID, n := range ledger {
		if n != 1 || outcomes[stepID] != 1 {
			t.Fatalf("step %s: %d invocations, %d outcome events", stepID, n, outcomes[stepID])
		}
		rec, err := c.exec.GetStep(ctx, &xctv1.GetStepRequest{StepId: stepID})
		if err != nil || rec.GetStep().GetAttempt() != 1 || len(rec.GetStep().GetReruns()) != 0 {
			t.Fatalf("executor record of %s: %v, %v", stepID, rec.GetStep(), err)
		}
	}
	last := events[len(events)-1]
	if last.Type == checkpoint.EventType { // the run's end, signed
		last = events[len(events)-2]
	}
	if last.Type != lctl.TypeRunFinished || last.Data["status"] != status {
		t.Fatalf("the run ended %v, want %s", last.Data, status)
	}
	return events
}

func typed(events []lctl.Event, typ string) []lctl.Event {
	var out []lctl.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

var (
	lctlOnce sync.Once
	lctlErr  error
)

// lctlBinary builds the lctl command next to the xct binary, once.
func lctlBinary(t *testing.T) string {
	xct, _ := binaries(t)
	bin := filepath.Join(filepath.Dir(xct), "lctl")
	lctlOnce.Do(func() {
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/xct-dev/xct/cmd/lctl").CombinedOutput(); err != nil {
			lctlErr = fmt.Errorf("go build lctl: %w\n%s", err, out)
		}
	})
	if lctlErr != nil {
		t.Fatal(lctlErr)
	}
	return bin
}

var runStarted = regexp.MustCompile(`run (run-\S+) started by`)

// TestTakeoverOnSIGTERM: two orchestrator processes; the one running a run
// gets SIGTERM while a step's tool call is in flight. It reports
// NOT_SERVING, lets the step finish, records the hand-over and exits 0
// within its drain timeout; the other takes the run over from its chain and
// finishes it; the client (xct run, given both addresses) follows the run
// across the hand-over.
func TestTakeoverOnSIGTERM(t *testing.T) {
	t.Parallel()
	c := startTakeoverCluster(t)
	runP := startProc(t, "xct run", c.xct, "run", "--addr", c.addr[0]+","+c.addr[1], "--model", "scripted:takeover.yaml", "--goal", "count", "--credentials", c.creds, "--as", "alice")
	id := runP.waitFor(t, runStarted, 30*time.Second)
	select {
	case <-c.gate.entered: // step 2 is executing, called by orch-a
	case <-time.After(60 * time.Second):
		t.Fatalf("step 2 never reached the tool:\n%s", runP.output())
	}
	health := healthpb.NewHealthClient(dial(t, c.addr[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := watch.Recv(); err != nil || st.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before SIGTERM: %v, %v", st, err)
	}
	if err := c.orch[0].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := watch.Recv(); err != nil || st.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after SIGTERM: %v, %v", st, err)
	}
	cancel() // an open health watch would hold the server's graceful stop
	c.orch[0].waitFor(t, regexp.MustCompile(`(stopping: handing runs over)`), 30*time.Second)
	close(c.gate.release) // the step in flight finishes during the drain

	code, out := c.orch[0].wait(t, drainTimeout+10*time.Second)
	if code != 0 {
		t.Fatalf("orch-a exited %d after SIGTERM:\n%s", code, out)
	}
	if strings.Contains(out, "drain timeout:") {
		t.Errorf("orch-a's drain timed out instead of handing the run over:\n%s", out)
	}
	if code, out := runP.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("xct run exited %d:\n%s", code, out)
	}
	events := c.check(t, id, 3, "done")
	rel, res := typed(events, "run_released"), typed(events, "run_resumed")
	if len(rel) != 1 || len(res) != 1 || rel[0].Data["instance"] != "orch-a" || rel[0].Data["step"] != float64(3) ||
		res[0].Data["instance"] != "orch-b" || res[0].Data["reason"] != "released" || res[0].Seq != rel[0].Seq+2 || events[rel[0].Seq].Type != checkpoint.EventType {
		t.Fatalf("hand-over: %v / %v", rel, res)
	}
	// Step 2, in flight at the SIGTERM, ended before the hand-over.
	for _, e := range events {
		if e.Type == lctl.TypeStepEnd && e.Data["step"] == float64(2) && e.Seq > rel[0].Seq {
			t.Fatal("step 2 ended after the hand-over")
		}
	}
	out = runP.output()
	for _, want := range []string{"[step 3] handover  orch-a stopped", "[step 3] resumed   by orch-b (released)", "[step 3] result    success 3", "done: counted to three"} {
		if !strings.Contains(out, want) {
			t.Errorf("xct run output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "[step 2] result") != 1 {
		t.Errorf("xct run printed step 2's result %d times:\n%s", strings.Count(out, "[step 2] result"), out)
	}
}

// TestTakeoverOnSIGKILL: the owner is killed while a step's tool call is in
// flight. Nothing is handed over; its claim expires (runLease) and the other
// orchestrator takes the run over from the chain: step 2 is allowed and has
// no outcome, so it asks the executor with the same step id. The killed
// caller's call had committed (the remote call was under way), so the
// executor lets it run to its own outcome instead of cutting it when its
// caller vanished, records it, and answers the new owner with that record
// instead of acting again. The run finishes; the tool acted once.
func TestTakeoverOnSIGKILL(t *testing.T) {
	t.Parallel()
	c := startTakeoverCluster(t)
	runP := startProc(t, "xct run", c.xct, "run", "--addr", c.addr[0]+","+c.addr[1], "--model", "scripted:takeover.yaml", "--goal", "count", "--credentials", c.creds, "--as", "alice")
	id := runP.waitFor(t, runStarted, 30*time.Second)
	select {
	case <-c.gate.entered:
	case <-time.After(60 * time.Second):
		t.Fatalf("step 2 never reached the tool:\n%s", runP.output())
	}
	if err := c.orch[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.orch[0].done
	c.waitEvent(t, id, "run_resumed")
	close(c.gate.release)
	code, out := runP.wait(t, 90*time.Second)
	if code != 0 || !strings.Contains(out, "resumed   by orch-b (lease expired)") || strings.Count(out, "[step 2] result") != 1 {
		t.Fatalf("xct run exited %d:\n%s", code, out)
	}
	events := c.check(t, id, 3, "done")
	res := typed(events, "run_resumed")
	if len(typed(events, "run_released")) != 0 || len(res) != 1 || res[0].Data["instance"] != "orch-b" ||
		res[0].Data["reason"] != "lease_expired" || res[0].Data["previous_owner"] != "orch-a" || res[0].Data["step"] != float64(2) {
		t.Fatalf("takeover after SIGKILL: %v", res)
	}
	// Step 2's outcome was recorded by orch-b after the takeover, from the
	// executor's record of the one call orch-a started.
	var step2 []lctl.Event
	for _, e := range typed(events, lctl.TypeToolCall) {
		if e.Data["step"] == float64(2) {
			step2 = append(step2, e)
		}
	}
	if len(step2) != 1 || step2[0].Seq < res[0].Seq || len(typed(events, lctl.TypeError)) != 0 {
		t.Fatalf("step 2 outcome: %v, errors %v", step2, typed(events, lctl.TypeError))
	}
}
