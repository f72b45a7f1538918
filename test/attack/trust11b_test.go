package attack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/cli"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// readerModel reads big.txt steps times, then asks for a deploy (which
// waits for an approval), then stops.
type readerModel struct{ steps int }

func (readerModel) Name() string { return "reader" }
func (readerModel) Close() error { return nil }
func (m readerModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	switch n := len(req.GetHistory()); {
	case n == m.steps:
		return &xctv1.ProposeResponse{Output: `{"next_step": {"tool": "test.deploy", "arguments": {"target": "prod"}}}`}, nil
	case n > m.steps:
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "read enough"}`}, nil
	}
	out, err := json.Marshal(map[string]any{"next_step": map[string]any{"tool": "fs.read", "arguments": map[string]any{"path": "big.txt"}}})
	return &xctv1.ProposeResponse{Output: string(out)}, err
}

// watchToEnd follows a run's chain until it ends.
func watchToEnd(ctx context.Context, t *testing.T, orch xctv1.OrchestratorServiceClient, id string) int {
	t.Helper()
	stream, err := orch.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return n
		} else if err != nil {
			t.Fatalf("watch %s: %v", id, err)
		}
		n++
	}
}

// TestAttackGetRunPastAMessage: a run's steps are each bounded (a
// proposal, an output of at most --tool-max-output), but not their sum:
// a model that reads a 240 KiB file 72 times (each read allowed) made its
// run larger than a gRPC message, and every GetRun of it (and a CancelRun
// answering it) failed with "trying to send message larger than max" (on
// main). Now an answer that would pass 8 MiB leaves the largest steps'
// bulk out (arguments, results, long messages), each replaced by a note
// naming the step's size and where to read it whole (WatchRun, the
// tracer's chain); small steps and the run's own fields stay whole.
func TestAttackGetRunPastAMessage(t *testing.T) {
	t.Parallel()
	const steps = 72
	var deployed atomic.Int64
	c := startBindCluster(t, withProposer("reader", readerModel{steps: steps}), func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	big := strings.Repeat("0123456789abcdef", 15<<10) // 240 KiB
	if err := os.WriteFile(filepath.Join(c.workspace, "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	alice := c.orchestratorAs(t, "alice")
	if _, err := alice.StartRun(ctx, &xctv1.StartRunRequest{RunId: "reader-1", Goal: "read", Model: "func:reader", MaxSteps: steps + 5}); err != nil {
		t.Fatal(err)
	}
	dave := c.orchestratorAs(t, "dave")
	check := func(r *xctv1.Run, wantSteps int) {
		t.Helper()
		if len(r.GetSteps()) != wantSteps {
			t.Fatalf("run %s: %d steps, want %d", r.GetStatus(), len(r.GetSteps()), wantSteps)
		}
		whole, left := 0, 0
		for i, s := range r.GetSteps()[:steps] {
			if s.GetNumber() != int32(i+1) || s.GetStepId() == "" || s.GetProposal().GetTool() != "fs.read" || s.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
				t.Fatalf("step %d: %.300v", i+1, s)
			}
			raw, err := json.Marshal(s.GetResponse().GetSuccess().GetResult().AsInterface())
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.Contains(string(raw), big):
				whole++
			case strings.Contains(string(raw), "left out of this answer") && strings.Contains(string(raw), "WatchRun reader-1"):
				left++
			default:
				t.Fatalf("step %d's result is neither whole nor said to be left out: %.300s", i+1, raw)
			}
		}
		if whole == 0 || left == 0 {
			t.Fatalf("%d steps whole, %d left out", whole, left)
		}
	}
	// While the run waits for the deploy's approval: GetRun. The 72
	// reads take about half a minute under -race at load ~15 (each
	// proposal carries the history, so the run's work grows with the
	// square of its steps): wait for the approval on the validator, a
	// light call, rather than by asking for the run's 8 MiB every 50 ms,
	// which slowed the run it waited for (a minute did not do at load
	// ~25). Then GetRun, once the orchestrator has the run waiting.
	waitApprovalWithin(t, c, "bob", "reader-1", 5*time.Minute)
	testutil.Eventually(t, 60*time.Second, func() error {
		got, err := dave.GetRun(ctx, &xctv1.GetRunRequest{RunId: "reader-1"})
		if err != nil {
			t.Fatalf("GetRun of a run of %d 240 KiB reads: %.300v", steps, err)
		}
		if got.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL {
			return fmt.Errorf("run is %s", got.GetRun().GetStatus())
		}
		check(got.GetRun(), steps+1)
		return nil
	})
	// CancelRun answers the run the same way, not a broken call (the
	// cancel is made either way).
	cr, err := alice.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: "reader-1", Reason: "enough"})
	if err != nil {
		t.Fatalf("CancelRun: %.300v", err)
	}
	check(cr.GetRun(), steps+1)
	watchToEnd(ctx, t, dave, "reader-1")
	got, err := dave.GetRun(ctx, &xctv1.GetRunRequest{RunId: "reader-1"})
	if err != nil {
		t.Fatalf("GetRun of the ended run: %.300v", err)
	}
	if got.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Fatalf("run is %s", got.GetRun().GetStatus())
	}
	check(got.GetRun(), steps+1)
	if deployed.Load() != 0 {
		t.Fatal("deployed without an approval")
	}

	// Its chain, where the note sends the reader: lctl export (which asked
	// the tracer for the whole file in one answer, and failed past a gRPC
	// message on main) and lctl verify --chain (which pages, by events).
	last := uint64(0)
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dave"))
	testutil.Eventually(t, 30*time.Second, func() error {
		page, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "reader-1", PageSize: 1})
		if err != nil {
			return err
		}
		if last = page.GetSummary().GetEvents(); last < got.GetRun().GetLastSeq() {
			return fmt.Errorf("the tracer has %d events of %d", last, got.GetRun().GetLastSeq())
		}
		return nil
	})
	env := map[string]string{"LCTL_TOKEN": c.creds.Token(t, "dave"), "LCTL_TRACER": c.app.Addr(app.TargetTracer)}
	lctlRun := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := cli.Run(ctx, args, cli.Env{Stdout: &out, Stderr: &out, Getenv: func(k string) string { return env[k] }, Live: lctllive.Live{}})
		return code, out.String()
	}
	file := filepath.Join(t.TempDir(), "reader-1.lctl.json")
	if code, out := lctlRun("export", "--chain", "reader-1", "-o", file); code != 0 {
		t.Fatalf("lctl export of a %d-event chain past a message: exit %d\n%.500s", last, code, out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := lctl.DecodeFile(bytes.NewReader(raw), lctl.FormatJSON)
	if err != nil || uint64(len(f.Events)) != last || lctl.Verify(f.Events) != nil {
		t.Fatalf("the export: %d events of %d, %v", len(f.Events), last, err)
	}
	if code, out := lctlRun("verify", "--chain", "reader-1"); code != 0 || !strings.Contains(out, "hash chain: "+fmt.Sprint(last)+" events linked") {
		t.Fatalf("lctl verify --chain: exit %d\n%.500s", code, out)
	}
	for _, args := range [][]string{{"stats"}, {"replay"}, {"replay", "--to-seq", "100"}, {"bottleneck"}, {"diff", "--chain", "reader-1"}} {
		if code, out := lctlRun(append(args, "--chain", "reader-1")...); code != 0 {
			t.Errorf("lctl %v --chain: exit %d\n%.500s", args, code, out)
		}
	}
	// Asked for all of it in one answer, the tracer says how to page.
	if _, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "reader-1"}); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "page_size") {
		t.Fatalf("GetChain of all of it: %v", err)
	}
	// Small runs are answered whole as before.
	if _, err := alice.StartRun(ctx, &xctv1.StartRunRequest{RunId: "reader-2", Goal: "read", Model: "func:reader", MaxSteps: 3}); err != nil {
		t.Fatal(err)
	}
	watchToEnd(ctx, t, dave, "reader-2")
	got, err = dave.GetRun(ctx, &xctv1.GetRunRequest{RunId: "reader-2"})
	if err != nil || len(got.GetRun().GetSteps()) != 3 {
		t.Fatalf("a small run: %d steps, %v", len(got.GetRun().GetSteps()), err)
	}
	for _, s := range got.GetRun().GetSteps() {
		if !strings.Contains(fmt.Sprint(s.GetResponse().GetSuccess().GetResult().AsInterface()), big) {
			t.Fatalf("a small run's step %d is not whole", s.GetNumber())
		}
	}
}

// TestAttackMaxRunsPerReplica: --max-runs bounded one principal's runs in
// progress per orchestrator, so with two replicas alice held twice the
// limit of runs waiting for approvals (each holding a consumer on the
// approvals' stream that everyone's waits share): on main, with a limit
// of 3, alice started 3 runs on each of two orchestrators sharing one
// NATS. Now the count is the cluster's (a KV record per principal, every
// change a compare-and-set): 3 in all, concurrent starts on both
// replicas included; a run that ends (cancelled on one replica) frees its
// place on the other; another principal is not counted with her.
func TestAttackMaxRunsPerReplica(t *testing.T) {
	t.Parallel()
	const limit = 3
	ns := testutil.RunJetStream(t)
	gate := make(chan struct{})
	close(gate)
	opts := func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: new(atomic.Int64)}}
		cfg.Orchestrator.MaxRuns = limit
	}
	a := startBindClusterOn(t, ns, withProposer("gate", gateModel{gate: gate}), opts)
	b := startReplicaOn(t, ns, withProposer("gate", gateModel{gate: gate}), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	aliceA, aliceB := a.orchestratorAs(t, "alice"), b.orchestratorAs(t, "alice")
	start := func(orch xctv1.OrchestratorServiceClient, id string) error {
		_, err := orch.StartRun(ctx, &xctv1.StartRunRequest{RunId: id, Goal: "deploy", Model: "func:gate"})
		return err
	}
	refused := func(err error, what string) {
		t.Helper()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "in this cluster") || !strings.Contains(err.Error(), "--max-runs") {
			t.Fatalf("%s: %v; want RESOURCE_EXHAUSTED, alice's runs in this cluster past --max-runs", what, err)
		}
	}
	// A crash left alice counted for three runs that are gone (no owner
	// key): they are dropped when she reaches the limit.
	admin, err := nats.Connect(a.natsURL, testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	quota, err := ajs.KeyValue(ctx, orchestrator.QuotaBucket)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("alice"))
	stale := `{"principal": "alice", "runs": {"gone-1": "2026-11-26T00:00:00Z", "gone-2": "2026-11-26T00:00:00Z", "gone-3": "2026-11-26T00:00:00Z"}}`
	if _, err := quota.Put(ctx, "p."+hex.EncodeToString(sum[:20]), []byte(stale)); err != nil {
		t.Fatal(err)
	}

	// Two on one replica, one on the other: the limit is reached on both.
	for _, r := range []struct {
		orch xctv1.OrchestratorServiceClient
		id   string
	}{{aliceA, "alice-a1"}, {aliceA, "alice-a2"}, {aliceB, "alice-b1"}} {
		if err := start(r.orch, r.id); err != nil {
			t.Fatalf("start %s: %v", r.id, err)
		}
	}
	refused(start(aliceB, "alice-b2"), "a second run on the replica with one")
	refused(start(aliceA, "alice-a3"), "a third run on the replica with two")

	// One of alice's ends (cancelled where it runs): the other replica
	// takes a new one, and then no more.
	if _, err := aliceA.CancelRun(ctx, &xctv1.CancelRunRequest{RunId: "alice-a1", Reason: "enough"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error { return start(aliceB, "alice-b3") })
	refused(start(aliceA, "alice-a4"), "past the limit again")

	// Four starts of dev's on each replica at once: exactly three are
	// taken (dev is counted alone, not with alice).
	devA, devB := a.orchestratorAs(t, "dev"), b.orchestratorAs(t, "dev")
	type result struct {
		id  string
		err error
	}
	results := make(chan result, 8)
	for i := range 8 {
		orch := devA
		if i%2 == 1 {
			orch = devB
		}
		id := fmt.Sprintf("dev-%d", i)
		go func() { results <- result{id, start(orch, id)} }()
	}
	var started []string
	for range 8 {
		r := <-results
		switch {
		case r.err == nil:
			started = append(started, r.id)
		case status.Code(r.err) != codes.ResourceExhausted || !strings.Contains(r.err.Error(), "--max-runs"):
			t.Fatalf("start %s: %v; want RESOURCE_EXHAUSTED naming --max-runs", r.id, r.err)
		}
	}
	if len(started) != limit {
		t.Fatalf("dev started %d runs at once across two replicas (%v), want %d", len(started), started, limit)
	}
}

// TestAttackDebuggerSessionGoesToAnotherPort: bob signs in to the
// debugger (plaintext, on 127.0.0.1) with his own link and later opens a
// page of another server on 127.0.0.1 (another user's, or a local dev
// server's; any program may listen on a loopback port). Cookies do not
// separate ports and SameSite sees one site: on main his browser sent the
// session cookie (Path=/) with that request, and the other server used it
// to approve alice's deploy as bob. Now the session cookie has a path of
// its own (/s/<random>/, where the debugger is served for the session)
// and is accepted nowhere else; what reaches the other port (the sign-in
// hint) authenticates nothing, and bob's own approval in the debugger
// still works.
func TestAttackDebuggerSessionGoesToAnotherPort(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	close(gate)
	var deployed atomic.Int64
	c := startBindCluster(t, withProposer("gate", gateModel{gate: gate}), func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
		cfg.Tracer.HTTPListen = "127.0.0.1:0"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const runID = "run-for-bob"
	if _, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{RunId: runID, Goal: "deploy", Model: "func:gate"}); err != nil {
		t.Fatal(err)
	}
	bob := c.validatorAs(t, "bob")
	pending := func() int {
		l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: runID})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.GetApprovals())
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := pending(); n != 1 {
			return fmt.Errorf("%d pending approvals", n)
		}
		return nil
	})
	tracerHost := c.app.Tracer.HTTPAddr()
	base := "http://" + tracerHost

	b := browser.New(t, 2*time.Minute)
	own, _ := debuggerLink(t, ctx, base, c.creds.Token(t, "bob"), runID)
	b.Do(t, "bob opens his link", chromedp.Navigate(own))
	b.Until(t, "the sign-in page", `!!document.querySelector('#continue')`)
	b.Do(t, "bob continues", chromedp.Click(chromedp.CSS("#continue")))
	b.Until(t, "bob on the chain", `location.hash.split('?')[0] === '#/chain/`+runID+`' && document.readyState === 'complete'`)
	home := browser.Eval[string](t, b, `location.pathname`)

	// The other server on 127.0.0.1 keeps what the browser sends it.
	var mu sync.Mutex
	var got []*http.Cookie
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Cookies()...)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><title>done</title>`))
	}))
	defer evil.Close()
	if !strings.HasPrefix(evil.URL, "http://127.0.0.1:") {
		t.Fatalf("the other server is at %s", evil.URL)
	}
	b.Do(t, "bob's browser on the other port", chromedp.Navigate(evil.URL+"/"))
	b.Until(t, "the other page", `document.title === 'done'`)

	// It tries what it got on the debugger's API, at the paths it may
	// guess, as the debugger's own page would call it.
	mu.Lock()
	stolen := slices.Clone(got)
	mu.Unlock()
	decide := `{"run_id": "` + runID + `", "step": 1, "approve": true, "reason": "stolen"}`
	for _, path := range []string{"/api/approvals/decide", "/s/x/api/approvals/decide"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(decide))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-XCT-CSRF", "1")
		for _, ck := range stolen {
			req.AddCookie(ck)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("the cookies bob's browser sent another port (%d) decided with %s: %s", len(stolen), path, resp.Status)
		}
	}
	if n := pending(); n != 1 {
		t.Fatalf("after the other server's tries, %d approvals are pending: the one bob never gave was decided", n)
	}
	for _, ck := range stolen {
		if ck.Name == "xct_debugger_session" {
			t.Errorf("bob's session cookie went to another port (path %s)", home)
		}
	}

	// bob's own approval, with his page's Approve button.
	b.Do(t, "back to bob's debugger", chromedp.Navigate(base+home+"#/approvals"))
	b.Until(t, "the debugger", `location.host === '`+tracerHost+`' && document.readyState === 'complete'`)
	approveInPage(t, b, runID, "reviewed")
	l, err := bob.ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: runID, All: true})
	if err != nil || len(l.GetApprovals()) != 1 {
		t.Fatalf("approvals: %v %v", l, err)
	}
	if a := l.GetApprovals()[0]; a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || a.GetDecidedBy() != "bob" || a.GetReason() != "reviewed" {
		t.Fatalf("bob's approval in his browser: %s by %q (%q; %s)", a.GetState(), a.GetDecidedBy(), a.GetReason(), browser.Eval[string](t, b, `document.body.innerText`))
	}
	if run := c.waitRun(t, "bob", runID); deployed.Load() != 1 || run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("after bob's approval: %d deploys, run %s", deployed.Load(), run.GetStatus())
	}
}

// TestAttackConcurrentRollbacksOnTwoReplicas: a rollback waits for a
// human to approve an undo (config-approval.yaml: restoring config/ is a
// write there) on one orchestrator; meanwhile an operator asks another
// replica, sharing the NATS and the workspace, to roll the same run back.
// One rollback of a run at a time was a check of one process's runs only:
// the second replica started its own rollback of the same steps beside
// the first (on main). Now a rollback holds the run's owner key while it
// runs, as a run does; the second is refused with FAILED_PRECONDITION
// and records nothing, and once the first is done a rollback on the other
// replica is taken.
func TestAttackConcurrentRollbacksOnTwoReplicas(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	policy := withTools(t, "", shippedPolicy(t, "config-approval.yaml"))
	a := startBindClusterOn(t, ns, policy)
	b := startReplicaOn(t, ns, policy, func(cfg *app.Config, _ *app.Options) { cfg.Executor.Workspace = a.workspace })
	if err := os.MkdirAll(filepath.Join(a.workspace, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.workspace, "config", "app.yaml"), []byte("mode: safe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.writeScript(t, "a.yaml", script(
		step("fs.write", `{path: config/app.yaml, content: "mode: fast\n"}`),
		step("fs.write", `{path: notes.txt, content: "switched to fast\n"}`),
	))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := a.orchestratorAs(t, "dev").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	waitApproval(t, a, "bob", id)
	if _, err := a.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true}); err != nil {
		t.Fatal(err)
	}
	a.waitRun(t, "dev", id)

	done := rollbackAsync(t, a, "dev", id)
	undo := waitApproval(t, a, "bob", id)
	if undo.GetProposal().GetTool() != "xct.undo" {
		t.Fatalf("the undo's approval: %v", undo)
	}
	tracer := lctlv1.NewTracerServiceClient(a.creds.Dial(t, a.app.Addr(app.TargetTracer), "dave"))
	rollbacks := func() int {
		t.Helper()
		r, err := b.orchestratorAs(t, "dave").GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		testutil.Eventually(t, 20*time.Second, func() error {
			c, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: id})
			if err != nil {
				return err
			}
			if got := uint64(len(c.GetEvents())); got < r.GetRun().GetLastSeq() {
				return fmt.Errorf("the tracer has %d events of %d", got, r.GetRun().GetLastSeq())
			}
			n = 0
			for _, e := range c.GetEvents() {
				if e.GetType() == "rollback_started" {
					n++
				}
			}
			return nil
		})
		return n
	}
	// Whatever happens, the first rollback's undo is decided before the
	// cluster stops (a rollback waiting for a human outlives its caller).
	decided := false
	decide := func() {
		if decided {
			return
		}
		decided = true
		if _, err := a.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: fmt.Sprint(undo.GetStep()), Approve: true, Reason: "ok"}); err != nil {
			t.Error(err)
		}
	}
	defer decide()
	// And any other undo waiting for a human (a second rollback's, on
	// main) is denied, so that the clusters stop.
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		bob := a.validatorAs(t, "bob")
		l, err := bob.ListApprovals(cctx, &xctv1.ListApprovalsRequest{RunId: id})
		if err != nil {
			return
		}
		for _, ap := range l.GetApprovals() {
			_, _ = bob.DecideApproval(cctx, &xctv1.DecideApprovalRequest{RunId: id, Step: fmt.Sprint(ap.GetStep()), Approve: false, Reason: "test cleanup"})
		}
	})
	// The other replica, while the first rollback waits.
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = b.orchestratorAs(t, "carol").RollbackRun(rctx, &xctv1.RollbackRunRequest{RunId: id})
	rcancel()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "another orchestrator") {
		t.Errorf("a second rollback on the other replica while the first runs: %v", err)
	}
	if n := rollbacks(); n != 1 {
		t.Errorf("the chain has %d rollbacks started, want the first only", n)
	}
	// The first goes on and ends.
	decide()
	if err := <-done; err != nil {
		t.Fatalf("the first rollback: %v", err)
	}
	if got, _ := readWS(t, a.workspace, "config/app.yaml"); got != "mode: safe\n" {
		t.Fatalf("config/app.yaml after the rollback: %q", got)
	}
	// Then the other replica may roll back (nothing is left to undo).
	testutil.Eventually(t, 20*time.Second, func() error {
		_, err := b.orchestratorAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id})
		return err
	})
}
