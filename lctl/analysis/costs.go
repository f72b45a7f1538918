package analysis

import (
	"slices"
	"sort"

	"github.com/xct-dev/xct/lctl"
)

// CostTrack follows a chain's tokens per model as its events arrive, so the
// cost of the events up to any position is what ComputeStats would say for
// them — the same attribution of tokens to models, the same pricing, the
// same order of summing — without replaying the chain. The debugger asks it
// for the cost so far at a seq.
//
// Memory grows with the number of step_end events that carry tokens, plus
// one running total per model every costMarkEvery of them; CostAt adds up
// at most costMarkEvery of them. A CostTrack is not safe for concurrent use.
type CostTrack struct {
	n      int // events added
	models modelResolver
	names  []string // models in order of their first tokens
	index  map[string]int
	points []costPoint
	// marks[k] is the running total per model (indexed like names) after
	// points[(k+1)*costMarkEvery-1].
	marks [][]modelTokens
}

// costMarkEvery is how many priced step_ends lie between two running
// totals.
const costMarkEvery = 256

// costPoint is one step_end's tokens.
type costPoint struct {
	pos     int // position of the step_end in the chain
	model   int // index into names
	in, out int64
}

type modelTokens struct{ in, out int64 }

// NewCostTrack returns an empty CostTrack.
func NewCostTrack() *CostTrack {
	return &CostTrack{models: newModelResolver(), index: map[string]int{}}
}

// Len is the number of events added.
func (t *CostTrack) Len() int { return t.n }

// Add takes the next event of the chain (its position is Len()).
func (t *CostTrack) Add(e *lctl.Event) {
	pos := t.n
	t.n++
	model, isEnd := t.models.add(e)
	if !isEnd {
		return
	}
	tok, ok := e.Object("tokens")
	if !ok {
		return
	}
	in, out := tokensOf(tok)
	if in+out == 0 {
		return
	}
	if model == "" {
		model = UnknownModel
	}
	m, ok := t.index[model]
	if !ok {
		m = len(t.names)
		t.index[model] = m
		t.names = append(t.names, model)
	}
	t.points = append(t.points, costPoint{pos: pos, model: m, in: in, out: out})
	if len(t.points)%costMarkEvery == 0 {
		// totals of the points before this one (covered by the marks so
		// far and the points since), plus this one.
		sum := t.totals(len(t.points) - 1)
		sum[m].in += in
		sum[m].out += out
		t.marks = append(t.marks, sum)
	}
}

// totals is the running total per model (indexed like names) over the
// first k points; the marks cover at most k of them.
func (t *CostTrack) totals(k int) []modelTokens {
	sum := make([]modelTokens, len(t.names))
	from := 0
	if m := k / costMarkEvery; m > 0 {
		copy(sum, t.marks[m-1])
		from = m * costMarkEvery
	}
	for _, p := range t.points[from:k] {
		sum[p.model].in += p.in
		sum[p.model].out += p.out
	}
	return sum
}

// CostAt prices the tokens of the events at positions 0..pos: cost is nil
// when prices is nil or none of those tokens could be priced (as
// Stats.Cost), unpriced lists the models with tokens but no price (sorted).
func (t *CostTrack) CostAt(pos int, prices *Prices) (cost *float64, unpriced []string) {
	unpriced = []string{}
	k := sort.Search(len(t.points), func(i int) bool { return t.points[i].pos > pos })
	sum := t.totals(k)
	order := make([]int, 0, len(sum))
	for m, s := range sum {
		if s.in+s.out > 0 {
			order = append(order, m)
		}
	}
	sort.Slice(order, func(i, j int) bool { return t.names[order[i]] < t.names[order[j]] })
	var total float64
	priced := false
	for _, m := range order {
		if mp, _, ok := prices.lookup(t.names[m]); ok {
			total += float64(sum[m].in)/1000*mp.InputPer1K + float64(sum[m].out)/1000*mp.OutputPer1K
			priced = true
		} else if prices != nil {
			unpriced = append(unpriced, t.names[m])
		}
	}
	if priced {
		cost = &total
	}
	return cost, unpriced
}

// modelResolver finds the model of each step_end as the events go by: the
// step_end's own model, else its step's (by XCT step number), else the
// model of its agent's latest step_start.
type modelResolver struct {
	byStep  *stepModels       // XCT step number -> model
	byAgent map[string]string // agent -> model of its latest step
	// last is the agent and model byAgent was last set to: an agent's
	// steps mostly come in a row with one model, and then byAgent holds
	// them already (a map write, with its hash, per step_start).
	last *[2]string
}

func newModelResolver() modelResolver {
	return modelResolver{byStep: &stepModels{}, byAgent: map[string]string{}, last: new([2]string)}
}

// add takes the next event; for a step_end it returns its model ("" when
// none is known) and true.
func (r modelResolver) add(e *lctl.Event) (string, bool) { return r.addStep(e, &stepNumber{}) }

// addStep is add with the event's step number read once by step
// (stepNumber).
func (r modelResolver) addStep(e *lctl.Event, step *stepNumber) (string, bool) {
	switch e.Type {
	case lctl.TypeStepStart:
		m := modelOf(e)
		if n, ok := step.of(e); ok {
			r.byStep.set(n, m)
		}
		if m != "" && *r.last == [2]string{e.Agent, m} {
			break // byAgent[e.Agent] is m: the last set
		}
		if m != "" {
			r.byAgent[e.Agent] = m
			*r.last = [2]string{e.Agent, m}
		} else {
			delete(r.byAgent, e.Agent)
			*r.last = [2]string{}
		}
	case lctl.TypeStepEnd:
		m := modelOf(e)
		if m == "" {
			if n, ok := step.of(e); ok {
				m = r.byStep.get(n)
			}
		}
		if m == "" {
			m = r.byAgent[e.Agent]
		}
		return m, true
	}
	return "", false
}

// stepModels maps step numbers to models: the numbers XCT gives (1, 2, 3,
// ...) in a slice, not a map that grows by one entry per step; others in
// a map. The slice holds each model as its number in names (plus one; 0
// is ""): four bytes a step without a pointer, where a string was sixteen
// bytes the collector scanned at every cycle (a million-event chain has
// some 200,000 steps and a few models).
type stepModels struct {
	dense  []uint32
	sparse map[int64]string
	names  []string
	// named finds a name's number once names has more than a few.
	named map[string]uint32
}

// denseStepModels bounds the step numbers kept in the slice.
const denseStepModels = 1 << 22

// fewModels is how many names are looked for one by one before named.
const fewModels = 16

// number returns m's number (0 for "").
func (x *stepModels) number(m string) uint32 {
	if m == "" {
		return 0
	}
	if x.named == nil {
		for i, n := range x.names {
			if n == m {
				return uint32(i + 1)
			}
		}
		if len(x.names) < fewModels {
			x.names = append(x.names, m)
			return uint32(len(x.names))
		}
		x.named = make(map[string]uint32, 2*fewModels)
		for i, n := range x.names {
			x.named[n] = uint32(i + 1)
		}
	}
	if k, ok := x.named[m]; ok {
		return k
	}
	x.names = append(x.names, m)
	x.named[m] = uint32(len(x.names))
	return uint32(len(x.names))
}

func (x *stepModels) set(n int64, m string) {
	if n >= 0 && n < denseStepModels && n <= int64(2*len(x.dense)+1024) {
		if n >= int64(len(x.dense)) {
			// Doubling, not append's quarter more per growth past a few
			// hundred (five times the array's final size allocated).
			if need := int(n) + 1; need > cap(x.dense) {
				x.dense = slices.Grow(x.dense, max(need, 2*cap(x.dense))-len(x.dense))
			}
			x.dense = x.dense[:int(n)+1]
		}
		x.dense[n] = x.number(m)
		if x.sparse != nil {
			delete(x.sparse, n) // set before the slice reached n
		}
		return
	}
	if x.sparse == nil {
		x.sparse = map[int64]string{}
	}
	x.sparse[n] = m
}

func (x *stepModels) get(n int64) string {
	if n >= 0 && n < int64(len(x.dense)) {
		if k := x.dense[n]; k != 0 {
			return x.names[k-1]
		}
	}
	return x.sparse[n]
}
