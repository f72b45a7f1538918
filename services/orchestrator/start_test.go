package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
)

// Finding 4: a StartRun retried after a start that failed halfway got
// ALREADY_EXISTS for a run that had no chain: the failed start had left
// its owner key behind. A retry now gets the run.
func TestStartRunRetryAfterAFailedStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newGatedModel())
	a, _ := f.orchestrator("orch-a", time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	startRun := func(s *Service, id string) error {
		_, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{RunId: id, Goal: "g", Model: "func:tester", Principal: "alice"})
		return err
	}
	done := func(id string) {
		t.Helper()
		events := f.waitEnd(id)
		if events[0].Type != lctl.TypeRunStarted || events[len(events)-1].Data["status"] != "done" {
			t.Fatalf("run %s:\n%s", id, describe(events))
		}
	}

	// This instance's own leftover (its claim landed, its run_started did
	// not): the retry takes the key over.
	if _, err := f.owners.Create(ctx, "run-own-leftover", encodeOwner(ownerRecord{Owner: "orch-a"})); err != nil {
		t.Fatal(err)
	}
	if err := startRun(a, "run-own-leftover"); err != nil {
		t.Fatalf("retry on the same instance: %v", err)
	}
	done("run-own-leftover")

	// Another instance's leftover: UNAVAILABLE naming it (retry), not
	// ALREADY_EXISTS; within a lease the key is cleared and the retry
	// starts the run.
	if _, err := f.owners.Create(ctx, "run-other-leftover", encodeOwner(ownerRecord{Owner: "orch-gone"})); err != nil {
		t.Fatal(err)
	}
	err := startRun(a, "run-other-leftover")
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "orch-gone") {
		t.Fatalf("start over another's leftover: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, func() error { return startRun(a, "run-other-leftover") })
	done("run-other-leftover")

	// A start whose run_started cannot be appended removes its own claim,
	// so the retry elsewhere succeeds.
	nc := connect(t, f.ns)
	broken, err := New(Config{ValidatorAddr: f.valAddr, ExecutorAddr: f.execAddr, RunLease: 30 * time.Millisecond, AppendTimeout: time.Nanosecond,
		Instance: "orch-broken"}, nc, testLogger(), WithProposer("tester", f.model),
		WithDialOptions(grpcx.WithToken(f.creds.Token(t, grpcxtest.Service))))
	if err != nil {
		t.Fatal(err)
	}
	if err := broken.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broken.Stop(context.Background()) })
	if err := startRun(broken, "run-failed-start"); status.Code(err) != codes.Unavailable {
		t.Fatalf("a start that cannot append: %v", err)
	}
	if _, err := f.owners.Get(ctx, "run-failed-start"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("owner key after a failed start: %v", err)
	}
	if err := startRun(a, "run-failed-start"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	done("run-failed-start")

	// A run that exists is still ALREADY_EXISTS.
	if err := startRun(a, "run-own-leftover"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("start an ended run again: %v", fmt.Sprint(err))
	}
}

// blackHole accepts TCP connections and never answers: a peer whose
// process is paused, or behind a partition that drops packets.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// Finding 5 (and the cached catalog of finding 6): a takeover whose calls
// hang (here the executor does not answer at all) used to stall for the
// whole call timeout (2 minutes by default). Each call of a takeover is now
// bounded by --takeover-timeout, and the tool catalog comes from the
// XCT_TOOLS bucket when the executor cannot list it: the run is resumed
// within seconds and finishes.
func TestTakeoverBoundedWhileTheExecutorHangs(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	gate := model.gate(1) // A is asked for step 2 and hangs there
	a, anc := f.orchestrator("orch-a", time.Second)
	id := f.start(a)
	if turn := <-model.asked; turn != 1 {
		t.Fatalf("asked for turn %d", turn)
	}
	anc.Close() // A is gone for the cluster
	defer close(gate)

	nc := connect(t, f.ns)
	b, err := New(Config{ValidatorAddr: f.valAddr, ExecutorAddr: blackHole(t), RunLease: time.Second, Instance: "orch-b",
		CallTimeout: 2 * time.Minute, TakeoverTimeout: 300 * time.Millisecond}, nc, testLogger(), WithProposer("tester", model),
		WithDialOptions(grpcx.WithToken(f.creds.Token(t, grpcxtest.Service))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	started := time.Now()
	events := f.waitEnd(id)
	if res := only(events, TypeRunResumed); len(res) != 1 || str(res[0].Data, "instance") != "orch-b" {
		t.Fatalf("resumed:\n%s", describe(events))
	}
	if last := events[len(events)-1]; last.Data["status"] != "done" {
		t.Fatalf("run ended %v", last.Data)
	}
	t.Logf("taken over and finished %v after A was cut off", time.Since(started))
}
