package validator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/verdict"
)

// Service is the validator: it implements xctv1.ValidatorServiceServer,
// judges proposals against the tool catalog, the tools' input schemas and a
// Policy, and keeps the human approvals of steps. It is safe for concurrent
// use.
type Service struct {
	xctv1.UnimplementedValidatorServiceServer

	cfg Config
	log *slog.Logger
	// bareTools is a recheck without a catalog (Recheck): a tool an undo
	// amounts to is judged as declaring no effect class, as its other
	// steps are, where a service without its catalog denies.
	bareTools bool
	nc        *nats.Conn // nil when the catalog was given to NewWithCatalog
	now       func() time.Time
	schemas   *schemaCache

	catalog   atomic.Pointer[catalog.Catalog] // nil until Start with NATS
	policy    atomic.Pointer[installedPolicy]
	approvals atomic.Pointer[approvalStore] // nil until Start with NATS
	// indexMarkerTTL is how long a removed pending index key's marker is
	// kept where the bucket lets markers expire (DefaultIndexMarkerTTL).
	indexMarkerTTL time.Duration

	// limits counts calls for the enforced policy's rate limits, shadows
	// for the shadow policies' (which must not use up enforced calls; their
	// windows' names start with the shadow's version). On NATS both are
	// rateStore, the cluster's count (bound at Start).
	limits, shadowLimits counter
	rates                *rateStore // nil without NATS
	// signer signs allow verdicts (nil: they go unsigned; binding.go).
	signer *verdict.Signer
	// toolDigests are the digests of the descriptors judged, kept while
	// the descriptor does not change (binding.go).
	toolDigests verdict.ToolDigests
	// redactor hides approval arguments from callers who may not decide
	// them (nil until Start with NATS; approvalview.go).
	redactor atomic.Pointer[redact.Redactor]
	// chains reads a run's chain before a decision (withdraw.go).
	chains chainLog

	mu         sync.Mutex // guards started, stopWatch and reload
	started    bool
	stopWatch  context.CancelFunc
	reload     *reloader
	lastReload reloadState // guarded by reloadMu
	reloadMu   sync.Mutex

	// epochKV is the policy epochs bucket (nil until Start with NATS and
	// a verdict key); epochPending says the last write failed (epoch.go).
	epochMu      sync.Mutex
	epochKV      jetstream.KeyValue
	epochPending bool
}

// installedPolicy is the policy in force, with what the service needs of it
// read once.
type installedPolicy struct {
	policy  Policy
	version string
	limits  []rateLimit
	shadows []*RulesPolicy
	set     *PolicySet // nil for a policy of another kind
	// recorded is closed once the policy's epoch was written, or its
	// write failed, or there is none to write (epoch.go).
	recorded     chan struct{}
	recordedOnce sync.Once
}

// epochRecorded closes recorded (once).
func (p *installedPolicy) epochRecorded() {
	p.recordedOnce.Do(func() { close(p.recorded) })
}

// awaitEpoch waits until the policy's epoch is recorded, or ctx ends.
func (p *installedPolicy) awaitEpoch(ctx context.Context) {
	select {
	case <-p.recorded:
	case <-ctx.Done():
	}
}

// installable turns a policy into what the service installs. A lone rules
// file becomes a set, so a file in shadow mode is recorded, not enforced.
func installable(p Policy) (*installedPolicy, error) {
	if p == nil {
		return nil, ErrNoPolicy
	}
	if rp, ok := p.(*RulesPolicy); ok {
		set, err := NewPolicySet(rp)
		if err != nil {
			return nil, err
		}
		p = set
	}
	inst := &installedPolicy{policy: p, version: p.Version(), recorded: make(chan struct{})}
	if set, ok := p.(*PolicySet); ok {
		inst.set = set
		inst.limits = set.enforced.settings.rateLimits
		inst.shadows = set.shadows
	}
	return inst, nil
}

// Option configures a Service beyond its Config.
type Option func(*Service)

// WithClock makes the service read the time from now: verdict times,
// approval expiry and rate limit windows. For tests.
func WithClock(now func() time.Time) Option {
	return func(s *Service) {
		if now != nil {
			s.now = now
		}
	}
}

// New builds a validator that learns the tool catalog from JetStream through
// nc once started, and keeps approvals in its KV bucket XCT_APPROVALS. It
// loads the configured policy files (or the built-in default) now: a broken
// file is an error naming the file and line.
func New(cfg Config, nc *nats.Conn, log *slog.Logger, opts ...Option) (*Service, error) {
	if nc == nil {
		return nil, ErrNoNATS
	}
	s, err := newService(cfg, log, opts)
	if err != nil {
		return nil, err
	}
	s.nc = nc
	s.rates = &rateStore{}
	s.limits, s.shadowLimits = s.rates, s.rates
	return s, nil
}

// NewWithCatalog builds a validator over a given catalog, with no NATS: for
// tests and offline policy checks. It keeps no approvals: a step that needs
// one stays NEEDS_APPROVAL and the approval RPCs are unavailable. Start
// and Stop only run the policy reload.
func NewWithCatalog(cfg Config, cat *catalog.Catalog, log *slog.Logger, opts ...Option) (*Service, error) {
	if cat == nil {
		return nil, ErrNoCatalog
	}
	s, err := newService(cfg, log, opts)
	if err != nil {
		return nil, err
	}
	s.catalog.Store(cat)
	return s, nil
}

func newService(cfg Config, log *slog.Logger, opts []Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	set, err := LoadPolicyFiles(cfg.PolicyFiles()...)
	if err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	s := &Service{
		cfg: cfg, log: log, now: time.Now, schemas: newSchemaCache(),
		limits: newRateLimiter(), shadowLimits: newRateLimiter(),
	}
	for _, o := range opts {
		o(s)
	}
	if s.signer, err = cfg.signer(); err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	inst, err := installable(set)
	if err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	// Validate answers nothing before Start, which records this policy's
	// epoch; a service without NATS records none.
	inst.epochRecorded()
	s.policy.Store(inst)
	s.logPolicy("validator policy loaded", set)
	return s, nil
}

// logPolicy logs what a policy set is made of.
func (s *Service) logPolicy(msg string, set *PolicySet) {
	files := make([]string, 0, len(set.files))
	for _, f := range set.files {
		files = append(files, fmt.Sprintf("%s (%s, %d rules)", f.File(), f.mode, f.Rules()))
	}
	if len(files) == 0 {
		files = append(files, DefaultPolicyFile)
	}
	s.log.Info(msg, "version", set.Version(), "files", files, "default_enforced", set.defaultEnforced)
}

// Register registers the validator's gRPC service on g.
func (s *Service) Register(g *grpc.Server) {
	xctv1.RegisterValidatorServiceServer(g, s)
}

// Start opens the approvals bucket and loads the tool catalog from
// JetStream, keeping it current until Stop, and starts watching the policy
// files when reloading is configured. It returns once the catalog's present
// entries are loaded; ctx bounds only that wait. Until Start returns,
// proposals are denied with VALIDATOR_UNAVAILABLE.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrAlreadyStarted
	}
	if s.nc != nil {
		js, err := jetstream.New(s.nc)
		if err != nil {
			return fmt.Errorf("validator: jetstream: %w", err)
		}
		store, err := openApprovals(ctx, js)
		if err != nil {
			return fmt.Errorf("validator: %w", err)
		}
		store.kv = s.cfg.StoreHealth.KeyValue(store.kv)
		if store.markerTTL > 0 && s.indexMarkerTTL > 0 {
			store.markerTTL = s.indexMarkerTTL
		}
		if store.markerTTL == 0 {
			s.log.Warn("the approvals bucket keeps the delete markers of the pending index (one per closed approval, read by every list of pending approvals): run `xct nats provision` to let them expire",
				"bucket", ApprovalsBucket)
		}
		// Approvals an older validator opened are not in the index yet.
		if made, err := store.indexPending(ctx); err != nil {
			return fmt.Errorf("validator: %w", err)
		} else if made > 0 {
			s.log.Info("indexed pending approvals opened without an index entry", "approvals", made)
		}
		// The watch outlives ctx (a start-up deadline, typically) and ends at
		// Stop; ctx only cancels the initial load.
		watchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopAfter := context.AfterFunc(ctx, cancel)
		cat, err := catalog.Watch(watchCtx, js)
		stopAfter()
		if err != nil {
			cancel()
			if cerr := ctx.Err(); cerr != nil {
				// The watch saw only its own context cancelled: say
				// that the start's bound passed (app starts it again).
				return fmt.Errorf("validator: load tool catalog: %w before the catalog was read (%w)", cerr, err)
			}
			return fmt.Errorf("validator: load tool catalog: %w", err)
		}
		s.rates.health = s.cfg.StoreHealth
		if err := s.rates.bind(ctx, js, s.nc.MaxPayload()); err != nil {
			cancel()
			return fmt.Errorf("validator: %w", err)
		}
		red, err := s.cfg.Redact.Build(ctx, js)
		if err != nil {
			cancel()
			return fmt.Errorf("validator: %w", err)
		}
		if err := s.bindEpochs(ctx, js); err != nil {
			cancel()
			return fmt.Errorf("validator: %w", err)
		}
		s.redactor.Store(red)
		s.approvals.Store(store)
		s.catalog.Store(cat)
		s.stopWatch = cancel
		s.log.Info("validator started", "tools", len(cat.List()))
		s.warnUnknownTools(s.policy.Load())
		s.warnRateCapacity(s.policy.Load())
	}
	if files := s.cfg.PolicyFiles(); len(files) > 0 && s.cfg.PolicyReload > 0 {
		s.reload = s.startReload(files, s.cfg.PolicyReload)
	}
	s.started = true
	return nil
}

// Stop ends the catalog watch and the policy reload. A validator that
// watched JetStream denies proposals after Stop (its catalog would go
// stale); one built with NewWithCatalog keeps its catalog. Stop is safe to
// call more than once.
func (s *Service) Stop(_ context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reload != nil {
		s.reload.stop()
		s.reload = nil
	}
	if s.stopWatch != nil {
		s.stopWatch()
		s.stopWatch = nil
		s.catalog.Store(nil)
		s.approvals.Store(nil)
	}
	s.started = false
	return nil
}

// SetPolicy replaces the policy in force, atomically: a proposal is judged
// wholly by the old policy or wholly by the new one, and validations in
// flight finish with the policy they started with. Hot reload uses it; so
// can other policy engines. A *RulesPolicy in shadow mode is recorded, not
// enforced (the built-in default is enforced beside it).
func (s *Service) SetPolicy(p Policy) error {
	inst, err := installable(p)
	if err != nil {
		return err
	}
	s.policy.Store(inst)
	s.log.Info("validator policy installed", "version", inst.version)
	// Verdicts in flight signed under the previous policy stop here
	// (epoch.go); a failed write is logged and tried again.
	_ = s.publishEpoch(context.Background(), inst)
	s.warnUnknownTools(inst)
	s.warnRateCapacity(inst)
	return nil
}

// PolicyVersion is the version of the policy in force.
func (s *Service) PolicyVersion() string { return s.policy.Load().version }

// KnowsTool says whether the validator's tool catalog holds name now. The
// catalog follows executors' announcements through a KV watch, so a tool
// an executor has just published may be unknown for a moment: a proposal
// for it in that moment is denied UNKNOWN_TOOL (what a caller that must
// not race, such as a test starting an executor, waits for).
func (s *Service) KnowsTool(name string) bool {
	cat := s.catalog.Load()
	if cat == nil {
		return false
	}
	_, ok := cat.Get(name)
	return ok
}

// warnUnknownTools logs the rules and rate limits of a policy that name
// tools the catalog does not have, when the catalog is known. The catalog
// changes as executors come and go, so this is a warning, not a refusal;
// `xct policy lint` reports the same as errors.
func (s *Service) warnUnknownTools(inst *installedPolicy) {
	cat := s.catalog.Load()
	if cat == nil || inst.set == nil || len(cat.List()) == 0 {
		return
	}
	for _, f := range unknownToolFindings(inst.set, cat) {
		s.log.Warn("policy names a tool the catalog does not have", "file", f.File, "line", f.Line, "rule", f.RuleID, "problem", f.Msg)
	}
}

// warnRateCapacity logs the rate limits of a policy that count more calls
// than one record of the count store holds (the NATS server's
// max_payload): once a window holds that many, its calls are refused
// (ratestore.go).
func (s *Service) warnRateCapacity(inst *installedPolicy) {
	if s.rates == nil {
		return
	}
	b := s.rates.bucket.Load()
	if b == nil {
		return
	}
	limits := slices.Clone(inst.limits)
	for _, sh := range inst.shadows {
		limits = append(limits, sh.rs.settings.rateLimits...)
	}
	for _, l := range limits {
		if n := max(l.perRun.n, l.perPrincipal.n, l.global.n); n > b.maxCalls {
			s.log.Warn("a rate limit counts more calls than one record of its count store holds (the NATS server's max_payload); once its window holds that many, its calls are refused",
				"file", l.file, "line", l.line, "tool", l.pattern, "limit", n, "record_holds", b.maxCalls)
		}
	}
}
