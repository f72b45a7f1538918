package crew

import (
	"encoding/json"
	"fmt"

	"github.com/xct-dev/xct/lctl"
)

// Payload is the data of one LCTL event the crew's rules produce. Data is
// the event's data in the spec's field names, as JSON carries it (numbers
// float64, lists []any), which is what lctl's reducer and analyses read.
type Payload interface {
	EventType() string
	Data() map[string]any
}

// NewEvent is p as an event by agent, without seq, timestamp or hashes
// (the chain's writer sets them).
func NewEvent(p Payload, agent string) lctl.Event {
	return lctl.Event{Type: p.EventType(), Agent: agent, Data: p.Data()}
}

// jsonData is v's JSON form as a map: what a reader of the chain gets.
// The rules only build payloads of checked values; a value JSON cannot
// carry (a NaN set by a caller) yields the encoding error as the data
// rather than a panic in the loop.
func jsonData(v any, extra map[string]any) map[string]any {
	raw, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"encode_error": err.Error()}
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return map[string]any{"encode_error": err.Error()}
	}
	for k, x := range extra {
		if _, taken := out[k]; !taken {
			out[k] = jsonValue(x)
		}
	}
	return out
}

// jsonValue is x as JSON gives it back.
func jsonValue(x any) any {
	raw, err := json.Marshal(x)
	if err != nil {
		return nil
	}
	var out any
	_ = json.Unmarshal(raw, &out)
	return out
}

// AgentProfile is the spec's agent_profile (part 5), as a step_start of
// the agent carries it.
type AgentProfile struct {
	Type             string   `json:"type"`
	Capabilities     []string `json:"capabilities"`
	Model            string   `json:"model"`
	ReliabilityScore float64  `json:"reliability_score"`
}

// ModelRef is part 10's model on a step_start: which model, in which role.
type ModelRef struct {
	ID   string `json:"id"`
	Role string `json:"role,omitempty"`
}

// StepStart is the crew's part of an agent's step_start: its intent, what
// it was given, its profile and the model that serves the step. The
// orchestrator adds its own fields (step, step_id, tool, arguments).
type StepStart struct {
	Intent       string       `json:"intent"`
	InputSummary string       `json:"input_summary"`
	AgentProfile AgentProfile `json:"agent_profile"`
	Model        ModelRef     `json:"model"`
}

// EventType is step_start.
func (StepStart) EventType() string { return lctl.TypeStepStart }

// Data is the event's data.
func (s StepStart) Data() map[string]any { return jsonData(s, nil) }

// StepStartFor is the step_start data of an agent's step on model (the
// route's choice; the agent's primary when empty).
func (a *Agent) StepStartFor(intent, inputSummary, model string) StepStart {
	if model == "" {
		model = a.Profile.Model
	}
	return StepStart{
		Intent:       intent,
		InputSummary: inputSummary,
		AgentProfile: AgentProfile{Type: a.Profile.Type, Capabilities: a.Profile.Capabilities, Model: model, ReliabilityScore: a.Profile.ReliabilityScore},
		Model:        ModelRef{ID: model, Role: a.Profile.Type},
	}
}

// FactAdded is a fact_added's data: the spec's {id, text, confidence,
// source} with tags and the fact's other fields (severity, ...).
type FactAdded struct {
	ID         string         `json:"id"`
	Text       string         `json:"text"`
	Confidence float64        `json:"confidence"`
	Source     string         `json:"source"`
	Tags       []string       `json:"tags,omitempty"`
	Fields     map[string]any `json:"-"`
}

// EventType is fact_added.
func (FactAdded) EventType() string { return lctl.TypeFactAdded }

// Data is the event's data.
func (f FactAdded) Data() map[string]any { return jsonData(f, f.Fields) }

// FactModified is a fact_modified's data: {id, text, confidence, reason},
// the fields changed, and a consensus block when several agents have
// assessed the fact. Confidence is absent when the update gave none (it is
// then no assessment, for lctl confidence either).
type FactModified struct {
	ID         string          `json:"id"`
	Text       string          `json:"text"`
	Confidence *float64        `json:"confidence,omitempty"`
	Reason     string          `json:"reason"`
	Source     string          `json:"source,omitempty"`
	Tags       []string        `json:"tags,omitempty"`
	Consensus  *ConsensusBlock `json:"consensus,omitempty"`
	Fields     map[string]any  `json:"-"`
}

// EventType is fact_modified.
func (FactModified) EventType() string { return lctl.TypeFactModified }

// Data is the event's data.
func (f FactModified) Data() map[string]any { return jsonData(f, f.Fields) }

// ConsensusBlock is the spec's consensus (part 3): who assessed the fact
// and how far they agree, with the tier-2 score and conflict level.
type ConsensusBlock struct {
	Assessors []string `json:"assessors"`
	// Agreement is 1 minus the spread between the highest and lowest
	// assessment.
	Agreement float64 `json:"agreement"`
	// ConsensusScore is the assessments' average weighted by each
	// agent's reliability_score.
	ConsensusScore float64 `json:"consensus_score"`
	// ConflictLevel is the spread (0: full agreement).
	ConflictLevel float64 `json:"conflict_level"`
}

// Handoff is a handoff event's data (XCT records it as the type lctl's v3
// conversion uses): who handed control to whom, why, at which depth, and
// the facts the receiver's suggested queries gave it.
type Handoff struct {
	From             string   `json:"from"`
	To               string   `json:"to"`
	Summary          string   `json:"summary"`
	Depth            int      `json:"depth"`
	SuggestedQueries []string `json:"suggested_queries"`
	Facts            []string `json:"facts"`
}

// EventType is handoff.
func (Handoff) EventType() string { return lctl.TypeHandoff }

// Data is the event's data.
func (h Handoff) Data() map[string]any { return jsonData(h, nil) }

// ContractValidation is a contract_validation's data (part 4): one
// agent's contract in one direction, at a handoff.
type ContractValidation struct {
	Contract   string              `json:"contract"`
	Direction  string              `json:"direction"` // "output" or "input"
	Status     string              `json:"status"`    // "passed" or "failed"
	Checked    int                 `json:"checked"`
	Warnings   []string            `json:"warnings"`
	Violations []ContractViolation `json:"violations"`
}

// ContractViolation is one broken rule.
type ContractViolation struct {
	Subject string `json:"subject"` // "fact F1"
	Message string `json:"message"`
	Rule    string `json:"rule"` // where the rule is written: file:line
}

// Statuses of a contract validation.
const (
	StatusPassed = "passed"
	StatusFailed = "failed"
)

// EventType is contract_validation.
func (ContractValidation) EventType() string { return lctl.TypeContractValidation }

// Data is the event's data.
func (c ContractValidation) Data() map[string]any { return jsonData(c, nil) }

// Passed reports whether the contract held.
func (c ContractValidation) Passed() bool { return c.Status == StatusPassed }

// ModelRouting is a model_routing's data (part 10): the decision, why, the
// alternatives considered and the confidence in it, with the agent, the
// chosen model and the rule or failure that led there.
type ModelRouting struct {
	Decision               string   `json:"decision"`
	Reason                 string   `json:"reason"`
	AlternativesConsidered []string `json:"alternatives_considered"`
	Confidence             float64  `json:"confidence"`
	For                    string   `json:"for"` // the agent whose step it is
	Model                  string   `json:"model"`
	StepKind               string   `json:"step_kind"`
	Rule                   string   `json:"rule,omitempty"`
	FailedModel            string   `json:"failed_model,omitempty"`
	FailureCode            string   `json:"failure_code,omitempty"`
	// FailedTokens are what the failed call used (the model read its
	// prompt before it failed), when it reported any: the run's tokens
	// count them from here, so an owner lost before the step's
	// step_start leaves them on the chain.
	FailedTokens *RoutingTokens `json:"failed_tokens,omitempty"`
}

// RoutingTokens are a failed model call's token counts.
type RoutingTokens struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	// Estimated: the endpoint did not report the call's usage; these are
	// the orchestrator's estimate (orchestrator's failedCallTokens).
	Estimated bool `json:"estimated,omitempty"`
}

// EventType is model_routing.
func (ModelRouting) EventType() string { return lctl.TypeModelRouting }

// Data is the event's data.
func (m ModelRouting) Data() map[string]any { return jsonData(m, nil) }

// Signal is an error the crew's rules send back to the proposing agent
// (an error event, spec part 6): a refused handoff, a broken contract, a
// fact the store refuses, no model left.
type Signal struct {
	Category        string         `json:"category"`
	Type            string         `json:"type"`
	Code            string         `json:"code"`
	Message         string         `json:"message"`
	Recoverable     bool           `json:"recoverable"`
	SuggestedAction string         `json:"suggested_action"`
	Details         map[string]any `json:"details,omitempty"`
}

// Error codes of crew signals (docs/crews.md), with the taxonomy's types.
const (
	CodeUnknownAgent       = "UNKNOWN_AGENT"        // orchestration_error / routing_failed
	CodeNotInControl       = "NOT_IN_CONTROL"       // orchestration_error / delegation_rejected
	CodeHandoffNotAllowed  = "HANDOFF_NOT_ALLOWED"  // orchestration_error / delegation_rejected
	CodeCycleDetected      = "CYCLE_DETECTED"       // orchestration_error / cycle_detected
	CodeChainDepthExceeded = "CHAIN_DEPTH_EXCEEDED" // orchestration_error / chain_depth_exceeded
	CodeContractViolated   = "CONTRACT_VIOLATED"    // output_error / validation_failed
	CodeInvalidFact        = "INVALID_FACT"         // input_error / invalid_format
	CodeUnknownFact        = "UNKNOWN_FACT"         // input_error / missing_context
	CodeInvalidQuery       = "INVALID_QUERY"        // input_error / invalid_format
	CodeNoModel            = "NO_MODEL"             // orchestration_error / routing_failed
	CodeToolNotAllowed     = "TOOL_NOT_ALLOWED"     // output_error / validation_failed
	// CodeDoneNotAllowed refuses done from an agent the crew's
	// authority.end_run does not name; CodeAssessmentNotAllowed an
	// assessment that would lift another agent's doubt from an agent
	// authority.lift_doubts does not name (or the fact's author).
	CodeDoneNotAllowed       = "DONE_NOT_ALLOWED"       // orchestration_error / delegation_rejected
	CodeAssessmentNotAllowed = "ASSESSMENT_NOT_ALLOWED" // output_error / validation_failed
	// CodeVerificationRequired is the validator's: a step in the verify
	// band, denied until the reviewer named in details.verifier verifies.
	CodeVerificationRequired = "VERIFICATION_REQUIRED" // output_error / validation_failed
)

// EventType is error.
func (*Signal) EventType() string { return lctl.TypeError }

// Data is the event's data.
func (s *Signal) Data() map[string]any { return jsonData(s, nil) }

// Error is the signal's code and message.
func (s *Signal) Error() string { return s.Code + ": " + s.Message }

func signal(category, typ, code, action string, recoverable bool, format string, args ...any) *Signal {
	return &Signal{Category: category, Type: typ, Code: code, Message: fmt.Sprintf(format, args...), Recoverable: recoverable, SuggestedAction: action}
}

// Checkpoint is a checkpoint's data (part 1): the hash of lctl's state
// replayed up to it and the facts as the chain records them (confidence as
// assessed, without the decay the store applies), which is what lctl
// verify recomputes and compares.
type Checkpoint struct {
	StateHash     string                  `json:"state_hash"`
	FactsSnapshot map[string]FactSnapshot `json:"facts_snapshot"`
}

// FactSnapshot is one fact of a checkpoint.
type FactSnapshot struct {
	Text       string   `json:"text"`
	Confidence *float64 `json:"confidence,omitempty"`
}

// EventType is checkpoint.
func (Checkpoint) EventType() string { return lctl.TypeCheckpoint }

// Data is the event's data.
func (c Checkpoint) Data() map[string]any { return jsonData(c, nil) }

// NewCheckpoint is the checkpoint to append after events, the chain so
// far (the orchestrator writes one at every handoff and every N events).
func NewCheckpoint(chainID string, events []lctl.Event) (Checkpoint, error) {
	return checkpointOf(chainID, lctl.Replay(chainID, events, 0))
}

// checkpointOf is the checkpoint of lctl's state s of chainID. The state
// hash is lctl's version 2 (State.Hash): a session's state keeps it up to
// date, so each checkpoint of a long run costs what changed since the last
// one, not the run's length.
func checkpointOf(chainID string, s *lctl.State) (Checkpoint, error) {
	h, err := s.Hash()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint of %s: %w", chainID, err)
	}
	cp := Checkpoint{StateHash: h, FactsSnapshot: make(map[string]FactSnapshot, len(s.Facts))}
	for id, f := range s.Facts {
		snap := FactSnapshot{Text: f.Text}
		if f.Confidence != nil {
			c := *f.Confidence
			snap.Confidence = &c
		}
		cp.FactsSnapshot[id] = snap
	}
	return cp, nil
}
