package attack

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/executor"
)

// TestAttackWatchesPerReplica (session 15, ops15): --max-watches bounded
// one principal's open WatchRun streams per orchestrator, so with R
// replicas dave could hold R times the limit, each a consumer on LCTL
// when the runs differ (docs/kubernetes.md had the arithmetic: 64 x 10 of
// the stream's 1000). On main, with a limit of 3 and two replicas on one
// NATS, dave's fourth watch (on the other replica) was served. Now the
// count is the cluster's (a record per principal in the quota bucket,
// every change a compare-and-set): the fourth is refused on either
// replica, bob is not counted with him, and a watch that ends gives its
// place back to a watch on the other replica.
func TestAttackWatchesPerReplica(t *testing.T) {
	t.Parallel()
	const limit = 3
	ns := testutil.RunJetStream(t)
	opts := func(cfg *app.Config, o *app.Options) {
		cfg.Orchestrator.MaxWatches = limit
		cfg.Security.RateLimit = 0 // the watch cap, not the call rate limit, is under test
		o.ExtraTools = []executor.Tool{deployTool{}}
	}
	a := startBindClusterOn(t, ns, opts)
	b := startReplicaOn(t, ns, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// A run that stays open: its step waits for a human.
	a.writeScript(t, "deploy.yaml", "steps:\n  - next_step: {tool: test.deploy, arguments: {target: prod}}\n  - done: true\n")
	started, err := a.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "scripted:deploy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := started.GetRun().GetRunId()
	watch := func(ctx context.Context, orch xctv1.OrchestratorServiceClient) error {
		stream, err := orch.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
		if err != nil {
			return err
		}
		_, err = stream.Recv() // run_started: the stream is serving
		return err
	}
	refused := func(err error, what string) {
		t.Helper()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "in this cluster") || !strings.Contains(err.Error(), "--max-watches") {
			t.Fatalf("%s: %v; want RESOURCE_EXHAUSTED, dave's watches in this cluster past --max-watches", what, err)
		}
	}
	daveA, daveB := a.orchestratorAs(t, "dave"), b.orchestratorAs(t, "dave")
	first, closeFirst := context.WithCancel(ctx)
	defer closeFirst()
	if err := watch(first, daveA); err != nil {
		t.Fatalf("dave's first watch, on A: %v", err)
	}
	if err := watch(ctx, daveA); err != nil {
		t.Fatalf("dave's second watch, on A: %v", err)
	}
	if err := watch(ctx, daveB); err != nil {
		t.Fatalf("dave's third watch, on B: %v", err)
	}
	refused(watch(ctx, daveB), "dave's fourth watch, on B")
	refused(watch(ctx, daveA), "dave's fourth watch, on A")
	if err := watch(ctx, b.orchestratorAs(t, "bob")); err != nil {
		t.Fatalf("bob's watch while dave is at the limit: %v", err)
	}
	// The first watch ends on A: its place is B's to give.
	closeFirst()
	testutil.Eventually(t, 30*time.Second, func() error {
		err := watch(ctx, daveB)
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a watch on B after one on A closed: %v", err)
		}
		return err
	})
	refused(watch(ctx, daveA), "dave's watch past the limit again")
}
