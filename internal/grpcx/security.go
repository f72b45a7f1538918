package grpcx

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/auth"
)

// Security is how a process protects its gRPC calls, as a server and as a
// client of the other services (flags).
type Security struct {
	// TLS files (mTLS): servers require client certificates signed by the
	// CA; clients verify servers against it and present their own.
	TLS TLSFiles
	// Plaintext allows serving without TLS, on loopback addresses only
	// unless PlaintextAny.
	Plaintext    bool
	PlaintextAny bool
	// ServiceToken is the bearer token this process's services send when
	// they call each other (plaintext development, where there is no
	// certificate to identify them).
	ServiceToken string
	// RateLimit is the sustained calls per second allowed per principal
	// (0: unlimited), RateBurst the bucket size. XCT's own services are not
	// limited.
	RateLimit float64
	RateBurst int
}

// Default rate limits per principal.
const (
	DefaultRateLimit = 50
	DefaultRateBurst = 100
)

// RegisterFlags registers the transport and rate-limit flags.
func (s *Security) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.TLS.Cert, "tls-cert", "", "this process's certificate (PEM), re-read when it changes")
	fs.StringVar(&s.TLS.Key, "tls-key", "", "the certificate's private key (PEM)")
	fs.StringVar(&s.TLS.CA, "tls-ca", "", "the CA bundle (PEM) that peers' certificates must chain to")
	fs.BoolVar(&s.Plaintext, "plaintext", false, "serve without TLS (local development; loopback addresses only unless --plaintext-any)")
	fs.BoolVar(&s.PlaintextAny, "plaintext-any", false, "with --plaintext, allow plaintext on any address (never in production)")
	fs.StringVar(&s.ServiceToken, "service-token", "", "bearer token the services send each other when they have no certificate (prefer XCT_SERVICE_TOKEN)")
	fs.Float64Var(&s.RateLimit, "rate-limit", DefaultRateLimit, "calls per second allowed per principal (0: unlimited); XCT's services are not limited")
	fs.IntVar(&s.RateBurst, "rate-burst", DefaultRateBurst, "burst of calls allowed per principal")
}

// CheckListen says whether a server may listen on addr with this
// configuration: TLS, or plaintext when explicitly allowed (on loopback
// only unless PlaintextAny).
func (s Security) CheckListen(addr string) error { return s.checkTransport(addr) }

func (s Security) checkTransport(addr string) error {
	switch {
	case s.TLS.Enabled() && s.Plaintext:
		return errors.New("--plaintext and TLS files are both set: choose one")
	case s.TLS.Enabled():
		return nil
	case !s.Plaintext:
		return errors.New("no transport security: set --tls-cert, --tls-key and --tls-ca (or --plaintext for local development)")
	case s.PlaintextAny:
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if !isLoopback(host) {
		return fmt.Errorf("--plaintext serves on loopback addresses only, not %q (add --plaintext-any to override)", addr)
	}
	return nil
}

// isLoopback reports whether host is a loopback name or address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// targetHost is the host of a dial target ("host:port", "dns:///host:port").
func targetHost(target string) string {
	if i := strings.Index(target, ":///"); i >= 0 {
		target = target[i+4:]
	}
	if host, _, err := net.SplitHostPort(target); err == nil {
		return host
	}
	return target
}

// authorizer authenticates, authorizes and rate-limits every call but the
// open ones (health). A refusal is logged with the principal and method,
// and the handler never runs.
type authorizer struct {
	authn  *auth.Authenticator
	table  auth.Table
	limits *limiter
	log    *slog.Logger
}

// authenticate is the go-grpc-middleware auth function.
func (z *authorizer) authenticate(ctx context.Context) (context.Context, error) {
	method, _ := grpc.Method(ctx)
	if z.authn == nil {
		z.log.WarnContext(ctx, "call refused", "code", codes.Unauthenticated, "principal", "", "method", method, "reason", "no authenticator configured")
		return nil, status.Error(codes.Unauthenticated, "authentication is not configured on this server")
	}
	p, err := z.authn.AuthenticateGRPC(ctx)
	if err != nil {
		z.log.WarnContext(ctx, "call refused", "code", codes.Unauthenticated, "principal", "", "method", method, "reason", err.Error())
		msg := "invalid or unknown credentials"
		switch {
		case auth.Expired(err):
			msg = "token expired"
		case strings.Contains(err.Error(), "no bearer token and no service certificate"):
			msg = "no credentials: send \"authorization: Bearer <token>\" or a service certificate"
		}
		return nil, status.Error(codes.Unauthenticated, msg)
	}
	return auth.NewContext(ctx, p), nil
}

// authorize checks the table and the caller's rate limit.
func (z *authorizer) authorize(ctx context.Context, method string) error {
	p, ok := auth.FromContext(ctx)
	if !ok {
		z.log.WarnContext(ctx, "call refused", "code", codes.Unauthenticated, "principal", "", "method", method, "reason", "no principal")
		return status.Error(codes.Unauthenticated, "unauthenticated")
	}
	if err := z.table.Authorize(p, method); err != nil {
		z.log.WarnContext(ctx, "call refused", "code", codes.PermissionDenied, "principal", p.Name, "roles", p.Roles, "method", method, "reason", err.Error())
		return status.Errorf(codes.PermissionDenied, "%s may not call %s", p.Name, method)
	}
	if !p.Service && !z.limits.allow(p.Name) {
		z.log.WarnContext(ctx, "call refused", "code", codes.ResourceExhausted, "principal", p.Name, "method", method, "reason", "rate limit")
		return status.Errorf(codes.ResourceExhausted, "rate limit of %s exceeded; slow down", p.Name)
	}
	return nil
}

func (z *authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if auth.IsOpen(info.FullMethod) {
		return handler(ctx, req)
	}
	if err := z.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (z *authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if auth.IsOpen(info.FullMethod) {
		return handler(srv, ss)
	}
	if err := z.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// needsDeadline reports whether a method must be called with a deadline:
// everything but health and reflection (probes and grpcurl).
func needsDeadline(method string) bool {
	return !auth.IsOpen(method) && !strings.HasPrefix(method, "/grpc.reflection.")
}

var errNoDeadline = status.Error(codes.InvalidArgument, "a deadline is required: set a timeout on the call")

func deadlineUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, ok := ctx.Deadline(); !ok && needsDeadline(info.FullMethod) {
		return nil, errNoDeadline
	}
	return handler(ctx, req)
}

func deadlineStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if _, ok := ss.Context().Deadline(); !ok && needsDeadline(info.FullMethod) {
		return errNoDeadline
	}
	return handler(srv, ss)
}

// limiter is a token bucket per principal. Buckets idle for longer than
// limiterIdle are dropped when the map grows, so it stays bounded by the
// principals active recently.
type limiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*bucket
	sweepAt int
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

const limiterIdle = 10 * time.Minute

func newLimiter(perSecond float64, burst int) *limiter {
	if burst < 1 {
		burst = 1
	}
	return &limiter{rate: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}, sweepAt: 1024}
}

func (l *limiter) allow(principal string) bool {
	if l == nil || l.rate <= 0 {
		return true
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[principal]
	if !ok {
		if len(l.buckets) >= l.sweepAt {
			for k, v := range l.buckets {
				if now.Sub(v.seen) > limiterIdle {
					delete(l.buckets, k)
				}
			}
			l.sweepAt = max(1024, 2*len(l.buckets))
		}
		b = &bucket{lim: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[principal] = b
	}
	b.seen = now
	return b.lim.AllowN(now, 1)
}

// bearerCreds sends a bearer token with every call. The metadata is made
// once: gRPC copies what GetRequestMetadata returns into the call's
// headers and does not change the map (TestBearerMetadataKept), so each
// call need not allocate its own map and header value.
type bearerCreds struct {
	md     map[string]string
	secure bool
}

func newBearerCreds(token string, secure bool) bearerCreds {
	return bearerCreds{md: map[string]string{"authorization": "Bearer " + token}, secure: secure}
}

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

func (b bearerCreds) RequireTransportSecurity() bool { return b.secure }

// TokenCallOption sends token with one call (for a server forwarding its
// caller's identity, e.g. the tracer's HTTP API calling the validator).
// The connection must not carry a token of its own.
func TokenCallOption(token string) grpc.CallOption {
	return grpc.PerRPCCredentials(newBearerCreds(token, false))
}

// HealthServer is a plaintext gRPC server that serves only the health
// service h, for probes that cannot speak mTLS (kubelet's gRPC probes). It
// says SERVING or NOT_SERVING and nothing else, so it needs no
// authentication.
type HealthServer struct {
	srv *grpc.Server
	lis net.Listener
}

// ServeHealth listens on addr and serves h there until Stop.
func ServeHealth(addr string, h healthpb.HealthServer) (*HealthServer, error) {
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health: listen on %s: %w", addr, err)
	}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(4<<10),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ServerMinPingInterval}),
	)
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	return &HealthServer{srv: srv, lis: lis}, nil
}

// Addr is the address the health server listens on.
func (h *HealthServer) Addr() string { return h.lis.Addr().String() }

// Stop stops the health server.
func (h *HealthServer) Stop() { h.srv.Stop() }
