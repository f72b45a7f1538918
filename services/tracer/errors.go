package tracer

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/lctl"
)

// Errors callers act on. Inside the package they are wrapped with context;
// errorCodes turns them into gRPC codes at the RPC boundary.
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

// errorCodes is the code of each error a caller of the tracer can act on;
// grpcx maps context errors and hides any other error (logged with a
// correlation id).
var errorCodes = grpcx.Codes{
	{Err: ErrChainNotFound, Code: codes.NotFound},
	{Err: lctl.ErrInvalidChainID, Code: codes.InvalidArgument},
	{Err: ErrInvalidRequest, Code: codes.InvalidArgument},
	{Err: ErrSeqOutOfRange, Code: codes.OutOfRange},
	{Err: ErrNotReady, Code: codes.Unavailable},
	{Err: ErrStopped, Code: codes.Unavailable},
}
