package analysis

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xct-dev/xct/lctl"
)

// Prices is a price table: what a model's tokens cost, per 1,000. It is read
// from YAML:
//
//	models:
//	  claude-3-opus: {input_per_1k: 0.015, output_per_1k: 0.075}
//	  gpt-4o:        {input_per_1k: 0.0025, output_per_1k: 0.01}
type Prices struct {
	Models map[string]ModelPrice `yaml:"models" json:"models"`
}

// ModelPrice is the price of one model's tokens, in dollars per 1,000.
type ModelPrice struct {
	InputPer1K  float64 `yaml:"input_per_1k" json:"input_per_1k"`
	OutputPer1K float64 `yaml:"output_per_1k" json:"output_per_1k"`
}

// LoadPrices reads a price table. Unknown keys and negative prices are
// errors, so a typo does not silently price a model at zero.
func LoadPrices(r io.Reader) (*Prices, error) {
	raw, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read price table: %w", err)
	}
	var p Prices
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("price table: %w", err)
	}
	if len(p.Models) == 0 {
		return nil, fmt.Errorf("price table: no models (want models: {NAME: {input_per_1k, output_per_1k}})")
	}
	for name, mp := range p.Models {
		if mp.InputPer1K < 0 || mp.OutputPer1K < 0 || math.IsNaN(mp.InputPer1K) || math.IsNaN(mp.OutputPer1K) {
			return nil, fmt.Errorf("price table: model %q has a negative price", name)
		}
	}
	return &p, nil
}

// lookup finds a model's price: its exact name, else the longest name in
// the table the model's name starts with ("claude-3-opus" prices
// "claude-3-opus-20240229").
func (p *Prices) lookup(model string) (ModelPrice, string, bool) {
	if p == nil {
		return ModelPrice{}, "", false
	}
	if mp, ok := p.Models[model]; ok {
		return mp, model, true
	}
	best := ""
	for name := range p.Models {
		if strings.HasPrefix(model, name) && len(name) > len(best) {
			best = name
		}
	}
	if best == "" {
		return ModelPrice{}, "", false
	}
	return p.Models[best], best, true
}

// Stats summarizes a chain: the spec's `lctl stats`.
type Stats struct {
	ChainID string `json:"chain_id"`
	Events  int    `json:"events"`
	// DurationMS is the sum of the steps' durations (step_end duration_ms,
	// or the time between a step's start and end); when no step has one,
	// the time from the first to the last event.
	DurationMS     float64 `json:"duration_ms"`
	DurationSource string  `json:"duration_source"` // "steps", "timestamps" or "none"
	// WallClockMS is the time from the first to the last event (0 when the
	// events have no timestamps).
	WallClockMS float64     `json:"wall_clock_ms"`
	Tokens      lctl.Tokens `json:"tokens"`
	TotalTokens int64       `json:"total_tokens"`
	// Cost is in dollars; nil without a price table or when no tokens could
	// be priced.
	Cost        *float64    `json:"cost"`
	CostByModel []ModelCost `json:"cost_by_model"`
	// CostByAgent is the same tokens by the agent whose step spent them,
	// each step priced by its own model, in order of the agents' first
	// tokens.
	CostByAgent []AgentCost `json:"cost_by_agent"`
	// Unpriced lists models with tokens but no price in the table.
	Unpriced []string `json:"unpriced"`
	// Agents are the agents that did work (started a step).
	Agents        []string       `json:"agents"`
	Errors        int            `json:"errors"`
	ErrorsByType  map[string]int `json:"errors_by_type"`
	Facts         int            `json:"facts"`
	AvgConfidence *float64       `json:"avg_confidence"`
	Steps         int            `json:"steps"`
	ToolCalls     int            `json:"tool_calls"`
	EventTypes    map[string]int `json:"event_types"`
	UnknownTypes  int            `json:"unknown_types"`
	RunStatus     string         `json:"run_status,omitempty"`
	// Profiles are the agents' agent_profile (type, capabilities, model),
	// the latest of each, in order of their first.
	Profiles []AgentProfile `json:"agent_profiles"`
	// Streams counts the streams that ended (stream_start to stream_end);
	// StreamTokens sums their tokens (total_tokens, else the chunks') and
	// StreamMS their durations. Tokens of a stream inside a step that
	// reports its own tokens are in that step's; the others are added to
	// Tokens.Output, and a stream outside every step to DurationMS.
	Streams        int     `json:"streams"`
	StreamTokens   int64   `json:"stream_tokens"`
	StreamMS       float64 `json:"stream_ms"`
	FirstTimestamp string  `json:"first_timestamp,omitempty"`
	LastTimestamp  string  `json:"last_timestamp,omitempty"`
}

// ModelCost is the tokens of one model and what they cost.
type ModelCost struct {
	Model string `json:"model"`
	// PricedAs is the price table entry used ("" when unpriced).
	PricedAs string   `json:"priced_as,omitempty"`
	Input    int64    `json:"input"`
	Output   int64    `json:"output"`
	Cost     *float64 `json:"cost"`
}

// AgentCost is the tokens one agent's steps spent and what they cost.
type AgentCost struct {
	Agent  string `json:"agent"`
	Input  int64  `json:"input"`
	Output int64  `json:"output"`
	// Cost is nil when none of the agent's tokens could be priced;
	// Unpriced is true when some could not.
	Cost     *float64 `json:"cost"`
	Unpriced bool     `json:"unpriced,omitempty"`
}

// UnknownModel stands for tokens whose step names no model.
const UnknownModel = "(unknown model)"

// ComputeStats summarizes a chain. Tokens are the step_end tokens, each
// attributed to the model of its step (step_start's model or
// agent_profile.model); prices may be nil.
func ComputeStats(chainID string, events []lctl.Event, prices *Prices) *Stats {
	b := NewStatsBuilder(chainID, prices)
	for i := range events {
		b.Add(&events[i])
	}
	return b.Stats()
}

// StatsBuilder takes a chain one event at a time (a stream, never held)
// and gives ComputeStats' result.
type StatsBuilder struct {
	chainID string
	prices  *Prices
	state   *lctl.State
	events  int
	// The first and the last event with a time: their timestamps as
	// written and as parsed (not a copy of each event).
	timed                 bool
	firstStamp, lastStamp string
	firstTime, lastTime   time.Time
	steps                 *stepTimer
	cost                  *tokenPricer
	profiles              profileTracker
}

// NewStatsBuilder returns a builder before the first event; prices may be
// nil.
func NewStatsBuilder(chainID string, prices *Prices) *StatsBuilder {
	s := lctl.NewSummaryState(chainID)
	s.DeferTypeCounts() // EventTypes is read in Stats
	s.CountToolCalls()  // only their number is
	s.NoFactHistory()   // facts: their number and confidences
	s.NoCurrentStep()   // never shown
	s.NoFactText()      // nor the facts' texts
	steps := newStepTimer()
	steps.untitled = true  // Stats reads the steps' times, not their names
	steps.durations = true // nor, of every XCT step, more than its duration
	cost := newTokenPricer(prices)
	s.KeepTokens()
	cost.state = s
	return &StatsBuilder{chainID: chainID, prices: prices, state: s, steps: steps, cost: cost}
}

// ReadsData says whether Add reads the data of an event of type typ: a
// stream need not decode any other's (lctl.StreamOptions.Data). Add reads
// what its state folds (State.ReadsData), steps, tool calls and streams
// (the step timer, the pricer, the profiles).
func (b *StatsBuilder) ReadsData(typ string) bool {
	return BottleneckData(typ) || b.state.ReadsData(typ)
}

// DataTypes is ReadsData in a function that reads nothing of the builder
// (State.DataTypes): what a stream calls on its decoding cores.
func (b *StatsBuilder) DataTypes() func(typ string) bool {
	state := b.state.DataTypes()
	return func(typ string) bool { return BottleneckData(typ) || state(typ) }
}

// StatsUnread names, per type, the members of the data a StatsBuilder
// never reads of those a stream would keep at length or copy
// (lctl.StreamOptions.Unread): a step's intent, a step's id (a new string
// at each step, copied and put in the decoder's tables on its first
// event: its summary state keeps no steps nor tool calls, its step timer
// and pricer go by the step's number), a fact's text (its state keeps
// none: NoFactText), a checkpoint's facts_snapshot (the state reads its
// state_hash only).
func StatsUnread(typ string) string {
	switch typ {
	case lctl.TypeStepStart:
		return "intent,step_id"
	case lctl.TypeStepEnd, lctl.TypeToolCall:
		return "step_id"
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		return "text"
	case lctl.TypeCheckpoint:
		return "facts_snapshot"
	}
	return ""
}

// Add takes the next event of the chain. It reads the data of the types
// ReadsData names and of no other.
func (b *StatsBuilder) Add(e *lctl.Event) {
	b.events++
	b.state.Apply(e)
	if t, ok := e.ParsedTime(); ok {
		if !b.timed {
			b.timed, b.firstStamp, b.firstTime = true, e.Timestamp, t
		}
		b.lastStamp, b.lastTime = e.Timestamp, t
	}
	var step stepNumber // a step's number: the step timer's and the pricer's
	b.steps.addStep(e, &step)
	b.cost.addStep(e, &step)
	b.profiles.add(e)
}

// Stats is the summary of the events added.
func (b *StatsBuilder) Stats() *Stats {
	s := b.state
	s.FlushTypeCounts()
	st := &Stats{
		ChainID:      b.chainID,
		Events:       b.events,
		Tokens:       s.Tokens,
		TotalTokens:  s.Tokens.Input + s.Tokens.Output,
		Agents:       append([]string{}, s.Agents...),
		Errors:       len(s.Errors),
		ErrorsByType: map[string]int{},
		Facts:        len(s.Facts),
		Steps:        s.EventTypes[lctl.TypeStepStart],
		ToolCalls:    s.ToolCallCount(),
		EventTypes:   s.EventTypes,
		UnknownTypes: unknownTypes(s),
		Unpriced:     []string{},
		CostByModel:  []ModelCost{},
		CostByAgent:  []AgentCost{},
		Profiles:     append([]AgentProfile{}, b.profiles.list...),
	}
	if s.Run != nil {
		st.RunStatus = s.Run.Status
	}
	for _, e := range s.Errors {
		k := strings.Trim(e.Category+"/"+e.Type, "/")
		if k == "" {
			k = "unclassified"
		}
		st.ErrorsByType[k]++
	}
	// Sum in a fixed order: float addition is not associative, and the
	// same chain must always print the same average.
	ids := make([]string, 0, len(s.Facts))
	for id := range s.Facts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var sum float64
	n := 0
	for _, id := range ids {
		if f := s.Facts[id]; f.Confidence != nil {
			sum += *f.Confidence
			n++
		}
	}
	if n > 0 {
		avg := sum / float64(n)
		st.AvgConfidence = &avg
	}
	if b.timed {
		st.FirstTimestamp, st.LastTimestamp = b.firstStamp, b.lastStamp
		st.WallClockMS = float64(b.lastTime.Sub(b.firstTime).Microseconds()) / 1000
	}
	b.steps.each(func(t *StepTiming) {
		if !t.Unfinished && !t.nested { // a nested step's time is in its parent's
			st.DurationMS += t.DurationMS
		}
		if t.Stream && !t.Unfinished {
			st.Streams++
			st.StreamTokens += t.Tokens
			st.StreamMS += t.DurationMS
		}
	})
	// Streamed tokens no step reported are output tokens.
	st.Tokens.Output += b.steps.unreportedStreamTokens()
	st.TotalTokens = st.Tokens.Input + st.Tokens.Output
	switch {
	case st.DurationMS > 0:
		st.DurationSource = "steps"
	case st.WallClockMS > 0:
		st.DurationMS, st.DurationSource = st.WallClockMS, "timestamps"
	default:
		st.DurationSource = "none"
	}
	b.cost.finish(st)
	return st
}

// tokenPricer prices step_end tokens as the events go by.
type tokenPricer struct {
	prices  *Prices
	byModel map[string]*ModelCost
	order   []string
	byAgent map[string]*AgentCost
	agents  []string
	models  modelResolver
	// state, when set, is the state that has applied each event just
	// before (lctl.State.TokenMembers).
	state *lctl.State
	// lastModel and lastAgent are the entries of byModel and byAgent the
	// last tokens went to (the next step's mostly go there too): found
	// without the maps' hashing.
	lastModel *ModelCost
	lastAgent *AgentCost
}

func newTokenPricer(prices *Prices) *tokenPricer {
	return &tokenPricer{prices: prices, byModel: map[string]*ModelCost{}, byAgent: map[string]*AgentCost{}, models: newModelResolver()}
}

// addStep prices e's tokens when it is a step_end; step is its step
// number, read once for the step timer and the model resolver
// (stepNumber).
func (p *tokenPricer) addStep(e *lctl.Event, step *stepNumber) {
	model, isEnd := p.models.addStep(e, step)
	if !isEnd {
		return
	}
	// The pair the stream read on its decoding core, else the object
	// State.Apply has just read (stats): its members found.
	in, out, pair := e.TokenPair()
	if !pair {
		t, ok := e.Object("tokens")
		if !ok {
			return
		}
		in, out, pair = t.TokenPair()
		switch {
		case pair:
		case p.state != nil:
			m := p.state.TokenMembers(t, tokenNames[:])
			in, out = memberTokens(&m)
		default:
			in, out = tokensOf(t)
		}
	}
	if in+out == 0 {
		return
	}
	if model == "" {
		model = UnknownModel
	}
	mc := p.lastModel
	if mc == nil || mc.Model != model {
		if mc = p.byModel[model]; mc == nil {
			mc = &ModelCost{Model: model}
			p.byModel[model] = mc
			p.order = append(p.order, model)
		}
		p.lastModel = mc
	}
	mc.Input += in
	mc.Output += out
	ac := p.lastAgent
	if ac == nil || ac.Agent != e.Agent {
		if ac = p.byAgent[e.Agent]; ac == nil {
			ac = &AgentCost{Agent: e.Agent}
			p.byAgent[e.Agent] = ac
			p.agents = append(p.agents, e.Agent)
		}
		p.lastAgent = ac
	}
	ac.Input += in
	ac.Output += out
	if mp, _, ok := p.prices.lookup(model); ok {
		c := float64(in)/1000*mp.InputPer1K + float64(out)/1000*mp.OutputPer1K
		if ac.Cost == nil {
			ac.Cost = new(float64)
		}
		*ac.Cost += c
	} else if p.prices != nil {
		ac.Unpriced = true
	}
}

func (p *tokenPricer) finish(st *Stats) {
	prices := p.prices
	for _, a := range p.agents {
		st.CostByAgent = append(st.CostByAgent, *p.byAgent[a])
	}
	order := p.order
	sort.Strings(order)
	var total float64
	priced := false
	for _, m := range order {
		mc := p.byModel[m]
		if mp, name, ok := prices.lookup(m); ok {
			c := float64(mc.Input)/1000*mp.InputPer1K + float64(mc.Output)/1000*mp.OutputPer1K
			mc.Cost, mc.PricedAs = &c, name
			total += c
			priced = true
		} else if prices != nil {
			st.Unpriced = append(st.Unpriced, m)
		}
		st.CostByModel = append(st.CostByModel, *mc)
	}
	if priced {
		st.Cost = &total
	}
}

// FormatCost renders dollars the way the spec does: $0.047.
func FormatCost(c float64) string {
	switch {
	case c == 0:
		return "$0.00"
	case c < 0.01:
		return fmt.Sprintf("$%.4f", c)
	case c < 1:
		return fmt.Sprintf("$%.3f", c)
	}
	return fmt.Sprintf("$%.2f", c)
}

// unknownTypes counts the events of types no reader here knows: the
// reducer's UnknownTypes (XCT's own types and handoff are known to it).
func unknownTypes(s *lctl.State) int { return len(s.UnknownTypes) }
