// Package orchestrator owns XCT's loop (protocol §5): it asks a model for one
// decision, has the validator judge it, has the executor run what was
// allowed, and records every transition on the run's LCTL chain, of which it
// is the only writer. It keeps no state the chain cannot rebuild.
package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/lctl"
)

// Service is the orchestrator.
type Service struct {
	xctv1.UnimplementedOrchestratorServiceServer

	cfg       Config
	nc        *nats.Conn
	log       *slog.Logger
	funcs     map[string]Proposer
	events    *eventlog.Log
	runs      *runIndex
	validator xctv1.ValidatorServiceClient
	executor  xctv1.ExecutorServiceClient
	conns     []*grpc.ClientConn
	// dial and proposerDial are how peers are dialled (identity.go).
	dial, proposerDial []grpcx.DialOption
	// redactor replaces secrets in events before they are appended; set
	// by Start (redaction.go).
	redactor *redact.Redactor
	// checkpoints signs chain checkpoints (checkpoint.go); nil: unsigned.
	checkpoints *checkpointSigner

	// catalog caches the XCT_TOOLS bucket (catalog.go); stopCatalog ends
	// its watch.
	catalog     atomic.Pointer[catalog.Catalog]
	stopCatalog context.CancelFunc

	// owners is the run owners bucket (owners.go); instance is this
	// process's name in it.
	owners   jetstream.KeyValue
	instance string
	// ownersStreamH is the owners bucket's stream (orphans.go unlist),
	// looked up once.
	ownersStreamMu sync.Mutex
	ownersStreamH  jetstream.Stream
	// quota is the bucket of each principal's runs in progress across
	// the cluster (quota.go).
	quota      jetstream.KeyValue
	quotaLocks quotaLocks

	mu       sync.Mutex
	active   map[string]*run
	claiming map[string]bool
	stopping bool

	// stopWatch ends the takeover watch, stopHeartbeat the renewal of
	// claims; background counts both goroutines. closing is closed once
	// every run was handed over: open WatchRun streams end then.
	stopWatch, stopHeartbeat context.CancelFunc
	background               sync.WaitGroup
	closing                  chan struct{}
	closeOnce                sync.Once

	// watches share one follower per watched run (watch.go).
	watches *watches
	// watchLeaseForTest shortens watchLease (watchcount.go) in tests.
	watchLeaseForTest time.Duration
}

// Option customizes a Service.
type Option func(*Service)

// WithProposer registers an in-process model under "func:NAME" (for tests,
// benchmarks and embedding).
func WithProposer(name string, p Proposer) Option {
	return func(s *Service) { s.funcs[name] = p }
}

// New builds an orchestrator. It dials the validator and executor lazily:
// an unreachable one shows up as a deny or an error signal, never as allow.
func New(cfg Config, nc *nats.Conn, log *slog.Logger, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("orchestrator config: %w", err)
	}
	s := &Service{cfg: cfg, nc: nc, log: log, funcs: map[string]Proposer{}, runs: newRunIndex(), active: map[string]*run{},
		claiming: map[string]bool{}, instance: cfg.Instance, closing: make(chan struct{})}
	s.watches = newWatches(func(ctx context.Context, runID string, fn func(lctl.Event) error) error {
		return s.events.Follow(ctx, runID, eventlog.FollowOptions{}, fn)
	})
	if s.instance == "" {
		s.instance = newInstance()
	}
	var err error
	if s.checkpoints, err = newCheckpointSigner(cfg.Checkpoint, log); err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	for _, o := range opts {
		o(s)
	}
	vc, err := grpcx.Dial(cfg.ValidatorAddr, s.dial...)
	if err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	ec, err := grpcx.Dial(cfg.ExecutorAddr, s.dial...)
	if err != nil {
		vc.Close()
		return nil, fmt.Errorf("executor: %w", err)
	}
	s.conns = []*grpc.ClientConn{vc, ec}
	s.validator = xctv1.NewValidatorServiceClient(vc)
	s.executor = xctv1.NewExecutorServiceClient(ec)
	return s, nil
}

// Register registers the gRPC service.
func (s *Service) Register(g *grpc.Server) { xctv1.RegisterOrchestratorServiceServer(g, s) }

// Stopping reports whether Stop was called.
func (s *Service) Stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Instance is this orchestrator's name in the run owners bucket.
func (s *Service) Instance() string { return s.instance }

// Start opens the event log and the run owners bucket, then renews the
// claims of the runs it will own and watches for runs to take over. It
// reads no chain: unfinished runs are found through their owner keys, so
// starting costs the same with a log of any size. Runs without a key are
// searched for every OrphanScan, not at start (orphans.go).
func (s *Service) Start(ctx context.Context) error {
	log, err := eventlog.Open(ctx, s.nc)
	if err != nil {
		return err
	}
	log.ReportTo(s.cfg.StoreHealth)
	s.events = log
	if s.redactor, err = s.cfg.Redact.Build(ctx, log.JetStream()); err != nil {
		return fmt.Errorf("orchestrator: %w", err)
	}
	if err := s.openOwners(ctx); err != nil {
		return err
	}
	if err := s.openQuota(ctx); err != nil {
		return err
	}
	cctx, ccancel := context.WithCancel(context.Background())
	s.stopCatalog = ccancel
	s.watchCatalog(cctx)
	hctx, hcancel := context.WithCancel(context.Background())
	wctx, wcancel := context.WithCancel(context.Background())
	s.stopHeartbeat, s.stopWatch = hcancel, wcancel
	s.background.Add(4)
	go func() {
		defer s.background.Done()
		s.heartbeat(hctx)
	}()
	go func() {
		defer s.background.Done()
		s.watchHeartbeats(hctx)
	}()
	go func() {
		defer s.background.Done()
		s.watchOwners(wctx)
	}()
	go func() {
		defer s.background.Done()
		s.scanOrphans(wctx)
	}()
	s.log.Info("orchestrator instance", "instance", s.instance, "run_lease", s.cfg.RunLease, "drain_timeout", s.cfg.DrainTimeout)
	return nil
}

// Stop hands every run over to another replica (docs/lifecycle.md): it
// takes no new runs or takeovers, lets each run finish the step in flight
// and records the hand-over at that step boundary (at once for a run
// waiting for a human), within the drain timeout (and ctx). Past 90% of
// it, model calls in flight are interrupted; a run still inside a tool
// call at the deadline is left to its claim's expiry. A rollback ends at
// once if its undo waits for a human (the approval withdrawn, the undo
// not done), after its undo if one is executing, with rollback_finished
// "failed" and UNAVAILABLE to its caller (rollback.go). Then claims stop
// being renewed, open WatchRun streams end with UNAVAILABLE, and
// connections close.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if s.stopWatch != nil {
		s.stopWatch()
	}
	var runs, rollbacks []*run
	for _, r := range s.activeRuns() {
		if r.release == nil {
			// A rollback: an undo waiting for a human ends now (its
			// approval withdrawn), one executing finishes and is
			// recorded, and it ends there (rollback.go).
			rollbacks = append(rollbacks, r)
			r.cancel(errRollbackStopped)
			continue
		}
		runs = append(runs, r)
		r.requestRelease()
	}
	s.log.Info("stopping: handing runs over at their next step boundary", "runs", len(runs), "rollbacks", len(rollbacks), "drain_timeout", s.cfg.DrainTimeout)
	drain, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()
	interrupt, cancelInterrupt := context.WithTimeout(drain, s.cfg.DrainTimeout*9/10)
	defer cancelInterrupt()
	waitRuns(interrupt, runs)
	for _, r := range runs {
		r.cancel(errReleased)
	}
	if left := waitRuns(drain, runs); left > 0 {
		s.log.Warn("drain timeout: runs still inside a tool call are left to their claims' expiry", "runs", left)
	}
	if left := waitRuns(drain, rollbacks); left > 0 {
		s.log.Warn("drain timeout: rollbacks still inside an undo are left to their claims' expiry", "rollbacks", left)
	}
	if s.stopHeartbeat != nil {
		s.stopHeartbeat()
	}
	if s.stopCatalog != nil {
		s.stopCatalog()
	}
	s.background.Wait()
	s.closeOnce.Do(func() { close(s.closing) })
	for _, c := range s.conns {
		c.Close()
	}
	return nil
}

// waitRuns waits until every run's loop ended or ctx ends, and returns how
// many did not end.
func waitRuns(ctx context.Context, runs []*run) int {
	left := 0
	for _, r := range runs {
		select {
		case <-r.done:
		case <-ctx.Done():
			left++
		}
	}
	return left
}

// launch runs a run's loop; the run leaves the active set when it ends.
func (s *Service) launch(r *run) {
	go func() {
		r.loop()
		s.mu.Lock()
		delete(s.active, r.id)
		s.mu.Unlock()
		if r.ended {
			s.finishLease(r)
			s.unlist(r.id) // the run's end is on its chain (orphans.go)
			s.giveQuota(r.principal, r.id)
		}
		r.cancel(nil)
		close(r.left)
	}()
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "run-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

func nowpb() *timestamppb.Timestamp { return timestamppb.Now() }
