package debugger

import (
	"net/http"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// stateResponse is /api/chains/{id}/state.
type stateResponse struct {
	Seq          uint64      `json:"seq"`
	Event        *lctl.Event `json:"event"`
	SnapshotFrom uint64      `json:"snapshot_from"`
	State        *lctl.State `json:"state"`
	Counts       stateCounts `json:"counts"`
	Step         *stepDetail `json:"step"`
	// Cost is the dollars of the tokens up to seq, priced as the chain's
	// stats price them; nil without a price table or when none of those
	// tokens could be priced.
	Cost *float64 `json:"cost"`
	// UnpricedModels have tokens up to seq but no price.
	UnpricedModels []string `json:"unpriced_models"`
	// FactStore is the facts at seq with their confidence then, who
	// assessed them and their consensus (lanes.go); at most 200.
	FactStore []FactAt `json:"fact_store"`
}

// stateCounts are the full lengths of the state's lists.
type stateCounts struct {
	ToolCalls           int `json:"tool_calls"`
	Errors              int `json:"errors"`
	Steps               int `json:"steps"`
	UnknownTypes        int `json:"unknown_types"`
	ContractValidations int `json:"contract_validations"`
	ModelRoutings       int `json:"model_routings"`
	Facts               int `json:"facts"`
	// FactHistory is the full length of every fact's history that was
	// cut.
	FactHistory map[string]int `json:"fact_history"`
}

// defaultHistory is how many entries of each fact's history the state
// endpoint returns unless told otherwise.
const defaultHistory = 3

// stepDetail is what happened to a step up to a seq.
type stepDetail struct {
	Step              *int64      `json:"step"`
	Agent             string      `json:"agent"`
	StartSeq          uint64      `json:"start_seq"`
	Proposal          *lctl.Event `json:"proposal"`
	Verdict           *lctl.Event `json:"verdict"`
	Decision          string      `json:"decision"`
	Rules             []string    `json:"rules"`
	ApprovalRequested *lctl.Event `json:"approval_requested"`
	ApprovalDecided   *lctl.Event `json:"approval_decided"`
	Result            *lctl.Event `json:"result"`
	Error             *lctl.Event `json:"error"`
	End               *lctl.Event `json:"end"`
}

func (h *Handler) state(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	if s := q.Get("seq"); s != "" {
		if n, err := seqParam(r, "seq", 0); err != nil || n == 0 {
			return nil, badArg("seq must be a positive whole number, got %q", s)
		}
	}
	tail, err := intParam(r, "tail", defaultTail, 0, maxPage)
	if err != nil {
		return nil, err
	}
	history, err := intParam(r, "history", defaultHistory, 0, maxPage)
	if err != nil {
		return nil, err
	}
	c, err := h.getChain(r)
	if err != nil {
		return nil, err
	}
	if len(c.Events) == 0 {
		return nil, notFound("chain %s has no events", c.ID)
	}
	seq, _ := seqParam(r, "seq", 0)
	pos := len(c.Events) - 1
	if seq != 0 {
		if pos = positionOf(c, seq); pos < 0 {
			last := c.Events[len(c.Events)-1].Seq
			if seq > last {
				return nil, notFound("seq %d is past the end of chain %s (last seq %d)", seq, c.ID, last)
			}
			return nil, notFound("chain %s has no event with seq %d", c.ID, seq)
		}
	}
	e := c.Events[pos]
	st, from := c.Timeline.StateAtFrom(e.Seq)
	resp := &stateResponse{
		Seq: e.Seq, Event: &e, SnapshotFrom: from, State: st,
		Counts: stateCounts{
			ToolCalls: len(st.ToolCalls), Errors: len(st.Errors), Steps: len(st.Steps),
			UnknownTypes: len(st.UnknownTypes), ContractValidations: len(st.ContractValidations),
			ModelRoutings: len(st.ModelRoutings), Facts: len(st.Facts), FactHistory: map[string]int{},
		},
		Step:           stepAt(c, pos, st),
		UnpricedModels: []string{},
		FactStore:      h.factsAt(c, pos, st),
	}
	if h.opts.Prices != nil {
		resp.Cost, resp.UnpricedModels = h.costAt(c, pos)
	}
	st.ToolCalls = lastN(st.ToolCalls, tail)
	st.Errors = lastN(st.Errors, tail)
	st.Steps = lastN(st.Steps, tail)
	st.UnknownTypes = lastN(st.UnknownTypes, tail)
	st.ContractValidations = lastN(st.ContractValidations, tail)
	st.ModelRoutings = lastN(st.ModelRoutings, tail)
	for id, f := range st.Facts {
		// The facts are the state's own copies: cutting them changes
		// nothing else.
		if len(f.History) > history {
			resp.Counts.FactHistory[id] = len(f.History)
			f.History = lastN(f.History, history)
		}
	}
	return resp, nil
}

// costAt prices the tokens of the events up to pos. The chain's CostTrack
// is kept in its cache and takes only the events added since the last
// request, so a request costs a binary search and at most a few hundred
// additions, whatever the chain's length.
func (h *Handler) costAt(c *Chain, pos int) (*float64, []string) {
	cc := h.cacheOf(c.ID)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.costs == nil || cc.costs.Len() > len(c.Events) {
		cc.costs = analysis.NewCostTrack()
	}
	for i := cc.costs.Len(); i < len(c.Events); i++ {
		cc.costs.Add(&c.Events[i])
	}
	return cc.costs.CostAt(pos, h.opts.Prices)
}

func lastN[T any](l []T, n int) []T {
	if len(l) <= n {
		return nonNil(l)
	}
	return l[len(l)-n:]
}

// stepAt is the step the event at pos belongs to, as of that event: an XCT
// step by its data.step, else the step in progress (or just ended) of the
// event's agent. nil outside any step.
func stepAt(c *Chain, pos int, st *lctl.State) *stepDetail {
	e := &c.Events[pos]
	n, numbered := ownStepNumber(e)
	if _, parent := spanOf(e.Data); !numbered && parent == "" && e.Type != lctl.TypeStepEnd && e.Type != lctl.TypeStepStart && st.CurrentStep == nil {
		return nil
	}
	// Find the step's start, looking back a bounded distance: by span in a
	// chain from OpenTelemetry (spans.go), else by number or agent.
	start := -1
	span := ""
	if !numbered {
		if start = spanStart(c, pos); start >= 0 {
			span, _ = spanOf(c.Events[start].Data)
		}
	}
	for i := pos; start < 0 && i >= 0 && pos-i <= maxStepScan; i-- {
		x := &c.Events[i]
		if x.Type != lctl.TypeStepStart {
			continue
		}
		if numbered {
			if m, ok := stepNumber(x.Data); ok && m == n {
				start = i
				break
			}
			continue
		}
		if st.CurrentStep != nil && x.Seq == st.CurrentStep.Seq || x.Agent == e.Agent {
			start = i
			break
		}
	}
	if start < 0 {
		return nil
	}
	first := &c.Events[start]
	d := &stepDetail{Agent: first.Agent, StartSeq: first.Seq, Proposal: first, Rules: []string{}}
	if m, ok := stepNumber(first.Data); ok && !numbered && span == "" {
		// An un-numbered event of a numbered step (a crew's fact or
		// handoff): the step's events are those of its number (the
		// validator's verdict among them).
		n, numbered = m, true
	}
	if numbered {
		d.Step = &n
	}
	for i := start + 1; i <= pos; i++ {
		x := &c.Events[i]
		if numbered {
			if m, ok := stepNumber(x.Data); !ok || m != n {
				continue
			}
		} else if span != "" {
			if !inSpan(x, span) {
				continue
			}
		} else if x.Agent != first.Agent {
			continue
		}
		switch x.Type {
		case lctl.TypeVerdict:
			d.Verdict, d.Decision, d.Rules = x, str(x.Data, "decision"), ruleIDs(x.Data["reasons"])
		case xctevent.TypeApprovalRequested:
			d.ApprovalRequested = x
		case xctevent.TypeApprovalDecided:
			d.ApprovalDecided = x
		case lctl.TypeToolCall:
			d.Result = x
		case lctl.TypeError:
			d.Error = x
		case lctl.TypeStepEnd:
			d.End = x
		case lctl.TypeStepStart:
			// A later attempt of the same step number starts over.
			*d = stepDetail{Step: d.Step, Agent: x.Agent, StartSeq: x.Seq, Proposal: x, Rules: []string{}}
		}
	}
	return d
}
