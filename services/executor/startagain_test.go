package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/provision"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
)

// Session 18 (ops18), issue 17: session 17 noted that a start failing
// after OpenStepStore (here: the policy epochs bucket missing, which
// fails the start as a NATS dependency, so internal/app starts it again)
// left its step store's KV publisher behind, one per attempt. The
// publisher holds the connection and nothing else: no subscription, no
// goroutine, no server-side state; the next attempt's store replaces it.
// This keeps it so: ten failed starts leave the connection's
// subscriptions as they were, and the start that finds the bucket works.
func TestFailedStartsLeaveNothingOnNATS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := testutil.RunJetStream(t)
	js, err := jetstream.New(testutil.Connect(t, ns))
	must(t, err)
	must(t, js.DeleteKeyValue(ctx, verdict.PolicyBucket))
	nc := testutil.Connect(t, ns)
	cid, err := nc.GetClientID()
	must(t, err)
	subs := func() uint32 {
		t.Helper()
		cz, err := ns.Connz(&server.ConnzOptions{CID: cid, Subscriptions: true})
		must(t, err)
		if len(cz.Conns) != 1 {
			t.Fatalf("connection %d: %d found", cid, len(cz.Conns))
		}
		return cz.Conns[0].NumSubs
	}
	s, err := New(Config{Workspace: t.TempDir()}, nc, nil)
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	var before uint32
	for i := range 10 {
		if err := s.Start(ctx); !errors.Is(err, jsguard.ErrMissing) {
			t.Fatalf("start %d without the policy epochs bucket: %v", i+1, err)
		}
		if i == 0 {
			// The first request made the client's one subscription
			// for the answers of all its requests.
			before = subs()
			continue
		}
		if n := subs(); n != before {
			t.Fatalf("after %d failed starts the connection has %d subscriptions, %d before", i+1, n, before)
		}
	}
	testutil.Provision(t, ns.ClientURL(), provision.Defaults())
	must(t, s.Start(ctx))
	if _, err := s.store(); err != nil {
		t.Fatalf("the step store after the start: %v", err)
	}
}
