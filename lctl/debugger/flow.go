package debugger

import (
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/text"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// The flowchart model: steps as nodes with their verdicts, approvals, tool
// calls and errors attached, other events as nodes of their own, edges in
// chain order. It is built incrementally (events are only ever appended to
// a chain), once per chain, so a page of a 100,000-event chain costs a copy
// of that page.

// maxAttached bounds the events listed on one node.
const maxAttached = 50

// Node kinds.
const (
	kindStep     = "agent_step"
	kindToolCall = "tool_call"
	kindError    = "error"
	kindVerdict  = "verdict"
	kindApproval = "approval"
	kindFact     = "fact"
	kindHandoff  = "handoff"
	kindEvent    = "event"
)

// Statuses of nodes and attachments.
const (
	statusOK            = "ok"
	statusError         = "error"
	statusDenied        = "denied"
	statusNeedsApproval = "needs_approval"
	statusApproved      = "approved"
	statusInDoubt       = "in_doubt"
	statusPending       = "pending"
	statusCancelled     = "cancelled"
)

// FlowNode is a node of the flowchart.
type FlowNode struct {
	ID           string       `json:"id"`
	Kind         string       `json:"kind"`
	Seq          uint64       `json:"seq"`
	LastSeq      uint64       `json:"last_seq"`
	Events       int          `json:"events"`
	Agent        string       `json:"agent"`
	Label        string       `json:"label"`
	Step         *int64       `json:"step,omitempty"`
	Tool         string       `json:"tool,omitempty"`
	Status       string       `json:"status"`
	Gated        bool         `json:"gated"`
	Attached     []Attachment `json:"attached"`
	AttachedMore int          `json:"attached_more"`
	Count        int          `json:"count"`
	// Type is the event type of a node that is not a step.
	Type string `json:"type,omitempty"`
	// Lane is the agent whose lane the node is in (lanes.go): the node's
	// agent, or for a routing decision the agent it routed.
	Lane string `json:"lane"`
	// Routing are the model_routing decisions that led to the step.
	Routing []Routing `json:"routing"`
	// Streams are the model's streamed answers for the step.
	Streams []Stream `json:"streams"`
	// Handoff is the handoff the step proposed, with its contracts.
	Handoff *Handoff `json:"handoff,omitempty"`
}

// Attachment is an event shown on a step's node.
type Attachment struct {
	Seq    uint64 `json:"seq"`
	Type   string `json:"type"`
	Label  string `json:"label"`
	Status string `json:"status,omitempty"`
}

// FlowEdge links two nodes.
type FlowEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
	Kind string `json:"kind"`
	// Handoff is the recorded handoff a handoff edge stands for (nil for
	// a handoff only inferred from a change of agent).
	Handoff *Handoff `json:"handoff,omitempty"`
}

// FlowPage is one page of a chain's flowchart.
type FlowPage struct {
	Nodes []FlowNode `json:"nodes"`
	Edges []FlowEdge `json:"edges"`
	// Lanes are the agents of the whole flow, in order of appearance.
	Lanes       []Lane `json:"lanes"`
	TotalEvents int    `json:"total_events"`
	TotalNodes  int    `json:"total_nodes"`
	NextFrom    uint64 `json:"next_from"`
}

// flowNode is a node under construction.
type flowNode struct {
	FlowNode
	open bool
	// What decides a step's status.
	decision       string // the latest verdict's
	requested      bool   // an approval was requested and not yet decided
	approved       bool   // a human approved
	humanDenied    bool
	failed         bool // an error event or an error outcome
	inDoubt        bool
	doubtOpen      bool // a step_in_doubt not yet followed by the step's outcome
	outcome        string
	ended          bool
	idx            int    // index in flow.nodes
	prelude        bool   // routing and stream events waiting for their step (lanes.go)
	handoffTo      string // the agent an xct.handoff step proposes
	handoffSummary string
}

// flow is a chain's flowchart, built as events arrive.
type flow struct {
	mu       sync.Mutex
	consumed int
	nodes    []*flowNode
	byStep   map[int64]*flowNode  // open XCT steps by number
	byAgent  map[string]*flowNode // open steps without a number, by agent
	bySpan   map[string]*flowNode // open steps of OpenTelemetry spans, by span id (spans.go)
	into     []edgeIn             // into[i]: how nodes[i] is reached
	lastStep string               // agent of the latest step node
	lanes    []Lane
	openOf   map[string]*flowNode // open numbered steps by agent, for their un-numbered events
	current  *flowNode            // the step started last, while open
	pending  *pendingHandoff
}

func newFlow() *flow {
	return &flow{byStep: map[int64]*flowNode{}, byAgent: map[string]*flowNode{}, bySpan: map[string]*flowNode{}, openOf: map[string]*flowNode{}}
}

// update applies the events past those already consumed.
func (f *flow) update(events []lctl.Event) {
	for i := f.consumed; i < len(events); i++ {
		f.add(&events[i])
	}
	f.consumed = len(events)
}

func (f *flow) add(e *lctl.Event) {
	stepNo, hasStep := ownStepNumber(e)
	if e.Type == lctl.TypeStepStart {
		pre := f.mergePrelude(e.Agent)
		n := f.newNode(e, kindStep)
		n.open = true
		n.Status = statusPending
		n.Label = stepLabel(e.Data)
		n.Tool = str(e.Data, "tool")
		if pre != nil {
			n.Routing, n.Streams, n.Attached = pre.Routing, pre.Streams, pre.Attached
			n.Events += pre.Events
		}
		lane := f.laneOf(e.Agent)
		lane.Steps++
		if p, ok := e.Data["agent_profile"].(map[string]any); ok && str(p, "type") != "" {
			lane.Type = str(p, "type")
		}
		if args, ok := e.Data["arguments"].(map[string]any); ok && n.Tool == handoffTool {
			n.handoffTo, n.handoffSummary = str(args, "to"), str(args, "summary")
		}
		f.current = n
		if span, _ := spanOf(e.Data); span != "" && !hasStep {
			f.bySpan[span] = n
		} else if hasStep {
			s := stepNo
			n.Step = &s
			f.byStep[stepNo] = n
			f.openOf[e.Agent] = n
		} else {
			f.byAgent[e.Agent] = n
		}
		in := edgeIn{from: -1}
		if f.pending != nil && f.pending.info.To == e.Agent {
			in.from, in.info = f.pending.from, f.pending.info
			f.pending = nil
		} else {
			in.handoff = f.lastStep != "" && f.lastStep != e.Agent
		}
		f.into[len(f.into)-1] = in
		f.lastStep = e.Agent
		return
	}
	var owner *flowNode
	bySpan := false
	switch {
	case hasStep:
		owner = f.byStep[stepNo]
	default:
		if owner = f.spanOwner(e); owner != nil {
			bySpan = true
		} else {
			owner = f.byAgent[e.Agent]
		}
		// Crews: a step's un-numbered events (facts, the handoff, the
		// stream) by its agent, the contract checks by the system.
		switch {
		case owner != nil:
		case e.Type == lctl.TypeContractValidation:
			owner = f.current
		case isPrelude(e.Type):
			owner = f.openOf[preludeLane(e)]
		default:
			owner = f.openOf[e.Agent]
		}
	}
	if owner == nil && isPrelude(e.Type) {
		f.addPrelude(e)
		return
	}
	if owner != nil {
		owner.attach(e)
		if e.Type == lctl.TypeHandoff && owner.Handoff != nil {
			f.pending = &pendingHandoff{from: owner.idx, info: owner.Handoff}
		}
		if e.Type == lctl.TypeStepEnd {
			owner.open = false
			if f.openOf[owner.Agent] == owner {
				delete(f.openOf, owner.Agent)
			}
			if f.current == owner {
				f.current = nil
			}
			switch {
			case hasStep:
				delete(f.byStep, stepNo)
			case bySpan:
				id, _ := spanOf(e.Data)
				delete(f.bySpan, id)
			default:
				delete(f.byAgent, e.Agent)
			}
		}
		owner.Status = owner.status()
		return
	}
	kind := standaloneKind(e.Type)
	if kind == kindFact || kind == kindEvent {
		if last := f.last(); last != nil && !last.open && !last.prelude && last.Kind == kind && last.Type == e.Type && last.Agent == e.Agent {
			last.LastSeq = e.Seq
			last.Events++
			last.Count++
			return
		}
	}
	n := f.newNode(e, kind)
	n.Type = e.Type
	n.Label, n.Status = describe(e)
	if hasStep {
		s := stepNo
		n.Step = &s
	}
	if !isFact(e.Type) {
		n.Tool = str(e.Data, "tool")
	}
	if e.Type == lctl.TypeHandoff || e.Type == lctl.TypeContractValidation {
		n.note(e)
		if e.Type == lctl.TypeHandoff {
			f.pending = &pendingHandoff{from: n.idx, info: n.Handoff}
		}
	}
}

func (f *flow) last() *flowNode {
	if len(f.nodes) == 0 {
		return nil
	}
	return f.nodes[len(f.nodes)-1]
}

func (f *flow) newNode(e *lctl.Event, kind string) *flowNode {
	n := &flowNode{FlowNode: FlowNode{
		ID: "n" + strconv.FormatUint(e.Seq, 10), Kind: kind, Seq: e.Seq, LastSeq: e.Seq,
		Events: 1, Agent: e.Agent, Count: 1, Attached: []Attachment{},
		Routing: []Routing{}, Streams: []Stream{},
	}, idx: len(f.nodes)}
	f.nodes = append(f.nodes, n)
	f.into = append(f.into, edgeIn{from: -1})
	n.setLane(f, e.Agent)
	return n
}

// attach adds an event of the node's step.
func (n *flowNode) attach(e *lctl.Event) {
	if e.Seq > n.LastSeq {
		n.LastSeq = e.Seq
	}
	n.Events++
	if n.Tool == "" && !isFact(e.Type) {
		n.Tool = str(e.Data, "tool")
	}
	switch e.Type {
	case lctl.TypeVerdict:
		n.decision = str(e.Data, "decision")
		if n.decision == xctevent.DecisionNeedsApproval {
			n.Gated = true
		}
	case xctevent.TypeApprovalRequested:
		n.Gated, n.requested = true, true
	case xctevent.TypeApprovalDecided:
		n.requested = false
		switch str(e.Data, "decision") {
		case xctevent.ApprovalApproved:
			n.approved = true
		case xctevent.ApprovalDenied, xctevent.ApprovalExpired:
			n.humanDenied = true
		}
	case xctevent.TypeStepInDoubt:
		n.doubtOpen = true
	case lctl.TypeError:
		n.failed, n.doubtOpen = true, false
		if str(e.Data, "code") == "IN_DOUBT" {
			n.inDoubt = true
		}
	case lctl.TypeToolCall:
		n.doubtOpen = false
		if s := str(e.Data, "status"); s != "" && s != xctevent.ToolCallSuccess {
			n.failed = true
		}
	case lctl.TypeStepEnd:
		n.ended = true
		n.outcome = str(e.Data, "outcome")
	case lctl.TypeContractValidation, lctl.TypeHandoff, lctl.TypeStreamEnd:
		n.note(e)
	case lctl.TypeModelRouting, lctl.TypeStreamStart, lctl.TypeStreamChunk:
		// On the node's routing and streams, not listed.
		n.note(e)
		return
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		// Listed: what the step found.
	default:
		// Facts, streams and the like are counted, not listed.
		return
	}
	if len(n.Attached) >= maxAttached {
		n.AttachedMore++
		return
	}
	label, status := describe(e)
	n.Attached = append(n.Attached, Attachment{Seq: e.Seq, Type: e.Type, Label: label, Status: status})
}

// status is what the step's events say, most important first.
func (n *flowNode) status() string {
	switch {
	case n.inDoubt || n.doubtOpen:
		return statusInDoubt
	case n.outcome == xctevent.OutcomeCancelled:
		// The run was cancelled while the step was open: it did not run.
		return statusCancelled
	case n.outcome == xctevent.OutcomeDenied || n.decision == xctevent.DecisionDeny || n.humanDenied:
		return statusDenied
	case n.outcome == xctevent.OutcomeError || n.outcome == xctevent.OutcomeInvalid || (n.failed && n.outcome != xctevent.OutcomeSuccess):
		return statusError
	case n.requested || (n.decision == xctevent.DecisionNeedsApproval && !n.approved && !n.ended):
		return statusNeedsApproval
	case n.approved:
		return statusApproved
	case n.ended:
		return statusOK
	}
	return statusPending
}

// page copies the nodes from the first whose seq is at least from, at most
// limit of them.
func (f *flow) page(from uint64, limit int) FlowPage {
	p := FlowPage{Nodes: []FlowNode{}, Edges: []FlowEdge{}, TotalEvents: f.consumed, TotalNodes: len(f.nodes), Lanes: append([]Lane{}, f.lanes...)}
	start := len(f.nodes)
	for i, n := range f.nodes {
		if n.Seq >= from {
			start = i
			break
		}
	}
	end := min(start+limit, len(f.nodes))
	for i := start; i < end; i++ {
		n := f.nodes[i].FlowNode
		n.Attached = append([]Attachment{}, n.Attached...)
		n.Routing = append([]Routing{}, n.Routing...)
		n.Streams = append([]Stream{}, n.Streams...)
		n.Handoff = n.Handoff.clone()
		p.Nodes = append(p.Nodes, n)
		if i == 0 {
			continue
		}
		in := f.into[i]
		if in.info != nil && in.from >= 0 {
			// A recorded handoff: from the step that handed over, with its
			// contracts; the chain's order stays an edge of its own.
			if in.from != i-1 {
				p.Edges = append(p.Edges, FlowEdge{From: f.nodes[i-1].ID, To: n.ID, Kind: "next"})
			}
			p.Edges = append(p.Edges, FlowEdge{From: f.nodes[in.from].ID, To: n.ID, Kind: "handoff", Handoff: in.info.clone()})
			continue
		}
		kind := "next"
		if in.handoff {
			kind = "handoff"
		}
		p.Edges = append(p.Edges, FlowEdge{From: f.nodes[i-1].ID, To: n.ID, Kind: kind})
	}
	if end < len(f.nodes) {
		p.NextFrom = f.nodes[end].Seq
	}
	return p
}

// standaloneKind is the node kind of an event outside any step.
func standaloneKind(t string) string {
	switch t {
	case lctl.TypeToolCall:
		return kindToolCall
	case lctl.TypeError:
		return kindError
	case lctl.TypeVerdict:
		return kindVerdict
	case xctevent.TypeApprovalRequested, xctevent.TypeApprovalDecided:
		return kindApproval
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		return kindFact
	case lctl.TypeHandoff:
		return kindHandoff
	}
	return kindEvent
}

// describe is a short label and a status for one event.
func describe(e *lctl.Event) (label, status string) {
	d := e.Data
	switch e.Type {
	case lctl.TypeVerdict:
		dec := str(d, "decision")
		status = map[string]string{xctevent.DecisionAllow: statusOK, xctevent.DecisionDeny: statusDenied, xctevent.DecisionNeedsApproval: statusNeedsApproval}[dec]
		rules := ruleIDs(d["reasons"])
		if len(rules) > 0 {
			return dec + ": " + strings.Join(rules, ", "), status
		}
		return dec, status
	case xctevent.TypeApprovalRequested:
		return "approval requested for " + firstNonEmpty(str(d, "tool"), "the step"), statusPending
	case xctevent.TypeStepInDoubt:
		return "in doubt: " + clip(firstNonEmpty(str(d, "reason"), "the step's outcome is unknown"), 120), statusInDoubt
	case xctevent.TypeApprovalDecided:
		dec := str(d, "decision")
		status = map[string]string{
			xctevent.ApprovalApproved: statusApproved, xctevent.ApprovalDenied: statusDenied,
			xctevent.ApprovalExpired: statusDenied, xctevent.ApprovalWithdrawn: statusCancelled,
		}[dec]
		if by := str(d, "by"); by != "" {
			return dec + " by " + by, status
		}
		return dec, status
	case lctl.TypeToolCall:
		s := firstNonEmpty(str(d, "status"), "done")
		status = statusOK
		if s != xctevent.ToolCallSuccess && s != "done" {
			status = statusError
		}
		return firstNonEmpty(str(d, "tool"), "tool") + " " + s, status
	case lctl.TypeError:
		status = statusError
		if str(d, "code") == "IN_DOUBT" {
			status = statusInDoubt
		} else if str(d, "code") == "POLICY_DENIED" {
			status = statusDenied
		}
		return firstNonEmpty(str(d, "code"), str(d, "type"), "error") + ": " + clip(str(d, "message"), 120), status
	case lctl.TypeStepEnd:
		o := str(d, "outcome")
		status = statusOK
		switch o {
		case xctevent.OutcomeError, xctevent.OutcomeInvalid:
			status = statusError
		case xctevent.OutcomeDenied:
			status = statusDenied
		}
		return "end: " + firstNonEmpty(o, "done"), status
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		return firstNonEmpty(str(d, "id"), "fact") + ": " + clip(str(d, "text"), 120), statusOK
	case lctl.TypeRunFinished:
		s := str(d, "status")
		status = statusOK
		if s != xctevent.StatusDone {
			status = statusError
		}
		return "run " + firstNonEmpty(s, "finished"), status
	case lctl.TypeContractValidation:
		s := str(d, "status")
		status = statusOK
		if s != "passed" {
			status = statusError
		}
		return "contract " + str(d, "contract") + " " + str(d, "direction") + ": " + firstNonEmpty(s, "checked"), status
	case lctl.TypeHandoff:
		return "handoff " + firstNonEmpty(str(d, "from"), e.Agent) + " → " + str(d, "to") + ": " + clip(str(d, "summary"), 80), statusOK
	case lctl.TypeStreamEnd:
		s := firstNonEmpty(str(d, "status"), "ok")
		status = statusOK
		if s != "ok" {
			status = statusError
		}
		return "stream " + s, status
	case lctl.TypeRunStarted:
		return "run started: " + clip(str(d, "goal"), 120), statusOK
	}
	return e.Type, statusOK
}

// ownStepNumber is e's data.step when that is the chain's word on the
// step the event belongs to. A fact's data are its author's: a crew
// member's fact fields are at the top level of fact_added and
// fact_modified (step, tool, ... among them on chains written before
// XCT refused those names), so a fact's step is the step it was recorded
// in (its agent's open step), never a number in its data.
func ownStepNumber(e *lctl.Event) (int64, bool) {
	if isFact(e.Type) {
		return 0, false
	}
	return stepNumber(e.Data)
}

// isFact reports whether typ is a fact's event.
func isFact(typ string) bool { return typ == lctl.TypeFactAdded || typ == lctl.TypeFactModified }

// stepNumber reads data.step as a whole number.
func stepNumber(d map[string]any) (int64, bool) {
	switch v := d["step"].(type) {
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v), true
		}
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}

func str(d map[string]any, key string) string {
	s, _ := d[key].(string)
	return s
}

// ruleIDs lists the rule ids of a verdict's reasons.
func ruleIDs(v any) []string {
	list, _ := v.([]any)
	out := []string{}
	for _, r := range list {
		switch x := r.(type) {
		case map[string]any:
			if id := str(x, "rule_id"); id != "" {
				out = append(out, id)
			}
		case string:
			out = append(out, x)
		}
	}
	return out
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// clip puts s on one line and keeps at most n bytes of it, cut on a
// character boundary (text.Truncate).
func clip(s string, n int) string { return text.Truncate(strings.Join(strings.Fields(s), " "), n) }
