package orchestrator

import "errors"

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
