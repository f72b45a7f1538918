package attack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
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
	const steps = 72
	var deployed atomic.Int64
	c := startBindCluster(t, withProposer("reader", readerModel{steps: steps}), func(_ *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: &deployed}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
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
	// While the run waits for the deploy's approval: GetRun.
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
	const limit = 3
	ns := testutil.RunJetStream(t)
	gate := make(chan struct{})
	close(gate)
	opts := func(cfg *app.Config, o *app.Options) {
		o.ExtraTools = []executor.Tool{countingDeploy{n: new(atomic.Int64)}}
		cfg.Orchestrator.MaxRuns = limit
	}
	a := startBindClusterOn(t, ns, withProposer("gate", gateModel{gate: gate}), opts)
	b := startBindClusterOn(t, ns, withProposer("gate", gateModel{gate: gate}), opts)
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
