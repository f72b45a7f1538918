package executor

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/xct-dev/xct/internal/grpcx"
)

// Errors returned by New, Config.Validate, Start and Stop. Tool failures are
// never Go errors: they are structured error signals in the step's Response.
var (
	// ErrNoWorkspace means Config.Workspace is empty.
	ErrNoWorkspace = errors.New("executor: a workspace directory is required")
	// ErrBadConfig means a numeric setting is out of range.
	ErrBadConfig = errors.New("executor: invalid configuration")
	// ErrInvalidTool means a tool's descriptor cannot be served: no name, or
	// an input schema that is not a JSON object.
	ErrInvalidTool = errors.New("executor: invalid tool descriptor")
	// ErrDuplicateTool means two tools have the same name.
	ErrDuplicateTool = errors.New("executor: duplicate tool name")
	// ErrWorkspace means the workspace directory cannot be created or opened.
	ErrWorkspace = errors.New("executor: workspace unavailable")
	// ErrStopped means the service is stopping and runs no more steps.
	ErrStopped = errors.New("executor: stopped")
	// ErrToolsConfig means the tools configuration file cannot be used; the
	// message names the file and line.
	ErrToolsConfig = errors.New("invalid tools configuration")
)

// Errors of the step records (StepStore, Service.Step, Service.ResolveStep).
var (
	// ErrStepExists means a record for the step id already exists.
	ErrStepExists = errors.New("executor: step already recorded")
	// ErrStepNotFound means there is no record for the step id.
	ErrStepNotFound = errors.New("executor: no record of the step")
	// ErrStepConflict means the record changed since it was read: another
	// executor or resolver wrote it first.
	ErrStepConflict = errors.New("executor: step record changed concurrently")
	// ErrStepCorrupt means a stored record cannot be decoded.
	ErrStepCorrupt = errors.New("executor: step record unreadable")
	// ErrRecordTooLarge means a record does not fit in the store.
	ErrRecordTooLarge = errors.New("executor: step record too large")
	// ErrNotInDoubt means a resolution was asked for a step that is not in
	// doubt (for RETRY: neither in doubt nor failed).
	ErrNotInDoubt = errors.New("executor: step is not in doubt")
	// ErrChainUnreadable means the run's chain, which must show a step in
	// doubt before a decision about it is taken, could not be read.
	ErrChainUnreadable = errors.New("executor: the run's chain cannot be read")
	// ErrBadResolution means a resolution lacks its decision or its author.
	ErrBadResolution = errors.New("executor: invalid resolution")
	// ErrSelfRelease means a step a human approved was to be released for
	// another attempt by the principal the approval was asked for (the
	// run's, or a name that looks like it): another attempt runs on the
	// approval again, and that principal may not decide its approvals.
	ErrSelfRelease = errors.New("executor: the principal a step's approval was asked for cannot release it for another attempt")
	// ErrBadStepID means a step id is not 1-128 of A-Z a-z 0-9 _ -.
	ErrBadStepID = errors.New("executor: invalid step id")
	// ErrNoStepStore means the executor has a NATS connection but Start has
	// not opened its step store yet.
	ErrNoStepStore = errors.New("executor: step store not open (Start not called)")
)

// Errors of compensations.
var (
	// ErrUndoConflict means a compensation cannot be applied: the world
	// changed since the step it undoes.
	ErrUndoConflict = errors.New("executor: cannot undo: the workspace changed since the step")
	// errUndoTooLarge means what a change replaces is too large to save for
	// its compensation; the tool refuses the change.
	errUndoTooLarge = errors.New("too large to save for undo")
)

// errOutcomeUnknown wraps an error of the step record store itself: a
// reader could not reach it, so the step's outcome is unknown.
var errOutcomeUnknown = errors.New(outcomeUnknown)

// stepCodes is the code of each step record error a caller can act on;
// grpcx maps context errors and hides any other error (logged with a
// correlation id).
var stepCodes = grpcx.Codes{
	{Err: ErrBadResolution, Code: codes.InvalidArgument},
	{Err: ErrBadStepID, Code: codes.InvalidArgument},
	{Err: ErrStepNotFound, Code: codes.NotFound},
	{Err: ErrNotInDoubt, Code: codes.FailedPrecondition},
	{Err: ErrSelfRelease, Code: codes.PermissionDenied},
	{Err: ErrChainUnreadable, Code: codes.Unavailable},
	{Err: ErrStepConflict, Code: codes.Aborted},
	{Err: ErrStepCorrupt, Code: codes.DataLoss},
	{Err: errOutcomeUnknown, Code: codes.Unavailable},
}
