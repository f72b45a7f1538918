// Package grpcx is the one place that builds XCT's gRPC servers and client
// connections, so every service gets the same interceptors, health and
// reflection, limits, tracing and shutdown behaviour. When OpenTelemetry is
// configured (internal/telemetry), servers and clients carry otelgrpc stats
// handlers, so trace context crosses every hop.
package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

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
}

// NewServer builds a server for the named service. Recovery is the
// innermost interceptor, so a panic in a handler becomes INTERNAL instead of
// ending the process; logging records every call's code and duration.
func NewServer(name string, log *slog.Logger) *Server {
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	onPanic := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in handler", "service", name, "panic", fmt.Sprint(p))
		return status.Error(codes.Internal, "internal error")
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(func(c codes.Code) logging.Level {
			switch c {
			case codes.OK, codes.Canceled, codes.NotFound, codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition:
				return logging.LevelDebug
			case codes.Internal, codes.Unknown, codes.DataLoss:
				return logging.LevelError
			}
			return logging.LevelWarn
		}),
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(logger, logOpts...),
			recovery.UnaryServerInterceptor(onPanic),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(logger, logOpts...),
			recovery.StreamServerInterceptor(onPanic),
		),
	}
	if telemetry.Enabled() {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(notHealth))))
	}
	s := grpc.NewServer(opts...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	return &Server{GRPC: s, Health: h, log: log, name: name}
}

// Listen binds addr ("host:port"; port 0 picks a free one).
func (s *Server) Listen(addr string) error {
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

// Serve marks every registered service SERVING and serves until Stop.
func (s *Server) Serve() error {
	for svc := range s.GRPC.GetServiceInfo() {
		s.Health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
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
}

// Dial opens a client connection to an XCT service. Connections are lazy:
// an unreachable peer shows up as UNAVAILABLE on the first call. The name is
// resolved through DNS and calls are spread round-robin over every address
// it resolves to, so a headless Kubernetes Service balances across replicas.
func Dial(addr string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
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
