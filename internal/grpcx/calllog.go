package grpcx

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// codeLevel is the level a finished call is logged at: the calls that
// went as a caller may expect (OK, and refusals that are the caller's
// business) at DEBUG, failures of the server at ERROR, the rest at WARN.
func codeLevel(c codes.Code) slog.Level {
	switch c {
	case codes.OK, codes.Canceled, codes.NotFound, codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition:
		return slog.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return slog.LevelError
	}
	return slog.LevelWarn
}

// logUnary logs each finished call ("finished call", with its method,
// peer, code, error and duration) at codeLevel. The line is built only
// when its level is enabled: with INFO logging an OK call costs a clock
// read and a level check, not the fields, time stamps and context the
// general-purpose logging middleware made for every call.
func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		logCall(ctx, log, info.FullMethod, "unary", start, err)
		return resp, err
	}
}

// logStream is logUnary for streams.
func logStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		kind := "bidi_stream"
		switch {
		case info.IsClientStream && !info.IsServerStream:
			kind = "client_stream"
		case info.IsServerStream && !info.IsClientStream:
			kind = "server_stream"
		}
		logCall(ss.Context(), log, info.FullMethod, kind, start, err)
		return err
	}
}

// logCall writes the line of a finished call if its level is enabled.
func logCall(ctx context.Context, log *slog.Logger, fullMethod, kind string, start time.Time, err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	}
	code := status.Code(err)
	lvl := codeLevel(code)
	if !log.Enabled(ctx, lvl) {
		return
	}
	service, method := splitMethod(fullMethod)
	attrs := make([]slog.Attr, 0, 11)
	attrs = append(attrs,
		slog.String("protocol", "grpc"),
		slog.String("grpc.component", "server"),
		slog.String("grpc.service", service),
		slog.String("grpc.method", method),
		slog.String("grpc.method_type", kind),
	)
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	attrs = append(attrs, slog.String("grpc.start_time", start.Format(time.RFC3339)))
	if d, ok := ctx.Deadline(); ok {
		attrs = append(attrs, slog.String("grpc.request.deadline", d.Format(time.RFC3339)))
	}
	attrs = append(attrs, slog.String("grpc.code", code.String()))
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", err.Error()))
	}
	attrs = append(attrs, slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000))
	log.LogAttrs(ctx, lvl, "finished call", attrs...)
}

// splitMethod splits "/pkg.Service/Method".
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", "unknown"
}
