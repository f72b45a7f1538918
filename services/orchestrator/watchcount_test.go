package orchestrator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/testutil"
)

// watchReplica is an orchestrator's watch counting alone: its instance,
// its open watches, the cluster's quota bucket, its heartbeat stopped by
// stop (deleting the key, as a graceful stop does) or by crash (leaving
// it to go stale, as a dead process does).
type watchReplica struct {
	s     *Service
	stop  func()
	crash func()
}

func startWatchReplica(t *testing.T, kv jetstream.KeyValue, instance string, lease time.Duration) *watchReplica {
	t.Helper()
	s := &Service{quota: kv, instance: instance, watches: newWatches(nil), log: testLogger(), watchLeaseForTest: lease}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchHeartbeats(ctx)
	}()
	r := &watchReplica{s: s}
	r.stop = func() {
		cancel()
		<-done
	}
	r.crash = func() {
		// The heartbeat goroutine deletes its key when stopped; a crash
		// does not. Stop it, then write the key back as it was last.
		r.stop()
		if _, err := kv.Put(context.Background(), instanceKey(instance), []byte(instance)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(r.stop)
	return r
}

// open takes a place for a watch served by r.
func (r *watchReplica) open(principal string, limit int) (string, error) {
	id := newWatchID()
	r.s.watches.serve(id, true)
	err := r.s.takeWatch(context.Background(), principal, id, limit)
	if err != nil {
		r.s.watches.serve(id, false)
	}
	return id, err
}

// TestWatchPlacesOfDeadReplicasComeBack: a principal's open watches are
// counted across replicas; the places held by a replica that stopped
// (its heartbeat deleted) come back at once, those of one that died (its
// heartbeat stale for a lease by the NATS server's clock) once the lease
// has passed, and a replica's own place whose removal failed (it no
// longer serves the watch) comes back at the limit. Nothing is pruned
// while the principal is below the limit.
func TestWatchPlacesOfDeadReplicasComeBack(t *testing.T) {
	t.Parallel()
	nc := connect(t, testutil.RunJetStream(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), QuotaBucket)
	if err != nil {
		t.Fatal(err)
	}
	const lease, limit = 5 * time.Second, 2
	a := startWatchReplica(t, kv, "orch-a", lease)
	exhausted := func(err error, what string) {
		t.Helper()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED", what, err)
		}
	}
	count := func() int {
		t.Helper()
		rec, _, err := getRecord[watchRecord](context.Background(), a.s.quota, watchKey("dave"), "dave")
		if err != nil {
			t.Fatal(err)
		}
		return len(rec.Watches)
	}

	// Stopped: B's two places come back at once.
	b := startWatchReplica(t, kv, "orch-b", lease)
	for i := range limit {
		if _, err := b.open("dave", limit); err != nil {
			t.Fatalf("watch %d on B: %v", i+1, err)
		}
	}
	_, err = a.open("dave", limit)
	exhausted(err, "a third watch, on A")
	b.stop()
	if _, err := a.open("dave", limit); err != nil {
		t.Fatalf("a watch on A once B stopped: %v", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("dave counted for %d watches, want A's one", n)
	}

	// Crashed: C's place comes back once its heartbeat is a lease old.
	c := startWatchReplica(t, kv, "orch-c", lease)
	if _, err := c.open("dave", limit); err != nil {
		t.Fatalf("a watch on C: %v", err)
	}
	c.crash()
	_, err = a.open("dave", limit)
	exhausted(err, "a watch on A while C's heartbeat is fresh")
	testutil.Eventually(t, 30*time.Second, func() error {
		_, err := a.open("dave", limit)
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
		return err
	})
	if n := count(); n != 2 {
		t.Fatalf("dave counted for %d watches, want A's two", n)
	}

	// A's own place whose removal failed: A no longer serves it.
	rec, _, err := getRecord[watchRecord](context.Background(), a.s.quota, watchKey("dave"), "dave")
	if err != nil {
		t.Fatal(err)
	}
	for id := range rec.Watches {
		a.s.watches.serve(id, false) // as if giveWatch had failed
		break
	}
	if _, err := a.open("dave", limit); err != nil {
		t.Fatalf("a watch on A in place of its own leftover: %v", err)
	}
	if n := count(); n != 2 {
		t.Fatalf("dave counted for %d watches, want 2", n)
	}
	// Given back normally.
	rec, _, _ = getRecord[watchRecord](context.Background(), a.s.quota, watchKey("dave"), "dave")
	for id := range rec.Watches {
		a.s.giveWatch("dave", id)
	}
	if n := count(); n != 0 {
		t.Fatalf("after giving every watch back: %d counted", n)
	}
	// Another principal is counted apart.
	for i := range limit {
		if _, err := a.open(fmt.Sprintf("erin-%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
}
