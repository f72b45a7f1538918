package lctl

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
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
	// Tokens sums step_end tokens, raised to a run_finished's totals
	// (XCT), which count the final done turn too.
	Tokens Tokens `json:"tokens"`
	// DurationMS sums step_end duration_ms.
	DurationMS float64 `json:"duration_ms"`
	// EventTypes counts events by type, unknown types included.
	EventTypes map[string]int `json:"event_types"`
	// UnknownTypes lists the seqs of events whose type this reducer does
	// not know (IsRecognizedType is false). They are counted and kept,
	// never dropped. XCT's extension types, the spec's handoff and
	// signed_checkpoint are known, though not all are folded into fields.
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

	// idx finds the latest attempt of a step number in Steps. It is derived
	// from Steps and not part of the JSON form; nil means "rebuild it".
	idx *stepIndex
	// track, when set, records what Apply changes in place (Steps entries
	// and facts), so a Timeline can snapshot only what changed.
	track *changeTrack
	// noSteps leaves Steps alone (Timeline.SummaryAt): nothing else in the
	// state depends on them.
	noSteps bool
	// unfolded lists the seqs of every event of a type the reducer does
	// not fold into a field (IsKnownType false): UnknownTypes and the
	// recognized types it only counts. It is what Hash writes as
	// "unknown_types", so state hashes stay what they were before the
	// reducer recognized those types (docs/lctl.md, "State hash"); nil
	// (a State not built by NewState) means UnknownTypes.
	unfolded []uint64
	// deferTypes makes Apply count the known types in typeCounts instead
	// of EventTypes (DeferTypeCounts), until FlushTypeCounts.
	deferTypes bool
	typeCounts [numKnownTypes]int
	// tokens, when set (KeepTokens), is the last step_end's tokens
	// object with its members found.
	tokens *Members
	// countCalls counts tool calls in calls instead of listing them
	// (CountToolCalls); factsOnly folds only facts (FactsOnly).
	countCalls bool
	calls      int
	factsOnly  bool
	// noHistory keeps facts without their History (NoFactHistory);
	// noCurrent leaves CurrentStep nil (NoCurrentStep).
	noHistory bool
	noCurrent bool
	// noFactText leaves facts' Text empty (NoFactText).
	noFactText bool
	// hc is what HashV1 wrote before (CacheHashes, state_canonical.go)
	// and what Hash keeps up to date (state_hash2.go). Copies of a State
	// (Clone, snapshots) start without it.
	hc *hashCache
}

// The lists ToolCalls, Errors, UnknownTypes, unfolded, ContractValidations
// and ModelRoutings are append-only: Apply never changes an element after
// appending it. Clone and Timeline rely on that to share them.

// stepIndex maps a step number to the index in Steps of its latest attempt.
// Step numbers below denseSteps (every XCT chain) live in a slice; others
// in a map.
type stepIndex struct {
	dense  []int32 // dense[n] is index+1 of step n's latest attempt, 0 for none
	sparse map[int64]int
}

// denseSteps bounds the step numbers kept in the dense index.
const denseSteps = 1 << 20

func (x *stepIndex) get(n int64) (int, bool) {
	if n >= 0 && n < denseSteps {
		if n < int64(len(x.dense)) && x.dense[n] != 0 {
			return int(x.dense[n]) - 1, true
		}
		return 0, false
	}
	i, ok := x.sparse[n]
	return i, ok
}

func (x *stepIndex) set(n int64, i int) {
	if n >= 0 && n < denseSteps {
		if n >= int64(len(x.dense)) {
			x.dense = append(x.dense, make([]int32, int(n)+1-len(x.dense))...)
		}
		x.dense[n] = int32(i + 1)
		return
	}
	if x.sparse == nil {
		x.sparse = map[int64]int{}
	}
	x.sparse[n] = i
}

// changeTrack records the Steps entries and facts Apply changed in place.
type changeTrack struct {
	steps map[int]struct{}
	facts map[string]struct{}
}

func (s *State) touchStep(i int) {
	if s.track != nil {
		s.track.steps[i] = struct{}{}
	}
	if s.hc != nil {
		s.hc.touchStep(i)
	}
}

func (s *State) touchFact(id string) {
	if s.track != nil {
		s.track.facts[id] = struct{}{}
	}
	if s.hc != nil {
		s.hc.touchFact(id)
	}
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
		unfolded:            []uint64{},
		ContractValidations: []ContractValidation{},
		ModelRoutings:       []ModelRouting{},
		Steps:               []Step{},
		idx:                 &stepIndex{},
	}
}

// NewSummaryState returns a state that keeps everything but Steps (nil,
// as Timeline.SummaryAt's): for aggregates over a chain too long to hold
// every step (lctl stats on a stream). The rest is exactly NewState's.
func NewSummaryState(chainID string) *State {
	s := NewState(chainID)
	s.Steps, s.noSteps = nil, true
	return s
}

// Clone returns a copy of s that shares nothing it could change: applying
// events to either leaves the other as it was. The append-only lists are
// shared up to their current length (an append to the copy copies them), so
// a clone costs O(facts + steps), not O(events).
func (s *State) Clone() *State {
	c := *s
	c.track = nil
	c.hc = nil
	c.Facts = make(map[string]*Fact, len(s.Facts))
	for id, f := range s.Facts {
		c.Facts[id] = f.frozen()
	}
	c.Agents = capped(s.Agents)
	if s.CurrentStep != nil {
		cur := *s.CurrentStep
		c.CurrentStep = &cur
	}
	c.ToolCalls = capped(s.ToolCalls)
	c.Errors = capped(s.Errors)
	c.UnknownTypes = capped(s.UnknownTypes)
	c.unfolded = capped(s.unfolded)
	c.ContractValidations = capped(s.ContractValidations)
	c.ModelRoutings = capped(s.ModelRoutings)
	if s.EventTypes != nil {
		c.EventTypes = make(map[string]int, len(s.EventTypes))
		for k, v := range s.EventTypes {
			c.EventTypes[k] = v
		}
	}
	c.Run = s.Run.clone()
	if s.Steps != nil {
		c.Steps = append(make([]Step, 0, len(s.Steps)), s.Steps...)
	}
	c.idx = nil
	if s.idx != nil {
		c.idx = &stepIndex{dense: append([]int32(nil), s.idx.dense...)}
		if s.idx.dense != nil && c.idx.dense == nil {
			c.idx.dense = []int32{}
		}
		if s.idx.sparse != nil {
			c.idx.sparse = make(map[int64]int, len(s.idx.sparse))
			for k, v := range s.idx.sparse {
				c.idx.sparse[k] = v
			}
		}
	}
	return &c
}

// frozen copies a fact so that changes to either copy do not reach the
// other: its history and tags are shared up to their length, and Apply
// only ever appends to the one and replaces the other.
func (f *Fact) frozen() *Fact {
	c := *f
	c.History = capped(f.History)
	c.Tags = capped(f.Tags)
	return &c
}

func (r *Run) clone() *Run {
	if r == nil {
		return nil
	}
	c := *r
	if r.Labels != nil {
		c.Labels = make(map[string]string, len(r.Labels))
		for k, v := range r.Labels {
			c.Labels[k] = v
		}
	}
	if r.Tokens != nil {
		t := *r.Tokens
		c.Tokens = &t
	}
	return &c
}

// capped returns l limited to its length, so appending to it copies.
func capped[T any](l []T) []T {
	if l == nil {
		return nil
	}
	return l[:len(l):len(l)]
}

// Replay applies events in order, stopping before the first event whose seq
// is beyond toSeq (toSeq 0 applies them all), and returns the state reached:
// the spec's replay_to. Events are expected in seq order, as a chain stores
// them.
func Replay(chainID string, events []Event, toSeq uint64) *State {
	n := len(events)
	if toSeq != 0 {
		for i := range events {
			if events[i].Seq > toSeq {
				n = i
				break
			}
		}
	}
	events = events[:n]
	s := NewState(chainID)
	// Count the types first: the counts size every list exactly (no slice
	// ever grows and copies) and fill EventTypes without a map write per
	// event.
	var counts [numKnownTypes]int
	for i := range events {
		if k := typeIndex(events[i].Type); k >= 0 {
			counts[k]++
		}
	}
	s.ToolCalls = make([]ToolCall, 0, counts[kToolCall])
	s.Errors = make([]ErrorRecord, 0, counts[kError])
	s.Steps = make([]Step, 0, counts[kStepStart])
	s.ContractValidations = make([]ContractValidation, 0, counts[kContractValidation])
	s.ModelRoutings = make([]ModelRouting, 0, counts[kModelRouting])
	for k, c := range counts {
		if c > 0 {
			s.EventTypes[knownTypes[k]] = c
		}
	}
	for i := range events {
		s.apply(&events[i], false)
	}
	return s
}

// knownTypes are the event types the reducer folds; typeIndex maps a type
// to its position here.
var knownTypes = [...]string{
	kStepStart: TypeStepStart, kStepEnd: TypeStepEnd, kFactAdded: TypeFactAdded, kFactModified: TypeFactModified,
	kToolCall: TypeToolCall, kError: TypeError, kCheckpoint: TypeCheckpoint, kContractValidation: TypeContractValidation,
	kModelRouting: TypeModelRouting, kStreamStart: TypeStreamStart, kStreamChunk: TypeStreamChunk, kStreamEnd: TypeStreamEnd,
	kRunStarted: TypeRunStarted, kVerdict: TypeVerdict, kRunFinished: TypeRunFinished,
}

const (
	kStepStart = iota
	kStepEnd
	kFactAdded
	kFactModified
	kToolCall
	kError
	kCheckpoint
	kContractValidation
	kModelRouting
	kStreamStart
	kStreamChunk
	kStreamEnd
	kRunStarted
	kVerdict
	kRunFinished
	numKnownTypes
)

// typeIndex returns the position of a known type in knownTypes, -1 for a
// type the reducer does not know.
func typeIndex(t string) int {
	switch t {
	case TypeStepStart:
		return kStepStart
	case TypeStepEnd:
		return kStepEnd
	case TypeFactAdded:
		return kFactAdded
	case TypeFactModified:
		return kFactModified
	case TypeToolCall:
		return kToolCall
	case TypeError:
		return kError
	case TypeCheckpoint:
		return kCheckpoint
	case TypeContractValidation:
		return kContractValidation
	case TypeModelRouting:
		return kModelRouting
	case TypeStreamStart:
		return kStreamStart
	case TypeStreamChunk:
		return kStreamChunk
	case TypeStreamEnd:
		return kStreamEnd
	case TypeRunStarted:
		return kRunStarted
	case TypeVerdict:
		return kVerdict
	case TypeRunFinished:
		return kRunFinished
	}
	return -1
}

// DeferTypeCounts makes Apply count events of the types the reducer folds
// in an array, not in EventTypes (a map write per event), until
// FlushTypeCounts adds them there: for a caller that applies a whole
// stream and reads EventTypes, or hashes the state, only after
// FlushTypeCounts.
func (s *State) DeferTypeCounts() { s.deferTypes = true }

// KeepTokens makes Apply keep the last step_end's tokens object with its
// members found, for TokenMembers: a caller that reads the same object
// right after Apply (stats' pricer) does not walk it again.
func (s *State) KeepTokens() { s.tokens = new(Members) }

// TokenMembers is t.Members(names), from what Apply kept (KeepTokens)
// when t is the very object Apply read last (the same bytes: a streamed
// object's are never written again) and names are the same names.
func (s *State) TokenMembers(t Object, names []string) Members {
	if k := s.tokens; k != nil && len(t.raw) > 0 && len(k.o.raw) == len(t.raw) && &k.o.raw[0] == &t.raw[0] &&
		slices.Equal(k.names, names) {
		m := *k
		m.names = names
		return m
	}
	return t.Members(names)
}

// FlushTypeCounts adds the counts DeferTypeCounts kept to EventTypes and
// ends the deferral.
func (s *State) FlushTypeCounts() {
	if s.EventTypes == nil {
		s.EventTypes = map[string]int{}
	}
	for k, c := range s.typeCounts {
		if c > 0 {
			s.EventTypes[knownTypes[k]] += c
		}
	}
	s.typeCounts = [numKnownTypes]int{}
	s.deferTypes = false
}

// CountToolCalls makes Apply count tool calls (ToolCallCount) instead of
// listing them in ToolCalls, which stays as it is: for a summary of a
// chain too long to hold every call (lctl stats, text replay on a
// stream). Such a state is not hashed (its hash covers the list): Hash
// and HashV1 refuse it.
func (s *State) CountToolCalls() { s.countCalls = true }

// ToolCallCount is how many tool calls the state has applied: those in
// ToolCalls and those CountToolCalls counted.
func (s *State) ToolCallCount() int { return len(s.ToolCalls) + s.calls }

// FactsOnly makes Apply fold only facts (their text, confidence, source
// and tags, without their History) besides Seq, EventCount,
// LastTimestamp and EventTypes: for checking a chain's fact snapshots
// (lctl verify on a stream). Such a state is not hashed: Hash and HashV1
// refuse it.
func (s *State) FactsOnly() { s.factsOnly = true }

// NoFactHistory makes Apply keep facts as they stand (text, confidence,
// source, tags) without their History, which stays empty: for a summary
// that gives only the facts' number and confidences (lctl stats, text
// replay on a stream). Such a state is not hashed: Hash and HashV1 refuse
// it.
func (s *State) NoFactHistory() { s.noHistory = true }

// NoFactText makes Apply keep facts without their Text (with
// NoFactHistory: a summary that gives only their number and confidences,
// lctl stats), so that a stream need not keep the texts
// (StreamOptions.Unread). Such a state is not hashed.
func (s *State) NoFactText() { s.noFactText = true }

// NoCurrentStep makes Apply leave CurrentStep nil: for a summary that
// never shows the step in progress (lctl stats). Such a state is not
// hashed: Hash and HashV1 refuse it.
func (s *State) NoCurrentStep() { s.noCurrent = true }

// errPartialState is what hashing a state that does not keep everything
// says.
var errPartialState = errors.New("the state counts tool calls, keeps only facts, keeps no fact history or no current step (CountToolCalls, FactsOnly, NoFactHistory, NoCurrentStep): it has no hash")

// Apply folds one event into the state. It never fails and never panics: a
// field of the wrong type (or a number out of range) is ignored as if it were
// absent, and the rest of the event still applies. What each type does:
//
//   - every event: Seq, EventCount, LastTimestamp and EventTypes[type]++.
//   - step_start: adds the agent to Agents on its first step; sets
//     CurrentStep {seq, agent, step, intent, tool, model}. With a step number
//     (XCT) it opens a new entry in Steps and raises Run.Steps.
//   - step_end: clears CurrentStep; adds data.tokens {input, output} (or
//     the {in, out}, {input_tokens, output_tokens}, {prompt_tokens,
//     completion_tokens} other writers use) to Tokens and duration_ms to
//     DurationMS; with a step number, records
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
//   - run_finished (XCT): sets Run's status, message, steps and tokens;
//     the chain's Tokens become at least those totals (they also count
//     the final done turn, which has no step_end).
//   - handoff, signed_checkpoint and XCT's other extension types
//     (IsRecognizedType): counted in EventTypes only.
//   - any other type: its seq is appended to UnknownTypes.
func (s *State) Apply(e *Event) { s.apply(e, true) }

// ReadsData says whether Apply reads the data of an event of type typ,
// with the state's options: a stream need not decode any other's
// (StreamOptions.Data). Kept in step with apply: every type it folds
// reads its data, but for a verdict, and a tool call it counts, in a
// state without steps (stepFor gives nil before reading anything);
// the types it does not fold read none.
//
// A stream asks on its decoding cores while Apply changes the state on
// another: it takes DataTypes, which reads nothing of the state.
func (s *State) ReadsData(typ string) bool {
	k := typeIndex(typ)
	if s.factsOnly {
		return k == kFactAdded || k == kFactModified
	}
	switch k {
	case kVerdict:
		return !s.noSteps
	case kToolCall:
		return !s.noSteps || !s.countCalls
	case -1:
		return false
	}
	return true
}

// DataTypes is ReadsData with the state's options as they are now, in a
// function that reads nothing of the state: the decoding cores call it
// for every event, and reading the state's options there would share its
// memory with the goroutine applying events to it (every event's Seq,
// EventCount and LastTimestamp written beside them).
func (s *State) DataTypes() func(typ string) bool {
	c := &State{factsOnly: s.factsOnly, noSteps: s.noSteps, countCalls: s.countCalls}
	return c.ReadsData
}

// apply is Apply; countType false leaves EventTypes to the caller (Replay
// counts known types in bulk).
func (s *State) apply(e *Event, countType bool) {
	if e == nil {
		return
	}
	if s.idx == nil {
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
	k := typeIndex(e.Type)
	switch {
	case k >= 0 && s.deferTypes:
		if countType {
			s.typeCounts[k]++
		}
	case countType || k < 0:
		s.EventTypes[e.Type]++
	}
	if s.factsOnly {
		if k == kFactAdded || k == kFactModified {
			s.applyFact(e)
		}
		return
	}
	switch k {
	case kStepStart:
		s.applyStepStart(e)
	case kStepEnd:
		s.applyStepEnd(e)
	case kFactAdded, kFactModified:
		s.applyFact(e)
	case kToolCall:
		s.applyToolCall(e)
	case kError:
		s.applyError(e)
	case kCheckpoint:
		s.LastCheckpointSeq = e.Seq
		s.LastCheckpointHash = estr(e, "state_hash")
	case kContractValidation:
		s.ContractValidations = appendDoubling(s.ContractValidations, ContractValidation{
			Seq:       e.Seq,
			Agent:     e.Agent,
			Contract:  estr(e, "contract"),
			Direction: estr(e, "direction"),
			Status:    estr(e, "status"),
			Warnings:  stringList(e.Get("warnings")),
		})
	case kModelRouting:
		r := ModelRouting{
			Seq:          e.Seq,
			Agent:        e.Agent,
			Decision:     estr(e, "decision"),
			Reason:       estr(e, "reason"),
			Alternatives: stringList(e.Get("alternatives_considered")),
		}
		if c, ok := econfidence(e, "confidence"); ok {
			r.Confidence = &c
		}
		s.ModelRoutings = appendDoubling(s.ModelRoutings, r)
	case kStreamStart:
		s.Stream.Streams++
		s.Stream.Active = true
	case kStreamChunk:
		s.Stream.Chunks++
		if n, ok := ecount(e, "tokens"); ok {
			s.Stream.Tokens += n
		}
	case kStreamEnd:
		s.Stream.Active = false
		if n, ok := ecount(e, "total_chunks"); ok {
			s.Stream.ReportedChunks += n
		}
		if n, ok := ecount(e, "total_tokens"); ok {
			s.Stream.ReportedTokens += n
		}
		if ms, ok := eduration(e, "duration_ms"); ok {
			s.Stream.DurationMS += ms
		}
	case kRunStarted:
		s.applyRunStarted(e)
	case kVerdict:
		if st := s.stepFor(e); st != nil {
			if v := estr(e, "decision"); v != "" {
				st.Decision = v
			}
			if rs := eventRuleIDs(e); len(rs) > 0 {
				st.Reasons = rs
			}
		}
	case kRunFinished:
		s.applyRunFinished(e)
	default:
		s.unfolded = appendDoubling(s.unfolded, e.Seq)
		if !isRecognizedUnfolded(e.Type) {
			s.UnknownTypes = appendDoubling(s.UnknownTypes, e.Seq)
		}
	}
}

// hashedUnknown is the list Hash writes as "unknown_types".
func (s *State) hashedUnknown() []uint64 {
	if s.unfolded == nil {
		return s.UnknownTypes
	}
	return s.unfolded
}

func (s *State) applyStepStart(e *Event) {
	s.addAgent(e.Agent)
	if s.noCurrent && s.noSteps {
		// Only the run's number of steps is left to fold.
		if n, ok := ecount(e, "step"); ok && s.Run != nil && n > s.Run.Steps {
			s.Run.Steps = n
		}
		return
	}
	cur, n, hasStep := newCurrentStep(e)
	if hasStep && s.noSteps {
		if s.Run != nil && n > s.Run.Steps {
			s.Run.Steps = n
		}
	} else if hasStep {
		s.idx.set(n, len(s.Steps))
		s.touchStep(len(s.Steps))
		s.Steps = appendDoubling(s.Steps, Step{
			Step:     n,
			StepID:   estr(e, "step_id"),
			Tool:     cur.Tool,
			Intent:   cur.Intent,
			StartSeq: e.Seq,
		})
		if s.Run != nil && n > s.Run.Steps {
			s.Run.Steps = n
		}
	}
	if !s.noCurrent {
		s.CurrentStep = cur
	}
}

// newCurrentStep returns the step in progress the step_start e begins,
// and its number.
func newCurrentStep(e *Event) (cur *CurrentStep, n int64, hasStep bool) {
	// The current step and its number are allocated together.
	alloc := &struct {
		cur CurrentStep
		n   int64
	}{cur: CurrentStep{
		Seq:    e.Seq,
		Agent:  e.Agent,
		Intent: estr(e, "intent"),
		Tool:   estr(e, "tool"),
		Model:  emodel(e),
	}}
	n, hasStep = ecount(e, "step")
	if hasStep {
		alloc.n = n
		alloc.cur.Step = &alloc.n
	}
	return &alloc.cur, n, hasStep
}

// SetCurrentStep sets CurrentStep to the step the step_start e begins, as
// Apply sets it, or to nil for a nil e: for a state that keeps no current
// step as it goes (NoCurrentStep), once its events are applied, with the
// last step_start applied when no step_end came after it. It stays a state
// that is not hashed.
func (s *State) SetCurrentStep(e *Event) {
	if e == nil {
		s.CurrentStep = nil
		return
	}
	s.CurrentStep, _, _ = newCurrentStep(e)
}

func (s *State) applyStepEnd(e *Event) {
	s.CurrentStep = nil
	if in, out, ok := e.TokenPair(); ok {
		// Object's TokenPair, read on a decoding core (as below).
		if s.tokens != nil {
			*s.tokens = Members{}
		}
		s.Tokens.Input += in
		s.Tokens.Output += out
	} else if t, ok := e.Object("tokens"); ok {
		in, out, pair := t.TokenPair()
		switch {
		case pair:
			if s.tokens != nil {
				// Not found: TokenMembers walks the object, if asked (the
				// pricer reads the pair too).
				*s.tokens = Members{}
			}
		case s.tokens != nil:
			*s.tokens = t.Members(tokenNames[:])
			in, out = memberCounts(s.tokens)
		default:
			in, out = tokenCounts(t)
		}
		s.Tokens.Input += in
		s.Tokens.Output += out
	}
	ms, hasDuration := eduration(e, "duration_ms")
	if hasDuration {
		s.DurationMS += ms
	}
	if st := s.stepFor(e); st != nil {
		if v := estr(e, "outcome"); v != "" {
			st.Outcome = v
		}
		if hasDuration {
			st.DurationMS = ms
		}
		st.EndSeq = e.Seq
	}
}

func (s *State) applyFact(e *Event) {
	id := estr(e, "id")
	if id == "" {
		return
	}
	s.touchFact(id)
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
	if !s.noFactText { // else not read: the stream may have left it unread
		if v, ok := e.Str("text"); ok {
			f.Text = v
		}
	}
	if c, ok := econfidence(e, "confidence"); ok {
		f.Confidence = &c
	}
	if v, ok := e.Str("source"); ok {
		f.Source = v
	}
	if _, ok := e.Lookup("tags"); ok {
		f.Tags = stringList(e.Get("tags"))
	}
	if s.factsOnly || s.noHistory {
		return
	}
	change := FactChange{Seq: e.Seq, Agent: e.Agent, Text: f.Text, Reason: estr(e, "reason")}
	if f.Confidence != nil {
		c := *f.Confidence
		change.Confidence = &c
	}
	f.History = appendDoubling(f.History, change)
}

func (s *State) applyToolCall(e *Event) {
	if s.countCalls {
		s.calls++
		if st := s.stepFor(e); st != nil {
			if v := estr(e, "status"); v != "" {
				st.Status = v
			}
		}
		return
	}
	tc := ToolCall{
		Seq:    e.Seq,
		Agent:  e.Agent,
		Tool:   estr(e, "tool"),
		StepID: estr(e, "step_id"),
		Status: estr(e, "status"),
	}
	if n, ok := ecount(e, "step"); ok {
		tc.Step = &n
	}
	if ms, ok := eduration(e, "duration_ms"); ok {
		tc.DurationMS = ms
	}
	s.ToolCalls = appendDoubling(s.ToolCalls, tc)
	if st := s.stepFor(e); st != nil && tc.Status != "" {
		st.Status = tc.Status
	}
}

func (s *State) applyError(e *Event) {
	r := ErrorRecord{
		Seq:      e.Seq,
		Agent:    e.Agent,
		StepID:   estr(e, "step_id"),
		Category: estr(e, "category"),
		Type:     estr(e, "type"),
		Code:     estr(e, "code"),
		Message:  estr(e, "message"),
	}
	if n, ok := ecount(e, "step"); ok {
		r.Step = &n
	}
	if b, ok := e.Get("recoverable").(bool); ok {
		r.Recoverable = b
	}
	s.Errors = appendDoubling(s.Errors, r)
	if st := s.stepFor(e); st != nil && r.Code != "" {
		st.ErrorCode = r.Code
	}
}

func (s *State) applyRunStarted(e *Event) {
	if s.Run == nil {
		s.Run = &Run{}
	}
	r := s.Run
	r.Status = "running"
	r.StartedSeq = e.Seq
	r.RunID = estr(e, "run_id")
	r.Goal = estr(e, "goal")
	r.Model = emodel(e)
	r.Principal = estr(e, "principal")
	if labels, ok := e.Get("labels").(map[string]any); ok {
		r.Labels = map[string]string{}
		for k, v := range labels {
			if sv, ok := v.(string); ok {
				r.Labels[k] = sv
			}
		}
	}
	if n, ok := ecount(e, "max_steps"); ok {
		r.MaxSteps = n
	}
}

func (s *State) applyRunFinished(e *Event) {
	if s.Run == nil {
		s.Run = &Run{}
	}
	r := s.Run
	r.FinishedSeq = e.Seq
	if v := estr(e, "status"); v != "" {
		r.Status = v
	}
	r.Message = estr(e, "message")
	if n, ok := ecount(e, "steps"); ok {
		r.Steps = n
	}
	if t, ok := e.Object("tokens"); ok {
		in, out := tokenCounts(t)
		r.Tokens = &Tokens{Input: in, Output: out}
		// The run's totals also count the model turns that are no step
		// (XCT's final done): they are the chain's totals, so every view
		// (stats, the debugger, the chain list, xct show) gives one number.
		s.Tokens.Input = max(s.Tokens.Input, in)
		s.Tokens.Output = max(s.Tokens.Output, out)
	}
}

// stepFor returns the latest attempt of the step the event names, creating
// an entry when the chain starts mid-step; nil when the event names none.
func (s *State) stepFor(e *Event) *Step {
	if s.noSteps {
		return nil
	}
	n, ok := ecount(e, "step")
	if !ok {
		return nil
	}
	i, ok := s.idx.get(n)
	if !ok {
		i = len(s.Steps)
		s.idx.set(n, i)
		s.Steps = appendDoubling(s.Steps, Step{Step: n, StartSeq: e.Seq})
	}
	s.touchStep(i)
	st := &s.Steps[i]
	if st.StepID == "" {
		st.StepID = estr(e, "step_id")
	}
	if st.Tool == "" {
		st.Tool = estr(e, "tool")
	}
	return st
}

func (s *State) rebuildStepIndex() {
	s.idx = &stepIndex{}
	for i := range s.Steps {
		s.idx.set(s.Steps[i].Step, i)
	}
}

// tokenCounts reads a tokens object: {input, output} as the spec writes it,
// or the {in, out}, {input_tokens, output_tokens} and {prompt_tokens,
// completion_tokens} other implementations and model APIs use.
func tokenCounts(t Object) (in, out int64) {
	m := t.Members(tokenNames[:])
	for i := range 4 {
		if n, ok := memberCount(&m, i); ok {
			in = n
			break
		}
	}
	for i := 4; i < 8; i++ {
		if n, ok := memberCount(&m, i); ok {
			out = n
			break
		}
	}
	return in, out
}

// memberCounts is tokenCounts of the members found (tokenCounts has its
// loops itself: a call more costs every other reader of the state).
func memberCounts(m *Members) (in, out int64) {
	for i := range 4 {
		if n, ok := memberCount(m, i); ok {
			in = n
			break
		}
	}
	for i := 4; i < 8; i++ {
		if n, ok := memberCount(m, i); ok {
			out = n
			break
		}
	}
	return in, out
}

// tokenNames are the names a tokens object gives its counts by: input's
// first (XCT's and the spec's, then the aliases other writers use), then
// output's, each group in the order they are looked for.
var tokenNames = [8]string{"input", "in", "input_tokens", "prompt_tokens", "output", "out", "output_tokens", "completion_tokens"}

// memberCount is count of the object's member names[i].
func memberCount(m *Members, i int) (int64, bool) {
	if f, ok := m.Float(i); ok {
		return countOf(f, true)
	}
	return count(m.Get(i))
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

// appendDoubling is append, growing a full list to twice its length: a
// list of a million elements grown by append (by a quarter once past 256)
// is copied some twenty times over, on the goroutine that applies the
// events in order; doubling copies it about once.
func appendDoubling[T any](l []T, v T) []T {
	if len(l) == cap(l) && len(l) >= 256 {
		l = slices.Grow(l, len(l))
	}
	return append(l, v)
}

// estr returns the event's data member key when it is a string, ""
// otherwise.
func estr(e *Event, key string) string {
	v, _ := e.Str(key)
	return v
}

// enumber returns the event's data member key as number does, reading a
// streamed number without boxing it.
func enumber(e *Event, key string) (float64, bool) {
	if f, ok := e.Float(key); ok {
		return f, true
	}
	return number(e.Get(key))
}

// emodel is modelName of the data member model.
func emodel(e *Event) string {
	if v, ok := e.Str("model"); ok {
		return v
	}
	return modelName(e.Get("model"))
}

// ecount is count of the data member key.
func ecount(e *Event, key string) (int64, bool) {
	f, ok := enumber(e, key)
	return countOf(f, ok)
}

// eduration is duration of the data member key.
func eduration(e *Event, key string) (float64, bool) {
	f, ok := enumber(e, key)
	return durationOf(f, ok)
}

// econfidence is confidence of the data member key.
func econfidence(e *Event, key string) (float64, bool) {
	f, ok := enumber(e, key)
	return confidenceOf(f, ok)
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

// eventRuleIDs returns the rule_id of each {rule_id, message} reason of
// the event, read without decoding the reasons when it was streamed.
func eventRuleIDs(e *Event) []string {
	var out []string
	e.EachObject("reasons", func(o Object) {
		if id, ok := o.Str("rule_id"); ok {
			out = append(out, id)
		}
	})
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
func count(v any) (int64, bool) { return countOf(number(v)) }

func countOf(f float64, ok bool) (int64, bool) {
	if !ok || f < 0 || f > maxExactInt || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// duration returns v as a non-negative number of milliseconds. Values past
// 2^53 ms are rejected so sums stay finite and exact.
func duration(v any) (float64, bool) { return durationOf(number(v)) }

func durationOf(f float64, ok bool) (float64, bool) {
	if !ok || f < 0 || f > maxExactInt {
		return 0, false
	}
	return f, true
}

// confidenceOf returns a number when it is in [0, 1].
func confidenceOf(f float64, ok bool) (float64, bool) {
	if !ok || f < 0 || f > 1 {
		return 0, false
	}
	return f, true
}

// IsKnownType reports whether the reducer folds events of this type into
// the state's fields: the spec's core and extension types and XCT's
// run_started, verdict and run_finished.
func IsKnownType(t string) bool { return typeIndex(t) >= 0 }

// IsRecognizedType reports whether the reducer knows events of this type:
// those it folds (IsKnownType), the spec's handoff and XCT's extension
// types (IsXCTType, signed_checkpoint among them), which it counts. Events
// of any other type are listed in State.UnknownTypes.
func IsRecognizedType(t string) bool { return IsKnownType(t) || isRecognizedUnfolded(t) }

// isRecognizedUnfolded reports whether t is a known type the reducer does
// not fold.
func isRecognizedUnfolded(t string) bool { return t == TypeHandoff || IsXCTType(t) }
