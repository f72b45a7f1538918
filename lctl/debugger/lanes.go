package debugger

import (
	"encoding/json"
	"strconv"

	"github.com/xct-dev/xct/lctl"
)

// Crews (docs/crews.md): several agents take turns on one chain. The
// flowchart puts each agent in a lane (a node's Lane), draws a recorded
// handoff as an edge from the step that handed over to the receiving
// agent's next step with the two contract_validation results of that
// handoff, puts the model_routing decisions and the model's stream on the
// step they lead to (the loop calls the model before the step's
// step_start), and shows a handoff refused by a contract on its step.
// Chains without these events are drawn as before.

// Handoff statuses.
const (
	handoffPassed   = "passed"
	handoffRefused  = "refused"
	handoffChecking = "checking"
)

// Lane is an agent's lane in the flowchart.
type Lane struct {
	Agent string `json:"agent"`
	// Type is the agent's profile type (step_start's agent_profile.type),
	// "" when no step gave one.
	Type  string `json:"type"`
	Steps int    `json:"steps"`
	Nodes int    `json:"nodes"`
}

// Routing is a model_routing decision shown on the step it led to.
type Routing struct {
	Seq         uint64   `json:"seq"`
	Decision    string   `json:"decision"`
	Model       string   `json:"model"`
	Reason      string   `json:"reason"`
	Rule        string   `json:"rule,omitempty"`
	StepKind    string   `json:"step_kind,omitempty"`
	FailedModel string   `json:"failed_model,omitempty"`
	FailureCode string   `json:"failure_code,omitempty"`
	Confidence  *float64 `json:"confidence"`
}

// Stream is a model's streamed answer shown on its step.
type Stream struct {
	Seq        uint64   `json:"seq"`
	Model      string   `json:"model"`
	Chunks     int      `json:"chunks"`
	Tokens     *float64 `json:"tokens"`
	Status     string   `json:"status"`
	DurationMS *float64 `json:"duration_ms"`
}

// ContractResult is one contract_validation of a handoff.
type ContractResult struct {
	Seq        uint64      `json:"seq"`
	Contract   string      `json:"contract"`
	Direction  string      `json:"direction"`
	Status     string      `json:"status"`
	Violations []Violation `json:"violations"`
}

// Violation is one broken rule of a contract.
type Violation struct {
	Subject string `json:"subject"`
	Message string `json:"message"`
	Rule    string `json:"rule"`
}

// Handoff is a handoff proposed in a step: passed (the handoff event is on
// the chain), refused (a contract failed: control did not pass) or
// checking (contracts checked, no outcome yet).
type Handoff struct {
	Seq       uint64           `json:"seq"`
	From      string           `json:"from"`
	To        string           `json:"to"`
	Summary   string           `json:"summary"`
	Depth     *float64         `json:"depth"`
	Status    string           `json:"status"`
	Contracts []ContractResult `json:"contracts"`
}

func (h *Handoff) clone() *Handoff {
	if h == nil {
		return nil
	}
	c := *h
	c.Contracts = append([]ContractResult{}, h.Contracts...)
	return &c
}

// edgeIn is how a node is reached.
type edgeIn struct {
	// handoff: the agent changed from the previous step (no handoff event
	// said so).
	handoff bool
	// from is the index of the step that handed over to this one (a
	// handoff event), -1 if none; info is that handoff.
	from int
	info *Handoff
}

// pendingHandoff is a handoff on the chain whose receiving step has not
// started yet.
type pendingHandoff struct {
	from int
	info *Handoff
}

// isPrelude tells the events the loop records before the step they lead
// to: the routing decision and the model's stream.
func isPrelude(t string) bool {
	switch t {
	case lctl.TypeModelRouting, lctl.TypeStreamStart, lctl.TypeStreamChunk, lctl.TypeStreamEnd:
		return true
	}
	return false
}

// preludeLane is the agent a prelude event is for: a routing decision's
// data.for, else the event's agent.
func preludeLane(e *lctl.Event) string {
	if e.Type == lctl.TypeModelRouting {
		if f := str(e.Data, "for"); f != "" {
			return f
		}
	}
	return e.Agent
}

// note records a crew event on a node (a step, or a prelude node).
func (n *flowNode) note(e *lctl.Event) {
	d := e.Data
	switch e.Type {
	case lctl.TypeModelRouting:
		n.Routing = append(n.Routing, Routing{
			Seq: e.Seq, Decision: str(d, "decision"), Model: str(d, "model"), Reason: str(d, "reason"),
			Rule: str(d, "rule"), StepKind: str(d, "step_kind"), FailedModel: str(d, "failed_model"),
			FailureCode: str(d, "failure_code"), Confidence: num(d, "confidence"),
		})
	case lctl.TypeStreamStart:
		n.Streams = append(n.Streams, Stream{Seq: e.Seq, Model: str(d, "model"), Status: statusPending})
	case lctl.TypeStreamChunk:
		if s := n.lastStream(); s != nil {
			s.Chunks++
		}
	case lctl.TypeStreamEnd:
		s := n.lastStream()
		if s == nil {
			n.Streams = append(n.Streams, Stream{Seq: e.Seq})
			s = &n.Streams[len(n.Streams)-1]
		}
		s.Status = firstNonEmpty(str(d, "status"), "ok")
		s.Tokens = num(d, "total_tokens")
		s.DurationMS = num(d, "duration_ms")
		if c := num(d, "total_chunks"); c != nil {
			s.Chunks = int(*c)
		}
	case lctl.TypeContractValidation:
		if n.Handoff == nil || n.Handoff.Status == handoffPassed {
			n.Handoff = &Handoff{From: n.Agent, To: n.handoffTo, Summary: n.handoffSummary, Status: handoffChecking}
		}
		n.Handoff.Contracts = append(n.Handoff.Contracts, contractResult(e))
		if n.Handoff.Contracts[len(n.Handoff.Contracts)-1].Status != "passed" {
			n.Handoff.Status = handoffRefused
		}
	case lctl.TypeHandoff:
		if n.Handoff == nil || n.Handoff.Status != handoffChecking {
			n.Handoff = &Handoff{Contracts: []ContractResult{}}
		}
		n.Handoff.Seq, n.Handoff.Status = e.Seq, handoffPassed
		n.Handoff.From = firstNonEmpty(str(d, "from"), e.Agent)
		n.Handoff.To = firstNonEmpty(str(d, "to"), n.handoffTo)
		n.Handoff.Summary, n.Handoff.Depth = str(d, "summary"), num(d, "depth")
	}
}

func (n *flowNode) lastStream() *Stream {
	if len(n.Streams) == 0 || n.Streams[len(n.Streams)-1].Status != statusPending {
		return nil
	}
	return &n.Streams[len(n.Streams)-1]
}

func contractResult(e *lctl.Event) ContractResult {
	d := e.Data
	r := ContractResult{Seq: e.Seq, Contract: str(d, "contract"), Direction: str(d, "direction"), Status: str(d, "status"), Violations: []Violation{}}
	list, _ := d["violations"].([]any)
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			r.Violations = append(r.Violations, Violation{Subject: str(m, "subject"), Message: str(m, "message"), Rule: str(m, "rule")})
		}
	}
	if len(r.Violations) == 0 {
		// A chain that lists its violations only as warnings.
		ws, _ := d["warnings"].([]any)
		for _, w := range ws {
			if s, ok := w.(string); ok && r.Status != "passed" {
				r.Violations = append(r.Violations, Violation{Message: s})
			}
		}
	}
	return r
}

// num reads data[key] as a number.
func num(d map[string]any, key string) *float64 {
	switch v := d[key].(type) {
	case float64:
		return &v
	case int:
		f := float64(v)
		return &f
	case int64:
		f := float64(v)
		return &f
	case json.Number:
		if f, err := v.Float64(); err == nil {
			return &f
		}
	}
	return nil
}

// mergePrelude moves a prelude node at the end of the flow (a routing
// decision, a stream) onto the step of its agent that starts now.
func (f *flow) mergePrelude(agent string) *flowNode {
	last := f.last()
	if last == nil || !last.prelude || last.Lane != agent {
		return nil
	}
	f.nodes = f.nodes[:len(f.nodes)-1]
	f.into = f.into[:len(f.into)-1]
	f.laneOf(last.Lane).Nodes--
	return last
}

// laneOf returns the lane of an agent, adding it.
func (f *flow) laneOf(agent string) *Lane {
	for i := range f.lanes {
		if f.lanes[i].Agent == agent {
			return &f.lanes[i]
		}
	}
	f.lanes = append(f.lanes, Lane{Agent: agent})
	return &f.lanes[len(f.lanes)-1]
}

// addPrelude takes a routing decision or stream event outside any step:
// it goes on a prelude node of its agent at the end of the flow, which the
// agent's next step takes over.
func (f *flow) addPrelude(e *lctl.Event) {
	lane := preludeLane(e)
	if last := f.last(); last != nil && last.prelude && last.Lane == lane {
		last.LastSeq = e.Seq
		last.Events++
		last.Count++
		last.note(e)
		last.listPrelude(e)
		last.Label = preludeLabel(last)
		return
	}
	n := f.newNode(e, kindEvent)
	n.prelude = true
	n.Type = e.Type
	n.Status = statusOK
	n.setLane(f, lane)
	n.note(e)
	n.listPrelude(e)
	n.Label = preludeLabel(n)
}

// listPrelude lists a stream's end on the prelude node, as a step lists it.
func (n *flowNode) listPrelude(e *lctl.Event) {
	if e.Type != lctl.TypeStreamEnd || len(n.Attached) >= maxAttached {
		return
	}
	label, status := describe(e)
	n.Attached = append(n.Attached, Attachment{Seq: e.Seq, Type: e.Type, Label: label, Status: status})
}

func preludeLabel(n *flowNode) string {
	if len(n.Routing) > 0 {
		r := n.Routing[len(n.Routing)-1]
		return "route to " + firstNonEmpty(r.Model, r.Decision)
	}
	if len(n.Streams) > 0 {
		s := n.Streams[len(n.Streams)-1]
		return "stream " + s.Status + ", " + strconv.Itoa(s.Chunks) + " chunks"
	}
	return n.Type
}

// setLane puts the node in a lane and counts it there.
func (n *flowNode) setLane(f *flow, lane string) {
	if n.Lane != "" {
		f.laneOf(n.Lane).Nodes--
	}
	n.Lane = lane
	f.laneOf(lane).Nodes++
}

// handoffTool is the system tool a crew agent proposes to hand over
// (docs/crews.md); its arguments name the receiving agent.
const handoffTool = "xct.handoff"

// FactAt is one fact of the store as of a seq, for the state panel: its
// confidence then (the hops' decay included, as lctl confidence computes
// it with the spec's decay rate), who had assessed it, and the consensus
// the chain had recorded for it by then.
type FactAt struct {
	ID         string   `json:"id"`
	Text       string   `json:"text"`
	Confidence *float64 `json:"confidence"`
	Band       string   `json:"band"`
	Blocked    bool     `json:"blocked"`
	// Seq and Kind are the latest change to the confidence: added,
	// modified (an assessment) or hop (decay).
	Seq         uint64         `json:"seq"`
	Kind        string         `json:"kind"`
	Assessments []FactAssessed `json:"assessments"`
	Consensus   *FactConsensus `json:"consensus"`
}

// FactAssessed is an agent's latest assessment of a fact up to the seq.
type FactAssessed struct {
	Agent      string  `json:"agent"`
	Confidence float64 `json:"confidence"`
	Seq        uint64  `json:"seq"`
}

// FactConsensus is the consensus block of the latest fact_modified that
// recorded one (docs/crews.md).
type FactConsensus struct {
	Seq            uint64   `json:"seq"`
	Assessors      []string `json:"assessors"`
	Agreement      *float64 `json:"agreement"`
	ConsensusScore *float64 `json:"consensus_score"`
	ConflictLevel  *float64 `json:"conflict_level"`
}

// maxFactsAt bounds the facts the state endpoint lists.
const maxFactsAt = 200

// factsAt is the fact store at the event at pos, from the chain's fact
// track (facttrack.go, kept per chain and fed only the events added since
// the last request).
func (h *Handler) factsAt(c *Chain, pos int, st *lctl.State) []FactAt {
	out := []FactAt{}
	if len(st.Facts) == 0 {
		return out
	}
	cc := h.cacheOf(c.ID)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.facts == nil || cc.facts.n > len(c.Events) {
		cc.facts = newFactTrack()
	}
	for i := cc.facts.n; i < len(c.Events); i++ {
		cc.facts.add(&c.Events[i])
	}
	for _, f := range cc.facts.order {
		s, ok := st.Facts[f.id]
		if !ok {
			continue
		}
		if len(out) == maxFactsAt {
			break
		}
		fa := f.at(pos)
		fa.Text = s.Text
		out = append(out, fa)
	}
	return out
}

func consensusAt(seq uint64, d map[string]any) *FactConsensus {
	c := &FactConsensus{Seq: seq, Assessors: []string{}, Agreement: num(d, "agreement"), ConsensusScore: num(d, "consensus_score"), ConflictLevel: num(d, "conflict_level")}
	list, _ := d["assessors"].([]any)
	for _, a := range list {
		if s, ok := a.(string); ok {
			c.Assessors = append(c.Assessors, s)
		}
	}
	return c
}
