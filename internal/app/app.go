// Package app assembles XCT's services into one process: which services run
// (the targets), in which order they start and stop, and how each is served
// on its own gRPC port. The embedded cluster and each standalone service are
// the same code with different targets.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/storehealth"
	"github.com/xct-dev/xct/internal/telemetry"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
	"github.com/xct-dev/xct/services/tracer"
	"github.com/xct-dev/xct/services/validator"
)

// Targets. StartOrder is the dependency order: the executor publishes the
// tool catalog the validator reads; the orchestrator calls both.
const (
	TargetExecutor     = "executor"
	TargetValidator    = "validator"
	TargetTracer       = "tracer"
	TargetOrchestrator = "orchestrator"
	TargetAll          = "all"
)

// StartOrder lists every target in the order they start.
var StartOrder = []string{TargetExecutor, TargetValidator, TargetTracer, TargetOrchestrator}

// Default addresses, documented in the README.
const (
	DefaultOrchestratorAddr = "127.0.0.1:7701"
	DefaultValidatorAddr    = "127.0.0.1:7702"
	DefaultExecutorAddr     = "127.0.0.1:7703"
	DefaultTracerAddr       = "127.0.0.1:7704"
	DefaultNATSURL          = "nats://127.0.0.1:4222"
)

// Config is everything a process of XCT needs.
type Config struct {
	// NATSURL is the NATS server (the embedded cluster sets it to its own).
	NATSURL string
	// NATSCredentialsFile holds the NATS passwords (natsauth.File): each
	// target connects as the user named like it. XCT_NATS_PASSWORD in the
	// environment is the other way, for a process of one target.
	NATSCredentialsFile string
	// NATSUsers, when set, are the passwords themselves (xct dev, tests);
	// they win over the file.
	NATSUsers natsauth.File
	// Replicas is the deployment's JetStream replica count: 1 embedded, 3
	// in production. The streams and buckets are made with it by the
	// admin (internal/provision); the services only bind them.
	Replicas int
	// gRPC listen addresses of each target.
	OrchestratorListen string
	ValidatorListen    string
	ExecutorListen     string
	TracerListen       string
	// HealthListen, when set, is a plaintext listener serving only gRPC
	// health, for probes that cannot speak mTLS (kubelet's).
	HealthListen string

	Orchestrator orchestrator.Config
	Validator    validator.Config
	Executor     executor.Config
	Tracer       tracer.Config
	// Security is the transport (mTLS or allowed plaintext), the service
	// token and the rate limits of every server and client of the process;
	// Auth is how servers authenticate callers (docs/security.md).
	Security grpcx.Security
	Auth     auth.Config
	// Redact is the secret redaction of the orchestrator's events and the
	// executor's step records (both get this one).
	Redact redact.Config
	// GCPercent is the collector's target for the process (TuneGC).
	GCPercent int
	// Start is how a process waits for NATS and starts its services
	// (wait.go): one attempt's bound, the longest wait between
	// attempts, and how long to try before the process gives up.
	Start StartRetry
}

// RegisterFlags registers the flags of every service.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NATSURL, "nats", DefaultNATSURL, "NATS server URL (no credentials in it: see -nats-credentials)")
	fs.StringVar(&c.NATSCredentialsFile, "nats-credentials", "", "file of NATS passwords (YAML, user: password, mode 0600); each service connects as the user named like it (env "+EnvNATSPassword+" instead, for one service)")
	fs.IntVar(&c.Replicas, "replicas", 1, "JetStream replicas of the deployment (3 in production): give xct nats provision the same, which makes the streams and buckets the services bind")
	fs.StringVar(&c.OrchestratorListen, "orchestrator-listen", DefaultOrchestratorAddr, "orchestrator gRPC listen address (port 0 picks a free one)")
	fs.StringVar(&c.ValidatorListen, "validator-listen", DefaultValidatorAddr, "validator gRPC listen address")
	fs.StringVar(&c.ExecutorListen, "executor-listen", DefaultExecutorAddr, "executor gRPC listen address")
	fs.StringVar(&c.TracerListen, "tracer-listen", DefaultTracerAddr, "tracer gRPC listen address")
	fs.IntVar(&c.GCPercent, "gc-percent", DefaultGCPercent, "garbage collector target percent for this process (0: Go's default; GOGC in the environment wins)")
	c.Start.RegisterFlags(fs)
	fs.StringVar(&c.HealthListen, "health-listen", "", "plaintext gRPC listen address serving only the health service, for probes that cannot use mTLS (empty: none)")
	c.Orchestrator.RegisterFlags(fs)
	c.Validator.RegisterFlags(fs)
	c.Executor.RegisterFlags(fs)
	c.Tracer.RegisterFlags(fs)
	c.Redact.RegisterFlags(fs)
	c.Security.RegisterFlags(fs)
	c.Auth.RegisterFlags(fs)
}

func (c *Config) listenAddr(target string) string {
	switch target {
	case TargetOrchestrator:
		return c.OrchestratorListen
	case TargetValidator:
		return c.ValidatorListen
	case TargetExecutor:
		return c.ExecutorListen
	case TargetTracer:
		return c.TracerListen
	}
	return ""
}

// ParseTargets turns "all" or a comma-separated list into targets in start
// order.
func ParseTargets(s string) ([]string, error) {
	if s == "" || s == TargetAll {
		return slices.Clone(StartOrder), nil
	}
	want := map[string]bool{}
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if !slices.Contains(StartOrder, t) {
			return nil, fmt.Errorf("unknown target %q (want %s or all)", t, strings.Join(StartOrder, ", "))
		}
		want[t] = true
	}
	var out []string
	for _, t := range StartOrder {
		if want[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

// service is what every XCT service offers the app.
type service interface {
	Register(*grpc.Server)
	Start(context.Context) error
	Stop(context.Context) error
}

type module struct {
	target  string
	svc     service
	srv     *grpcx.Server
	errc    chan error
	started bool // Start returned nil (guarded by App.mu once serving)
}

// App is a running set of services.
type App struct {
	log *slog.Logger
	// conns are the NATS connections, one per target (one shared
	// without credentials); closed by Stop.
	conns []*nats.Conn
	// natsRefusals counts the requests NATS refused one of this process's
	// users (a permissions violation): always a bug in natsauth's
	// permissions or in a service, never an expected answer.
	natsRefusals atomic.Int64
	mu           sync.Mutex // guards modules against the NATS callbacks
	modules      []*module
	// Orchestrator is set when the orchestrator target runs.
	Orchestrator *orchestrator.Service
	// Tracer is set when the tracer target runs.
	Tracer *tracer.Service
	// stopTelemetry flushes and ends OpenTelemetry tracing.
	stopTelemetry func(context.Context) error
	// health is the plaintext health-only listener (--health-listen).
	health *grpcx.HealthServer
	// waiting is what the services wait for before they start (nil once
	// started); fatal carries a start that failed after waiting.
	waiting  atomic.Pointer[error]
	fatal    chan error
	stopped  chan struct{}
	starting sync.Mutex // held while startWhenReady starts services
	// retry is how the services wait for NATS and are started again
	// (Config.Start; zero fields: the defaults).
	retry StartRetry
	// byTarget is each target's NATS connection (for provisioned).
	byTarget map[string]*nats.Conn
	// store holds the streams that refused a write for want of room:
	// while one does, the process reports NOT_SERVING.
	store *storehealth.Monitor
	// natsConns are the connections, for the health checks (conns is
	// emptied by Stop).
	natsConns []*nats.Conn
	// serving is the status last reported on "" (guarded by mu); deps
	// what the orchestrator's dependencies were found (deps.go), and
	// depsDone is closed when their watch ends (nil: none runs).
	serving  bool
	deps     depsState
	depsDone chan struct{}
}

// Options customize Start.
type Options struct {
	// Orchestrator options (in-process proposers, observers).
	Orchestrator []orchestrator.Option
	// ExtraTools are registered with the executor next to the built-ins.
	ExtraTools []executor.Tool
}

// Environment variables with a service's NATS credentials (Kubernetes
// sets them from a Secret): the password, and the user when it is not
// the target's name.
const (
	EnvNATSPassword = "XCT_NATS_PASSWORD" //nolint:gosec // a variable's name, not a credential
	EnvNATSUser     = "XCT_NATS_USER"
)

// natsCredentials returns the credentials each target connects with:
// NATSUsers, else the credentials file, else the environment (one target
// only). Nothing given is an anonymous connection, which XCT's own NATS
// servers refuse (an external one may allow it).
func (c *Config) natsCredentials(targets []string, getenv func(string) string) (map[string]natsauth.Credentials, error) {
	users := c.NATSUsers
	if users == nil && c.NATSCredentialsFile != "" {
		f, err := natsauth.Load(c.NATSCredentialsFile)
		if err != nil {
			return nil, err
		}
		users = f
	}
	out := map[string]natsauth.Credentials{}
	if users != nil {
		for _, t := range targets {
			cr, err := users.For(t)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t, err)
			}
			out[t] = cr
		}
		return out, nil
	}
	pw := getenv(EnvNATSPassword)
	if pw == "" {
		return nil, nil
	}
	if len(targets) != 1 {
		return nil, fmt.Errorf("%s names one user: run one target per process, or give -nats-credentials", EnvNATSPassword)
	}
	user := getenv(EnvNATSUser)
	if user == "" {
		user = targets[0]
	}
	out[targets[0]] = natsauth.Credentials{User: user, Password: pw}
	return out, nil
}

// secretFiles are the files of secrets c names: NATS credentials, keys,
// the tokens file.
func (c *Config) secretFiles() []string {
	var out []string
	for _, f := range []string{c.NATSCredentialsFile, c.Auth.TokensFile, c.Security.TLS.Key, c.Redact.KeyFile,
		c.Validator.VerdictKeyFile, c.Orchestrator.Checkpoint.KeyFile} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// CheckNATSURL refuses a --nats value the NATS client cannot use, or that
// carries credentials: the URL is logged and named in every NOT_SERVING
// reason (which callers read), so a password in it would be shown to
// them; credentials go in --nats-credentials or XCT_NATS_PASSWORD. It
// takes what the client takes: URLs separated by commas, each
// nats://, tls://, ws:// or wss:// (or HOST:PORT, which is nats://).
func CheckNATSURL(flag, s string) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("%s is empty: give the NATS server's URL (nats://HOST:4222)", flag)
	}
	for one := range strings.SplitSeq(s, ",") {
		one = strings.TrimSpace(one)
		if one == "" {
			continue
		}
		parsed := one
		if !strings.Contains(one, "://") {
			parsed = "nats://" + one
		}
		u, err := url.Parse(parsed)
		if err != nil {
			// The error quotes the URL: say only that it is not one.
			return fmt.Errorf("%s: %q is not a URL (want nats://HOST:PORT)", flag, redactURL(one))
		}
		switch {
		case u.User != nil:
			return fmt.Errorf("%s %s carries credentials: the URL is logged and shown in the NOT_SERVING reasons callers read; give the password with --nats-credentials or %s", flag, redactURL(one), EnvNATSPassword)
		case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
			return fmt.Errorf("%s %s: scheme %q is not NATS's (want nats://, tls://, ws:// or wss://, e.g. nats://HOST:4222)", flag, u.Redacted(), u.Scheme)
		case u.Hostname() == "":
			return fmt.Errorf("%s %s names no host (want nats://HOST:PORT)", flag, u.Redacted())
		case (u.Path != "" && u.Path != "/") || u.RawQuery != "":
			return fmt.Errorf("%s %s: a NATS URL has no path or query (want nats://HOST:PORT; several servers: separated by commas)", flag, u.Redacted())
		}
	}
	return nil
}

// redactURL is s with anything between "://" and an "@" replaced.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = "xxxxx@" + rest[i+1:]
	}
	if ok {
		return scheme + "://" + rest
	}
	return rest
}

// ConnectNATS connects to NATS. A server that cannot be reached yet is
// retried in the background, as are later disconnects, forever; appends
// fail while it is away. It fails only for a URL that cannot be used.
// Extra options carry the credentials (natsauth.Credentials.Option).
func ConnectNATS(url, name string, extra ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.Name(name),
		nats.Timeout(5 * time.Second),
		// A server not up yet is waited for (the services report
		// NOT_SERVING meanwhile), like one that went away later.
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
	}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", url, err)
	}
	return nc, nil
}

// Validate checks the configuration of the given targets without starting
// anything, so a bad flag or a broken policy file is reported before any
// connection is tried.
func (c *Config) Validate(targets []string) error {
	var errs []error
	if err := CheckNATSURL("--nats", c.NATSURL); err != nil {
		errs = append(errs, err)
	}
	for _, t := range targets {
		var err error
		switch t {
		case TargetOrchestrator:
			// Services of the same process are found at their listen
			// addresses.
			oc := c.Orchestrator
			if slices.Contains(targets, TargetValidator) {
				oc.ValidatorAddr = c.ValidatorListen
			}
			if slices.Contains(targets, TargetExecutor) {
				oc.ExecutorAddr = c.ExecutorListen
			}
			err = oc.Validate()
		case TargetValidator:
			if err = c.Validator.Validate(); err == nil && c.Validator.PolicyFile != "" {
				_, err = validator.LoadPolicyFiles(c.Validator.PolicyFiles()...)
			}
		case TargetExecutor:
			err = c.Executor.Validate()
		case TargetTracer:
			err = c.Tracer.Validate()
		}
		if err == nil {
			err = c.Security.CheckListen(c.listenAddr(t))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t, err))
		}
	}
	if err := c.Redact.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Start.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.checkVerdictKeys(targets); err != nil {
		errs = append(errs, err)
	}
	if err := c.checkOutsideWorkspace(targets); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkOutsideWorkspace refuses, in a process that serves the executor,
// every file or directory the process is configured with that lies inside
// the executor's workspace: the model changes the workspace (fs.write is
// reversible, allowed by the default policy) and reads it, so a policy
// file there is rewritten and reloaded (--policy-reload) as the model's
// own policy, a tools configuration, scripts or keys become the model's,
// a JWKS file signs in whoever holds the key the model wrote there, and
// credentials become its to read.
func (c *Config) checkOutsideWorkspace(targets []string) error {
	if !slices.Contains(targets, TargetExecutor) || c.Executor.Workspace == "" {
		return nil
	}
	ws := realPath(c.Executor.Workspace)
	type named struct{ flag, path string }
	var files []named
	add := func(flag string, paths ...string) {
		for _, p := range paths {
			if p = strings.TrimSpace(p); p != "" {
				files = append(files, named{flag, p})
			}
		}
	}
	add("--tools-config", c.Executor.ToolsConfigFile)
	add("--verdict-trust", strings.Split(c.Executor.VerdictTrust, ",")...)
	add("--nats-credentials", c.NATSCredentialsFile)
	add("--auth-tokens", c.Auth.TokensFile)
	add("--redact-key-file", c.Redact.KeyFile)
	add("--redact-config", c.Redact.File)
	if !strings.Contains(c.Auth.OIDCJWKS, "://") {
		// A JWKS file is read again when it changes: keys written there
		// sign tokens with any roles.
		add("--oidc-jwks", c.Auth.OIDCJWKS)
	}
	add("--tls-cert", c.Security.TLS.Cert)
	add("--tls-key", c.Security.TLS.Key)
	add("--tls-ca", c.Security.TLS.CA)
	if slices.Contains(targets, TargetValidator) {
		add("--policy", c.Validator.PolicyFiles()...)
		add("--verdict-key", c.Validator.VerdictKeyFile)
	}
	if slices.Contains(targets, TargetOrchestrator) {
		add("--scripts-dir", c.Orchestrator.ScriptsDir)
		add("--checkpoint-key-file", c.Orchestrator.Checkpoint.KeyFile)
	}
	if slices.Contains(targets, TargetTracer) {
		add("--tracer-data", c.Tracer.DataDir)
	}
	var errs []error
	for _, f := range files {
		rel, err := filepath.Rel(ws, realPath(f.path))
		// Outside is ".." or under "../"; a name inside may start with
		// two dots ("..policy.yaml").
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			errs = append(errs, fmt.Errorf("%s %s is inside the executor's workspace %s: the model could read and rewrite it; keep it outside",
				f.flag, f.path, c.Executor.Workspace))
		}
	}
	return errors.Join(errs...)
}

// realPath is p absolute, with the symbolic links of its longest existing
// part resolved.
func realPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if parent := filepath.Dir(dir); parent == dir {
			return abs
		} else {
			rest = filepath.Join(filepath.Base(dir), rest)
		}
	}
}

// ProfileLabel is the CPU profiler label that names the service a
// goroutine works for ("orchestrator", "validator", "executor", "tracer";
// "nats-client" for the shared connection, "nats-server" for the embedded
// server).
const ProfileLabel = "xct.service"

// Start connects to NATS and starts targets in dependency order, each on
// its own gRPC listener. If any fails, what started is stopped again.
func Start(ctx context.Context, cfg Config, targets []string, log *slog.Logger, opts Options) (_ *App, err error) {
	if err := cfg.bindInProcess(targets, log); err != nil {
		return nil, err
	}
	if err := cfg.Validate(targets); err != nil {
		return nil, err
	}
	name := "xct-" + strings.Join(targets, "+")
	// Every goroutine a service starts inherits its profiler label, so a
	// CPU profile of one process shows each service's share (the step
	// benchmarks report it per step). The NATS connection is shared.
	defer pprof.SetGoroutineLabels(ctx)
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, "nats-client")))
	creds, err := cfg.natsCredentials(targets, os.Getenv)
	if err != nil {
		return nil, err
	}
	// What a program the executor runs without a sandbox must not be
	// able to read (executor.Config.SecretFiles).
	cfg.Executor.SecretFiles = append(cfg.Executor.SecretFiles, cfg.secretFiles()...)
	cfg.Executor.SecretsInEnv = cfg.Executor.SecretsInEnv || os.Getenv(EnvNATSPassword) != ""
	a := &App{log: log, fatal: make(chan error, 1), stopped: make(chan struct{}), retry: cfg.Start}
	// Each target connects as its own NATS user, with only its own
	// rights (natsauth.Permissions); without credentials they share one
	// anonymous connection.
	conns := map[string]*nats.Conn{}
	for _, t := range targets {
		cr, ok := creds[t]
		if !ok && len(a.conns) > 0 {
			conns[t] = a.conns[0]
			continue
		}
		cname := name
		if ok {
			cname = "xct-" + t
		}
		nc, err := ConnectNATS(cfg.NATSURL, cname, cr.Option())
		if err != nil {
			a.closeConns()
			return nil, err
		}
		conns[t] = nc
		a.conns = append(a.conns, nc)
	}
	if len(creds) == 0 {
		log.Warn("connecting to NATS without credentials: only a server that allows anonymous access accepts it (-nats-credentials)")
	}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a.Stop(sctx)
		}
	}()
	// Tracing first: the gRPC servers and clients built below pick it up.
	if a.stopTelemetry, err = telemetry.Setup(ctx, name); err != nil {
		return nil, err
	}
	authn, err := auth.New(ctx, cfg.Auth, log)
	if err != nil {
		return nil, err
	}
	// Bind every listener first, so services of one process can find each
	// other's real addresses (port 0 included).
	// Until a server belongs to a started module (which Stop stops), a
	// failed Start closes it here: no listener outlives a failed Start.
	servers := map[string]*grpcx.Server{}
	defer func() {
		if err != nil {
			for _, s := range servers {
				s.Stop(ctx)
			}
		}
	}()
	for _, t := range targets {
		// The server's call workers are started here: they take the
		// service's profiler label.
		pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, t)))
		srv := grpcx.NewServer(t, log.With("service", t), grpcx.WithSecurity(cfg.Security), grpcx.WithAuth(authn), grpcx.WithReady(a.notReady))
		if err := srv.Listen(cfg.listenAddr(t)); err != nil {
			return nil, err
		}
		servers[t] = srv
	}
	if srv, ok := servers[TargetValidator]; ok {
		cfg.Orchestrator.ValidatorAddr = srv.Addr()
		// The tracer's debugger decides approvals through the validator
		// of the same process unless told otherwise.
		if cfg.Tracer.ValidatorAddr == "" {
			cfg.Tracer.ValidatorAddr = srv.Addr()
		}
	}
	if srv, ok := servers[TargetExecutor]; ok {
		cfg.Orchestrator.ExecutorAddr = srv.Addr()
	}
	if srv, ok := servers[TargetOrchestrator]; ok && cfg.Tracer.OrchestratorAddr == "" {
		// The debugger's Cancel goes to the orchestrator of the same process.
		cfg.Tracer.OrchestratorAddr = srv.Addr()
	}
	cfg.Orchestrator.Replicas, cfg.Validator.Replicas = cfg.Replicas, cfg.Replicas
	cfg.Executor.Replicas, cfg.Tracer.Replicas = cfg.Replicas, cfg.Replicas
	cfg.Orchestrator.Redact, cfg.Executor.Redact, cfg.Validator.Redact = cfg.Redact, cfg.Redact, cfg.Redact
	cfg.Tracer.RedactRules = cfg.Redact.File // the rules only: the tracer never holds the cluster's key (tracer.Config.RedactRules)
	// Every service tells one monitor whether its writes stored: a
	// stream that cannot store (full) makes the process NOT_SERVING.
	a.natsConns = slices.Clone(a.conns)
	var probeJS jetstream.JetStream
	if len(a.conns) > 0 {
		if probeJS, err = jetstream.New(a.conns[0]); err != nil {
			return nil, fmt.Errorf("jetstream: %w", err)
		}
	}
	a.store = storehealth.New(log, probeJS, a.storeChanged)
	cfg.Orchestrator.StoreHealth, cfg.Executor.StoreHealth = a.store, a.store
	cfg.Validator.StoreHealth, cfg.Tracer.StoreHealth = a.store, a.store

	// NATS and JetStream must answer before a service starts. When they
	// do not yet, every service is served at once, NOT_SERVING and
	// refusing calls with what it waits for, and starts when they answer.
	a.byTarget = conns
	waitErr := a.ready(ctx, a.conns, cfg.NATSURL)
	if waitErr != nil {
		a.waitingFor(waitErr)
		log.Warn("waiting for NATS: serving NOT_SERVING until it answers", "nats", cfg.NATSURL, "reason", waitErr)
	}
	for _, t := range targets {
		pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, t)))
		var svc service
		slog := log.With("service", t)
		nc := conns[t]
		switch t {
		case TargetExecutor:
			svc, err = executor.New(cfg.Executor, nc, slog, opts.ExtraTools...)
		case TargetValidator:
			svc, err = validator.New(cfg.Validator, nc, slog)
		case TargetTracer:
			var tr *tracer.Service
			tcfg := cfg.Tracer
			tcfg.UIAuthorize = tracer.DebuggerAuthorizer(authn)
			tcfg.UIIdentify = tracer.DebuggerIdentifier(authn)
			tcfg.OTLPAuthorize = tracer.OTLPAuthorizer(authn)
			tcfg.ValidatorDial = []grpcx.DialOption{grpcx.WithTLS(cfg.Security.TLS)}
			tr, err = tracer.New(tcfg, nc, slog)
			a.Tracer, svc = tr, tr
		case TargetOrchestrator:
			var o *orchestrator.Service
			// Its calls to the validator and executor carry the
			// process's service identity; models behind grpc: get the
			// transport only, never the service token.
			oopts := append([]orchestrator.Option{
				orchestrator.WithDialOptions(grpcx.ServiceDial(cfg.Security)...),
				orchestrator.WithProposerDialOptions(grpcx.WithTLS(cfg.Security.TLS)),
			}, opts.Orchestrator...)
			o, err = orchestrator.New(cfg.Orchestrator, nc, slog, oopts...)
			a.Orchestrator, svc = o, o
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), t+":") { // named once: "tracer: create data directory …"
				err = fmt.Errorf("%s: %w", t, err)
			}
			return nil, err
		}
		m := &module{target: t, svc: svc, srv: servers[t], errc: make(chan error, 1)}
		if waitErr == nil {
			sctx, cancel := context.WithTimeout(ctx, a.retry.timeout())
			err := svc.Start(sctx)
			cancel()
			if err != nil {
				err = fmt.Errorf("start %s: %w", t, dependencyErr(err, cfg.NATSURL))
				if !dependencyFailure(err) {
					return nil, err
				}
				// NATS answered the probe, then not this start (a leader
				// election, say): wait, as when it did not answer at all.
				waitErr = err
				a.waitingFor(waitErr)
				log.Warn("waiting for NATS: serving NOT_SERVING until a start succeeds", "service", t, "reason", waitErr)
			} else {
				m.started = true
			}
		}
		svc.Register(m.srv.GRPC)
		a.modules = append(a.modules, m)
		delete(servers, t) // Stop stops it now
		go func() { m.errc <- m.srv.Serve() }()
		log.Info("serving", "service", t, "addr", m.srv.Addr())
	}
	a.mu.Lock()
	a.serving = waitErr == nil
	a.mu.Unlock()
	if a.Orchestrator != nil {
		a.depsNotServing()
		a.depsDone = make(chan struct{})
		go a.watchDeps(a.Orchestrator, a.depsDone) //nolint:gosec // G118: bounded by Stop, not by Start's ctx
	}
	if cfg.HealthListen != "" && len(a.modules) > 0 {
		// Every module reports the same status; the probe port shows the
		// first one's, NOT_SERVING included while it drains.
		if a.health, err = grpcx.ServeHealth(cfg.HealthListen, a.modules[0].srv.Health); err != nil {
			return nil, err
		}
		log.Info("serving health", "addr", a.health.Addr())
	}
	// Without NATS no service can record or read anything: report
	// NOT_SERVING while the connection is down, so probes and balancers
	// move away, and SERVING again once it is back.
	allConns := slices.Clone(a.conns)
	for _, nc := range allConns {
		nc.SetErrorHandler(func(c *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				a.natsRefusals.Add(1)
				log.Error("NATS refused a request of this service: its user lacks the permission (natsauth)", "connection", c.Opts.Name, "err", err)
				return
			}
			log.Warn("NATS", "connection", c.Opts.Name, "err", err)
		})
		nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // our own close or drain at shutdown
			}
			log.Error("lost NATS: reporting NOT_SERVING", "err", err)
			a.setServing(false)
		})
		nc.SetReconnectHandler(func(*nats.Conn) {
			if a.notReady() != nil {
				return // still starting: startWhenReady reports SERVING
			}
			for _, c := range allConns {
				if !c.IsConnected() {
					return // SERVING once every connection is back
				}
			}
			if err := a.store.Err(); err != nil {
				log.Info("NATS is back; still NOT_SERVING: a stream cannot store", "reason", err)
				a.setServing(false)
				return
			}
			log.Info("NATS is back: reporting SERVING")
			a.setServing(true)
		})
	}
	if waitErr != nil {
		// The start outlives Start's ctx (the caller's deadline for
		// binding and configuring); Stop ends it.
		go a.startWhenReady(cfg.NATSURL, allConns) //nolint:gosec // G118: bounded by Stop, not by Start's ctx
	}
	return a, nil
}

// storeChanged reports a stream filling (NOT_SERVING) or storing again
// (SERVING, if the services have started and every connection is up).
func (a *App) storeChanged() {
	if a.notReady() != nil {
		return // still starting: startWhenReady reports the status
	}
	for _, c := range a.natsConns {
		if !c.IsConnected() {
			return // the reconnect handler reports it
		}
	}
	a.setServing(a.store.Err() == nil)
}

// setServing sets the health of every service this process serves.
func (a *App) setServing(ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, m := range a.modules {
		for svc := range m.srv.GRPC.GetServiceInfo() {
			m.srv.Health.SetServingStatus(svc, st)
		}
		m.srv.Health.SetServingStatus("", st)
	}
	a.serving = ok
	a.setDepsAllLocked()
}

// StoreHealth is the process's store health: what it knows of
// JetStream's room (services report NOT_SERVING while a stream is full).
func (a *App) StoreHealth() *storehealth.Monitor { return a.store }

// HealthAddr is the address of the health-only listener ("" without
// --health-listen).
func (a *App) HealthAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.health == nil {
		return ""
	}
	return a.health.Addr()
}

// Addr returns the address a target listens on ("" if it does not run).
func (a *App) Addr(target string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.modules {
		if m.target == target {
			return m.srv.Addr()
		}
	}
	return ""
}

// Err returns a channel that yields the first serving error of any target.
func (a *App) Err() <-chan error {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(chan error, len(a.modules)+1)
	go func() {
		select {
		case err := <-a.fatal:
			out <- err
		case <-a.stopped:
		}
	}()
	for _, m := range a.modules {
		go func() {
			if err := <-m.errc; err != nil {
				out <- err
			}
		}()
	}
	return out
}

// Stop stops targets in reverse start order: each reports NOT_SERVING,
// finishes its own work (the orchestrator records how its runs ended), then
// drains its gRPC calls until ctx ends. The NATS
// connection is drained last, then buffered spans are flushed.
func (a *App) Stop(ctx context.Context) {
	a.mu.Lock()
	modules := a.modules
	a.modules = nil
	a.mu.Unlock()
	if a.stopped != nil {
		select {
		case <-a.stopped:
		default:
			close(a.stopped) // a start still waiting for NATS gives up
		}
	}
	if a.depsDone != nil {
		<-a.depsDone // the dependencies' watch ends before the orchestrator
	}
	a.starting.Lock() // a start in progress finishes first
	defer a.starting.Unlock()
	for i := len(modules) - 1; i >= 0; i-- {
		m := modules[i]
		m.srv.Health.Shutdown() // NOT_SERVING: probes and balancers move away
		if m.started {
			if err := m.svc.Stop(ctx); err != nil {
				a.log.Warn("stop", "service", m.target, "err", err)
			}
		}
		m.srv.Stop(ctx)
	}
	if a.health != nil {
		a.health.Stop()
		a.health = nil
	}
	a.store.Close()
	a.closeConns()
	if a.stopTelemetry != nil {
		if err := a.stopTelemetry(ctx); err != nil {
			a.log.Warn("stop telemetry", "err", err)
		}
		a.stopTelemetry = nil
	}
}

// closeConns drains every NATS connection (closing one that cannot drain).
func (a *App) closeConns() {
	for _, nc := range a.conns {
		if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			nc.Close()
		}
	}
	a.conns = nil
}

// NATSRefusals is how many requests NATS refused this process's users
// since Start (permissions violations; tests expect none).
func (a *App) NATSRefusals() int64 { return a.natsRefusals.Load() }
