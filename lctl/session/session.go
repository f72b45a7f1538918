// Package session records LCTL v4.0 chains from any Go agent: the spec's
// LCTLSession (part 7). A Session appends events (steps, facts, tool calls,
// errors, checkpoints) to one chain, either in memory for export to a
// .lctl.json / .lctl.yaml file, or durably through a Sink (XCT's NATS
// JetStream stream, where the tracer materializes it: lctllive.NewSession). Every event is sealed into the hash
// chain, and checkpoints carry the real state hash, so `lctl verify` can
// check them.
//
//	s := session.New("review-42", session.Options{Agent: "code-analyzer"})
//	step, _ := s.StepStart(ctx, "analyze", "UserController.py")
//	s.AddFact(ctx, session.Fact{ID: "F1", Text: "SQL built from user input", Confidence: 0.85, Source: "static-analysis"})
//	step.End(ctx, "success", "1 finding", lctl.Tokens{Input: 500, Output: 200})
//	s.Checkpoint(ctx)
//	s.Export("review-42.lctl.json")
//
// The gRPC interceptors (interceptors.go) record every call as a tool_call
// or error event without further code.
package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// SystemAgent records what no agent did itself: checkpoints.
const SystemAgent = "system"

// Options tune a Session.
type Options struct {
	// Agent is the agent of events recorded through the Session itself
	// rather than through Agent(name) ("agent" when empty).
	Agent string
	// Now is the clock (time.Now when nil). Timestamps never go backwards
	// within a session, whatever the clock does.
	Now func() time.Time
	// KeepEvents keeps the events of a Sink session in memory too, so
	// Events and Export work (in-memory sessions always keep them).
	KeepEvents bool
}

// Session records one chain. It is safe for concurrent use; events are
// sealed in the order the calls reach it.
type Session struct {
	chainID string
	agent   string
	now     func() time.Time

	mu     sync.Mutex
	writer Sink // nil: in memory only
	keep   bool
	events []lctl.Event
	state  *lctl.State
	last   time.Time
	prev   string // hash of the last event
	seq    uint64
	err    error // first failed append
	closed bool
	path   string // written on Close when set
}

// ErrClosed is returned by a Session used after Close.
var ErrClosed = errors.New("lctl session is closed")

// New starts an in-memory session for a new chain; Export writes it.
func New(chainID string, opts Options) (*Session, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return nil, err
	}
	return newSession(chainID, opts), nil
}

// NewFile starts an in-memory session that Close writes to path (.lctl.json
// or .lctl.yaml, by extension).
func NewFile(chainID, path string, opts Options) (*Session, error) {
	s, err := New(chainID, opts)
	if err != nil {
		return nil, err
	}
	s.path = path
	return s, nil
}

// Sink appends a session's events durably to its chain: it seals each
// event after the chain's last one and returns it as stored. XCT's event
// stream is one (internal/lctllive.NewSession wires it); a Sink is the
// chain's single writer.
type Sink interface {
	Append(ctx context.Context, eventType, agent string, data map[string]any) (lctl.Event, error)
}

// NewSink starts a session that appends each event through sink before
// returning. Opts.KeepEvents keeps the events in memory too.
func NewSink(chainID string, sink Sink, opts Options) (*Session, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, errors.New("lctl session: no sink")
	}
	s := newSession(chainID, opts)
	s.writer, s.keep = sink, opts.KeepEvents
	return s, nil
}

func newSession(chainID string, opts Options) *Session {
	agent := opts.Agent
	if agent == "" {
		agent = "agent"
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Session{chainID: chainID, agent: agent, now: now, keep: true, state: lctl.NewState(chainID)}
}

// ChainID returns the chain the session records.
func (s *Session) ChainID() string { return s.chainID }

// Record appends an event of any type, the spec's or one of your own (other
// readers keep unknown types). data must hold JSON values. It is what
// every other method calls.
func (s *Session) Record(ctx context.Context, eventType, agent string, data map[string]any) (lctl.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recordLocked(ctx, eventType, agent, data)
}

func (s *Session) recordLocked(ctx context.Context, eventType, agent string, data map[string]any) (lctl.Event, error) {
	if s.closed {
		return lctl.Event{}, ErrClosed
	}
	if s.err != nil {
		return lctl.Event{}, fmt.Errorf("lctl session %s: stopped after an earlier failure: %w", s.chainID, s.err)
	}
	if eventType == "" {
		return lctl.Event{}, errors.New("lctl session: an event needs a type")
	}
	if agent == "" {
		agent = s.agent
	}
	norm, err := lctl.DataOf(data)
	if err != nil {
		return lctl.Event{}, fmt.Errorf("lctl session %s: %s: %w", s.chainID, eventType, err)
	}
	if norm == nil {
		norm = map[string]any{}
	}
	var e lctl.Event
	if s.writer != nil {
		e, err = s.writer.Append(ctx, eventType, agent, norm)
		if err != nil {
			s.err = err
			return lctl.Event{}, fmt.Errorf("lctl session: %w", err)
		}
	} else {
		t := s.now()
		if t.Before(s.last) {
			t = s.last
		}
		s.last = t
		e = lctl.Event{ChainID: s.chainID, Seq: s.seq + 1, Type: eventType, Timestamp: lctl.FormatTime(t), Agent: agent, Data: norm}
		if err := e.Seal(s.prev); err != nil {
			return lctl.Event{}, fmt.Errorf("lctl session %s: %w", s.chainID, err)
		}
	}
	s.seq, s.prev = e.Seq, e.Hash
	if s.keep {
		s.events = append(s.events, e)
		s.state.Apply(&s.events[len(s.events)-1])
	} else {
		s.state.Apply(&e)
	}
	return e, nil
}

// Err returns the append that failed, if any: after it the session refuses
// to record, so nothing that was not recorded looks as if it was.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Events returns the recorded events (empty for a NATS session without
// KeepEvents).
func (s *Session) Events() []lctl.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]lctl.Event(nil), s.events...)
}

// State returns a copy of the chain's state after the recorded events.
func (s *Session) State() *lctl.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Clone()
}

// Checkpoint records the spec's checkpoint: the hash of the state after
// every event so far (replaying to the seq before the checkpoint and
// hashing reproduces it; `lctl verify` does) and a snapshot of the facts.
func (s *Session) Checkpoint(ctx context.Context) (lctl.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The state keeps its hash up to date from the first checkpoint on:
	// each next one costs what changed since (lctl.State.Hash).
	data, err := lctl.CheckpointData(s.state)
	if err != nil {
		return lctl.Event{}, fmt.Errorf("lctl session %s: checkpoint: %w", s.chainID, err)
	}
	return s.recordLocked(ctx, lctl.TypeCheckpoint, SystemAgent, data)
}

// Export writes the chain as an LCTL file, JSON or YAML by the path's
// extension, atomically (a temporary file renamed into place).
func (s *Session) Export(path string) error {
	s.mu.Lock()
	events := append([]lctl.Event(nil), s.events...)
	keep := s.keep
	s.mu.Unlock()
	if !keep {
		return errors.New("lctl session: events are not kept (set Options.KeepEvents for a NATS session)")
	}
	var buf bytes.Buffer
	if err := lctl.NewFile(s.chainID, events).Encode(&buf, lctl.FormatForPath(path)); err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	return writeAtomic(path, buf.Bytes())
}

// Close ends the session; a session from NewFile writes its file.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	path := s.path
	s.mu.Unlock()
	if path != "" {
		return s.Export(path)
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".lctl-*")
	if err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("export %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("export %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	return nil
}

// Agent returns a recorder whose events name the given agent, for sessions
// that trace several agents.
func (s *Session) Agent(name string) Agent { return Agent{s: s, name: name} }

// Agent records events in one agent's name.
type Agent struct {
	s    *Session
	name string
}

// Name returns the agent's name.
func (a Agent) Name() string { return a.name }

// Fact is a fact to add: the spec's {id, text, confidence, source}, tags,
// and any other fields (severity, ...).
type Fact struct {
	ID         string
	Text       string
	Confidence float64
	Source     string
	Tags       []string
	Fields     map[string]any
}

// AddFact records fact_added.
func (a Agent) AddFact(ctx context.Context, f Fact) (lctl.Event, error) {
	if f.ID == "" {
		return lctl.Event{}, errors.New("lctl session: a fact needs an id")
	}
	if f.Confidence < 0 || f.Confidence > 1 {
		return lctl.Event{}, fmt.Errorf("lctl session: fact %s: confidence %v is not between 0 and 1", f.ID, f.Confidence)
	}
	data := map[string]any{}
	for k, v := range f.Fields {
		data[k] = v
	}
	data["id"], data["text"], data["confidence"] = f.ID, f.Text, f.Confidence
	if f.Source != "" {
		data["source"] = f.Source
	}
	if len(f.Tags) > 0 {
		data["tags"] = f.Tags
	}
	return a.s.Record(ctx, lctl.TypeFactAdded, a.name, data)
}

// FactChange is a change to a fact: the fields that are set change.
type FactChange struct {
	ID         string
	Text       string   // "" leaves the text
	Confidence *float64 // nil leaves the confidence
	Reason     string
	Fields     map[string]any
}

// ModifyFact records fact_modified.
func (a Agent) ModifyFact(ctx context.Context, c FactChange) (lctl.Event, error) {
	if c.ID == "" {
		return lctl.Event{}, errors.New("lctl session: a fact change needs an id")
	}
	data := map[string]any{}
	for k, v := range c.Fields {
		data[k] = v
	}
	data["id"] = c.ID
	if c.Text != "" {
		data["text"] = c.Text
	}
	if c.Confidence != nil {
		if *c.Confidence < 0 || *c.Confidence > 1 {
			return lctl.Event{}, fmt.Errorf("lctl session: fact %s: confidence %v is not between 0 and 1", c.ID, *c.Confidence)
		}
		data["confidence"] = *c.Confidence
	}
	if c.Reason != "" {
		data["reason"] = c.Reason
	}
	return a.s.Record(ctx, lctl.TypeFactModified, a.name, data)
}

// ToolCall is a finished tool invocation.
type ToolCall struct {
	Tool     string
	Input    any
	Output   any
	Duration time.Duration
	// Status is "success" when empty.
	Status string
}

// ToolCall records tool_call.
func (a Agent) ToolCall(ctx context.Context, tc ToolCall) (lctl.Event, error) {
	if tc.Tool == "" {
		return lctl.Event{}, errors.New("lctl session: a tool call needs a tool")
	}
	status := tc.Status
	if status == "" {
		status = "success"
	}
	return a.s.Record(ctx, lctl.TypeToolCall, a.name, map[string]any{
		"tool": tc.Tool, "input": jsonValue(tc.Input), "output": jsonValue(tc.Output),
		"duration_ms": durationMS(tc.Duration), "status": status,
	})
}

// ErrorInfo is an error in the spec's taxonomy (part 6).
type ErrorInfo struct {
	Category        string // input_error, execution_error, output_error, orchestration_error
	Type            string // tool_failure, timeout, generation_failed, ...
	Message         string
	Recoverable     bool
	SuggestedAction string
	Context         map[string]any
}

// Error records an error event.
func (a Agent) Error(ctx context.Context, info ErrorInfo) (lctl.Event, error) {
	data := map[string]any{"category": info.Category, "type": info.Type, "message": info.Message, "recoverable": info.Recoverable}
	if info.SuggestedAction != "" {
		data["suggested_action"] = info.SuggestedAction
	}
	if len(info.Context) > 0 {
		data["context"] = info.Context
	}
	return a.s.Record(ctx, lctl.TypeError, a.name, data)
}

// Step is a step in progress, from StepStart; End records its step_end.
type Step struct {
	a       Agent
	start   time.Time
	Started lctl.Event
}

// StepStart records step_start {intent, input_summary}; extra adds fields
// (model, agent_profile, ...).
func (a Agent) StepStart(ctx context.Context, intent, inputSummary string, extra map[string]any) (*Step, error) {
	data := map[string]any{}
	for k, v := range extra {
		data[k] = v
	}
	data["intent"], data["input_summary"] = intent, inputSummary
	start := a.s.now()
	e, err := a.s.Record(ctx, lctl.TypeStepStart, a.name, data)
	if err != nil {
		return nil, err
	}
	return &Step{a: a, start: start, Started: e}, nil
}

// End records step_end {outcome, output_summary, duration_ms, tokens}, the
// duration measured since StepStart.
func (st *Step) End(ctx context.Context, outcome, outputSummary string, tokens lctl.Tokens) (lctl.Event, error) {
	return st.a.s.Record(ctx, lctl.TypeStepEnd, st.a.name, map[string]any{
		"outcome": outcome, "output_summary": outputSummary,
		"duration_ms": durationMS(st.a.s.now().Sub(st.start)),
		"tokens":      map[string]any{"input": tokens.Input, "output": tokens.Output},
	})
}

// The Session records in its own agent's name too.

// AddFact records fact_added by the session's agent.
func (s *Session) AddFact(ctx context.Context, f Fact) (lctl.Event, error) {
	return s.Agent(s.agent).AddFact(ctx, f)
}

// ModifyFact records fact_modified by the session's agent.
func (s *Session) ModifyFact(ctx context.Context, c FactChange) (lctl.Event, error) {
	return s.Agent(s.agent).ModifyFact(ctx, c)
}

// ToolCall records tool_call by the session's agent.
func (s *Session) ToolCall(ctx context.Context, tc ToolCall) (lctl.Event, error) {
	return s.Agent(s.agent).ToolCall(ctx, tc)
}

// Error records an error event by the session's agent.
func (s *Session) Error(ctx context.Context, info ErrorInfo) (lctl.Event, error) {
	return s.Agent(s.agent).Error(ctx, info)
}

// StepStart records step_start by the session's agent.
func (s *Session) StepStart(ctx context.Context, intent, inputSummary string, extra map[string]any) (*Step, error) {
	return s.Agent(s.agent).StepStart(ctx, intent, inputSummary, extra)
}

func durationMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// jsonValue turns any Go value into JSON values for an event payload.
func jsonValue(v any) any {
	if v == nil {
		return nil
	}
	m, err := lctl.DataOf(map[string]any{"v": v})
	if err != nil {
		return fmt.Sprint(v)
	}
	return m["v"]
}
