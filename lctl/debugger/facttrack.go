package debugger

import (
	"encoding/json"
	"math"
	"sort"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// factTrack follows every fact's confidence along a chain, one event at a
// time, so the fact store at any seq (FactAt) costs a binary search per
// fact, and a growing chain only the events added since. It applies the
// rules of lctl confidence (analysis.Confidence, the spec's tiers 1 and 2)
// with the spec's decay rate: an assessment (fact_added / fact_modified
// with a confidence in [0, 1]) sets the value; a hop (a step_start by
// another agent than the previous step's) multiplies every fact not
// blocked by the rate; below the verify threshold a fact is blocked and
// stops decaying until it is assessed again. TestFactTrackAgreesWithLctl
// checks it against analysis.Confidence at every event.
type factTrack struct {
	n         int // events taken
	rate      float64
	lastAgent string
	facts     map[string]*trackedFact
	order     []*trackedFact
}

type trackedFact struct {
	id      string
	value   float64
	has     bool
	blocked bool
	points  []factPoint // every change, in chain order
	assess  []factPoint // the assessments (added, modified), in chain order
}

// factPoint is one change of a fact's confidence at the event at pos.
type factPoint struct {
	pos       int
	seq       uint64
	value     float64
	kind      string // added, modified, hop
	agent     string
	blocked   bool
	consensus map[string]any // a fact_modified's consensus block
}

func newFactTrack() *factTrack {
	return &factTrack{rate: analysis.DefaultDecayRate, facts: map[string]*trackedFact{}}
}

// add takes the event at position n.
func (t *factTrack) add(e *lctl.Event) {
	pos := t.n
	t.n++
	switch e.Type {
	case lctl.TypeStepStart:
		if t.lastAgent != "" && e.Agent != t.lastAgent && e.Agent != "" {
			for _, f := range t.order {
				if !f.has || f.blocked {
					continue
				}
				f.value *= t.rate
				f.blocked = f.value < analysis.ThresholdVerify
				f.points = append(f.points, factPoint{pos: pos, seq: e.Seq, value: f.value, kind: "hop", agent: e.Agent, blocked: f.blocked})
			}
		}
		if e.Agent != "" {
			t.lastAgent = e.Agent
		}
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		id, _ := e.Get("id").(string)
		if id == "" {
			return
		}
		f := t.facts[id]
		if f == nil {
			f = &trackedFact{id: id}
			t.facts[id] = f
			t.order = append(t.order, f)
		}
		c, ok := confidenceOf(e.Get("confidence"))
		if !ok {
			return
		}
		kind := "added"
		if e.Type == lctl.TypeFactModified {
			kind = "modified"
		}
		f.value, f.has, f.blocked = c, true, c < analysis.ThresholdVerify
		p := factPoint{pos: pos, seq: e.Seq, value: c, kind: kind, agent: e.Agent, blocked: f.blocked}
		p.consensus, _ = e.Get("consensus").(map[string]any)
		f.points = append(f.points, p)
		f.assess = append(f.assess, p)
	}
}

// confidenceOf reads a confidence as lctl confidence does: a finite number
// in [0, 1].
func confidenceOf(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1 {
		return 0, false
	}
	return f, true
}

// at is the fact as of the event at pos (nil-free lists).
func (f *trackedFact) at(pos int) FactAt {
	fa := FactAt{ID: f.id, Band: analysis.BandUnknown, Assessments: []FactAssessed{}}
	i := sort.Search(len(f.points), func(i int) bool { return f.points[i].pos > pos }) - 1
	if i >= 0 {
		p := f.points[i]
		v := p.value
		fa.Confidence, fa.Seq, fa.Kind, fa.Blocked, fa.Band = &v, p.seq, p.kind, p.blocked, analysis.BandOf(v)
	}
	j := sort.Search(len(f.assess), func(i int) bool { return f.assess[i].pos > pos })
	for _, a := range f.assess[:j] {
		found := false
		for k := range fa.Assessments {
			if fa.Assessments[k].Agent == a.agent {
				fa.Assessments[k].Confidence, fa.Assessments[k].Seq = a.value, a.seq
				found = true
			}
		}
		if !found {
			fa.Assessments = append(fa.Assessments, FactAssessed{Agent: a.agent, Confidence: a.value, Seq: a.seq})
		}
	}
	for k := j - 1; k >= 0; k-- {
		if c := f.assess[k].consensus; c != nil {
			fa.Consensus = consensusAt(f.assess[k].seq, c)
			break
		}
	}
	return fa
}
