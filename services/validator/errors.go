package validator

import (
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"

	"github.com/xct-dev/xct/internal/grpcx"
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

	// ErrApprovalsUnavailable means the approvals store cannot be used: the
	// validator runs without JetStream, or the KV bucket failed.
	ErrApprovalsUnavailable = errors.New("approvals are unavailable")
	// ErrApprovalNotFound means no approval exists for the step.
	ErrApprovalNotFound = errors.New("no such approval")
	// ErrApprovalDecided means the approval was decided already.
	ErrApprovalDecided = errors.New("the approval was already decided")
	// ErrApprovalExpired means the approval's time ran out before a decision.
	ErrApprovalExpired = errors.New("the approval expired")
	// ErrSelfApproval means the approver is the principal who started the
	// run.
	ErrSelfApproval = errors.New("the principal who started the run cannot decide its approvals (nor a name that differs from it only in case, width, invisible characters or a trailing dot)")
	// ErrNoApprover means a decision names no approver.
	ErrNoApprover = errors.New("an approver is required")
	// ErrNoDenyReason means a denial gives no reason; the model is told it.
	ErrNoDenyReason = errors.New("a reason is required to deny")
	// ErrNoApprovalNeeded means an approval was requested for a step the
	// policy in force does not require one for.
	ErrNoApprovalNeeded = errors.New("the policy in force does not require an approval for this step")
	// ErrStepMismatch means a step id is not the identity of the proposal
	// it comes with.
	ErrStepMismatch = errors.New("step_id is not the id of this run, step, tool and arguments")
	// ErrAmbiguousStep means a step number names several pending
	// approvals; name the step id instead.
	ErrAmbiguousStep = errors.New("several approvals match this step number; give the step id")
	// ErrBadRunID means a run id is missing or has characters run ids
	// never have.
	ErrBadRunID = errors.New("run_id must be 1 to 128 of A-Z a-z 0-9 _ -")
	// ErrBadStepID means a step id (or step number) is missing or malformed.
	ErrBadStepID = errors.New("step must be a step number or a step id (1 to 128 of A-Z a-z 0-9 _ -)")
	// ErrNoPrincipal means an approval was requested for a run without a
	// principal, so nobody could be kept from approving their own run.
	ErrNoPrincipal = errors.New("run.principal is required to request an approval")
	// ErrApprovalOtherPrincipal means the step's stored approval names
	// another principal than the run's as who may not decide it: it was
	// not opened for this run's principal.
	ErrApprovalOtherPrincipal = errors.New("the approval stored for this step was opened for another principal than the run's")
	// ErrApprovalCaller means a service not among --verdict-callers
	// tried to open or withdraw an approval.
	ErrApprovalCaller = errors.New("only the services of --verdict-callers open and withdraw approvals")
	// ErrBadChain means Recheck was given events it cannot read as an XCT
	// chain; the error names the event.
	ErrBadChain = errors.New("not a readable XCT chain")

	// errApprovalConflict means an approval changed under a compare-and-set.
	errApprovalConflict = errors.New("approval changed concurrently")
	// errNotBool is a condition that evaluated to something other than a
	// bool.
	errNotBool = errors.New(celBoolResultMsg)

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

// approvalCodes is the code of each approval error a caller can act on;
// grpcx maps context errors and hides any other error (logged with a
// correlation id).
var approvalCodes = grpcx.Codes{
	{Err: ErrApprovalsUnavailable, Code: codes.Unavailable},
	{Err: ErrChainUnreadable, Code: codes.Unavailable},
	{Err: ErrApprovalNotFound, Code: codes.NotFound},
	{Err: ErrSelfApproval, Code: codes.PermissionDenied},
	{Err: ErrNoApprover, Code: codes.PermissionDenied},
	{Err: ErrApprovalExpired, Code: codes.FailedPrecondition},
	{Err: ErrApprovalDecided, Code: codes.FailedPrecondition},
	{Err: ErrNoApprovalNeeded, Code: codes.FailedPrecondition},
	{Err: ErrAmbiguousStep, Code: codes.FailedPrecondition},
	{Err: ErrApprovalOtherPrincipal, Code: codes.FailedPrecondition},
	{Err: ErrApprovalCaller, Code: codes.PermissionDenied},
	{Err: ErrBadRunID, Code: codes.InvalidArgument},
	{Err: ErrBadStepID, Code: codes.InvalidArgument},
	{Err: ErrNoTool, Code: codes.InvalidArgument},
	{Err: ErrNoPrincipal, Code: codes.InvalidArgument},
	{Err: ErrStepMismatch, Code: codes.InvalidArgument},
	{Err: ErrNoDenyReason, Code: codes.InvalidArgument},
}

// approvalStatus is an approval RPC's error: its table's code, or the error
// left for the boundary interceptor to map or hide.
func approvalStatus(err error) error { return approvalCodes.Status(err) }
