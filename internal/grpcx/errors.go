package grpcx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The one error mapping at the gRPC boundary. A service declares, in its
// errors.go, only which of its sentinel errors a caller can act on and with
// which code (a Codes table); its handlers return Codes.Status(err). The
// server's innermost interceptor (installed by NewServer) then finishes the
// mapping for every RPC:
//
//   - a status error (from the table, or built by the handler) passes
//     through unchanged;
//   - context.Canceled and context.DeadlineExceeded become CANCELED and
//     DEADLINE_EXCEEDED;
//   - anything else is a failure no caller can act on: it is logged with
//     the method and a correlation id, and the caller gets INTERNAL
//     "internal error (id …)" — never the error's own text, which may name
//     files, addresses or stored values.

// Code pairs a sentinel error with the gRPC code of any error wrapping it.
type Code struct {
	Err  error
	Code codes.Code
}

// Codes is a service's sentinel → code table. The first entry an error
// wraps decides its code.
type Codes []Code

// Status returns err as the status its caller acts on: nil for nil, a
// status error unchanged, an error wrapping a sentinel of c (or a context
// error) as a status with that code and err's message. Any other error is
// returned unchanged, so the server's interceptor logs and hides it.
func (c Codes) Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range c {
		if errors.Is(err, e.Err) {
			return status.Error(e.Code, err.Error())
		}
	}
	if code, ok := contextCode(err); ok {
		return status.Error(code, err.Error())
	}
	return err
}

// Code returns the code c gives err, or codes.Unknown when err wraps none
// of its sentinels.
func (c Codes) Code(err error) codes.Code {
	for _, e := range c {
		if errors.Is(err, e.Err) {
			return e.Code
		}
	}
	return codes.Unknown
}

// contextCode maps the context errors.
func contextCode(err error) (codes.Code, bool) {
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, true
	}
	return codes.OK, false
}

// boundaryError is what a handler's error becomes on the wire (see the
// comment at the top of this file).
func boundaryError(ctx context.Context, log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if code, ok := contextCode(err); ok {
		return status.Error(code, err.Error())
	}
	id := correlationID()
	log.ErrorContext(ctx, "request failed", "method", method, "error_id", id, "err", err)
	return status.Errorf(codes.Internal, "internal error (id %s)", id)
}

// correlationID names one hidden failure in the log and in the answer.
func correlationID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrorsUnary is the unary server interceptor of the boundary mapping.
// NewServer installs it innermost; a server built otherwise can chain it.
func ErrorsUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			return resp, boundaryError(ctx, log, info.FullMethod, err)
		}
		return resp, nil
	}
}

// ErrorsStream is the streaming counterpart of ErrorsUnary.
func ErrorsStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return boundaryError(ss.Context(), log, info.FullMethod, handler(srv, ss))
	}
}
