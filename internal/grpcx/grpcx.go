// Package grpcx is the one place that builds XCT's gRPC servers and client
// connections, so every service gets the same interceptors, health and
// reflection, limits, tracing and shutdown behaviour. When OpenTelemetry is
// configured (internal/telemetry), servers and clients carry otelgrpc stats
// handlers, so trace context crosses every hop.
//
// Every server authenticates and authorizes each call (internal/auth; only
// health is open), requires a deadline, enforces keepalive, limits each
// principal's call rate and serves mTLS with certificates re-read on
// rotation, or plaintext when explicitly allowed (loopback only by
// default). docs/security.md describes it.
package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/telemetry"
)

// MaxMessageBytes bounds gRPC messages both ways.
const MaxMessageBytes = 16 << 20

// Server is a gRPC server with health and reflection registered.
type Server struct {
	GRPC   *grpc.Server
	Health *health.Server
	log    *slog.Logger
	lis    net.Listener
	name   string
	cfg    serverConfig
	// credsErr is why the TLS files could not be loaded (Listen reports it).
	credsErr error
}

// ServerOption configures a server.
type ServerOption func(*serverConfig)

type serverConfig struct {
	sec   Security
	authn *auth.Authenticator
	table auth.Table
	ready func() error
}

// WithReady makes the server refuse every call but health and reflection
// with UNAVAILABLE and ready's message while ready returns an error (a
// dependency the service waits for), and start NOT_SERVING then.
func WithReady(ready func() error) ServerOption { return func(c *serverConfig) { c.ready = ready } }

// WithSecurity sets the transport (TLS or explicitly allowed plaintext)
// and the per-principal rate limit.
func WithSecurity(s Security) ServerOption { return func(c *serverConfig) { c.sec = s } }

// WithAuth sets how callers are authenticated. Without it only service
// certificates authenticate, so a plaintext server refuses every call but
// health.
func WithAuth(a *auth.Authenticator) ServerOption { return func(c *serverConfig) { c.authn = a } }

// WithTable replaces the authorization table (auth.DefaultTable).
func WithTable(t auth.Table) ServerOption { return func(c *serverConfig) { c.table = t } }

// StreamWorkers is how many goroutines of a server take its calls, each
// call after another. A call given a new goroutine grows that goroutine's
// stack from a few KB, copying it, once or twice per call (signing and
// verifying verdicts and the interceptor chain need more than the first
// stack): ~10-15% of the executor's and the validator's CPU per step. A
// worker keeps its stack between calls. When every worker is busy a call
// gets a new goroutine, as without workers: with 64 workers, 256
// concurrent runs still paid ~5% of the executor's CPU in stack growth;
// with 256, 84-87 instead of 92-98 us of executor CPU per step. An idle
// worker costs its stack (shrunk by the collector) and nothing else. A
// stream holds its worker until it ends. The workers are started by
// NewServer and inherit the caller's profiler labels (internal/app sets
// the service's before it).
const StreamWorkers = 256

// Keepalive: servers ping idle clients and refuse clients that ping more
// often than ServerMinPingInterval; clients ping every ClientPingInterval.
const (
	ServerMinPingInterval = 10 * time.Second
	ClientPingInterval    = 30 * time.Second
)

// ReconnectMaxDelay bounds the wait between two attempts to reach a peer
// that is down. gRPC's default grows to 120 s: after an outage of a few
// minutes, steps and the debugger's decisions kept failing UNAVAILABLE for
// up to two minutes after the validator or executor was back. The first
// attempts keep gRPC's default pace (1 s, growing 1.6x with jitter).
const ReconnectMaxDelay = 5 * time.Second

// connectParams is how a client connection reaches a peer again
// (ReconnectMaxDelay).
func connectParams() grpc.ConnectParams {
	b := backoff.DefaultConfig
	b.MaxDelay = ReconnectMaxDelay
	return grpc.ConnectParams{Backoff: b, MinConnectTimeout: 20 * time.Second}
}

// NewServer builds a server for the named service. Interceptors, outermost
// first: logging (every call's code and duration, at the level its code
// calls for: an OK call only at DEBUG; calllog.go), recovery (a panic in a
// handler or interceptor becomes INTERNAL instead of ending the process),
// authentication (go-grpc-middleware's auth, skipped for health),
// authorization and the per-principal rate limit, and the required
// deadline, and innermost the one error mapping of the boundary
// (errors.go: a handler's error that is neither a status nor a context
// error is logged with a correlation id and answered as INTERNAL without
// its text). A refused call never reaches its handler.
func NewServer(name string, log *slog.Logger, options ...ServerOption) *Server {
	cfg := serverConfig{table: auth.DefaultTable()}
	for _, o := range options {
		o(&cfg)
	}
	if cfg.authn == nil {
		// Certificates only: every token is refused.
		cfg.authn, _ = auth.New(context.Background(), auth.Config{}, log)
	}
	z := &authorizer{authn: cfg.authn, table: cfg.table, limits: newLimiter(cfg.sec.RateLimit, cfg.sec.RateBurst), log: log}
	authenticate := func(ctx context.Context) (context.Context, error) {
		if m, _ := grpc.Method(ctx); auth.IsOpen(m) {
			return ctx, nil
		}
		return z.authenticate(ctx)
	}
	onPanic := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in handler", "service", name, "panic", fmt.Sprint(p))
		return status.Error(codes.Internal, "internal error")
	})
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.NumStreamWorkers(StreamWorkers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ServerMinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.ChainUnaryInterceptor(
			logUnary(log),
			recovery.UnaryServerInterceptor(onPanic),
			readyUnary(cfg.ready),
			grpcauth.UnaryServerInterceptor(authenticate),
			z.unary,
			deadlineUnary,
			ErrorsUnary(log),
		),
		grpc.ChainStreamInterceptor(
			logStream(log),
			recovery.StreamServerInterceptor(onPanic),
			readyStream(cfg.ready),
			grpcauth.StreamServerInterceptor(authenticate),
			z.stream,
			deadlineStream,
			ErrorsStream(log),
		),
	}
	srv := &Server{log: log, name: name, cfg: cfg}
	if cfg.sec.TLS.Enabled() {
		files, err := loadTLS(cfg.sec.TLS, true, log)
		if err != nil {
			srv.credsErr = err
		} else {
			opts = append(opts, grpc.Creds(&reloadingCreds{files: files, server: true}))
		}
	}
	if telemetry.Enabled() {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(notHealth))))
	}
	s := grpc.NewServer(opts...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	srv.GRPC, srv.Health = s, h
	return srv
}

// Listen binds addr ("host:port"; port 0 picks a free one). It fails when
// the transport is not secured: TLS files that cannot be loaded, or
// plaintext that was not allowed (or not on loopback).
func (s *Server) Listen(addr string) error {
	if s.credsErr != nil {
		return fmt.Errorf("%s: %w", s.name, s.credsErr)
	}
	if err := s.cfg.sec.checkTransport(addr); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", s.name, addr, err)
	}
	s.lis = lis
	return nil
}

// Addr is the address the server listens on, after Listen.
func (s *Server) Addr() string {
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// CheckTable returns an error naming every registered method the
// authorization table has no rule for.
func (s *Server) CheckTable() error {
	var methods []string
	for svc, info := range s.GRPC.GetServiceInfo() {
		for _, m := range info.Methods {
			methods = append(methods, "/"+svc+"/"+m.Name)
		}
	}
	if missing := s.cfg.table.Missing(methods); len(missing) > 0 {
		return fmt.Errorf("%s: no authorization rule for %v", s.name, missing)
	}
	return nil
}

// LivenessService is the health service name that says the process is
// alive and serves gRPC: SERVING from Serve until Stop, whatever its
// services wait for, whether NATS is reachable or a stream can store.
// Kubernetes' liveness probe asks it: a restart reconnects nothing the
// NATS client does not and frees no store. The readiness and startup
// probes ask "" (the process can do its work), which goes NOT_SERVING
// for those (internal/app).
const LivenessService = "liveness"

// Serve marks every registered service SERVING and serves until Stop. A
// server with a method the authorization table does not name refuses to
// start.
func (s *Server) Serve() error {
	if err := s.CheckTable(); err != nil {
		return err
	}
	st := healthpb.HealthCheckResponse_SERVING
	if s.cfg.ready != nil && s.cfg.ready() != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING // until the app says it is ready
	}
	for svc := range s.GRPC.GetServiceInfo() {
		s.Health.SetServingStatus(svc, st)
	}
	s.Health.SetServingStatus("", st)
	s.Health.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	if err := s.GRPC.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("%s: serve: %w", s.name, err)
	}
	return nil
}

// Stop reports NOT_SERVING, lets in-flight calls finish until ctx ends, then
// stops hard.
func (s *Server) Stop(ctx context.Context) {
	s.Health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.GRPC.Stop()
		<-done
	}
	// A server stopped before Serve (a failed start) still holds its
	// listener: gRPC closes only the listeners it serves.
	if s.lis != nil {
		_ = s.lis.Close()
	}
}

// readyUnary and readyStream refuse calls while ready reports an error.
func readyUnary(ready func() error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := notReady(ready, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func readyStream(ready func() error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := notReady(ready, info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func notReady(ready func() error, method string) error {
	if ready == nil || auth.IsOpen(method) {
		return nil
	}
	if err := ready(); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	return nil
}

// DialOption configures a client connection.
type DialOption func(*dialConfig)

type dialConfig struct {
	tls          TLSFiles
	token        string
	plaintextAny bool
	log          *slog.Logger
}

// WithTLS dials with mTLS: the server is verified against files.CA and
// files.Cert is presented (files re-read on rotation).
func WithTLS(files TLSFiles) DialOption { return func(c *dialConfig) { c.tls = files } }

// WithToken sends "authorization: Bearer <token>" with every call. Over
// plaintext it is sent to loopback addresses only, unless
// WithPlaintextAny.
func WithToken(token string) DialOption { return func(c *dialConfig) { c.token = token } }

// WithPlaintextAny allows a token over plaintext to any address.
func WithPlaintextAny() DialOption { return func(c *dialConfig) { c.plaintextAny = true } }

// ServiceDial is how one of XCT's services dials another: its certificate
// when TLS is configured, and its service token when one is set.
func ServiceDial(s Security) []DialOption {
	opts := []DialOption{WithTLS(s.TLS)}
	if s.ServiceToken != "" {
		opts = append(opts, WithToken(s.ServiceToken))
	}
	if s.PlaintextAny {
		opts = append(opts, WithPlaintextAny())
	}
	return opts
}

// Dial opens a client connection to an XCT service. Connections are lazy:
// an unreachable peer shows up as UNAVAILABLE on the first call. The name is
// resolved through DNS and calls are spread round-robin over every address
// it resolves to, so a headless Kubernetes Service balances across replicas.
// Without WithTLS the connection is plaintext. A call is one attempt: no
// service config is taken from the resolver and none retries. Every call gets a deadline
// (DefaultCallTimeout, DefaultStreamTimeout for streams) when the caller's
// context has none, and the connection sends keepalive pings.
func Dial(addr string, options ...DialOption) (*grpc.ClientConn, error) {
	var cfg dialConfig
	for _, o := range options {
		o(&cfg)
	}
	creds := insecure.NewCredentials()
	if cfg.tls.Enabled() {
		files, err := loadTLS(cfg.tls, false, cfg.log)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		creds = &reloadingCreds{files: files}
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
		// That service config only: none from the resolver (a TXT record
		// _grpc_config.NAME in DNS), whose retry policy would run a call
		// that reached the server again (an Execute, a Validate, a tool's
		// Invoke), and no retry of such a call at all. gRPC still retries,
		// transparently, a call that never reached the server's handlers.
		grpc.WithDisableServiceConfig(), grpc.WithDisableRetry(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ClientPingInterval, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithChainUnaryInterceptor(defaultDeadlineUnary),
		grpc.WithChainStreamInterceptor(defaultDeadlineStream),
		grpc.WithConnectParams(connectParams()),
	}
	if cfg.token != "" {
		if !cfg.tls.Enabled() && !cfg.plaintextAny && !isLoopback(targetHost(addr)) {
			return nil, fmt.Errorf("dial %s: refusing to send a bearer token without TLS to a non-loopback address (set --tls-ca, or --plaintext-any)", addr)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(newBearerCreds(cfg.token, cfg.tls.Enabled())))
	}
	if telemetry.Enabled() {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithFilter(notHealth))))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// notHealth keeps health checks out of traces: probes would drown the runs.
var notHealth = filters.Not(filters.HealthCheck())

// DefaultCallTimeout bounds a call between services when the caller's
// context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// DefaultStreamTimeout bounds a stream (a watch) whose caller set no
// deadline.
const DefaultStreamTimeout = 24 * time.Hour

func defaultDeadlineUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCallTimeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func defaultDeadlineStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if _, ok := ctx.Deadline(); ok {
		return streamer(ctx, desc, cc, method, opts...)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStreamTimeout)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &cancelOnEnd{ClientStream: cs, cancel: cancel}, nil
}

// cancelOnEnd releases a stream's default deadline when the stream ends.
type cancelOnEnd struct {
	grpc.ClientStream
	cancel context.CancelFunc
}

func (s *cancelOnEnd) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
	}
	return err
}
