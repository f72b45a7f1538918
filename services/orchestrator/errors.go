package orchestrator

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/lctl"
)

// Errors the orchestrator's RPCs map to gRPC codes.
var (
	// ErrRunNotFound: no run with that id (NotFound).
	ErrRunNotFound = errors.New("run not found")
	// ErrBadModel: the model reference cannot be used (InvalidArgument).
	ErrBadModel = errors.New("invalid model")
	// ErrRunExists: a chain with that run id already exists (AlreadyExists).
	ErrRunExists = errors.New("run already exists")
	// ErrRunFinished: the run already ended (FailedPrecondition).
	ErrRunFinished = errors.New("run already finished")
	// ErrNoExecutor: the tool catalog could not be fetched (Unavailable).
	ErrNoExecutor = errors.New("executor unavailable")
	// ErrStopping: the orchestrator is shutting down (Unavailable).
	ErrStopping = errors.New("orchestrator is stopping")
)

// errorCodes is the code of each error a caller of the orchestrator can act
// on; grpcx maps context errors and hides any other error (logged with a
// correlation id).
var errorCodes = grpcx.Codes{
	{Err: ErrRunNotFound, Code: codes.NotFound},
	{Err: ErrBadModel, Code: codes.InvalidArgument},
	{Err: lctl.ErrInvalidChainID, Code: codes.InvalidArgument},
	{Err: ErrRunExists, Code: codes.AlreadyExists},
	{Err: ErrRunFinished, Code: codes.FailedPrecondition},
	{Err: ErrNoExecutor, Code: codes.Unavailable},
	{Err: ErrStopping, Code: codes.Unavailable},
	{Err: errLogLost, Code: codes.Unavailable},
}

// toStatus is the orchestrator's RPC error: its table's code, or the error
// left for the boundary interceptor to map or hide.
func toStatus(err error) error { return errorCodes.Status(err) }
