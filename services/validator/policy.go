package validator

import (
	"context"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/wire"
)

// Input is everything a policy may look at when it judges one proposal. By
// the time a policy sees it, the tool is known to the catalog and the
// arguments satisfy the tool's input schema. A policy must treat Input as
// read-only: the same values may be shared with other readers.
type Input struct {
	// Run describes the run the proposal belongs to; it may be nil.
	Run *xctv1.RunContext
	// Step is the 1-based number of the step in the run.
	Step int32
	// StepID is the step's idempotency key.
	StepID string
	// Proposal is what the model proposed.
	Proposal *xctv1.NextStep
	// Args are the proposal's arguments as plain JSON values
	// (map[string]any, []any, string, float64, bool, nil).
	Args map[string]any
	// Tool is the catalog's descriptor of the proposed tool; never nil.
	Tool *xctv1.ToolDescriptor
	// Now is the time of the evaluation (the CEL variable "now"); zero
	// means the wall clock.
	Now time.Time
	// Crew is the crew context of a crew run's proposal (which agent
	// proposes, its tools, the crew's thresholds and the facts the
	// proposal relies on); nil for a single-model run. With it, the crew's
	// confidence gate replaces the policy's (crew.go).
	Crew *xctv1.CrewContext

	// previewBase is the base digest of the preview of the approval that
	// allowed the step (consultApproval); sign binds it into the grant.
	previewBase string
}

// Outcome is a policy's judgement of one proposal.
type Outcome struct {
	// Decision is allow, deny or needs approval. Any other value, including
	// UNSPECIFIED, is turned into a deny by the service (fail safe).
	Decision xctv1.VerdictDecision
	// Reasons lists every rule that contributed, in evaluation order.
	Reasons []*xctv1.Reason
	// Message explains a deny or an approval request to the model. Empty
	// means the service writes a generic one.
	Message string
	// Code is the error code of a deny or an approval request; empty means
	// POLICY_DENIED or APPROVAL_REQUIRED.
	Code wire.Code
	// EndsRun is set when a run budget that cannot recover refused the
	// step: the orchestrator ends the run.
	EndsRun bool
	// ApprovalTTL is how long an approval for the step stays valid, when
	// the decision is needs approval; zero means DefaultApprovalTTL.
	ApprovalTTL time.Duration
	// Details are added to the error signal's details.
	Details map[string]any
	// ConfidenceFloor, for a crew run, is the policy's confidence
	// thresholds: the crew's gate never uses lower ones (the crew file is
	// the submitter's, the thresholds the operator's). nil: none.
	ConfidenceFloor *crew.Thresholds
}

// Policy decides whether a proposal may run. Implementations must be safe
// for concurrent use and should not block: they run on every proposal.
//
// RulesPolicy (one file) and PolicySet (several files, some of them
// perhaps in shadow mode) are the implementations shipped with the service.
// Another engine is another implementation, installed with
// Service.SetPolicy.
type Policy interface {
	// Version identifies the policy's content, e.g. "sha256:<hex>". It is
	// recorded in every verdict the policy makes.
	Version() string
	// Evaluate judges one proposal. An error denies the proposal; its text
	// is logged, not shown to the model.
	Evaluate(ctx context.Context, in *Input) (Outcome, error)
}
