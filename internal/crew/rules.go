package crew

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// Gate actions: the spec's threshold table (part 3).
const (
	GateProceed = "proceed" // ≥ proceed threshold: proceed automatically
	GateWarn    = "warn"    // warn ≤ c < proceed: proceed, with a warning on the chain
	GateVerify  = "verify"  // verify ≤ c < warn: request verification (a reviewer agent, else a human)
	GateBlock   = "block"   // < verify: block for human review (an approval, not a deny)
)

// GateDecision is the confidence gate's answer for a proposal: the lowest
// confidence among the proposal's own and the facts it relies on decides.
type GateDecision struct {
	Action string
	// Confidence is the deciding confidence; Subject what it belongs to
	// ("proposal" or "fact F1"). Both are empty when nothing had one.
	Confidence *float64
	Subject    string
	// Verifier is, for GateVerify, the reviewer agent the proposing agent
	// may hand to; "" means a human verifies.
	Verifier string
	// Reason is a sentence for the chain and the agent.
	Reason string
	// RuleID names the band, for the verdict's reasons:
	// "confidence.proceed", "confidence.warn", ...
	RuleID string
}

// Gate applies the crew's thresholds to a proposal by agent with its own
// confidence (nil when the model gave none) relying on facts. With no
// confidence at all the gate has nothing to apply and proceeds.
func (c *Crew) Gate(agent string, proposal *float64, facts []*Fact) GateDecision {
	fc := make([]FactConfidence, len(facts))
	for i, f := range facts {
		fc[i] = FactConfidence{ID: f.ID, Confidence: f.Confidence}
	}
	return GateOn(c.Confidence.Thresholds, proposal, fc, c.verifierFor(agent))
}

// FactConfidence is a fact's id and its confidence now.
type FactConfidence struct {
	ID         string
	Confidence float64
}

// GateOn is the confidence gate on its own, for a judge that has the
// thresholds and the confidences but not the crew (the validator, from
// a CrewContext): the lowest of the proposal's confidence and the facts'
// decides; verifier is the reviewer for the verify band ("" a human).
func GateOn(th Thresholds, proposal *float64, facts []FactConfidence, verifier string) GateDecision {
	d := GateDecision{Action: GateProceed, RuleID: "confidence." + GateProceed, Reason: "no confidence to apply the thresholds to"}
	if proposal != nil {
		v := *proposal
		d.Confidence, d.Subject = &v, "proposal"
	}
	for _, f := range facts {
		if d.Confidence == nil || f.Confidence < *d.Confidence {
			v := f.Confidence
			d.Confidence, d.Subject = &v, "fact "+f.ID
		}
	}
	if d.Confidence == nil {
		return d
	}
	v := *d.Confidence
	if badConfidence(v) {
		d.Action = GateBlock
		d.Reason = fmt.Sprintf("%s confidence %v is not a number in [0, 1]: blocked for human review", d.Subject, v)
		d.RuleID = "confidence." + d.Action
		return d
	}
	switch th.Band(v) {
	case analysis.BandProceed:
		d.Action = GateProceed
		d.Reason = fmt.Sprintf("%s confidence %.2f is at least %.2f: proceed", d.Subject, v, th.Proceed)
	case analysis.BandWarn:
		d.Action = GateWarn
		d.Reason = fmt.Sprintf("%s confidence %.2f is below %.2f: proceed with a warning", d.Subject, v, th.Proceed)
	case analysis.BandVerify:
		d.Action = GateVerify
		d.Verifier = verifier
		who := "a human"
		if d.Verifier != "" {
			who = d.Verifier
		}
		d.Reason = fmt.Sprintf("%s confidence %.2f is below %.2f: verification by %s is required", d.Subject, v, th.Warn, who)
	default:
		d.Action = GateBlock
		d.Reason = fmt.Sprintf("%s confidence %.2f is below %.2f: blocked for human review", d.Subject, v, th.Verify)
	}
	d.RuleID = "confidence." + d.Action
	return d
}

// verifierFor is the first reviewer agent the agent may hand to.
func (c *Crew) verifierFor(agent string) string {
	a := c.Agent(agent)
	if a == nil {
		return ""
	}
	for _, to := range a.HandsTo {
		if r := c.Agent(to); r != nil && r.Profile.Type == "reviewer" {
			return to
		}
	}
	return ""
}

// CheckTool is the validator's per-agent check: the agent may propose the
// tool only when the crew file lists it for that agent.
func (c *Crew) CheckTool(agent, tool string) *Signal {
	a := c.Agent(agent)
	if a == nil {
		return signal("orchestration_error", "routing_failed", CodeUnknownAgent, "check_the_crew_file", false, "agent %q is not in crew %s", agent, c.Name)
	}
	if !a.MayPropose(tool) {
		return signal("output_error", "validation_failed", CodeToolNotAllowed, "choose_one_of_your_tools", true,
			"%s may not propose %s (its tools: %s)", agent, tool, strings.Join(a.Tools, ", "))
	}
	return nil
}

// HandoffState is where a run's handoffs stand: who is in control, how
// many handoffs were made and how often each agent received control. It
// is rebuilt from the chain's handoff events.
type HandoffState struct {
	Current string
	Depth   int
	Visits  map[string]int
	Path    []string
}

// NewHandoffState is a run's state before its first step: the entry agent
// in control.
func (c *Crew) NewHandoffState() *HandoffState {
	return &HandoffState{Current: c.Entry, Visits: map[string]int{c.Entry: 1}, Path: []string{c.Entry}}
}

// CheckHandoff decides whether from may hand control to to now: from
// must be in control, to must be an agent from may hand to, and the
// handoff must stay within the crew's depth (chain_depth_exceeded) and
// visit (cycle_detected) limits. A refusal is a signal to from.
func (c *Crew) CheckHandoff(st *HandoffState, from, to string) *Signal {
	const cat = "orchestration_error"
	switch {
	case from != st.Current:
		return signal(cat, "delegation_rejected", CodeNotInControl, "wait_for_control", false, "%s is not in control (%s is): only the agent in control hands off", from, st.Current)
	case c.Agent(to) == nil:
		return signal(cat, "routing_failed", CodeUnknownAgent, "hand_to_an_agent_of_the_crew", true, "no agent %q in crew %s (you may hand to: %s)", to, c.Name, strings.Join(c.Agent(from).HandsTo, ", "))
	case !c.Agent(from).MayHandTo(to):
		return signal(cat, "delegation_rejected", CodeHandoffNotAllowed, "hand_to_an_allowed_agent", true, "%s may not hand to %s (it may hand to: %s)", from, to, strings.Join(c.Agent(from).HandsTo, ", "))
	case st.Depth+1 > c.Handoffs.MaxDepth:
		return signal(cat, "chain_depth_exceeded", CodeChainDepthExceeded, "finish_with_done", true, "handoff %d would exceed the crew's max_depth %d (path: %s)", st.Depth+1, c.Handoffs.MaxDepth, strings.Join(st.Path, " -> "))
	case st.Visits[to]+1 > c.Handoffs.MaxVisits:
		return signal(cat, "cycle_detected", CodeCycleDetected, "finish_with_done", true, "%s would receive control %d times, over the crew's limit of %d (path: %s -> %s)", to, st.Visits[to]+1, c.Handoffs.MaxVisits, strings.Join(st.Path, " -> "), to)
	}
	return nil
}

// Accept records an allowed handoff to to.
func (st *HandoffState) Accept(to string) {
	st.Current = to
	st.Depth++
	st.Visits[to]++
	st.Path = append(st.Path, to)
}

// HandoffResult is what a proposed handoff comes to: either a signal to
// the proposing agent (refused: a rule or a contract), or the events to
// record, in order (the contract validations, then the handoff).
type HandoffResult struct {
	Allowed bool
	// Signal is the error back to the proposing agent when not allowed.
	Signal *Signal
	// Validations are the contract checks made (output of the producer,
	// input of the receiver), also when one failed.
	Validations []ContractValidation
	// Handoff is the handoff event's data, when allowed.
	Handoff *Handoff
	// Context are the facts the receiver's suggested queries give it,
	// confidence as it will be after the hop.
	Context []*Fact
}

// Handoff checks a proposed xct.handoff {to, summary} by from against the
// rules and the contracts (the producer's outputs, the facts it produced
// in its turn, against its contract; the receiver's inputs, the facts of
// others as they will reach it, against its own). When everything holds,
// st records the handoff; the store is left as it is (the receiver's
// step_start is the hop: BeginStep).
func (c *Crew) Handoff(st *HandoffState, store *FactStore, from, to, summary string) HandoffResult {
	if sig := c.CheckHandoff(st, from, to); sig != nil {
		return HandoffResult{Signal: sig}
	}
	var res HandoffResult
	if ct := c.Contracts.Contracts[from]; ct != nil && len(ct.Outputs) > 0 {
		res.Validations = append(res.Validations, c.checkOutputs(store, from, ct.Outputs))
	}
	after := store.Clone()
	after.BeginStep(to)
	if ct := c.Contracts.Contracts[to]; ct != nil && len(ct.Inputs) > 0 {
		res.Validations = append(res.Validations, c.checkInputs(after, to, ct.Inputs))
	}
	for _, v := range res.Validations {
		if !v.Passed() {
			res.Signal = signal("output_error", "validation_failed", CodeContractViolated, "produce_what_the_contract_requires", true,
				"handoff %s -> %s refused: %s %s contract: %s", from, to, v.Contract, v.Direction, strings.Join(v.Warnings, "; "))
			res.Signal.Details = map[string]any{"contract": v.Contract, "direction": v.Direction, "violations": jsonValue(v.Violations)}
			return res
		}
	}
	ctx, sig := after.ContextFor(c.Agent(to))
	if sig != nil {
		// The receiver's suggested queries name a field no fact has yet:
		// it starts without them rather than the handoff failing.
		ctx = nil
	}
	h := &Handoff{From: from, To: to, Summary: summary, Depth: st.Depth + 1, SuggestedQueries: slices.Clone(c.Agent(to).SuggestedQueries), Facts: []string{}}
	if h.SuggestedQueries == nil {
		h.SuggestedQueries = []string{}
	}
	for _, f := range ctx {
		h.Facts = append(h.Facts, f.ID)
	}
	st.Accept(to)
	res.Allowed, res.Handoff, res.Context = true, h, ctx
	return res
}

// factEvent is a fact as a fact_added event by who, for lctl's contract
// checks.
func factEvent(seq uint64, who string, f *Fact) lctl.Event {
	d := map[string]any{"id": f.ID, "text": f.Text, "confidence": f.Confidence}
	if f.Source != "" {
		d["source"] = f.Source
	}
	if len(f.Tags) > 0 {
		d["tags"] = jsonValue(f.Tags)
	}
	for k, v := range f.Fields {
		d[k] = v
	}
	return lctl.Event{Seq: seq, Type: lctl.TypeFactAdded, Agent: who, Data: d}
}

// checkOutputs validates the facts from produced in its turn against its
// output rules, with lctl's contract validation. A fact rule with no fact
// produced is a violation: the handoff would pass on nothing the contract
// promises.
func (c *Crew) checkOutputs(store *FactStore, from string, rules []analysis.ContractRule) ContractValidation {
	produced := store.ProducedThisTurn(from)
	var events []lctl.Event
	for i, f := range produced {
		events = append(events, factEvent(uint64(i+1), from, f))
	}
	cv := c.validate(from, "output", events, &analysis.Contract{Agent: from, Outputs: rules})
	for _, r := range rules {
		switch {
		case r.Type == "fact" && len(produced) == 0:
			cv.Violations = append(cv.Violations, ContractViolation{Subject: "facts of " + from, Message: "no fact produced in this turn", Rule: r.Where})
		case r.Type != "fact":
			cv.Warnings = append(cv.Warnings, fmt.Sprintf("rule %s (type %s) is checked on the chain by lctl validate, not at the handoff", r.Where, r.Type))
		}
	}
	return cv.finish()
}

// checkInputs validates the facts to will receive (those last changed by
// another agent, after the hop) against its input rules.
func (c *Crew) checkInputs(after *FactStore, to string, rules []analysis.ContractRule) ContractValidation {
	var events []lctl.Event
	for _, f := range after.Facts() {
		if f.UpdatedBy != to {
			events = append(events, factEvent(uint64(len(events)+1), f.UpdatedBy, f))
		}
	}
	events = append(events, lctl.Event{Seq: uint64(len(events) + 1), Type: lctl.TypeStepStart, Agent: to, Data: map[string]any{}})
	cv := c.validate(to, "input", events, &analysis.Contract{Agent: to, Inputs: rules})
	for _, r := range rules {
		if r.Type != "fact" {
			cv.Warnings = append(cv.Warnings, fmt.Sprintf("rule %s (type %s) is checked on the chain by lctl validate, not at the handoff", r.Where, r.Type))
		}
	}
	return cv.finish()
}

// validate runs lctl's contract validation over events for one contract.
func (c *Crew) validate(agent, direction string, events []lctl.Event, ct *analysis.Contract) ContractValidation {
	set := &analysis.ContractSet{Agents: []string{agent}, Contracts: map[string]*analysis.Contract{agent: ct}}
	if ct.Inputs == nil {
		ct.Inputs = []analysis.ContractRule{}
	}
	if ct.Outputs == nil {
		ct.Outputs = []analysis.ContractRule{}
	}
	rep := analysis.ValidateContracts(c.Name, events, set)
	cv := ContractValidation{Contract: agent, Direction: direction, Warnings: []string{}, Violations: []ContractViolation{}}
	for _, r := range rep.Results {
		cv.Checked += r.Checked
		for _, v := range r.Violations {
			cv.Violations = append(cv.Violations, ContractViolation{Subject: strings.Replace(v.Subject, "fact_added ", "fact ", 1), Message: strings.TrimPrefix(v.Message, "received at step "+fmt.Sprint(len(events))+": "), Rule: v.Rule})
		}
	}
	return cv
}

// finish sets the status and puts each violation in the warnings, which
// is where lctl's reducer reads a contract_validation's findings.
func (cv ContractValidation) finish() ContractValidation {
	cv.Status = StatusPassed
	if len(cv.Violations) > 0 {
		cv.Status = StatusFailed
	}
	var msgs []string
	for _, v := range cv.Violations {
		msgs = append(msgs, fmt.Sprintf("%s: %s (rule %s)", v.Subject, v.Message, v.Rule))
	}
	cv.Warnings = append(msgs, cv.Warnings...)
	return cv
}
