// Package orchestrator owns XCT's loop (protocol §5): it asks a model for one
// decision, has the validator judge it, has the executor run what was
// allowed, and records every transition on the run's LCTL chain, of which it
// is the only writer. It keeps no state the chain cannot rebuild.
package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
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

	mu       sync.Mutex
	active   map[string]*run
	stopping bool
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
	s := &Service{cfg: cfg, nc: nc, log: log, funcs: map[string]Proposer{}, runs: newRunIndex(), active: map[string]*run{}}
	for _, o := range opts {
		o(s)
	}
	vc, err := grpcx.Dial(cfg.ValidatorAddr)
	if err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	ec, err := grpcx.Dial(cfg.ExecutorAddr)
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

// Start opens the event log. It reads nothing else: runs are read from
// their chains when asked for, so starting costs the same with a log of any
// size.
func (s *Service) Start(ctx context.Context) error {
	log, err := eventlog.Open(ctx, s.nc, eventlog.Config{Replicas: s.cfg.Replicas})
	if err != nil {
		return err
	}
	s.events = log
	return nil
}

// Stop cancels active runs, waits for their loops to record how they ended
// (until ctx ends), and closes connections.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	active := make([]*run, 0, len(s.active))
	for _, r := range s.active {
		active = append(active, r)
	}
	s.mu.Unlock()
	for _, r := range active {
		r.cancel(errCancelled{reason: "orchestrator stopped"})
	}
	for _, r := range active {
		select {
		case <-r.done:
		case <-ctx.Done():
		}
	}
	for _, c := range s.conns {
		c.Close()
	}
	return nil
}

// StartRun implements OrchestratorService.
func (s *Service) StartRun(ctx context.Context, req *xctv1.StartRunRequest) (*xctv1.StartRunResponse, error) {
	r, err := s.startRun(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	run, _ := s.runs.get(r.id)
	return &xctv1.StartRunResponse{Run: run}, nil
}

func (s *Service) startRun(ctx context.Context, req *xctv1.StartRunRequest) (*run, error) {
	if req.GetGoal() == "" {
		return nil, status.Error(codes.InvalidArgument, "goal is required")
	}
	if req.GetModel() == "" {
		return nil, status.Error(codes.InvalidArgument, "model is required (scripted:FILE, openai:MODEL or grpc:ADDR)")
	}
	if req.GetMaxSteps() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_steps must not be negative")
	}
	id := req.GetRunId()
	if id == "" {
		id = newRunID()
	} else if err := lctl.ValidateChainID(id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	principal := req.GetPrincipal()
	if principal == "" {
		principal = "anonymous"
	}
	maxSteps := int(req.GetMaxSteps())
	if maxSteps == 0 {
		maxSteps = s.cfg.MaxSteps
	}
	proposer, err := s.newProposer(req.GetModel())
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	catalog, err := s.executor.ListTools(tctx, &xctv1.ListToolsRequest{})
	if err != nil {
		_ = proposer.Close()
		return nil, fmt.Errorf("%w: list tools: %s", ErrNoExecutor, status.Convert(err).Message())
	}
	writer, err := s.events.NewChainWriter(id)
	if err != nil {
		_ = proposer.Close()
		return nil, err
	}
	rctx, rcancel := context.WithCancelCause(context.Background())
	r := &run{
		id: id, svc: s, log: s.log, writer: writer, proposer: proposer, tools: catalog.GetTools(),
		goal: req.GetGoal(), principal: principal, labels: req.GetLabels(), maxSteps: maxSteps,
		model: req.GetModel(), started: time.Now(),
		ctx: rctx, cancel: rcancel, done: make(chan struct{}),
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		rcancel(nil)
		_ = proposer.Close()
		return nil, ErrStopping
	}
	s.active[id] = r
	s.mu.Unlock()
	err = r.record(lctl.TypeRunStarted, agentOrchestrator, map[string]any{
		"run_id":    id,
		"goal":      req.GetGoal(),
		"model":     req.GetModel(),
		"principal": principal,
		"labels":    req.GetLabels(),
		"max_steps": maxSteps,
	})
	if err != nil {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		rcancel(nil)
		_ = proposer.Close()
		if errors.Is(err, eventlog.ErrConflict) {
			return nil, fmt.Errorf("%w: %s", ErrRunExists, id)
		}
		return nil, err
	}
	s.log.Info("run started", "run", id, "model", req.GetModel(), "principal", principal)
	r.startRunSpan(ctx)
	go func() {
		r.loop()
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		rcancel(nil)
	}()
	return r, nil
}

// GetRun implements OrchestratorService.
func (s *Service) GetRun(ctx context.Context, req *xctv1.GetRunRequest) (*xctv1.GetRunResponse, error) {
	r, err := s.lookup(ctx, req.GetRunId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &xctv1.GetRunResponse{Run: r}, nil
}

// lookup returns a run: from the cache when this process writes it or it
// has ended (an ended chain never changes), otherwise read from its chain.
func (s *Service) lookup(ctx context.Context, id string) (*xctv1.Run, error) {
	if err := lctl.ValidateChainID(id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if owner := s.owner(id); owner != nil {
		// Wait for an append in flight: the caller may have seen it on the log.
		owner.recording.Lock()
		r, ok := s.runs.get(id)
		owner.recording.Unlock()
		if ok {
			return r, nil
		}
	}
	if r, ok := s.runs.get(id); ok && ended(r) {
		return r, nil
	}
	events, err := s.events.ReadChain(ctx, id)
	if errors.Is(err, eventlog.ErrChainNotFound) || (err == nil && (len(events) == 0 || events[0].Type != lctl.TypeRunStarted)) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	r := &xctv1.Run{}
	for i := range events {
		applyRunEvent(r, &events[i])
	}
	s.runs.put(r)
	return proto.Clone(r).(*xctv1.Run), nil
}

// owner returns the run if this process runs its loop.
func (s *Service) owner(id string) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active[id]
}

// owns reports whether this process runs the loop of a run.
func (s *Service) owns(id string) bool { return s.owner(id) != nil }

// ListRuns implements OrchestratorService. It lists every chain in the
// stream and summarizes each from its first and last events; summaries of
// ended runs are cached.
func (s *Service) ListRuns(ctx context.Context, req *xctv1.ListRunsRequest) (*xctv1.ListRunsResponse, error) {
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	chains, err := s.events.Chains(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	runs := make([]*xctv1.Run, 0, len(chains))
	for id, count := range chains {
		if r, ok := s.runs.summary(id); ok && (ended(r) || (s.owns(id) && r.GetLastSeq() >= count)) {
			runs = append(runs, r)
			continue
		}
		first, last, err := s.events.Ends(ctx, id)
		if err != nil {
			return nil, toStatus(err)
		}
		if first.Type != lctl.TypeRunStarted {
			continue // another LCTL writer's chain, not a run
		}
		r := &xctv1.Run{}
		applyRunEvent(r, &first)
		applyRunEvent(r, &last)
		if ended(r) {
			s.runs.putSummary(r)
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool {
		ti, tj := runs[i].GetCreatedAt().AsTime(), runs[j].GetCreatedAt().AsTime()
		if !ti.Equal(tj) {
			return ti.After(tj)
		}
		return runs[i].GetRunId() > runs[j].GetRunId()
	})
	if len(runs) > limit {
		runs = runs[:limit]
	}
	return &xctv1.ListRunsResponse{Runs: runs}, nil
}

// CancelRun implements OrchestratorService.
func (s *Service) CancelRun(ctx context.Context, req *xctv1.CancelRunRequest) (*xctv1.CancelRunResponse, error) {
	cur, err := s.lookup(ctx, req.GetRunId())
	if err != nil {
		return nil, toStatus(err)
	}
	s.mu.Lock()
	r, ok := s.active[req.GetRunId()]
	s.mu.Unlock()
	if !ok {
		if cur.GetStatus() != xctv1.RunStatus_RUN_STATUS_RUNNING {
			return nil, toStatus(fmt.Errorf("%w: %s is %s", ErrRunFinished, cur.GetRunId(), cur.GetStatus()))
		}
		return nil, status.Errorf(codes.FailedPrecondition, "run %s is owned by another orchestrator", cur.GetRunId())
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled by request"
	}
	r.cancel(errCancelled{reason: reason})
	return &xctv1.CancelRunResponse{Run: cur}, nil
}

// WatchRun implements OrchestratorService.
func (s *Service) WatchRun(req *xctv1.WatchRunRequest, stream grpc.ServerStreamingServer[xctv1.WatchRunResponse]) error {
	ctx := stream.Context()
	if _, err := s.lookup(ctx, req.GetRunId()); err != nil {
		return toStatus(err)
	}
	err := s.events.Follow(ctx, req.GetRunId(), eventlog.FollowOptions{}, func(e lctl.Event) error {
		if e.Seq >= req.GetFromSeq() {
			pe, err := lctlpb.ToProto(&e)
			if err != nil {
				return err
			}
			if err := stream.Send(&xctv1.WatchRunResponse{Event: pe}); err != nil {
				return err
			}
		}
		if e.Type == lctl.TypeRunFinished {
			return eventlog.ErrStop
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return toStatus(err)
	}
	return nil
}

// toStatus maps errors to gRPC status codes at the RPC boundary.
func toStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrRunNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrBadModel), errors.Is(err, lctl.ErrInvalidChainID):
		code = codes.InvalidArgument
	case errors.Is(err, ErrRunExists):
		code = codes.AlreadyExists
	case errors.Is(err, ErrRunFinished):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrNoExecutor), errors.Is(err, ErrStopping), errors.Is(err, errLogLost):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "run-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

func nowpb() *timestamppb.Timestamp { return timestamppb.Now() }
