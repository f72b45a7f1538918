package attack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/executor"
)

// Attack 5 (issue #11): about 500 WatchRun streams exhausted the NATS
// consumer limit and other users' runs and watches failed. The watchers
// of one run now share one consumer, and a principal's open watches are
// capped (RESOURCE_EXHAUSTED, saying so).
func TestAttackManyWatches(t *testing.T) {
	t.Parallel()
	const watches, limit = 600, 650
	c := startBindCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Orchestrator.MaxWatches = limit
		cfg.Security.RateLimit = 0 // the watch cap, not the call rate limit, is under test
		o.ExtraTools = []executor.Tool{deployTool{}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// A run that stays open: its step waits for a human.
	c.writeScript(t, "deploy.yaml", "steps:\n  - next_step: {tool: test.deploy, arguments: {target: prod}}\n  - done: true\n")
	started, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "deploy", Model: "scripted:deploy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := started.GetRun().GetRunId()

	dave := c.orchestratorAs(t, "dave")
	wctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	open := func() error {
		stream, err := dave.WatchRun(wctx, &xctv1.WatchRunRequest{RunId: id})
		if err != nil {
			return err
		}
		_, err = stream.Recv() // run_started: the stream is serving
		return err
	}
	for i := range watches {
		if err := open(); err != nil {
			t.Fatalf("watch %d: %v", i+1, err)
		}
	}
	// One consumer for the run, whatever the number of watchers.
	nc, err := nats.Connect(c.natsURL, testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, eventlog.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d watches of one run: %d consumers on %s", watches, info.State.Consumers, eventlog.StreamName)
	if info.State.Consumers > 4 {
		t.Fatalf("%d watches hold %d consumers on %s", watches, info.State.Consumers, eventlog.StreamName)
	}

	// Other users' runs and watches work meanwhile.
	c.writeScript(t, "write.yaml", "steps:\n  - next_step: {tool: fs.write, arguments: {path: b.txt, content: b}}\n  - done: true\n")
	other := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "write", Model: "scripted:write.yaml"})
	if other.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("another run while %d watches are open: %s %s", watches, other.GetStatus(), other.GetMessage())
	}

	// Past the cap, dave is refused, clearly; others are not.
	for i := watches; i < limit; i++ {
		if err := open(); err != nil {
			t.Fatalf("watch %d: %v", i+1, err)
		}
	}
	err = open()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limit per principal") {
		t.Fatalf("watch %d: %v", limit+1, err)
	}
	bobStream, err := c.orchestratorAs(t, "bob").WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bobStream.Recv(); err != nil {
		t.Fatalf("bob's watch while dave is at the cap: %v", err)
	}
	// Closing watches gives the cap back.
	stopWatching()
	_, err = c.orchestratorAs(t, "alice").CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "end"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		s, err := dave.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a watch after dave closed his: %v", err)
		}
		return err
	})
}
