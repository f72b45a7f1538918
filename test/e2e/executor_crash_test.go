package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nats-io/nats.go"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// ledgerServer is a ToolService with side effects the test can count: a
// ledger of entries. "charge" is not idempotent; "put" is, through the
// idempotency key: a key it has seen returns the first result and writes
// nothing. The first call of each tool writes its entry, reports it on
// acted, then hangs, so the executor can be killed between acting and
// recording.
type ledgerServer struct {
	xctv1.UnimplementedToolServiceServer
	acted chan string

	mu      sync.Mutex
	ledger  []string                   // one entry per side effect
	invokes map[string]int             // invocations per tool
	results map[string]*structpb.Value // put: result per idempotency key
}

func (l *ledgerServer) Describe(context.Context, *xctv1.DescribeRequest) (*xctv1.DescribeResponse, error) {
	desc := func(name string, idem bool) *xctv1.ToolDescriptor {
		return &xctv1.ToolDescriptor{Name: name, Description: "ledger " + name, InputSchema: `{"type":"object"}`,
			Effect: xctv1.Effect_EFFECT_IRREVERSIBLE, Idempotent: idem, Timeout: durationpb.New(2 * time.Second)}
	}
	return &xctv1.DescribeResponse{Tools: []*xctv1.ToolDescriptor{desc("charge", false), desc("put", true)}}, nil
}

func (l *ledgerServer) Invoke(ctx context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
	l.mu.Lock()
	l.invokes[req.GetTool()]++
	first := l.invokes[req.GetTool()] == 1
	if req.GetTool() == "put" {
		if v, ok := l.results[req.GetIdempotencyKey()]; ok {
			l.mu.Unlock()
			return success(v), nil // seen this key: no second effect
		}
	}
	l.ledger = append(l.ledger, req.GetTool()+" "+req.GetIdempotencyKey())
	v := structpb.NewStringValue("entry " + req.GetIdempotencyKey())
	if req.GetTool() == "put" {
		l.results[req.GetIdempotencyKey()] = v
	}
	l.mu.Unlock()
	if first {
		l.acted <- req.GetTool()
		<-ctx.Done() // the executor dies before it hears back
		return nil, ctx.Err()
	}
	return success(v), nil
}

func success(v *structpb.Value) *xctv1.InvokeResponse {
	return &xctv1.InvokeResponse{Response: &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}}
}

func (l *ledgerServer) counts() (entries []string, invokes map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	inv := map[string]int{}
	for k, v := range l.invokes {
		inv[k] = v
	}
	return append([]string(nil), l.ledger...), inv
}

// TestExecutorCrash runs the executor as its own process, kills it with
// SIGKILL after its tools acted and before it recorded their outcomes,
// restarts it, and asks for the same steps again: the idempotent tool is
// re-run once (and the tool server's idempotency key prevents a second
// effect), the other is reported IN_DOUBT, and no side effect happens
// twice.
func TestExecutorCrash(t *testing.T) {
	t.Parallel()
	xct, _ := binaries(t)
	ns := testutil.RunJetStream(t)
	base := t.TempDir()

	ledger := &ledgerServer{acted: make(chan string, 2), invokes: map[string]int{}, results: map[string]*structpb.Value{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	xctv1.RegisterToolServiceServer(g, ledger)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	toolsFile := filepath.Join(base, "tools.yaml")
	cfg := "servers:\n  - name: ledger\n    address: " + lis.Addr().String() + "\n"
	if err := os.WriteFile(toolsFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := grpcxtest.New(t)
	keys, _, execTrust := verdictKeys(t)
	// The orchestrator's requests: each step with the validator's signed
	// verdict for it.
	reqs := map[string]*xctv1.ExecuteRequest{
		"step-charge": signedRequest(t, keys, "run-crash", 1, "ledger.charge", nil, ""),
		"step-put":    signedRequest(t, keys, "run-crash", 2, "ledger.put", nil, ""),
	}
	ids := map[string]string{"step-charge": reqs["step-charge"].GetStepId(), "step-put": reqs["step-put"].GetStepId()}
	var addr string
	natsCreds := testutil.NATSCredentialsFile(t, "executor")
	serve := func(name string) (*proc, xctv1.ExecutorServiceClient) {
		p := startProc(t, name, xct, "serve", "--target", "executor", "--nats", ns.ClientURL(), "--nats-credentials", natsCreds,
			"--executor-listen", "127.0.0.1:0", "--workspace", filepath.Join(base, "ws"),
			"--tools-config", toolsFile, "--step-grace", "200ms", "--plaintext", "--auth-tokens", creds.Path, execTrust[0], execTrust[1])
		addr = p.waitFor(t, listening, 30*time.Second)
		// The client is the orchestrator: XCT's service identity.
		return p, xctv1.NewExecutorServiceClient(creds.Dial(t, addr, grpcxtest.Service))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	execute := func(c xctv1.ExecutorServiceClient, step, tool string) (*xctv1.ExecuteResponse, error) {
		req := reqs[step]
		if req.GetTool() != tool {
			t.Fatalf("step %s is a call of %s", step, req.GetTool())
		}
		// Each call carries a verdict of its own, as an orchestrator that
		// takes the run over asks the validator again: a verdict starts at
		// most one attempt.
		n := map[string]int{"step-charge": 1, "step-put": 2}[step]
		return c.Execute(ctx, signedRequest(t, keys, "run-crash", n, tool, nil, servedDigest(ctx, t, c, tool)))
	}

	// First executor: both tools act, then the process is killed.
	first, client := serve("executor-1")
	errs := make(chan error, 2)
	for step, tool := range map[string]string{"step-charge": "ledger.charge", "step-put": "ledger.put"} {
		go func() {
			_, err := execute(client, step, tool)
			errs <- err
		}()
	}
	for range 2 {
		select {
		case <-ledger.acted:
		case <-ctx.Done():
			t.Fatal("the tools did not act")
		}
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	for range 2 {
		if err := <-errs; status.Code(err) == codes.OK {
			t.Fatal("a step answered although its executor was killed mid-step")
		}
	}
	entries, invokes := ledger.counts()
	if len(entries) != 2 || invokes["charge"] != 1 || invokes["put"] != 1 {
		t.Fatalf("before the restart: ledger %v, invokes %v", entries, invokes)
	}

	// Second executor, same NATS: the same steps again.
	_, client = serve("executor-2")
	charge, err := execute(client, "step-charge", "ledger.charge")
	if err != nil {
		t.Fatal(err)
	}
	if e := charge.GetResponse().GetError(); e.GetCode() != string(wire.CodeInDoubt) || e.GetSuggestedAction() != "needs_human_decision" || e.GetRecoverable() {
		t.Fatalf("non-idempotent step after the crash: %v", charge)
	}
	put, err := execute(client, "step-put", "ledger.put")
	if err != nil {
		t.Fatal(err)
	}
	if put.GetResponse().GetError() != nil || put.GetAttempt() != 2 || put.GetReplayed() ||
		put.GetResponse().GetSuccess().GetResult().GetStringValue() != "entry "+ids["step-put"] {
		t.Fatalf("idempotent step after the crash: %v", put)
	}
	rec, err := client.GetStep(ctx, &xctv1.GetStepRequest{StepId: ids["step-put"]})
	if err != nil {
		t.Fatal(err)
	}
	if r := rec.GetStep(); r.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED || len(r.GetReruns()) != 1 {
		t.Fatalf("record of the re-run: %v", r)
	}

	// Asked once more: nothing runs again.
	if again, err := execute(client, "step-put", "ledger.put"); err != nil || !again.GetReplayed() || again.GetAttempt() != 2 {
		t.Fatalf("put again: %v, %v", again, err)
	}
	if again, err := execute(client, "step-charge", "ledger.charge"); err != nil || again.GetResponse().GetError().GetCode() != string(wire.CodeInDoubt) {
		t.Fatalf("charge again: %v, %v", again, err)
	}
	// A human checks the ledger and resolves the charge as done: a
	// decision settles a step its run's chain shows in doubt, which the
	// orchestrator records (written here as it would, the test being the
	// orchestrator); the executor reads the chain with its own NATS
	// rights (no consumers on the event log).
	carol := xctv1.NewExecutorServiceClient(creds.Dial(t, addr, "carol"))
	resolve := &xctv1.ResolveStepRequest{StepId: ids["step-charge"], Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		Reason: "the ledger holds the charge", RunId: "run-crash", InDoubtSeq: 3} // as carol, an operator
	if _, err := carol.ResolveStep(ctx, resolve); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("resolve before the chain shows the step in doubt: %v, want FAILED_PRECONDITION", err)
	}
	doubt := inDoubtChain(ctx, t, ns.ClientURL(), "run-crash", ids["step-charge"], "ledger.charge")
	if doubt != resolve.InDoubtSeq {
		t.Fatalf("step_in_doubt at seq %d, want %d", doubt, resolve.InDoubtSeq)
	}
	res, err := carol.ResolveStep(ctx, resolve)
	if err != nil || res.GetStep().GetResolution().GetResolvedBy() != "carol" || res.GetStep().GetResolution().GetInDoubtSeq() != doubt {
		t.Fatalf("resolve: %v, %v", res, err)
	}
	if after, err := execute(client, "step-charge", "ledger.charge"); err != nil || after.GetResponse().GetError() != nil || !after.GetReplayed() {
		t.Fatalf("charge after the resolution: %v, %v", after, err)
	}

	// In no case a second side effect.
	entries, invokes = ledger.counts()
	if len(entries) != 2 || invokes["charge"] != 1 || invokes["put"] != 2 {
		t.Fatalf("after the restart: ledger %v, invokes %v", entries, invokes)
	}
}

// inDoubtChain writes run runID's chain as an orchestrator leaves it when
// step 1 (stepID, tool) is in doubt, and returns its step_in_doubt's seq.
func inDoubtChain(ctx context.Context, t *testing.T, url, runID, stepID, tool string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url, testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	log, err := eventlog.Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := log.NewChainWriter(runID)
	if err != nil {
		t.Fatal(err)
	}
	var last lctl.Event
	for _, ev := range []xctevent.Event{
		xctevent.StepStart{Step: 1, StepID: stepID, Tool: tool, Arguments: map[string]any{}, Intent: "charge"},
		xctevent.Verdict{Step: 1, StepID: stepID, Tool: tool, Decision: xctevent.DecisionAllow},
		xctevent.StepInDoubt{Step: 1, StepID: stepID, Tool: tool, Reason: "its executor was killed mid-call"},
	} {
		if last, err = w.Append(ctx, ev.Type(), "orchestrator", ev.Data()); err != nil {
			t.Fatal(err)
		}
	}
	return last.Seq
}
