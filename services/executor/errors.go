package executor

import "errors"

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
)
