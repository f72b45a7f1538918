package validator

import (
	"errors"
	"strconv"
)

// Errors returned by New, NewWithCatalog, Config.Validate, the policy loaders
// and the request checks. A refused proposal is never a Go error: it is a
// Verdict with decision DENY or NEEDS_APPROVAL.
var (
	// ErrBadConfig means a configuration value is out of range.
	ErrBadConfig = errors.New("validator: invalid configuration")
	// ErrNoNATS means New was given no NATS connection; use NewWithCatalog
	// to run without one.
	ErrNoNATS = errors.New("validator: a NATS connection is required")
	// ErrNoCatalog means NewWithCatalog was given no catalog.
	ErrNoCatalog = errors.New("validator: a tool catalog is required")
	// ErrNoPolicy means SetPolicy was given no policy.
	ErrNoPolicy = errors.New("validator: a policy is required")
	// ErrInvalidPolicy is wrapped by every problem found in a policy file;
	// see PolicyError for its position.
	ErrInvalidPolicy = errors.New("invalid policy")
	// ErrAlreadyStarted means Start was called twice.
	ErrAlreadyStarted = errors.New("validator: already started")
	// ErrNoProposal means a ValidateRequest carries no proposal.
	ErrNoProposal = errors.New("proposal is required")
	// ErrNoTool means a proposal names no tool.
	ErrNoTool = errors.New("proposal.tool is required")
	// ErrNoToolDescriptor means a policy was asked to judge an input that
	// has no tool descriptor.
	ErrNoToolDescriptor = errors.New("validator: input has no tool descriptor")

	// errNoSchema means a tool publishes no input schema; its proposals are
	// denied.
	errNoSchema = errors.New("the tool publishes no input schema")
	// errRemoteRef is returned for every $ref outside the tool's own schema.
	errRemoteRef = errors.New("references outside the tool's schema are not loaded")
)

// PolicyError is one problem in a policy file, at a position a person can
// jump to. It wraps ErrInvalidPolicy.
type PolicyError struct {
	// File is the policy's file name as given to the loader.
	File string
	// Line is the 1-based line of the problem, 0 when it has no position
	// (an empty file, for instance).
	Line int
	// Msg says what is wrong.
	Msg string
}

// Error renders the problem as "file:line: message", the form editors and
// terminals turn into links.
func (e *PolicyError) Error() string {
	if e.Line > 0 {
		return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
	}
	return e.File + ": " + e.Msg
}

// Unwrap makes errors.Is(err, ErrInvalidPolicy) hold.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }
