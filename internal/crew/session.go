package crew

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/xct-dev/xct/lctl"
)

// Session is a crew run's runtime: what the orchestrator's loop asks the
// crew at every step. It is a function of the crew file and the run's
// chain: NewSession replays the chain so far, and Observe folds in each
// event the loop appends, so a run resumed by another orchestrator (or
// after a restart) reaches exactly the state of the one that wrote the
// chain. Nothing else changes it: Plan, Fallback, Catalog, CrewContext
// and Carry only read the state and return the events to append; they
// take effect when the loop appends them and observes them. It never
// writes the chain, calls a model or reads a clock.
//
// A Session is not safe for concurrent use: it belongs to the run's loop,
// like the run's chain writer. docs/crews.md, "The loop", lists the calls
// in order.
type Session struct {
	crew    *Crew
	chainID string
	opts    SessionOptions

	store *FactStore
	hs    *HandoffState
	// state is lctl's state of the chain so far, for checkpoints.
	state *lctl.State
	seq   uint64 // the last event observed

	started     bool   // a crew agent's step_start is on the chain
	stepModel   string // the model reference that proposed the last crew step (its agent_profile.model)
	stepsInTurn int    // step_starts of the agent in control since it received control
	lastOutcome string // the last step_end's outcome
	// failures and routing are this step's model failures and its last
	// model_routing (reset by the step's step_start).
	failures []ModelFailure
	routing  *ModelRouting
	// verifier is the agent a VERIFICATION_REQUIRED signal asked for, until
	// its first step after it receives control.
	verifier    string
	lastHandoff *Handoff

	sinceCheckpoint        int
	handoffSinceCheckpoint bool

	// turnAgents is the agent of every step_start on the chain, in chain
	// order (a system step's too): the run's turns, as the model's
	// transcript has one per step_start (HistoryOf).
	turnAgents []string

	// doneRefusals counts the DONE_NOT_ALLOWED signals to the agent in
	// control since its last step_start (or since it received control),
	// and refusedDone is the last one's message, for its brief.
	doneRefusals int
	refusedDone  string
}

// SessionOptions tune a session.
type SessionOptions struct {
	// CheckpointEvery asks for a checkpoint after that many events since
	// the last one; 0 writes them at handoffs only.
	CheckpointEvery int
}

// Agents the crew's own events are recorded under.
const (
	AgentSystem       = "system"       // contract_validation, checkpoint
	AgentOrchestrator = "orchestrator" // model_routing
)

// MaxContextFacts bounds the facts an agent is shown from its suggested
// queries, and a facts.query's answer.
const MaxContextFacts = 50

// NewSession is the session of a run of crew c on chain chainID, with the
// chain's events so far (none for a new run). An event the crew's rules
// would not have written (a fact refused, a handoff out of turn, a step
// by an agent not in control) is an error naming it.
func NewSession(c *Crew, chainID string, events []lctl.Event, opts SessionOptions) (*Session, error) {
	if opts.CheckpointEvery < 0 {
		return nil, fmt.Errorf("crew session: CheckpointEvery %d is negative", opts.CheckpointEvery)
	}
	s := &Session{crew: c, chainID: chainID, opts: opts, store: NewFactStore(c), hs: c.NewHandoffState(), state: lctl.NewState(chainID)}
	for i := range events {
		if err := s.Observe(&events[i]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Crew is the session's crew.
func (s *Session) Crew() *Crew { return s.crew }

// Current is the agent in control: the one whose next step it is.
func (s *Session) Current() *Agent { return s.crew.Agent(s.hs.Current) }

// Facts is the run's fact store as the chain made it (read it, do not
// change it).
func (s *Session) Facts() *FactStore { return s.store }

// Handoffs is where the run's handoffs stand (read it, do not change it).
func (s *Session) Handoffs() HandoffState { return *s.hs.clone() }

func (st *HandoffState) clone() *HandoffState {
	c := *st
	c.Visits = make(map[string]int, len(st.Visits))
	for k, v := range st.Visits {
		c.Visits[k] = v
	}
	c.Path = slices.Clone(st.Path)
	return &c
}

// Observe folds one appended event into the session. The loop calls it
// for every event it appends to the run's chain, in order, the crew's and
// its own alike (a step_start of a crew agent is the hop that decays the
// facts; a step_end says whether the next step is a retry).
func (s *Session) Observe(e *lctl.Event) error {
	if e.Seq != 0 && e.Seq <= s.seq {
		return fmt.Errorf("crew %s: event %d observed after event %d", s.crew.Name, e.Seq, s.seq)
	}
	if err := s.fold(e); err != nil {
		return fmt.Errorf("crew %s: event %d (%s): %w", s.crew.Name, e.Seq, e.Type, err)
	}
	if e.Seq != 0 {
		s.seq = e.Seq
	}
	s.state.Apply(e)
	if e.Type == lctl.TypeCheckpoint {
		s.sinceCheckpoint, s.handoffSinceCheckpoint = 0, false
	} else {
		s.sinceCheckpoint++
	}
	return nil
}

func (s *Session) fold(e *lctl.Event) error {
	d := e.DataMap()
	switch e.Type {
	case lctl.TypeStepStart:
		s.turnAgents = append(s.turnAgents, e.Agent)
		if s.crew.Agent(e.Agent) == nil {
			return nil // a system step (a rollback's undo): not the crew's
		}
		if e.Agent != s.hs.Current {
			return fmt.Errorf("a step by %s while %s is in control", e.Agent, s.hs.Current)
		}
		s.store.BeginStep(e.Agent)
		if s.verifier == e.Agent && s.stepsInTurn == 0 {
			s.verifier = ""
		}
		s.started = true
		s.stepModel = ""
		if p, ok := d["agent_profile"].(map[string]any); ok {
			s.stepModel, _ = p["model"].(string)
		}
		s.stepsInTurn++
		s.failures, s.routing = nil, nil
		s.doneRefusals, s.refusedDone = 0, ""
	case lctl.TypeStepEnd:
		s.lastOutcome, _ = d["outcome"].(string)
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		in, err := factInputOf(d)
		if err != nil {
			return err
		}
		var sig *Signal
		if e.Type == lctl.TypeFactAdded {
			_, sig = s.store.Add(e.Agent, in)
		} else {
			_, sig = s.store.Update(e.Agent, in)
		}
		if sig != nil {
			return sig
		}
	case lctl.TypeHandoff:
		from, _ := d["from"].(string)
		to, _ := d["to"].(string)
		if from != s.hs.Current || s.crew.Agent(to) == nil {
			return fmt.Errorf("handoff %s -> %s does not follow (in control: %s)", from, to, s.hs.Current)
		}
		s.hs.Accept(to)
		summary, _ := d["summary"].(string)
		s.lastHandoff = &Handoff{From: from, To: to, Summary: summary}
		s.stepsInTurn = 0
		s.failures, s.routing = nil, nil
		s.doneRefusals, s.refusedDone = 0, ""
		s.handoffSinceCheckpoint = true
	case lctl.TypeModelRouting:
		r := routingOf(d)
		if r.For != s.hs.Current {
			return nil // not this step's (another orchestrator's bookkeeping)
		}
		if r.FailureCode != "" {
			s.failures = append(s.failures, ModelFailure{Model: r.FailedModel, Code: r.FailureCode})
		}
		s.routing = &r
	case lctl.TypeError:
		if code, _ := d["code"].(string); code == CodeDoneNotAllowed && e.Agent == s.hs.Current {
			s.doneRefusals++
			s.refusedDone, _ = d["message"].(string)
		}
		if code, _ := d["code"].(string); code == CodeVerificationRequired {
			if det, ok := d["details"].(map[string]any); ok {
				if v, _ := det["verifier"].(string); s.crew.Agent(v) != nil {
					s.verifier = v
				}
			}
		}
	}
	return nil
}

// routingOf reads a model_routing's data back.
func routingOf(d map[string]any) ModelRouting {
	var r ModelRouting
	raw, err := json.Marshal(d)
	if err == nil {
		_ = json.Unmarshal(raw, &r) // lenient, as an LCTL reader is
	}
	return r
}

// Turns is how many turns (step_starts) the chain holds so far: the
// length of the run's transcript, which HistoryOf indexes.
func (s *Session) Turns() int { return len(s.turnAgents) }

// HistoryOf is which of the run's turns (0-based, one per step_start in
// chain order, as the run's transcript has them) agent's model is shown:
// under HistoryOwn the turns of its own steps only; under HistoryShared
// every turn. What another member read or was answered reaches the agent
// only as the crew hands it on (the hand-over summary and the facts in its
// brief). A function of the chain, so a resumed run shows the same.
func (s *Session) HistoryOf(agent string) []int {
	out := make([]int, 0, len(s.turnAgents))
	for i, a := range s.turnAgents {
		if s.crew.History == HistoryShared || a == agent {
			out = append(out, i)
		}
	}
	return out
}

// CheckDone is the crew's answer to done from agent, the agent in
// control: nil when its done ends the run (authority.end_run), else the
// DONE_NOT_ALLOWED signal the loop records as the agent's error (outside
// any step: a done proposes nothing to act) before it asks the agent's
// model again. A member the crew does not let end the run (a subordinate,
// or one steered by what it read) cannot skip the check of the agent that
// may.
func (s *Session) CheckDone(agent string) *Signal {
	if s.crew.MayEndRun(agent) {
		return nil
	}
	action := "continue_or_hand_over"
	var next []string
	if a := s.crew.Agent(agent); a != nil && a.MayPropose(ToolHandoff) {
		next = a.HandsTo
	}
	sig := signal("orchestration_error", "delegation_rejected", CodeDoneNotAllowed, action, true,
		"%s may not end the run: only %s may (the crew's authority.end_run); go on with your work, or hand it over", agent, strings.Join(s.crew.Authority.EndRun, ", "))
	sig.Details = map[string]any{"agent": agent, "end_run": slices.Clone(s.crew.Authority.EndRun), "hands_to": slices.Clone(next)}
	return sig
}

// DoneRefusals is how many times the agent in control answered done and
// was refused (DONE_NOT_ALLOWED) since its last step began: the loop
// ends the run when its model keeps answering done, as it does for a
// model that keeps answering invalid output.
func (s *Session) DoneRefusals() int { return s.doneRefusals }

// StepKind is the kind of the next step of the agent in control (the
// routing rules' step_kind): start, handoff, verify, retry or continue.
func (s *Session) StepKind() string {
	switch {
	case !s.started:
		return KindStart
	case s.stepsInTurn == 0 && s.verifier == s.hs.Current:
		return KindVerify
	case s.stepsInTurn == 0:
		return KindHandoff
	case s.lastOutcome != "" && s.lastOutcome != "success":
		return KindRetry
	}
	return KindContinue
}

// Emit is one event for the loop to append: its agent and its payload. It
// has Type and Data, so the orchestrator records it like its own events.
type Emit struct {
	Agent   string
	Payload Payload
}

// Type is the event's type.
func (e Emit) Type() string { return e.Payload.EventType() }

// Data is the event's data.
func (e Emit) Data() map[string]any { return e.Payload.Data() }

// Plan is what the loop needs before it calls the model for the next
// step: whose step, which model, what to record first and what to tell
// the model.
type Plan struct {
	// Agent is the agent in control: the step_start's agent.
	Agent *Agent
	// Kind is the step's kind (start, handoff, verify, retry, continue).
	Kind string
	// Model is the model reference to call (scripted:, openai:, grpc:).
	Model string
	// Routing is the model_routing to append before the model call, when
	// a rule or a fallback chose the model and the chain does not say so
	// yet; nil otherwise.
	Routing *Emit
	// Signal is set, and Model empty, when no model is left for the step
	// (NO_MODEL): the loop records it as the agent's error and stops the
	// run as it does today when the model does not answer.
	Signal *Signal
	// Context are the facts the agent's suggested queries give it now,
	// after the hop's decay (at most MaxContextFacts): pulled, never the
	// whole store.
	Context []*Fact
	// Brief is the text to add to the model's instructions: who the agent
	// is, who handed it control and why, whom it may hand to, its context
	// facts (JSON) and how to use the system tools.
	Brief string
}

// Plan answers for the next step of the agent in control.
func (s *Session) Plan() Plan { return s.plan(nil) }

// Fallback answers after the model call of this step failed with code
// (RATE_LIMITED, GENERATION_FAILED, TIMEOUT, ...): the agent's next model,
// with the model_routing to append (failed_model, failure_code), or a
// NO_MODEL signal when the crew does not route around the code or every
// model failed.
func (s *Session) Fallback(model, code string) Plan {
	return s.plan(&ModelFailure{Model: model, Code: code})
}

func (s *Session) plan(failure *ModelFailure) Plan {
	a := s.Current()
	p := Plan{Agent: a, Kind: s.StepKind()}
	failures := slices.Clone(s.failures)
	if failure != nil {
		failures = append(failures, *failure)
	}
	r := s.crew.Route(RouteRequest{Agent: a.Name, StepKind: p.Kind, Failures: failures})
	if r.Signal != nil {
		p.Signal = r.Signal
		return p
	}
	p.Model = r.Model
	if r.Event != nil && (failure != nil || !sameRouting(s.routing, r.Event)) {
		p.Routing = &Emit{Agent: AgentOrchestrator, Payload: *r.Event}
	}
	after := s.store.Clone()
	after.BeginStep(a.Name)
	if ctx, sig := after.ContextFor(a); sig == nil {
		if len(ctx) > MaxContextFacts {
			ctx = ctx[:MaxContextFacts]
		}
		p.Context = ctx
	}
	p.Brief = s.brief(a, p.Context)
	return p
}

// sameRouting reports whether the chain's last routing of the step is
// the decision r: then it is recorded already (a resumed step).
func sameRouting(recorded, r *ModelRouting) bool {
	return recorded != nil && recorded.Model == r.Model && recorded.Rule == r.Rule && recorded.StepKind == r.StepKind &&
		recorded.FailedModel == r.FailedModel && recorded.FailureCode == r.FailureCode
}

// FactView is a fact as an agent is shown it: its confidence now and its
// band.
type FactView struct {
	ID         string         `json:"id"`
	Text       string         `json:"text"`
	Confidence float64        `json:"confidence"`
	Band       string         `json:"band"`
	Source     string         `json:"source,omitempty"`
	Tags       []string       `json:"tags,omitempty"`
	Fields     map[string]any `json:"fields,omitempty"`
	AddedBy    string         `json:"added_by"`
	UpdatedBy  string         `json:"updated_by"`
}

// View is the fact as an agent is shown it.
func (s *Session) View(f *Fact) FactView {
	v := FactView{ID: f.ID, Text: f.Text, Confidence: round(f.Confidence), Band: s.crew.Confidence.Thresholds.Band(f.Confidence),
		Source: f.Source, Tags: slices.Clone(f.Tags), AddedBy: f.AddedBy, UpdatedBy: f.UpdatedBy}
	if len(f.Fields) > 0 {
		v.Fields = cloneFields(f.Fields)
	}
	return v
}

func (s *Session) views(facts []*Fact) []FactView {
	out := make([]FactView, len(facts))
	for i, f := range facts {
		out[i] = s.View(f)
	}
	return out
}

// brief is the text for the model's instructions.
func (s *Session) brief(a *Agent, ctx []*Fact) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are agent %q (%s) of crew %s.", a.Name, a.Profile.Type, s.crew.Name)
	if a.Description != "" {
		fmt.Fprintf(&b, " Your role: %s.", strings.TrimSuffix(a.Description, "."))
	}
	if h := s.lastHandoff; h != nil && h.To == a.Name {
		fmt.Fprintf(&b, "\n%s handed control to you: %q", h.From, h.Summary)
	}
	if s.verifier == a.Name && s.stepsInTurn == 0 {
		b.WriteString("\nYou were asked to verify: reassess the facts named above with facts.update (a confidence is your assessment).")
	}
	if a.MayPropose(ToolHandoff) && len(a.HandsTo) > 0 {
		fmt.Fprintf(&b, "\nYou may hand control to: %s (xct.handoff {to, summary}); your contract is checked when you do.", strings.Join(a.HandsTo, ", "))
	} else {
		b.WriteString("\nYou hand control to nobody.")
	}
	if s.crew.MayEndRun(a.Name) {
		b.WriteString("\nWhen the crew's work is done, answer done: that ends the run.")
	} else {
		fmt.Fprintf(&b, "\nYou may not end the run (only %s may): answer done and it is refused.", strings.Join(s.crew.Authority.EndRun, ", "))
	}
	if s.refusedDone != "" {
		fmt.Fprintf(&b, "\nYour answer done was refused: %q", s.refusedDone)
	}
	if a.MayPropose(ToolFactsAdd) || a.MayPropose(ToolFactsUpdate) {
		b.WriteString("\nRecord findings with facts.add and change them with facts.update (give a reason; a confidence is your assessment).")
	}
	if a.MayPropose(ToolFactsQuery) {
		b.WriteString("\nAsk the fact store with facts.query {query} (SELECT * WHERE ... ORDER BY ... LIMIT n).")
	}
	if s.crew.History != HistoryShared {
		b.WriteString("\nThe history you are shown holds your own steps only: what the other agents did reaches you as the hand-over above and the facts.")
	}
	if s.crew.MayLiftDoubts(a.Name) {
		b.WriteString("\nYou may lift a doubt another agent left on a fact you did not add (a higher confidence than its word, when that is below proceed).")
	} else {
		b.WriteString("\nYou may lower a fact's confidence, not raise it above a doubt another agent left on it.")
	}
	b.WriteString("\nBefore each of your steps runs, the confidence of every fact another agent assessed, and of any fact its goal names, is checked" +
		" (your own assessment can lower a fact for your steps, not raise it).")
	raw, err := json.Marshal(s.views(ctx))
	if err != nil {
		raw = []byte("[]")
	}
	fmt.Fprintf(&b, "\nFacts from your suggested queries (confidence now, with its band):\n%s", raw)
	return b.String()
}

// StepStartFields are the crew's fields of an agent's step_start on
// model: the agent's profile (spec part 5) with the model that serves the
// step, and the model's role. The orchestrator merges them into its own
// step_start (Merge); its "model" stays the model's own name.
func (s *Session) StepStartFields(model string) map[string]any {
	a := s.Current()
	st := a.StepStartFor("", "", model)
	return map[string]any{"agent_profile": jsonValue(st.AgentProfile), "model_role": a.Profile.Type}
}

// StepModel is the model reference that proposed the crew's last step,
// as its step_start's agent_profile names it (the agent's model, or the
// fallback that served it); "" before the first. The validator sees it as
// run.model: a policy's rule on a model holds for that model's steps in a
// crew too.
func (s *Session) StepModel() string { return s.stepModel }

// Merge is ev with fields added (fields ev has are kept as ev has them).
func Merge(ev interface {
	Type() string
	Data() map[string]any
}, fields map[string]any) Merged {
	return Merged{Base: ev, Fields: fields}
}

// Merged is an event with extra fields (Merge).
type Merged struct {
	Base interface {
		Type() string
		Data() map[string]any
	}
	Fields map[string]any
}

// Type is the base event's type.
func (m Merged) Type() string { return m.Base.Type() }

// Data is the base event's data with the extra fields it lacks.
func (m Merged) Data() map[string]any {
	d := m.Base.Data()
	if d == nil {
		d = map[string]any{}
	}
	for k, v := range m.Fields {
		if _, taken := d[k]; !taken {
			d[k] = v
		}
	}
	return d
}

// RunStartedFields are the crew's fields of the run_started event of a
// run of the crew: {crew: {name, sha256 of the file, entry, agents}}.
func RunStartedFields(c *Crew) map[string]any {
	agents := make([]any, len(c.Agents))
	for i, a := range c.Agents {
		agents[i] = map[string]any{"name": a.Name, "type": a.Profile.Type, "model": a.Profile.Model}
	}
	return map[string]any{"crew": map[string]any{"name": c.Name, "sha256": c.SHA256, "entry": c.Entry, "agents": agents}}
}

// CheckpointDue reports whether a checkpoint is due: a handoff since the
// last one, or CheckpointEvery events.
func (s *Session) CheckpointDue() bool {
	return s.handoffSinceCheckpoint || (s.opts.CheckpointEvery > 0 && s.sinceCheckpoint >= s.opts.CheckpointEvery)
}

// Checkpoint is the checkpoint to append now (agent "system"), or nil
// when none is due. The loop asks at step boundaries (after a step_end):
// a handoff's checkpoint then follows the handoff's step.
func (s *Session) Checkpoint() (*Emit, error) {
	if !s.CheckpointDue() {
		return nil, nil
	}
	cp, err := checkpointOf(s.chainID, s.state)
	if err != nil {
		return nil, err
	}
	return &Emit{Agent: AgentSystem, Payload: cp}, nil
}
