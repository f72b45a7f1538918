package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/storehealth"
	"github.com/xct-dev/xct/internal/testutil"
)

// flakyStart is a service whose first fails starts fail with err, as a
// tracer's start does when a JetStream request goes unanswered during a
// leader election (its consumer's creation waits out the start's deadline).
type flakyStart struct {
	fails  int32
	err    error
	starts atomic.Int32
}

func (f *flakyStart) Register(*grpc.Server)      {}
func (f *flakyStart) Stop(context.Context) error { return nil }
func (f *flakyStart) Start(context.Context) error {
	if f.starts.Add(1) <= f.fails {
		return f.err
	}
	return nil
}

// Session 16 (chaos16), issue 12: chaos seed 594700's r3 tracer said it
// listened (restarted after a SIGTERM while a NATS node restarted), then
// its start, made once JetStream answered, failed when a request went
// unanswered during a leader change, and the process exited: nothing
// served the tracer's address at the end (lost=106). A restartable
// service whose start fails on NATS is now started again, the process
// NOT_SERVING with the reason meanwhile; any other failed start still
// ends the process.
func TestAStartThatFailedOnNATSIsTriedAgain(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	unanswered := fmt.Errorf("tracer: create consumer XCT_TRACER of LCTL: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name, target string
		err          error
		retried      bool
	}{
		{"tracer, NATS unanswered", TargetTracer, unanswered, true},
		{"tracer, its own files", TargetTracer, fmt.Errorf("tracer: load store: open chain file: permission denied"), false},
		// Session 17 (ops17): every target, not only the tracer (on
		// main the executor's, the validator's and the orchestrator's
		// process ended after such a start).
		{"executor, NATS unanswered", TargetExecutor, unanswered, true},
		{"validator, NATS unanswered", TargetValidator, unanswered, true},
		{"orchestrator, NATS unanswered", TargetOrchestrator, unanswered, true},
		{"executor, its workspace", TargetExecutor, fmt.Errorf("executor: workspace: bad file descriptor"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(ns.ClientURL(), testutil.Admin())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			a := &App{log: log, fatal: make(chan error, 1), stopped: make(chan struct{}), byTarget: map[string]*nats.Conn{}, retry: StartRetry{Timeout: time.Second}}
			a.store = storehealth.New(log, js, a.storeChanged)
			svc := &flakyStart{fails: 2, err: tc.err}
			a.modules = []*module{{target: tc.target, svc: svc, srv: grpcx.NewServer(tc.target, log), errc: make(chan error, 1)}}
			a.waitingFor(fmt.Errorf("waiting for NATS"))
			done := make(chan struct{})
			go func() { defer close(done); a.startWhenReady(ns.ClientURL(), []*nats.Conn{nc}) }()
			t.Cleanup(func() { close(a.stopped); <-done; a.store.Close() })
			if !tc.retried {
				select {
				case err := <-a.fatal:
					if !strings.Contains(err.Error(), tc.err.Error()) {
						t.Fatalf("the process ends with %v, want the start's failure", err)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("a failed start of %s (%v) did not end the process", tc.target, tc.err)
				}
				if n := svc.starts.Load(); n != 1 {
					t.Fatalf("%d starts, want 1", n)
				}
				return
			}
			select {
			case err := <-a.fatal:
				t.Fatalf("the process ends after a start that failed on NATS: %v", err)
			case <-done:
			}
			if n := svc.starts.Load(); n != 3 {
				t.Fatalf("%d starts, want 3 (two failed)", n)
			}
			if err := a.notReady(); err != nil || !a.modules[0].started {
				t.Fatalf("after the third start: not ready (%v), started %v", err, a.modules[0].started)
			}
		})
	}
}
