package crew

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"

	"github.com/xct-dev/xct/lctl/analysis"
)

// FactStore is a crew run's shared fact store (spec parts 3 and 4): facts
// added and updated by agents through facts.add and facts.update, with
// their history, their confidence decaying at every hop (a step by another
// agent than the step before, as lctl confidence counts hops), the
// assessments of every agent that gave one, and queries in the spec's
// query language. It is rebuilt from the chain's events (Add, Update and
// BeginStep in event order), so it holds nothing the chain does not.
type FactStore struct {
	settings    ConfidenceSettings
	reliability map[string]float64
	facts       map[string]*Fact
	order       []*Fact
	current     string // the agent of the last step
	turn        int    // counts changes of the agent in control
	hops        int
	changes     uint64
}

// Fact is a fact as the store holds it.
type Fact struct {
	ID   string
	Text string
	// Confidence is the current confidence, decay included.
	Confidence float64
	Source     string
	Tags       []string
	// Fields are the fact's other fields (severity, ...).
	Fields    map[string]any
	AddedBy   string
	UpdatedBy string
	// Assessments are each agent's latest confidence in the fact, in
	// order of their first.
	Assessments []Assessment
	// Blocked is set when the confidence fell below the verify threshold:
	// a blocked fact does not decay further until an agent reassesses it.
	Blocked bool
	History []FactChange
	// AddedSeq and UpdatedSeq count the store's changes (1-based), which
	// is what a query's added_seq and seq see.
	AddedSeq, UpdatedSeq uint64
	turn                 int // the turn of the last change
	// byOthers holds, for each agent, the fact's confidence as the other
	// agents left it: the last confidence another agent gave it, decayed
	// since as Confidence is. An agent absent here has no one else's word
	// on the fact (it added it, and no one else assessed it). It is what
	// the gate reads for that agent's steps (GateConfidence).
	byOthers map[string]float64
}

// GateConfidence is the fact's confidence for the confidence gate of a
// step by agent: the lowest of its confidence and the confidence the
// other agents left it at. An agent's own assessment may lower a fact
// for its own steps, never lift it: a step relying on a fact that
// another agent doubts waits for what the gate asks (a verifier, a
// human) however the proposing agent itself rates the fact. ok is false
// when no other agent has given the fact a confidence.
func (f *Fact) GateConfidence(agent string) (c float64, ok bool) {
	o, ok := f.byOthers[agent]
	if !ok {
		return f.Confidence, false
	}
	return math.Min(f.Confidence, o), true
}

// OthersWord is the confidence the other agents left the fact at, for
// agent: the last confidence another agent gave it, decayed since. ok is
// false when no other agent has given it one.
func (f *Fact) OthersWord(agent string) (c float64, ok bool) {
	c, ok = f.byOthers[agent]
	return c, ok
}

// setByOthers records c, given by agent, as the other agents' word on f.
func (s *FactStore) setByOthers(f *Fact, agent string, c float64) {
	if f.byOthers == nil {
		f.byOthers = make(map[string]float64, len(s.reliability))
	}
	for a := range s.reliability {
		if a != agent {
			f.byOthers[a] = c
		}
	}
}

// Assessment is one agent's confidence in a fact.
type Assessment struct {
	Agent      string
	Confidence float64
	Weight     float64 // the agent's reliability_score
}

// FactChange is one entry of a fact's history.
type FactChange struct {
	Kind       string // "added", "modified" or "hop"
	Agent      string
	Text       string
	Confidence float64
	Reason     string
}

// FactInput is what facts.add and facts.update propose. For an update,
// empty text keeps the fact's text and a nil Confidence keeps its
// confidence.
type FactInput struct {
	ID         string
	Text       string
	Confidence *float64
	Source     string
	Tags       []string
	Reason     string
	Fields     map[string]any
}

// Fact kinds in a history.
const (
	ChangeAdded    = "added"
	ChangeModified = "modified"
	ChangeHop      = "hop"
)

// NewFactStore returns the empty fact store of a run of the crew.
func NewFactStore(c *Crew) *FactStore {
	s := &FactStore{settings: c.Confidence, reliability: map[string]float64{}, facts: map[string]*Fact{}}
	for _, a := range c.Agents {
		s.reliability[a.Name] = a.Profile.ReliabilityScore
	}
	return s
}

var factID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// reservedFields are a fact's own fields, which Fields cannot set.
var reservedFields = []string{"id", "text", "confidence", "source", "tags", "tag", "reason", "consensus", "agent", "updated_by", "added_by", "seq", "updated_seq", "added_seq", "changes"}

// MaxFactText bounds a fact's text.
const MaxFactText = 8 << 10

func factError(code, typ, format string, args ...any) *Signal {
	return signal("input_error", typ, code, "fix_the_fact", true, format, args...)
}

func checkInput(in FactInput, add bool) *Signal {
	switch {
	case !factID.MatchString(in.ID):
		return factError(CodeInvalidFact, "invalid_format", "fact id %q: use 1-64 letters, digits, _ . : -", in.ID)
	case add && in.Text == "":
		return factError(CodeInvalidFact, "invalid_format", "fact %s has no text", in.ID)
	case len(in.Text) > MaxFactText:
		return factError(CodeInvalidFact, "invalid_format", "fact %s: text is longer than %d bytes", in.ID, MaxFactText)
	case add && in.Confidence == nil:
		return factError(CodeInvalidFact, "invalid_format", "fact %s has no confidence", in.ID)
	case in.Confidence != nil && badConfidence(*in.Confidence):
		return factError(CodeInvalidFact, "invalid_format", "fact %s: confidence %v is not in [0, 1]", in.ID, *in.Confidence)
	case !add && in.Reason == "":
		return factError(CodeInvalidFact, "invalid_format", "fact %s: an update needs a reason", in.ID)
	}
	for k, v := range in.Fields {
		if slices.Contains(reservedFields, k) || !snakeCase.MatchString(k) {
			return factError(CodeInvalidFact, "invalid_format", "fact %s: field %q is reserved or not snake_case", in.ID, k)
		}
		switch x := v.(type) {
		case string, bool, nil:
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return factError(CodeInvalidFact, "invalid_format", "fact %s: field %s is not a number", in.ID, k)
			}
		default:
			return factError(CodeInvalidFact, "invalid_format", "fact %s: field %s must be a string, number or boolean", in.ID, k)
		}
	}
	for _, t := range in.Tags {
		if t == "" || len(t) > 64 {
			return factError(CodeInvalidFact, "invalid_format", "fact %s: a tag is empty or longer than 64 bytes", in.ID)
		}
	}
	return nil
}

// Add registers a new fact by agent (facts.add) and returns its fact_added
// data. A fact that exists, a missing text or confidence, a confidence
// outside [0, 1] (1.7) or a reserved field is a signal back to the agent,
// and the store is unchanged.
func (s *FactStore) Add(agent string, in FactInput) (FactAdded, *Signal) {
	if sig := checkInput(in, true); sig != nil {
		return FactAdded{}, sig
	}
	if s.facts[in.ID] != nil {
		return FactAdded{}, factError(CodeInvalidFact, "invalid_format", "fact %s exists: change it with %s", in.ID, ToolFactsUpdate)
	}
	s.changes++
	c := *in.Confidence
	f := &Fact{ID: in.ID, Text: in.Text, Confidence: c, Source: in.Source, Tags: slices.Clone(in.Tags), Fields: map[string]any{},
		AddedBy: agent, UpdatedBy: agent, AddedSeq: s.changes, UpdatedSeq: s.changes, turn: s.turn}
	for k, v := range in.Fields {
		f.Fields[k] = v
	}
	f.assess(agent, c, s.weight(agent))
	s.setByOthers(f, agent, c)
	f.Blocked = c < s.settings.Thresholds.Verify
	f.History = append(f.History, FactChange{Kind: ChangeAdded, Agent: agent, Text: f.Text, Confidence: c})
	s.facts[in.ID] = f
	s.order = append(s.order, f)
	return FactAdded{ID: f.ID, Text: f.Text, Confidence: c, Source: f.Source, Tags: slices.Clone(f.Tags), Fields: cloneFields(in.Fields)}, nil
}

// Update changes a fact by agent (facts.update) and returns its
// fact_modified data. With a confidence, it is the agent's assessment:
// once MinAssessors agents have assessed the fact, the data carries the
// consensus block.
func (s *FactStore) Update(agent string, in FactInput) (FactModified, *Signal) {
	if sig := checkInput(in, false); sig != nil {
		return FactModified{}, sig
	}
	f := s.facts[in.ID]
	if f == nil {
		return FactModified{}, factError(CodeUnknownFact, "missing_context", "no fact %s: add it with %s (facts: %s)", in.ID, ToolFactsAdd, s.ids())
	}
	s.changes++
	out := FactModified{ID: f.ID, Reason: in.Reason, Source: in.Source, Tags: slices.Clone(in.Tags), Fields: cloneFields(in.Fields)}
	if in.Text != "" {
		f.Text = in.Text
	}
	if in.Source != "" {
		f.Source = in.Source
	}
	if in.Tags != nil {
		f.Tags = slices.Clone(in.Tags)
	}
	for k, v := range in.Fields {
		f.Fields[k] = v
	}
	if in.Confidence != nil {
		c := *in.Confidence
		f.Confidence = c
		f.Blocked = c < s.settings.Thresholds.Verify
		f.assess(agent, c, s.weight(agent))
		s.setByOthers(f, agent, c)
		if len(f.Assessments) >= s.settings.MinAssessors {
			out.Consensus = f.consensus()
		}
	}
	f.UpdatedBy, f.UpdatedSeq, f.turn = agent, s.changes, s.turn
	f.History = append(f.History, FactChange{Kind: ChangeModified, Agent: agent, Text: f.Text, Confidence: f.Confidence, Reason: in.Reason})
	out.Text = f.Text
	if in.Confidence != nil {
		c := f.Confidence
		out.Confidence = &c
	}
	return out, nil
}

func cloneFields(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (s *FactStore) weight(agent string) float64 {
	if w, ok := s.reliability[agent]; ok && w > 0 {
		return w
	}
	return 1
}

func (f *Fact) assess(agent string, c, w float64) {
	for i := range f.Assessments {
		if f.Assessments[i].Agent == agent {
			f.Assessments[i].Confidence, f.Assessments[i].Weight = c, w
			return
		}
	}
	f.Assessments = append(f.Assessments, Assessment{Agent: agent, Confidence: c, Weight: w})
}

// consensus is the spec's tier 2 over the fact's assessments.
func (f *Fact) consensus() *ConsensusBlock {
	b := &ConsensusBlock{Assessors: []string{}}
	var sum, weights float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, a := range f.Assessments {
		b.Assessors = append(b.Assessors, a.Agent)
		sum += a.Confidence * a.Weight
		weights += a.Weight
		lo, hi = math.Min(lo, a.Confidence), math.Max(hi, a.Confidence)
	}
	if weights > 0 {
		b.ConsensusScore = round(sum / weights)
	}
	b.ConflictLevel = round(hi - lo)
	b.Agreement = round(1 - b.ConflictLevel)
	return b
}

// round keeps four decimals, so recorded scores read well.
func round(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// BeginStep tells the store that agent starts a step: when it is another
// agent than the last step's, that is a hop, and every fact's confidence
// decays by the crew's rate (a blocked fact stays where it fell). It
// returns whether it was a hop.
func (s *FactStore) BeginStep(agent string) bool {
	if agent == "" || agent == s.current {
		return false
	}
	hop := s.current != ""
	s.current = agent
	s.turn++
	if !hop {
		return false
	}
	s.hops++
	for _, f := range s.order {
		// The others' word decays as the fact does (a confidence below
		// verify is blocked: it stays where it fell).
		for a, c := range f.byOthers {
			if c >= s.settings.Thresholds.Verify {
				f.byOthers[a] = c * s.settings.DecayRate
			}
		}
		if f.Blocked {
			continue
		}
		f.Confidence *= s.settings.DecayRate
		if f.Confidence < s.settings.Thresholds.Verify {
			f.Blocked = true
		}
		f.History = append(f.History, FactChange{Kind: ChangeHop, Agent: agent, Text: f.Text, Confidence: f.Confidence})
	}
	return true
}

// Current is the agent of the last step ("" before the first).
func (s *FactStore) Current() string { return s.current }

// Hops counts the hops so far.
func (s *FactStore) Hops() int { return s.hops }

// Fact returns a fact by id, or nil.
func (s *FactStore) Fact(id string) *Fact { return s.facts[id] }

// Facts returns the facts in the order they were added.
func (s *FactStore) Facts() []*Fact { return slices.Clone(s.order) }

// ProducedThisTurn returns the facts agent added or changed since it last
// received control: its outputs at a handoff.
func (s *FactStore) ProducedThisTurn(agent string) []*Fact {
	var out []*Fact
	for _, f := range s.order {
		if f.UpdatedBy == agent && f.turn == s.turn && s.current == agent {
			out = append(out, f)
		}
	}
	return out
}

func (s *FactStore) ids() string {
	if len(s.order) == 0 {
		return "none"
	}
	var ids []string
	for _, f := range s.order {
		ids = append(ids, f.ID)
	}
	return fmt.Sprint(ids)
}

// Clone returns a copy that changes to either leave the other alone.
func (s *FactStore) Clone() *FactStore {
	c := *s
	c.facts = make(map[string]*Fact, len(s.facts))
	c.order = make([]*Fact, 0, len(s.order))
	for _, f := range s.order {
		nf := *f
		nf.Tags = slices.Clone(f.Tags)
		nf.Fields = cloneFields(f.Fields)
		if nf.Fields == nil {
			nf.Fields = map[string]any{}
		}
		nf.Assessments = slices.Clone(f.Assessments)
		nf.History = slices.Clone(f.History)
		nf.byOthers = maps.Clone(f.byOthers)
		c.facts[nf.ID] = &nf
		c.order = append(c.order, &nf)
	}
	return &c
}

// record is f as lctl's query language sees it, with the current
// confidence.
func (f *Fact) record() *analysis.FactRecord {
	c := f.Confidence
	r := &analysis.FactRecord{ID: f.ID, Text: f.Text, Confidence: &c, Source: f.Source, Tags: slices.Clone(f.Tags),
		Fields: map[string]any{"id": f.ID, "text": f.Text, "confidence": c, "source": f.Source}, AddedBy: f.AddedBy, AddedSeq: f.AddedSeq,
		UpdatedBy: f.UpdatedBy, UpdatedSeq: f.UpdatedSeq, Changes: 0}
	if r.Tags == nil {
		r.Tags = []string{}
	}
	for k, v := range f.Fields {
		r.Fields[k] = v
	}
	for _, h := range f.History {
		if h.Kind != ChangeHop {
			r.Changes++
			if !slices.Contains(r.Agents, h.Agent) {
				r.Agents = append(r.Agents, h.Agent)
			}
		}
	}
	return r
}

// Query runs a query in the spec's language (lctl's parser and evaluator)
// over the facts as they stand now, decay included. A query that does not
// parse or names a field no fact has is a signal to the agent.
func (s *FactStore) Query(q string) ([]*Fact, *Signal) {
	parsed, err := analysis.ParseQuery(q)
	if err != nil {
		return nil, signal("input_error", "invalid_format", CodeInvalidQuery, "fix_the_query", true, "query %q: %v", q, err)
	}
	recs := make([]*analysis.FactRecord, len(s.order))
	for i, f := range s.order {
		recs[i] = f.record()
	}
	got, err := parsed.Run(recs)
	if err != nil {
		return nil, signal("input_error", "invalid_format", CodeInvalidQuery, "fix_the_query", true, "query %q: %v", q, err)
	}
	out := make([]*Fact, len(got))
	for i, r := range got {
		out[i] = s.facts[r.ID]
	}
	return out, nil
}

// ContextFor runs the agent's suggested queries and returns the facts
// they give, each once, in the order found: what the agent is shown when
// it receives control (pulled, never the whole store).
func (s *FactStore) ContextFor(a *Agent) ([]*Fact, *Signal) {
	var out []*Fact
	for _, q := range a.SuggestedQueries {
		got, sig := s.Query(q)
		if sig != nil {
			return nil, sig
		}
		for _, f := range got {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out, nil
}
