package tracer

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/lctl"
)

// Errors callers act on. Inside the package they are wrapped with context;
// toStatus turns them into gRPC codes at the RPC boundary.
var (
	// ErrChainNotFound means the tracer has materialized no event of the chain.
	ErrChainNotFound = errors.New("chain not found")
	// ErrSeqOutOfRange means a replay asked for a seq past the chain's end.
	ErrSeqOutOfRange = errors.New("seq is past the end of the chain")
	// ErrInvalidRequest means a request field has a value the tracer cannot
	// use (a negative limit, an unknown export format).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNotReady means Start has not loaded the store yet.
	ErrNotReady = errors.New("tracer is starting")
	// ErrStopped means the service was stopped.
	ErrStopped = errors.New("tracer stopped")
	// ErrAlreadyStarted means Start was called twice. A stopped Service is
	// not restarted: build a new one with New.
	ErrAlreadyStarted = errors.New("tracer already started")
)

// toStatus turns an error into the gRPC status a caller can act on. Errors
// nobody can act on are logged and reported as INTERNAL without details.
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrChainNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, lctl.ErrInvalidChainID), errors.Is(err, ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrSeqOutOfRange):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, ErrNotReady), errors.Is(err, ErrStopped):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	log.ErrorContext(ctx, "tracer request failed", "err", err)
	return status.Error(codes.Internal, "internal error")
}
