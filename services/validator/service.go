package validator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
)

// Service is the validator: it implements xctv1.ValidatorServiceServer and
// judges proposals against the tool catalog, the tools' input schemas and a
// Policy. It is safe for concurrent use.
type Service struct {
	xctv1.UnimplementedValidatorServiceServer

	cfg     Config
	log     *slog.Logger
	nc      *nats.Conn // nil when the catalog was given to NewWithCatalog
	now     func() time.Time
	schemas *schemaCache

	catalog atomic.Pointer[catalog.Catalog] // nil until Start with NATS
	policy  atomic.Pointer[installedPolicy]

	mu        sync.Mutex // guards started and stopWatch
	started   bool
	stopWatch context.CancelFunc
}

// installedPolicy is the policy in force, with its version read once.
type installedPolicy struct {
	policy  Policy
	version string
}

// New builds a validator that learns the tool catalog from JetStream through
// nc once started. It loads the configured policy (or the built-in default)
// now: a broken policy file is an error naming the file and line.
func New(cfg Config, nc *nats.Conn, log *slog.Logger) (*Service, error) {
	if nc == nil {
		return nil, ErrNoNATS
	}
	s, err := newService(cfg, log)
	if err != nil {
		return nil, err
	}
	s.nc = nc
	return s, nil
}

// NewWithCatalog builds a validator over a given catalog, with no NATS: for
// tests and offline policy checks. Start and Stop do nothing but are safe
// to call.
func NewWithCatalog(cfg Config, cat *catalog.Catalog, log *slog.Logger) (*Service, error) {
	if cat == nil {
		return nil, ErrNoCatalog
	}
	s, err := newService(cfg, log)
	if err != nil {
		return nil, err
	}
	s.catalog.Store(cat)
	return s, nil
}

func newService(cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		p   *RulesPolicy
		err error
	)
	if cfg.PolicyFile == "" {
		p = DefaultPolicy()
	} else if p, err = LoadRulesFile(cfg.PolicyFile); err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	s := &Service{cfg: cfg, log: log, now: time.Now, schemas: newSchemaCache()}
	s.policy.Store(&installedPolicy{policy: p, version: p.Version()})
	log.Info("validator policy loaded", "file", p.File(), "version", p.Version(), "rules", len(p.rules))
	return s, nil
}

// Register registers the validator's gRPC service on g.
func (s *Service) Register(g *grpc.Server) {
	xctv1.RegisterValidatorServiceServer(g, s)
}

// Start loads the tool catalog from JetStream and keeps it current until
// Stop. It returns once the catalog's present entries are loaded; ctx
// bounds only that wait. Until Start returns, proposals are denied with
// VALIDATOR_UNAVAILABLE.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrAlreadyStarted
	}
	if s.nc == nil {
		s.started = true
		return nil
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("validator: jetstream: %w", err)
	}
	// The watch outlives ctx (a start-up deadline, typically) and ends at
	// Stop; ctx only cancels the initial load.
	watchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopAfter := context.AfterFunc(ctx, cancel)
	cat, err := catalog.Watch(watchCtx, js, s.cfg.Replicas)
	stopAfter()
	if err != nil {
		cancel()
		return fmt.Errorf("validator: load tool catalog: %w", err)
	}
	s.catalog.Store(cat)
	s.stopWatch = cancel
	s.started = true
	s.log.Info("validator started", "tools", len(cat.List()))
	return nil
}

// Stop ends the catalog watch. A validator that watched JetStream denies
// proposals after Stop (its catalog would go stale); one built with
// NewWithCatalog keeps its catalog. Stop is safe to call more than once.
func (s *Service) Stop(_ context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopWatch != nil {
		s.stopWatch()
		s.stopWatch = nil
		s.catalog.Store(nil)
	}
	s.started = false
	return nil
}

// SetPolicy replaces the policy in force, atomically: a proposal is judged
// wholly by the old policy or wholly by the new one. This is where hot
// reload and other policy engines plug in.
func (s *Service) SetPolicy(p Policy) error {
	if p == nil {
		return ErrNoPolicy
	}
	s.policy.Store(&installedPolicy{policy: p, version: p.Version()})
	s.log.Info("validator policy installed", "version", p.Version())
	return nil
}

// PolicyVersion is the version of the policy in force.
func (s *Service) PolicyVersion() string { return s.policy.Load().version }
