// Package xctevent is XCT's event model on LCTL: one Go type per event XCT
// writes on a run's chain (docs/events.md), the names of the types, the
// statuses and outcomes they carry, Data to write an event's payload and
// Parse to read one back.
//
// It lives under lctl, not under internal/ or next to the services, for
// two reasons. The lctl tools (replay, stats, the debugger) must know XCT's
// extension types to show them as what they are rather than as "unknown
// type", and lctl must stay pure: it may import nothing under internal/ and
// no gen/xct protos. So this package depends on lctl alone and on no
// generated code; the services convert between these types and their
// protos at their edge (the orchestrator's view.go, the validator's
// recheck).
//
// Every payload is a JSON object. Data returns the exact object XCT has
// always written (the same keys, the same omissions), so a chain written
// through these types hashes as before. Parse is lenient the way LCTL
// readers must be: a missing or mistyped field reads as its zero value,
// and a type this package does not know is returned as Unknown.
package xctevent

import (
	"encoding/json"
	"strings"

	"github.com/xct-dev/xct/lctl"
)

// Event types XCT writes: the LCTL core types it uses and its own.
const (
	TypeStepStart = lctl.TypeStepStart
	TypeToolCall  = lctl.TypeToolCall
	TypeError     = lctl.TypeError
	TypeStepEnd   = lctl.TypeStepEnd

	TypeRunStarted        = lctl.TypeRunStarted
	TypeVerdict           = lctl.TypeVerdict
	TypeRunFinished       = lctl.TypeRunFinished
	TypeApprovalRequested = lctl.TypeApprovalRequested
	TypeApprovalDecided   = lctl.TypeApprovalDecided
	TypeStepInDoubt       = lctl.TypeStepInDoubt
	TypeRunReleased       = lctl.TypeRunReleased
	TypeRunResumed        = lctl.TypeRunResumed
	TypeRollbackStarted   = lctl.TypeRollbackStarted
	TypeRollbackFinished  = lctl.TypeRollbackFinished
	TypeSignedCheckpoint  = lctl.TypeSignedCheckpoint
)

// Extension reports whether t is one of XCT's own event types (not an LCTL
// core type).
func Extension(t string) bool { return lctl.IsXCTType(t) }

// Run statuses (run_finished's status, rollback_finished's status).
const (
	StatusDone      = "done"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Step outcomes (step_end's outcome).
const (
	OutcomeSuccess   = "success"
	OutcomeError     = "error"
	OutcomeDenied    = "denied"
	OutcomeInvalid   = "invalid"
	OutcomeCancelled = "cancelled"
)

// Verdict decisions (verdict's decision).
const (
	DecisionAllow         = "allow"
	DecisionDeny          = "deny"
	DecisionNeedsApproval = "needs_approval"
)

// Approval decisions (approval_decided's decision).
const (
	ApprovalApproved  = "approved"
	ApprovalDenied    = "denied"
	ApprovalExpired   = "expired"
	ApprovalWithdrawn = "withdrawn"
)

// systemToolPrefix starts the names of XCT's own tools (xct.undo), which
// no model proposes.
const systemToolPrefix = "xct."

// ToolCallSuccess is tool_call's status.
const ToolCallSuccess = "success"

// Event is one typed XCT event payload.
type Event interface {
	// Type is the LCTL event type the payload belongs to.
	Type() string
	// Data is the payload as written on the chain.
	Data() map[string]any
}

// Tokens are a step's or a run's token counts.
type Tokens struct {
	Input, Output int64
	// Estimated: the endpoint did not say what the call used (it failed
	// after it may have read the request, e.g. past its deadline); the
	// counts are the orchestrator's estimate. Written only when true.
	Estimated bool
}

func (t Tokens) data() map[string]any {
	d := map[string]any{"input": float64(t.Input), "output": float64(t.Output)}
	if t.Estimated {
		d["estimated"] = true
	}
	return d
}

// RunStarted opens a run's chain.
type RunStarted struct {
	RunID, Goal, Model, Principal string
	Roles                         []string
	Labels                        map[string]string
	MaxSteps                      int
}

// StepStart is a step the model proposed, or (Raw set) model output that
// is not a decision.
type StepStart struct {
	Step         int
	StepID       string
	Intent       string
	InputSummary string
	Tool         string
	Arguments    map[string]any
	Model        string   // the proposing model; a system step (tool "xct.…", an undo) has none and omits it
	Confidence   *float64 // when the model gave one
	Raw          *string  // invalid output: only step, intent, input_summary, raw and tokens are written
	// Tokens are what the model call that proposed the step (or produced
	// the invalid output) used, so a run taken over before the step's
	// step_end still counts them; omitted when nil (a system step, and
	// chains written before session 15: read as none).
	Tokens *Tokens
	// Unrecorded are model calls of earlier owners that no event holds,
	// charged with this one (omitted when nil; see Unrecorded).
	Unrecorded *Unrecorded
}

// Unrecorded is what model calls cost that the chain holds no proposal
// of: an owner that lost the run while it waited for its model (killed,
// paused past its lease, cut off from NATS, its append failed, its stop
// cut the call short) may have been charged by the model's endpoint for
// an answer no event records. The owner that took the run over counts
// such calls (RunResumed.UnrecordedCalls) and charges them on the next
// call it records, each at what that call used: the request was the
// same, since the chain had not changed. The step's step_end tokens (and
// so the run's totals and budgets) include them.
type Unrecorded struct {
	Calls  int
	Tokens Tokens
}

func (u *Unrecorded) data() map[string]any {
	return map[string]any{"calls": float64(u.Calls), "tokens": u.Tokens.data()}
}

func unrecordedOf(v any) *Unrecorded {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	u := &Unrecorded{Calls: int(Int(m, "calls"))}
	if t, ok := m["tokens"].(map[string]any); ok {
		u.Tokens = Tokens{Input: Int(t, "input"), Output: Int(t, "output")}
	}
	return u
}

// Invalid reports whether the step records output that is not a decision.
func (s StepStart) Invalid() bool { return s.Raw != nil }

// Reason is one reason of a verdict.
type Reason struct{ RuleID, Message string }

// ShadowVerdict is what a shadow-mode policy would have decided.
type ShadowVerdict struct {
	PolicyVersion, Decision string
	Reasons                 []Reason
}

// Verdict is the validator's decision on a step.
type Verdict struct {
	Step          int
	StepID        string
	Tool          string
	Decision      string
	Reasons       []Reason
	PolicyVersion string
	EvaluatedAt   string
	Code          string // the refusal's code; omitted when empty
	EndsRun       bool
	Shadow        []ShadowVerdict
	// Rejudged: the step judged again because the executor refused the
	// allow before it (the verdict just before this one) without acting,
	// its policy replaced since it was signed (a reload). That allow
	// started no attempt. Omitted when false.
	Rejudged bool
}

// Preview is what an approver is shown of a step (a dry run). Base names
// the file (entry) the preview was made from, which the approval binds:
// its digest ("sha256:<hex>", "tree-sha256:<hex>", "link-sha256:<hex>",
// "absent", "refused"), or a redaction marker when the preview was
// redacted; "" when it binds none.
type Preview struct{ Kind, Content, Base string }

// ApprovalRequested: the step waits for a human.
type ApprovalRequested struct {
	Step        int
	StepID      string
	Tool        string
	RequestedBy string
	ExpiresAt   string
	Preview     *Preview
}

// ApprovalDecided: a human decided, the approval expired or was withdrawn.
type ApprovalDecided struct {
	Step       int
	StepID     string
	Decision   string
	By, Reason string
}

// ToolCall is a step's successful execution.
type ToolCall struct {
	Step       int
	StepID     string
	Tool       string
	Input      any
	Output     any
	DurationMS float64
	Status     string
}

// Error is an error signal recorded for a step (code and taxonomy,
// docs/events.md "Error codes").
type Error struct {
	Step            int
	StepID          string
	Code            string
	Category        string
	ErrType         string // the taxonomy's type (the field "type")
	Message         string
	Recoverable     bool
	SuggestedAction string
	Details         map[string]any // omitted when nil
	// Tokens are what a failed model call used, on the error that ends
	// the run outside a step (the model's endpoint failed): counted by a
	// run resumed before its run_finished. Omitted when nil.
	Tokens *Tokens
	// Unrecorded are earlier owners' model calls the chain holds no
	// proposal of, charged with the failed call (see Unrecorded).
	Unrecorded *Unrecorded
}

// StepEnd closes a step.
type StepEnd struct {
	Step          int
	StepID        string // omitted when empty (an invalid output has none)
	Outcome       string
	OutputSummary string
	DurationMS    float64
	Tokens        *Tokens // omitted when nil (an undo step)
}

// RunFinished ends a run.
type RunFinished struct {
	Status, Message string
	Steps           int
	Tokens          Tokens
}

// RunReleased: this orchestrator hands the run over.
type RunReleased struct {
	Instance, Reason string
	Step             int
	// CallCut: the stop cut a model call short (the drain's end); the
	// endpoint may have charged for it, and no proposal of it is on the
	// chain: the next owner counts it as unrecorded. Omitted when false.
	CallCut bool
}

// RunResumed: another orchestrator took the run over.
type RunResumed struct {
	Instance, PreviousOwner, Reason string
	Step                            int
	// UnrecordedCalls counts the model calls earlier owners may have made
	// and no event holds (the chain stopped where a call was next, and no
	// call was recorded since): the next call recorded charges them
	// (Unrecorded). Omitted when 0.
	UnrecordedCalls int
}

// StepInDoubt: the step's outcome could not be learnt from the executor.
type StepInDoubt struct {
	Step                                       int
	StepID, Tool, Reason, RecordState, Resolve string
}

// RollbackStarted opens a rollback of an ended run.
type RollbackStarted struct {
	Principal string
	ToStep    int
	Steps     []int
}

// RollbackFinished ends a rollback.
type RollbackFinished struct {
	Status, Message string
	Undone          []int
}

// SignedCheckpoint is a signed note over the chain's head.
type SignedCheckpoint struct {
	Note     string
	Seq      int64
	HeadHash string
	Key      string
}

// Unknown is an event of a type this package does not know, kept as is.
type Unknown struct {
	EventType string
	Payload   map[string]any
}

func (RunStarted) Type() string        { return TypeRunStarted }
func (StepStart) Type() string         { return TypeStepStart }
func (Verdict) Type() string           { return TypeVerdict }
func (ApprovalRequested) Type() string { return TypeApprovalRequested }
func (ApprovalDecided) Type() string   { return TypeApprovalDecided }
func (ToolCall) Type() string          { return TypeToolCall }
func (Error) Type() string             { return TypeError }
func (StepEnd) Type() string           { return TypeStepEnd }
func (RunFinished) Type() string       { return TypeRunFinished }
func (RunReleased) Type() string       { return TypeRunReleased }
func (RunResumed) Type() string        { return TypeRunResumed }
func (StepInDoubt) Type() string       { return TypeStepInDoubt }
func (RollbackStarted) Type() string   { return TypeRollbackStarted }
func (RollbackFinished) Type() string  { return TypeRollbackFinished }
func (SignedCheckpoint) Type() string  { return TypeSignedCheckpoint }
func (u Unknown) Type() string         { return u.EventType }

// Data implements Event.
func (e RunStarted) Data() map[string]any {
	return map[string]any{
		"run_id": e.RunID, "goal": e.Goal, "model": e.Model, "principal": e.Principal,
		"roles": e.Roles, "labels": e.Labels, "max_steps": e.MaxSteps,
	}
}

// Data implements Event.
func (e StepStart) Data() map[string]any {
	if e.Raw != nil {
		d := map[string]any{"step": float64(e.Step), "intent": e.Intent, "input_summary": e.InputSummary, "raw": *e.Raw}
		if e.Tokens != nil {
			d["tokens"] = e.Tokens.data()
		}
		if e.Unrecorded != nil {
			d["unrecorded"] = e.Unrecorded.data()
		}
		return d
	}
	d := map[string]any{
		"step": float64(e.Step), "step_id": e.StepID, "intent": e.Intent, "input_summary": e.InputSummary,
		"tool": e.Tool, "arguments": e.Arguments,
	}
	if e.Model != "" || !strings.HasPrefix(e.Tool, systemToolPrefix) {
		d["model"] = e.Model
	}
	if e.Confidence != nil {
		d["confidence"] = *e.Confidence
	}
	if e.Tokens != nil {
		d["tokens"] = e.Tokens.data()
	}
	if e.Unrecorded != nil {
		d["unrecorded"] = e.Unrecorded.data()
	}
	return d
}

func reasonsData(rs []Reason) []any {
	out := make([]any, 0, len(rs))
	for _, r := range rs {
		out = append(out, map[string]any{"rule_id": r.RuleID, "message": r.Message})
	}
	return out
}

// Data implements Event.
func (e Verdict) Data() map[string]any {
	d := map[string]any{
		"step": float64(e.Step), "step_id": e.StepID, "tool": e.Tool, "decision": e.Decision,
		"reasons": reasonsData(e.Reasons), "policy_version": e.PolicyVersion, "evaluated_at": e.EvaluatedAt,
	}
	if e.Code != "" {
		d["code"] = e.Code
	}
	if e.EndsRun {
		d["ends_run"] = true
	}
	if e.Rejudged {
		d["rejudged"] = true
	}
	if len(e.Shadow) > 0 {
		shadow := make([]any, 0, len(e.Shadow))
		for _, s := range e.Shadow {
			shadow = append(shadow, map[string]any{"policy_version": s.PolicyVersion, "decision": s.Decision, "reasons": reasonsData(s.Reasons)})
		}
		d["shadow"] = shadow
	}
	return d
}

// Data implements Event.
func (e ApprovalRequested) Data() map[string]any {
	d := map[string]any{"step": e.Step, "step_id": e.StepID, "tool": e.Tool, "requested_by": e.RequestedBy, "expires_at": e.ExpiresAt}
	if e.Preview != nil {
		pv := map[string]any{"kind": e.Preview.Kind, "content": e.Preview.Content}
		if e.Preview.Base != "" {
			pv["base_digest"] = e.Preview.Base
		}
		d["preview"] = pv
	}
	return d
}

// Data implements Event.
func (e ApprovalDecided) Data() map[string]any {
	return map[string]any{"step": e.Step, "step_id": e.StepID, "decision": e.Decision, "by": e.By, "reason": e.Reason}
}

// Data implements Event.
func (e ToolCall) Data() map[string]any {
	return map[string]any{
		"step": float64(e.Step), "step_id": e.StepID, "tool": e.Tool, "input": e.Input, "output": e.Output,
		"duration_ms": e.DurationMS, "status": e.Status,
	}
}

// Data implements Event.
func (e Error) Data() map[string]any {
	d := map[string]any{
		"step": float64(e.Step), "step_id": e.StepID, "code": e.Code, "category": e.Category, "type": e.ErrType,
		"message": e.Message, "recoverable": e.Recoverable, "suggested_action": e.SuggestedAction,
	}
	if e.Details != nil {
		d["details"] = e.Details
	}
	if e.Tokens != nil {
		d["tokens"] = e.Tokens.data()
	}
	if e.Unrecorded != nil {
		d["unrecorded"] = e.Unrecorded.data()
	}
	return d
}

// Data implements Event.
func (e StepEnd) Data() map[string]any {
	d := map[string]any{"step": float64(e.Step), "outcome": e.Outcome, "output_summary": e.OutputSummary, "duration_ms": e.DurationMS}
	if e.StepID != "" {
		d["step_id"] = e.StepID
	}
	if e.Tokens != nil {
		d["tokens"] = e.Tokens.data()
	}
	return d
}

// Data implements Event.
func (e RunFinished) Data() map[string]any {
	return map[string]any{"status": e.Status, "message": e.Message, "steps": e.Steps, "tokens": e.Tokens.data()}
}

// Data implements Event.
func (e RunReleased) Data() map[string]any {
	d := map[string]any{"instance": e.Instance, "reason": e.Reason, "step": e.Step}
	if e.CallCut {
		d["call_cut"] = true
	}
	return d
}

// Data implements Event.
func (e RunResumed) Data() map[string]any {
	d := map[string]any{"instance": e.Instance, "previous_owner": e.PreviousOwner, "reason": e.Reason, "step": e.Step}
	if e.UnrecordedCalls > 0 {
		d["unrecorded_calls"] = float64(e.UnrecordedCalls)
	}
	return d
}

// Data implements Event.
func (e StepInDoubt) Data() map[string]any {
	return map[string]any{
		"step": e.Step, "step_id": e.StepID, "tool": e.Tool, "reason": e.Reason,
		"record_state": e.RecordState, "resolve": e.Resolve,
	}
}

func intsData(ns []int) []any {
	out := make([]any, 0, len(ns))
	for _, n := range ns {
		out = append(out, n)
	}
	return out
}

// Data implements Event.
func (e RollbackStarted) Data() map[string]any {
	return map[string]any{"principal": e.Principal, "to_step": e.ToStep, "steps": intsData(e.Steps)}
}

// Data implements Event.
func (e RollbackFinished) Data() map[string]any {
	return map[string]any{"status": e.Status, "message": e.Message, "undone": intsData(e.Undone)}
}

// Data implements Event.
func (e SignedCheckpoint) Data() map[string]any {
	return map[string]any{"note": e.Note, "seq": e.Seq, "head_hash": e.HeadHash, "key": e.Key}
}

// Data implements Event.
func (u Unknown) Data() map[string]any { return u.Payload }

// Parse reads an event's payload into its type. Missing or mistyped fields
// read as zero values; a type this package does not know is an Unknown.
func Parse(e *lctl.Event) Event {
	d := e.DataMap()
	switch e.Type {
	case TypeRunStarted:
		r := RunStarted{
			RunID: Str(d, "run_id"), Goal: Str(d, "goal"), Model: Str(d, "model"), Principal: Str(d, "principal"),
			Roles: stringList(d["roles"]), Labels: labels(d["labels"]), MaxSteps: int(Int(d, "max_steps")),
		}
		if r.Roles == nil {
			r.Roles = stringList(d["principal_roles"]) // an older name
		}
		return r
	case TypeStepStart:
		s := StepStart{Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Intent: Str(d, "intent"), InputSummary: Str(d, "input_summary")}
		if t, ok := d["tokens"].(map[string]any); ok {
			s.Tokens = &Tokens{Input: Int(t, "input"), Output: Int(t, "output")}
		}
		s.Unrecorded = unrecordedOf(d["unrecorded"])
		if raw, ok := d["raw"]; ok {
			r, _ := raw.(string)
			s.Raw = &r
			return s
		}
		s.Tool, s.Model = Str(d, "tool"), Str(d, "model")
		s.Arguments, _ = d["arguments"].(map[string]any)
		if c, ok := d["confidence"].(float64); ok {
			s.Confidence = &c
		}
		return s
	case TypeVerdict:
		v := Verdict{
			Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Tool: Str(d, "tool"), Decision: Str(d, "decision"),
			Reasons: reasons(d["reasons"]), PolicyVersion: Str(d, "policy_version"), EvaluatedAt: Str(d, "evaluated_at"),
			Code: Str(d, "code"),
		}
		v.EndsRun, _ = d["ends_run"].(bool)
		v.Rejudged, _ = d["rejudged"].(bool)
		if list, ok := d["shadow"].([]any); ok {
			for _, x := range list {
				if m, ok := x.(map[string]any); ok {
					v.Shadow = append(v.Shadow, ShadowVerdict{PolicyVersion: Str(m, "policy_version"), Decision: Str(m, "decision"), Reasons: reasons(m["reasons"])})
				}
			}
		}
		return v
	case TypeApprovalRequested:
		a := ApprovalRequested{Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Tool: Str(d, "tool"), RequestedBy: Str(d, "requested_by"), ExpiresAt: Str(d, "expires_at")}
		if p, ok := d["preview"].(map[string]any); ok {
			a.Preview = &Preview{Kind: Str(p, "kind"), Content: Str(p, "content"), Base: Str(p, "base_digest")}
		}
		return a
	case TypeApprovalDecided:
		return ApprovalDecided{Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Decision: Str(d, "decision"), By: Str(d, "by"), Reason: Str(d, "reason")}
	case TypeToolCall:
		return ToolCall{
			Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Tool: Str(d, "tool"), Input: d["input"], Output: d["output"],
			DurationMS: Float(d, "duration_ms"), Status: Str(d, "status"),
		}
	case TypeError:
		x := Error{
			Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Code: Str(d, "code"), Category: Str(d, "category"),
			ErrType: Str(d, "type"), Message: Str(d, "message"), SuggestedAction: Str(d, "suggested_action"),
		}
		x.Recoverable, _ = d["recoverable"].(bool)
		x.Details, _ = d["details"].(map[string]any)
		if t, ok := d["tokens"].(map[string]any); ok {
			x.Tokens = &Tokens{Input: Int(t, "input"), Output: Int(t, "output")}
		}
		x.Unrecorded = unrecordedOf(d["unrecorded"])
		return x
	case TypeStepEnd:
		s := StepEnd{Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Outcome: Str(d, "outcome"), OutputSummary: Str(d, "output_summary"), DurationMS: Float(d, "duration_ms")}
		if t, ok := d["tokens"].(map[string]any); ok {
			s.Tokens = &Tokens{Input: Int(t, "input"), Output: Int(t, "output")}
		}
		return s
	case TypeRunFinished:
		f := RunFinished{Status: Str(d, "status"), Message: Str(d, "message"), Steps: int(Int(d, "steps"))}
		if t, ok := d["tokens"].(map[string]any); ok {
			f.Tokens = Tokens{Input: Int(t, "input"), Output: Int(t, "output")}
		}
		return f
	case TypeRunReleased:
		cut, _ := d["call_cut"].(bool)
		return RunReleased{Instance: Str(d, "instance"), Reason: Str(d, "reason"), Step: int(Int(d, "step")), CallCut: cut}
	case TypeRunResumed:
		return RunResumed{Instance: Str(d, "instance"), PreviousOwner: Str(d, "previous_owner"), Reason: Str(d, "reason"), Step: int(Int(d, "step")),
			UnrecordedCalls: int(Int(d, "unrecorded_calls"))}
	case TypeStepInDoubt:
		return StepInDoubt{
			Step: int(Int(d, "step")), StepID: Str(d, "step_id"), Tool: Str(d, "tool"), Reason: Str(d, "reason"),
			RecordState: Str(d, "record_state"), Resolve: Str(d, "resolve"),
		}
	case TypeRollbackStarted:
		return RollbackStarted{Principal: Str(d, "principal"), ToStep: int(Int(d, "to_step")), Steps: ints(d["steps"])}
	case TypeRollbackFinished:
		return RollbackFinished{Status: Str(d, "status"), Message: Str(d, "message"), Undone: ints(d["undone"])}
	case TypeSignedCheckpoint:
		return SignedCheckpoint{Note: Str(d, "note"), Seq: Int(d, "seq"), HeadHash: Str(d, "head_hash"), Key: Str(d, "key")}
	}
	return Unknown{EventType: e.Type, Payload: d}
}

// Str reads a string field; "" when missing or not a string.
func Str(d map[string]any, k string) string {
	s, _ := d[k].(string)
	return s
}

// Int reads an integer field from any of the number types a payload holds
// (JSON's float64, the Go ints a writer passes, json.Number); 0 otherwise.
func Int(d map[string]any, k string) int64 {
	switch v := d[k].(type) {
	case float64:
		return int64(v)
	case int:
		return int64(v)
	case int64:
		return v
	case int32:
		return int64(v)
	case json.Number:
		n, _ := v.Int64()
		if n == 0 {
			f, _ := v.Float64()
			n = int64(f)
		}
		return n
	}
	return 0
}

// Float reads a number field; 0 when missing or not a number.
func Float(d map[string]any, k string) float64 {
	switch v := d[k].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case json.Number:
		f, _ := v.Float64()
		return f
	}
	return 0
}

func reasons(v any) []Reason {
	list, _ := v.([]any)
	var out []Reason
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, Reason{RuleID: Str(m, "rule_id"), Message: Str(m, "message")})
		}
	}
	return out
}

func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func labels(v any) map[string]string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k], _ = x.(string)
	}
	return out
}

func ints(v any) []int {
	list, _ := v.([]any)
	var out []int
	for _, x := range list {
		out = append(out, int(Int(map[string]any{"n": x}, "n")))
	}
	return out
}
