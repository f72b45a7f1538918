package lctl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
)

// State is what a chain says after some prefix of its events: the reducer's
// output, the thing time-travel replay shows at a seq. It is derived only
// from events, so the same events always give the same State (and Hash).
//
// Every slice is in event order and is never nil, so the JSON form is stable:
// an empty list is [] and not null. Maps are keyed by ids and encoded with
// sorted keys by Canonical.
type State struct {
	// ChainID is the chain the events belong to.
	ChainID string `json:"chain_id"`
	// Seq is the seq of the last applied event (0 before the first).
	Seq uint64 `json:"seq"`
	// EventCount counts the applied events.
	EventCount int `json:"event_count"`
	// LastTimestamp is the timestamp of the last applied event.
	LastTimestamp string `json:"last_timestamp"`
	// Facts are the facts registered so far, by fact id.
	Facts map[string]*Fact `json:"facts"`
	// Agents are the agents that started a step, in order of their first
	// step_start. Pseudo agents that only record (the spec's "system", XCT's
	// validator and executor) are not agents that did work.
	Agents []string `json:"agents"`
	// CurrentStep is the step in progress: set by step_start, cleared by
	// step_end; null between steps.
	CurrentStep *CurrentStep `json:"current_step"`
	// ToolCalls lists tool invocations.
	ToolCalls []ToolCall `json:"tool_calls"`
	// Errors lists error events.
	Errors []ErrorRecord `json:"errors"`
	// Tokens sums step_end tokens.
	Tokens Tokens `json:"tokens"`
	// DurationMS sums step_end duration_ms.
	DurationMS float64 `json:"duration_ms"`
	// EventTypes counts events by type, unknown types included.
	EventTypes map[string]int `json:"event_types"`
	// UnknownTypes lists the seqs of events whose type this reducer does
	// not know. They are counted and kept, never dropped.
	UnknownTypes []uint64 `json:"unknown_types"`
	// LastCheckpointSeq is the seq of the latest checkpoint (0 if none).
	LastCheckpointSeq uint64 `json:"last_checkpoint_seq"`
	// LastCheckpointHash is the state_hash the latest checkpoint recorded.
	LastCheckpointHash string `json:"last_checkpoint_hash,omitempty"`
	// ContractValidations lists contract_validation events (spec part 4).
	ContractValidations []ContractValidation `json:"contract_validations"`
	// ModelRoutings lists model_routing decisions (spec part 10).
	ModelRoutings []ModelRouting `json:"model_routings"`
	// Stream summarizes streaming events (spec part 9).
	Stream StreamStats `json:"stream"`
	// Run is XCT's run (from run_started / run_finished); null for chains
	// that XCT did not write.
	Run *Run `json:"run"`
	// Steps are XCT's steps, one entry per step_start that carries a step
	// number, completed by the verdict, tool_call, error and step_end events
	// of the same step.
	Steps []Step `json:"steps"`

	// stepIndex maps a step number to the index in Steps of its latest
	// attempt. It is derived from Steps and not part of the JSON form.
	stepIndex map[int64]int
}

// Fact is a fact as it stands now, with every change that led to it.
type Fact struct {
	Text string `json:"text"`
	// Confidence is null when no event gave a valid one (a number in 0..1).
	Confidence *float64 `json:"confidence"`
	Source     string   `json:"source"`
	Tags       []string `json:"tags,omitempty"`
	// History has one entry per fact_added / fact_modified, oldest first,
	// with the fact's text and confidence after that event.
	History []FactChange `json:"history"`
}

// FactChange is one entry of a fact's history.
type FactChange struct {
	Seq        uint64   `json:"seq"`
	Agent      string   `json:"agent"`
	Text       string   `json:"text"`
	Confidence *float64 `json:"confidence"`
	Reason     string   `json:"reason"`
}

// CurrentStep is the step an agent is working on.
type CurrentStep struct {
	Seq    uint64 `json:"seq"`
	Agent  string `json:"agent"`
	Step   *int64 `json:"step,omitempty"`
	Intent string `json:"intent"`
	Tool   string `json:"tool,omitempty"`
	Model  string `json:"model,omitempty"`
}

// ToolCall is one tool invocation.
type ToolCall struct {
	Seq        uint64  `json:"seq"`
	Agent      string  `json:"agent"`
	Tool       string  `json:"tool"`
	Step       *int64  `json:"step,omitempty"`
	StepID     string  `json:"step_id,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	Status     string  `json:"status,omitempty"`
}

// ErrorRecord is one error event, classified by the LCTL taxonomy.
type ErrorRecord struct {
	Seq         uint64 `json:"seq"`
	Agent       string `json:"agent"`
	Step        *int64 `json:"step,omitempty"`
	StepID      string `json:"step_id,omitempty"`
	Category    string `json:"category"`
	Type        string `json:"type"`
	Code        string `json:"code"`
	Message     string `json:"message"`
	Recoverable bool   `json:"recoverable"`
}

// Tokens counts model tokens.
type Tokens struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// ContractValidation is one contract check.
type ContractValidation struct {
	Seq       uint64   `json:"seq"`
	Agent     string   `json:"agent"`
	Contract  string   `json:"contract"`
	Direction string   `json:"direction"`
	Status    string   `json:"status"`
	Warnings  []string `json:"warnings,omitempty"`
}

// ModelRouting is one routing decision between models.
type ModelRouting struct {
	Seq          uint64   `json:"seq"`
	Agent        string   `json:"agent"`
	Decision     string   `json:"decision"`
	Reason       string   `json:"reason"`
	Confidence   *float64 `json:"confidence,omitempty"`
	Alternatives []string `json:"alternatives,omitempty"`
}

// StreamStats summarizes streamed output.
type StreamStats struct {
	// Streams counts stream_start events.
	Streams int64 `json:"streams"`
	// Active is true between a stream_start and its stream_end.
	Active bool `json:"active"`
	// Chunks counts stream_chunk events; Tokens sums their tokens.
	Chunks int64 `json:"chunks"`
	Tokens int64 `json:"tokens"`
	// ReportedChunks and ReportedTokens sum what stream_end events claim
	// (total_chunks, total_tokens); they may differ from what was recorded.
	ReportedChunks int64 `json:"reported_chunks"`
	ReportedTokens int64 `json:"reported_tokens"`
	// DurationMS sums stream_end duration_ms.
	DurationMS float64 `json:"duration_ms"`
}

// Run is an XCT run as its run_started and run_finished events describe it.
type Run struct {
	RunID     string            `json:"run_id"`
	Status    string            `json:"status"` // "running" until run_finished, then its status
	Goal      string            `json:"goal"`
	Model     string            `json:"model"`
	Principal string            `json:"principal"`
	Labels    map[string]string `json:"labels,omitempty"`
	MaxSteps  int64             `json:"max_steps,omitempty"`
	Message   string            `json:"message"`
	// Steps is the highest step number started, until run_finished reports
	// the final count.
	Steps int64 `json:"steps"`
	// Tokens are the totals run_finished reported.
	Tokens      *Tokens `json:"tokens,omitempty"`
	StartedSeq  uint64  `json:"started_seq,omitempty"`
	FinishedSeq uint64  `json:"finished_seq,omitempty"`
}

// Step is one XCT step attempt, from proposal to result.
type Step struct {
	Step   int64  `json:"step"`
	StepID string `json:"step_id"`
	Tool   string `json:"tool"`
	Intent string `json:"intent,omitempty"`
	// Decision is the validator's: "allow", "deny", "needs_approval"
	// ("" before the verdict).
	Decision string `json:"decision"`
	// Reasons are the rule ids the verdict gave.
	Reasons []string `json:"reasons,omitempty"`
	// Status is the tool_call's status.
	Status string `json:"status,omitempty"`
	// ErrorCode is the code of the step's last error event.
	ErrorCode string `json:"error_code,omitempty"`
	// Outcome is step_end's: "success", "error", "denied", "invalid"
	// ("" while the step runs).
	Outcome    string  `json:"outcome"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	StartSeq   uint64  `json:"start_seq,omitempty"`
	EndSeq     uint64  `json:"end_seq,omitempty"`
}

// NewState returns the state of a chain before its first event.
func NewState(chainID string) *State {
	return &State{
		ChainID:             chainID,
		Facts:               map[string]*Fact{},
		Agents:              []string{},
		ToolCalls:           []ToolCall{},
		Errors:              []ErrorRecord{},
		EventTypes:          map[string]int{},
		UnknownTypes:        []uint64{},
		ContractValidations: []ContractValidation{},
		ModelRoutings:       []ModelRouting{},
		Steps:               []Step{},
		stepIndex:           map[int64]int{},
	}
}

// Replay applies events in order, stopping before the first event whose seq
// is beyond toSeq (toSeq 0 applies them all), and returns the state reached:
// the spec's replay_to. Events are expected in seq order, as a chain stores
// them.
func Replay(chainID string, events []Event, toSeq uint64) *State {
	s := NewState(chainID)
	for i := range events {
		if toSeq != 0 && events[i].Seq > toSeq {
			break
		}
		s.Apply(&events[i])
	}
	return s
}

// Apply folds one event into the state. It never fails and never panics: a
// field of the wrong type (or a number out of range) is ignored as if it were
// absent, and the rest of the event still applies. What each type does:
//
//   - every event: Seq, EventCount, LastTimestamp and EventTypes[type]++.
//   - step_start: adds the agent to Agents on its first step; sets
//     CurrentStep {seq, agent, step, intent, tool, model}. With a step number
//     (XCT) it opens a new entry in Steps and raises Run.Steps.
//   - step_end: clears CurrentStep; adds data.tokens {input, output} to
//     Tokens and duration_ms to DurationMS; with a step number, records
//     outcome, duration and end seq on the step.
//   - fact_added: creates (or replaces) Facts[id] {text, confidence, source,
//     tags} and appends to its history.
//   - fact_modified: updates the fields present (text, confidence, source,
//     tags) of Facts[id], creating it if it was never added, and appends to
//     its history with the reason.
//   - tool_call: appends to ToolCalls {tool, step, step_id, duration_ms,
//     status}; with a step number, records the status on the step.
//   - error: appends to Errors {category, type, code, message, recoverable};
//     with a step number, records the code on the step.
//   - checkpoint: sets LastCheckpointSeq and LastCheckpointHash (state_hash).
//     Its facts_snapshot does not replace facts: replay from the first event
//     already has them.
//   - contract_validation: appends to ContractValidations.
//   - model_routing: appends to ModelRoutings.
//   - stream_start / stream_chunk / stream_end: count streams, chunks and
//     chunk tokens in Stream; stream_end adds its reported totals and
//     duration and ends the active stream.
//   - run_started (XCT): creates Run {run_id, goal, model, principal, labels,
//     max_steps} with status "running".
//   - verdict (XCT): records decision and reason rule ids on the step.
//   - run_finished (XCT): sets Run's status, message, steps and tokens.
//   - any other type: its seq is appended to UnknownTypes.
func (s *State) Apply(e *Event) {
	if e == nil {
		return
	}
	if s.stepIndex == nil {
		s.rebuildStepIndex()
	}
	if s.Facts == nil {
		s.Facts = map[string]*Fact{}
	}
	if s.EventTypes == nil {
		s.EventTypes = map[string]int{}
	}
	s.Seq = e.Seq
	s.EventCount++
	s.LastTimestamp = e.Timestamp
	s.EventTypes[e.Type]++
	d := e.Data
	switch e.Type {
	case TypeStepStart:
		s.applyStepStart(e, d)
	case TypeStepEnd:
		s.applyStepEnd(e, d)
	case TypeFactAdded, TypeFactModified:
		s.applyFact(e, d)
	case TypeToolCall:
		s.applyToolCall(e, d)
	case TypeError:
		s.applyError(e, d)
	case TypeCheckpoint:
		s.LastCheckpointSeq = e.Seq
		s.LastCheckpointHash = str(d, "state_hash")
	case TypeContractValidation:
		s.ContractValidations = append(s.ContractValidations, ContractValidation{
			Seq:       e.Seq,
			Agent:     e.Agent,
			Contract:  str(d, "contract"),
			Direction: str(d, "direction"),
			Status:    str(d, "status"),
			Warnings:  stringList(d["warnings"]),
		})
	case TypeModelRouting:
		r := ModelRouting{
			Seq:          e.Seq,
			Agent:        e.Agent,
			Decision:     str(d, "decision"),
			Reason:       str(d, "reason"),
			Alternatives: stringList(d["alternatives_considered"]),
		}
		if c, ok := confidence(d["confidence"]); ok {
			r.Confidence = &c
		}
		s.ModelRoutings = append(s.ModelRoutings, r)
	case TypeStreamStart:
		s.Stream.Streams++
		s.Stream.Active = true
	case TypeStreamChunk:
		s.Stream.Chunks++
		if n, ok := count(d["tokens"]); ok {
			s.Stream.Tokens += n
		}
	case TypeStreamEnd:
		s.Stream.Active = false
		if n, ok := count(d["total_chunks"]); ok {
			s.Stream.ReportedChunks += n
		}
		if n, ok := count(d["total_tokens"]); ok {
			s.Stream.ReportedTokens += n
		}
		if ms, ok := duration(d["duration_ms"]); ok {
			s.Stream.DurationMS += ms
		}
	case TypeRunStarted:
		s.applyRunStarted(e, d)
	case TypeVerdict:
		if st := s.stepFor(e, d); st != nil {
			if v := str(d, "decision"); v != "" {
				st.Decision = v
			}
			if rs := ruleIDs(d["reasons"]); len(rs) > 0 {
				st.Reasons = rs
			}
		}
	case TypeRunFinished:
		s.applyRunFinished(e, d)
	default:
		s.UnknownTypes = append(s.UnknownTypes, e.Seq)
	}
}

// Hash identifies the state: "sha256:" and the hex SHA-256 of its canonical
// JSON. Two replays of the same events give the same hash.
func (s *State) Hash() (string, error) {
	c, err := Canonical(s)
	if err != nil {
		return "", fmt.Errorf("hash state: %w", err)
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func (s *State) applyStepStart(e *Event, d map[string]any) {
	s.addAgent(e.Agent)
	cur := &CurrentStep{
		Seq:    e.Seq,
		Agent:  e.Agent,
		Intent: str(d, "intent"),
		Tool:   str(d, "tool"),
		Model:  modelName(d["model"]),
	}
	n, hasStep := count(d["step"])
	if hasStep {
		cur.Step = &n
		s.stepIndex[n] = len(s.Steps)
		s.Steps = append(s.Steps, Step{
			Step:     n,
			StepID:   str(d, "step_id"),
			Tool:     cur.Tool,
			Intent:   cur.Intent,
			StartSeq: e.Seq,
		})
		if s.Run != nil && n > s.Run.Steps {
			s.Run.Steps = n
		}
	}
	s.CurrentStep = cur
}

func (s *State) applyStepEnd(e *Event, d map[string]any) {
	s.CurrentStep = nil
	if t, ok := d["tokens"].(map[string]any); ok {
		if n, ok := count(t["input"]); ok {
			s.Tokens.Input += n
		}
		if n, ok := count(t["output"]); ok {
			s.Tokens.Output += n
		}
	}
	ms, hasDuration := duration(d["duration_ms"])
	if hasDuration {
		s.DurationMS += ms
	}
	if st := s.stepFor(e, d); st != nil {
		if v := str(d, "outcome"); v != "" {
			st.Outcome = v
		}
		if hasDuration {
			st.DurationMS = ms
		}
		st.EndSeq = e.Seq
	}
}

func (s *State) applyFact(e *Event, d map[string]any) {
	id := str(d, "id")
	if id == "" {
		return
	}
	f, exists := s.Facts[id]
	if !exists || e.Type == TypeFactAdded {
		// An add replaces the fact's content but keeps its history.
		nf := &Fact{History: []FactChange{}}
		if exists {
			nf.History = f.History
		}
		f = nf
		s.Facts[id] = f
	}
	if v, ok := d["text"].(string); ok {
		f.Text = v
	}
	if c, ok := confidence(d["confidence"]); ok {
		f.Confidence = &c
	}
	if v, ok := d["source"].(string); ok {
		f.Source = v
	}
	if _, ok := d["tags"]; ok {
		f.Tags = stringList(d["tags"])
	}
	change := FactChange{Seq: e.Seq, Agent: e.Agent, Text: f.Text, Reason: str(d, "reason")}
	if f.Confidence != nil {
		c := *f.Confidence
		change.Confidence = &c
	}
	f.History = append(f.History, change)
}

func (s *State) applyToolCall(e *Event, d map[string]any) {
	tc := ToolCall{
		Seq:    e.Seq,
		Agent:  e.Agent,
		Tool:   str(d, "tool"),
		StepID: str(d, "step_id"),
		Status: str(d, "status"),
	}
	if n, ok := count(d["step"]); ok {
		tc.Step = &n
	}
	if ms, ok := duration(d["duration_ms"]); ok {
		tc.DurationMS = ms
	}
	s.ToolCalls = append(s.ToolCalls, tc)
	if st := s.stepFor(e, d); st != nil && tc.Status != "" {
		st.Status = tc.Status
	}
}

func (s *State) applyError(e *Event, d map[string]any) {
	r := ErrorRecord{
		Seq:      e.Seq,
		Agent:    e.Agent,
		StepID:   str(d, "step_id"),
		Category: str(d, "category"),
		Type:     str(d, "type"),
		Code:     str(d, "code"),
		Message:  str(d, "message"),
	}
	if n, ok := count(d["step"]); ok {
		r.Step = &n
	}
	if b, ok := d["recoverable"].(bool); ok {
		r.Recoverable = b
	}
	s.Errors = append(s.Errors, r)
	if st := s.stepFor(e, d); st != nil && r.Code != "" {
		st.ErrorCode = r.Code
	}
}

func (s *State) applyRunStarted(e *Event, d map[string]any) {
	if s.Run == nil {
		s.Run = &Run{}
	}
	r := s.Run
	r.Status = "running"
	r.StartedSeq = e.Seq
	r.RunID = str(d, "run_id")
	r.Goal = str(d, "goal")
	r.Model = modelName(d["model"])
	r.Principal = str(d, "principal")
	if labels, ok := d["labels"].(map[string]any); ok {
		r.Labels = map[string]string{}
		for k, v := range labels {
			if sv, ok := v.(string); ok {
				r.Labels[k] = sv
			}
		}
	}
	if n, ok := count(d["max_steps"]); ok {
		r.MaxSteps = n
	}
}

func (s *State) applyRunFinished(e *Event, d map[string]any) {
	if s.Run == nil {
		s.Run = &Run{}
	}
	r := s.Run
	r.FinishedSeq = e.Seq
	if v := str(d, "status"); v != "" {
		r.Status = v
	}
	r.Message = str(d, "message")
	if n, ok := count(d["steps"]); ok {
		r.Steps = n
	}
	if t, ok := d["tokens"].(map[string]any); ok {
		var tok Tokens
		if n, ok := count(t["input"]); ok {
			tok.Input = n
		}
		if n, ok := count(t["output"]); ok {
			tok.Output = n
		}
		r.Tokens = &tok
	}
}

// stepFor returns the latest attempt of the step the event names, creating
// an entry when the chain starts mid-step; nil when the event names none.
func (s *State) stepFor(e *Event, d map[string]any) *Step {
	n, ok := count(d["step"])
	if !ok {
		return nil
	}
	i, ok := s.stepIndex[n]
	if !ok {
		i = len(s.Steps)
		s.stepIndex[n] = i
		s.Steps = append(s.Steps, Step{Step: n, StartSeq: e.Seq})
	}
	st := &s.Steps[i]
	if st.StepID == "" {
		st.StepID = str(d, "step_id")
	}
	if st.Tool == "" {
		st.Tool = str(d, "tool")
	}
	return st
}

func (s *State) rebuildStepIndex() {
	s.stepIndex = make(map[int64]int, len(s.Steps))
	for i, st := range s.Steps {
		s.stepIndex[st.Step] = i
	}
}

func (s *State) addAgent(agent string) {
	if agent == "" {
		return
	}
	for _, a := range s.Agents {
		if a == agent {
			return
		}
	}
	s.Agents = append(s.Agents, agent)
}

// str returns d[key] when it is a string, "" otherwise.
func str(d map[string]any, key string) string {
	v, _ := d[key].(string)
	return v
}

// stringList returns the string elements of a list; nil when v is not a list.
func stringList(v any) []string {
	list, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		if sv, ok := x.(string); ok {
			out = append(out, sv)
		}
	}
	return out
}

// ruleIDs returns the rule_id of each {rule_id, message} reason.
func ruleIDs(v any) []string {
	list, ok := v.([]any)
	if !ok {
		return nil
	}
	var out []string
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			if id, ok := m["rule_id"].(string); ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// modelName accepts a model as a name or as the spec's {id, role} object.
func modelName(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		id, _ := x["id"].(string)
		return id
	}
	return ""
}

// number returns v as a finite float64 when it is a JSON (or Go) number.
func number(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	case int:
		f = float64(x)
	case int32:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint:
		f = float64(x)
	case uint32:
		f = float64(x)
	case uint64:
		f = float64(x)
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// maxExactInt is the largest integer a JSON number carries exactly.
const maxExactInt = 1 << 53

// count returns v as a non-negative integer (tokens, step numbers, totals).
func count(v any) (int64, bool) {
	f, ok := number(v)
	if !ok || f < 0 || f > maxExactInt || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// duration returns v as a non-negative number of milliseconds. Values past
// 2^53 ms are rejected so sums stay finite and exact.
func duration(v any) (float64, bool) {
	f, ok := number(v)
	if !ok || f < 0 || f > maxExactInt {
		return 0, false
	}
	return f, true
}

// confidence returns v when it is a number in [0, 1].
func confidence(v any) (float64, bool) {
	f, ok := number(v)
	if !ok || f < 0 || f > 1 {
		return 0, false
	}
	return f, true
}
