package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Issue 12, session 11: JetStream writes that time out but were stored
// (a stream leader change, a connection dropped after the write). The
// orchestrator's NATS connection goes through testutil.AckLoser, which
// loses the acknowledgement of one chosen write.

// launchLossy starts an orchestrator whose NATS connection goes through
// an AckLoser, with short append and lease bounds.
func (f *fixture) launchLossy(name string, model Proposer, tune ...func(*Config)) (*Service, *testutil.AckLoser) {
	f.t.Helper()
	loser := testutil.NewAckLoser(f.t, strings.TrimPrefix(f.ns.ClientURL(), "nats://"))
	nc, err := nats.Connect(loser.URL(), testutil.Admin())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	cfg := Config{RunLease: time.Second, DrainTimeout: 5 * time.Second, Instance: name, CallTimeout: time.Minute,
		AppendTimeout: 500 * time.Millisecond, TakeoverTimeout: 2 * time.Second, ValidatorAddr: f.valAddr, ExecutorAddr: f.execAddr}
	for _, t := range tune {
		t(&cfg)
	}
	s, err := New(cfg, nc, testLogger().With("instance", name), WithProposer("tester", model),
		WithDialOptions(grpcx.WithToken(f.creds.Token(f.t, grpcxtest.Service))))
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	if f.owners == nil {
		if f.owners, err = f.events.JetStream().KeyValue(ctx, OwnersBucket); err != nil {
			f.t.Fatal(err)
		}
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s, loser
}

// StartRun's run_started is stored but its acknowledgement is lost: the
// append times out and StartRun fails (UNAVAILABLE). The client retries
// with the same run id, as told. Before the fix, the failed start deleted
// the run's owner key although its chain had begun: the retry was told the
// run exists (ALREADY_EXISTS), and no orchestrator ever ran it (no key, no
// takeover): a run RUNNING forever with nothing running it. Now the key of
// a start whose append may have landed is left to expire, and a takeover
// finds the chain and runs the run to its end.
func TestStartRunWhoseStartLandedUnseenRuns(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	s, loser := f.launchLossy("orch-a", model)
	loser.LoseNext(func(subject string, body []byte) bool {
		return strings.HasPrefix(subject, "lctl.chain.") && bytes.Contains(body, []byte(`"type":"`+lctl.TypeRunStarted+`"`))
	})
	const id = "run-acklost-start"
	req := &xctv1.StartRunRequest{RunId: id, Goal: "count", Model: "func:tester", Principal: "alice"}
	start := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), req)
		return err
	}
	err := start()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("StartRun with its append's answer lost: %v, want UNAVAILABLE", err)
	}
	select {
	case <-loser.Lost:
	default:
		t.Fatal("no answer was lost")
	}
	// The client retries as told: the run exists, or it starts now.
	if err := start(); err != nil && status.Code(err) != codes.AlreadyExists {
		t.Fatalf("retried StartRun: %v", err)
	}
	events := f.waitEnd(id)
	f.checkChain(id, events, 1)
	if n := len(only(events, lctl.TypeRunStarted)); n != 1 {
		t.Fatalf("%d run_started:\n%s", n, describe(events))
	}
	if f.count.count(1) != 1 {
		t.Fatalf("step 1 acted %d times", f.count.count(1))
	}
}

// An event of a step is stored but its append's acknowledgement is lost:
// the run stops there (it cannot know what its chain holds), its owner key
// expires, and a takeover (here by the same orchestrator) reads the chain
// and goes on from what is stored. Whichever event it was, every step acts
// once, its outcome is on the chain once, and the run ends done.
func TestAppendLandedUnseenMidStep(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{lctl.TypeStepStart, lctl.TypeVerdict, lctl.TypeToolCall, lctl.TypeStepEnd} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			model := newGatedModel(step("test.count", 1), step("test.count", 2))
			f := newFixture(t, model)
			s, loser := f.launchLossy("orch-a", model)
			seen := 0
			loser.LoseNext(func(subject string, body []byte) bool {
				if !strings.HasPrefix(subject, "lctl.chain.") || !bytes.Contains(body, []byte(`"type":"`+typ+`"`)) {
					return false
				}
				seen++
				return seen == 2 // step 2's
			})
			id := f.start(s)
			events := f.waitEnd(id)
			select {
			case <-loser.Lost:
			default:
				t.Fatalf("no acknowledgement was lost:\n%s", describe(events))
			}
			if len(only(events, TypeRunResumed)) == 0 {
				t.Fatalf("no takeover after the lost acknowledgement:\n%s", describe(events))
			}
			f.checkChain(id, events, 2)
			for n := 1; n <= 2; n++ {
				if c := f.count.count(float64(n)); c != 1 {
					t.Fatalf("step %d acted %d times:\n%s", n, c, describe(events))
				}
			}
		})
	}
}

// A client times out and retries StartRun on the same orchestrator while
// the first call is still running: its claim of the run's owner key was
// stored, but the acknowledgement is lost, so the first call waits and
// then fails (it removes its claim: no run). Before the fix the retry was
// told ALREADY_EXISTS (the run id was in the active set) for a run that
// never started: a client that took that for "started" waited for a run
// that did not exist. Now the retry is told UNAVAILABLE while a start is
// in progress here, and a client retrying as told gets the run started.
func TestStartRunRetriedWhileTheFirstIsStillRunning(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	s, loser := f.launchLossy("orch-a", model)
	const id = "run-retried-while-starting"
	loser.LoseNext(func(subject string, _ []byte) bool { return subject == "$KV."+OwnersBucket+"."+id })
	req := &xctv1.StartRunRequest{RunId: id, Goal: "count", Model: "func:tester", Principal: "alice"}
	start := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), req)
		return err
	}
	first := make(chan error, 1)
	go func() { first <- start(2 * time.Second) }()
	select {
	case <-loser.Lost: // the first call's claim is stored, its answer lost
	case <-time.After(30 * time.Second):
		t.Fatal("the claim was not sent")
	}
	retry := start(30 * time.Second) // the client gave up on the first call
	if err := <-first; err == nil {
		t.Fatal("the first StartRun succeeded without its claim's answer")
	}
	if status.Code(retry) == codes.AlreadyExists {
		if _, err := f.events.LastSeq(context.Background(), id); err != nil {
			t.Fatalf("the retry was told the run exists (%v), but it has no chain: %v", retry, err)
		}
	}
	// The client goes on retrying as told until the run exists.
	testutil.Eventually(t, 30*time.Second, func() error {
		err := start(30 * time.Second)
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return err
		}
		return nil
	})
	events := f.waitEnd(id)
	f.checkChain(id, events, 1)
}

// The orchestrator that starts a run is paused (its writes held back, as a
// SIGSTOPped process's are) after it claimed the run and while its
// run_started is on its way. Another replica sees the claim unrenewed for
// a lease, takes it over, finds no chain (a start that failed) and deletes
// the key. Then the paused one goes on: its run_started lands, StartRun
// answers the run started, and its loop runs. Before the fix its next
// renewal found the key gone, took that for a takeover by another replica,
// and stopped the loop: a run that started, with no owner key, that no
// orchestrator would ever run. Now a run whose key was deleted while its
// loop ran here claims it again.
func TestStartRunPausedPastATakeoverStillRuns(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	proposing := model.gate(0)
	f := newFixture(t, model)
	a, loser := f.launchLossy("orch-a", model, func(c *Config) { c.AppendTimeout = time.Minute })
	f.orchestrator("orch-b", time.Second)
	const id = "run-paused-start"
	held, let := loser.HoldNext(func(subject string, body []byte) bool {
		return strings.HasPrefix(subject, "lctl.chain.") && bytes.Contains(body, []byte(`"type":"`+lctl.TypeRunStarted+`"`))
	})
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{RunId: id, Goal: "count", Model: "func:tester", Principal: "alice"})
		started <- err
	}()
	<-held
	// B takes the unrenewed claim over and, finding no chain, deletes it.
	testutil.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := f.owners.Get(ctx, id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("owner key still there: %w", err)
		}
		return nil
	})
	let() // A goes on: its run_started lands
	if err := <-started; err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	// The run that started must have an owner: A claims it again.
	testutil.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := f.owners.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("a started run without an owner key: %w", err)
		}
		if rec, _ := decodeOwner(e.Value()); rec.Owner == "" {
			return fmt.Errorf("owner record %s", e.Value())
		}
		return nil
	})
	close(proposing)
	events := f.waitEnd(id)
	f.checkChain(id, events, 1)
}

// A run_started that landed after its writer gave up (a publish held in a
// client's reconnect buffer is sent when it reconnects, past the append's
// deadline) and after a takeover had deleted the unrenewed claim: a run on
// the chain with no owner key. Before the fix, the client's StartRun
// retry claimed the key, found the chain, answered ALREADY_EXISTS and
// deleted the key again: the run stayed started and unowned. Now the
// retry, which holds the key, resumes the run.
func TestStartRunRetryResumesAnUnownedRun(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	a, _ := f.orchestrator("orch-a", time.Second)
	const id = "run-unowned"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := f.events.NewChainWriter(id)
	if err != nil {
		t.Fatal(err)
	}
	started := xctevent.RunStarted{RunID: id, Goal: "count", Model: "func:tester", Principal: "alice", Roles: []string{auth.RoleSubmitter}, MaxSteps: 10}
	if _, err := w.Append(ctx, started.Type(), agentOrchestrator, started.Data()); err != nil {
		t.Fatal(err)
	}
	_, err = a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{RunId: id, Goal: "count", Model: "func:tester", Principal: "alice"})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("StartRun of a run on the chain: %v, want ALREADY_EXISTS", err)
	}
	events := f.waitEnd(id)
	f.checkChain(id, events, 1)
}
