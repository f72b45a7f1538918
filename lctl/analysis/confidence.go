package analysis

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/xct-dev/xct/lctl"
)

// The spec's automatic thresholds (part 3).
const (
	ThresholdProceed = 0.80 // at or above: proceed automatically
	ThresholdWarn    = 0.60 // 0.60-0.79: warn, but proceed
	ThresholdVerify  = 0.40 // 0.40-0.59: request verification; below: block
)

// Bands of the thresholds.
const (
	BandProceed = "proceed"
	BandWarn    = "warn"
	BandVerify  = "verify"
	BandBlock   = "block"
	BandUnknown = "unknown" // the fact was never given a confidence
)

// BandOf places a confidence in the spec's threshold bands.
func BandOf(c float64) string {
	switch {
	case c >= ThresholdProceed:
		return BandProceed
	case c >= ThresholdWarn:
		return BandWarn
	case c >= ThresholdVerify:
		return BandVerify
	}
	return BandBlock
}

// DefaultDecayRate is the spec's decay per hop.
const DefaultDecayRate = 0.95

// ConfidenceOptions tune Confidence.
type ConfidenceOptions struct {
	// DecayRate multiplies a fact's confidence at every hop (0 means
	// DefaultDecayRate; 1 turns decay off).
	DecayRate float64
	// Rendered makes a ConfidenceBuilder's report carry each fact's
	// points rendered (what Render shows) instead of listed: Points is
	// nil. For text output of a long chain, whose points (a value per
	// fact per hop) would be held twice otherwise.
	Rendered bool
}

// ConfidenceReport is the spec's `lctl confidence`.
type ConfidenceReport struct {
	ChainID   string           `json:"chain_id"`
	DecayRate float64          `json:"decay_rate"`
	Hops      int              `json:"hops"`
	Facts     []FactConfidence `json:"facts"`
	Warnings  []string         `json:"warnings"`
}

// FactConfidence is one fact's confidence over the chain.
type FactConfidence struct {
	ID     string            `json:"id"`
	Text   string            `json:"text"`
	Points []ConfidencePoint `json:"points"`
	// Final is the confidence after the last event (decay included); nil
	// when no event gave the fact one.
	Final *float64 `json:"final"`
	Band  string   `json:"band"`
	// Labels explain the final state: verified, decayed, warn, needs
	// verification, below threshold.
	Labels []string `json:"labels"`
	// BlockedSeq is the seq of the event at which the fact fell below the
	// block threshold (0 if it never did or recovered).
	BlockedSeq uint64     `json:"blocked_seq,omitempty"`
	Consensus  *Consensus `json:"consensus,omitempty"`
	// rendered is the points as Render shows them, when the report was
	// made with ConfidenceOptions.Rendered (Points nil).
	rendered []byte
}

// ConfidencePoint is one value on a fact's timeline.
type ConfidencePoint struct {
	Seq   uint64 `json:"seq"`
	Agent string `json:"agent"`
	// Kind is "added" or "modified" (an agent assessed the fact) or "hop"
	// (the work passed to another agent and the confidence decayed).
	Kind    string  `json:"kind"`
	Value   float64 `json:"value"`
	Blocked bool    `json:"blocked,omitempty"`
	Reason  string  `json:"reason,omitempty"`
}

// Consensus is the spec's tier 2: several agents' assessments of one fact.
type Consensus struct {
	Assessments []Assessment `json:"assessments"`
	// Score is the average of the assessments, weighted by each agent's
	// reliability_score when its agent_profile gives one.
	Score float64 `json:"score"`
	// Conflict is the spread between the highest and lowest assessment
	// (0: full agreement).
	Conflict float64 `json:"conflict"`
	// Agreement is what the chain itself recorded (consensus.agreement),
	// when it did.
	Agreement *float64 `json:"agreement,omitempty"`
	// Assessors are the agents the chain's own consensus block names
	// (consensus.assessors), when it did.
	Assessors []string `json:"assessors,omitempty"`
}

// Assessment is one agent's confidence in a fact.
type Assessment struct {
	Agent      string  `json:"agent"`
	Confidence float64 `json:"confidence"`
	Weight     float64 `json:"weight"`
}

// Confidence follows every fact's confidence through the chain. An agent
// adding or modifying a fact with a confidence sets it; every hop (a step
// started by a different agent than the step before: the facts pass to it)
// multiplies every fact's confidence by the decay rate, the spec's tier 1.
// Facts assessed by several agents get a consensus (tier 2). The spec's
// thresholds mark facts that need verification or are blocked.
func Confidence(chainID string, events []lctl.Event, opts ConfidenceOptions) *ConfidenceReport {
	b := NewConfidenceBuilder(chainID, opts)
	for i := range events {
		b.Add(&events[i])
	}
	return b.Report()
}

// confTracked is a fact as Confidence follows it.
type confTracked struct {
	fc FactConfidence
	// points are fc.Points as kept until the report. A builder whose
	// report is rendered keeps only what Render shows of each (values,
	// with blocked the ones it shows as BLOCKED: a quarter of the
	// memory, never copied as it grows) and the last point.
	points    []confPoint
	values    chunked[float64]
	last      confPoint
	value     float64 // current confidence, decay included, when hasValue
	hasValue  bool
	verified  bool
	decayed   bool
	blocked   bool
	assessors map[string]*Assessment
	order     []string
	agreement *float64
	recorded  []string // consensus.assessors
}

// confPoint is a ConfidencePoint as the builder keeps it until the
// report: no pointers for the collector to follow (the agent and the
// reason are indexes into the builder's names) and less than half the
// size. A long chain has a point per fact per hop.
type confPoint struct {
	seq     uint64
	value   float64
	agent   uint32
	reason  uint32
	kind    uint8
	blocked bool
}

// pointKinds are ConfidencePoint.Kind by confPoint.kind.
var pointKinds = [...]string{"added", "modified", "hop"}

const (
	pointAdded = iota
	pointModified
	pointHop
)

// names interns the agents and reasons of the points: index 0 is "".
type names struct {
	list  []string
	index map[string]uint32
}

func (n *names) of(s string) uint32 {
	if s == "" {
		return 0
	}
	if i, ok := n.index[s]; ok {
		return i
	}
	if n.index == nil {
		n.index = map[string]uint32{}
		n.list = append(n.list, "")
	}
	i := uint32(len(n.list))
	n.list = append(n.list, s)
	n.index[s] = i
	return i
}

func (n *names) at(i uint32) string {
	if i == 0 {
		return ""
	}
	return n.list[i]
}

// ConfidenceBuilder takes a chain one event at a time (a stream) and gives
// Confidence's report.
type ConfidenceBuilder struct {
	r           *ConfidenceReport
	rendered    bool
	names       names
	rate        float64
	facts       map[string]*confTracked
	order       []*confTracked
	reliability map[string]float64
	lastAgent   string
}

// blockedValue is a rendered builder's value of a point shown as BLOCKED:
// a NaN no point's value is (they are numbers from 0 to 1 and their decay),
// told by its bits.
var blockedValue = math.Float64frombits(0x7ff8_0000_b10c_ced0)

// isBlockedValue says v is blockedValue.
func isBlockedValue(v float64) bool { return math.Float64bits(v) == math.Float64bits(blockedValue) }

// addPoint adds p to t's points.
func (b *ConfidenceBuilder) addPoint(t *confTracked, p confPoint) {
	if !b.rendered {
		t.points = appendDoubling(t.points, p)
		return
	}
	v := p.value
	if p.blocked {
		v = blockedValue
	}
	t.values.add(v)
	t.last = p
}

// NewConfidenceBuilder returns a builder before the first event.
func NewConfidenceBuilder(chainID string, opts ConfidenceOptions) *ConfidenceBuilder {
	rate := opts.DecayRate
	if rate <= 0 || rate > 1 || math.IsNaN(rate) {
		rate = DefaultDecayRate
	}
	return &ConfidenceBuilder{
		r:    &ConfidenceReport{ChainID: chainID, DecayRate: rate, Facts: []FactConfidence{}, Warnings: []string{}},
		rate: rate, facts: map[string]*confTracked{}, reliability: map[string]float64{}, rendered: opts.Rendered,
	}
}

// ConfidenceData says whether Add reads the data of an event of type typ:
// a stream need not decode any other's (lctl.StreamOptions.Data). Add
// reads a step_start's agent profile and a fact event's members.
func ConfidenceData(typ string) bool {
	return typ == lctl.TypeStepStart || typ == lctl.TypeFactAdded || typ == lctl.TypeFactModified
}

// ConfidenceUnread names, per type, the members of the data a
// ConfidenceBuilder never reads of those a stream would keep at length
// or copy (lctl.StreamOptions.Unread): of a step_start it reads only the
// agent's profile, not the step's intent nor its id (a new string at
// each step, copied and put in the decoder's tables).
func ConfidenceUnread(typ string) string {
	if typ == lctl.TypeStepStart {
		return "intent,step_id"
	}
	return ""
}

// Add takes the next event of the chain. It reads the data of the types
// ConfidenceData names and of no other.
func (b *ConfidenceBuilder) Add(e *lctl.Event) {
	switch e.Type {
	case lctl.TypeStepStart:
		if p, ok := e.Get("agent_profile").(map[string]any); ok {
			if rs, ok := numberOf(p["reliability_score"]); ok && rs > 0 {
				b.reliability[e.Agent] = rs
			}
		}
		if b.lastAgent != "" && e.Agent != b.lastAgent && e.Agent != "" {
			b.r.Hops++
			agent := b.names.of(e.Agent)
			for _, t := range b.order {
				if !t.hasValue || t.blocked {
					continue
				}
				v := t.value * b.rate
				t.value = v
				t.decayed = b.rate < 1
				p := confPoint{seq: e.Seq, agent: agent, kind: pointHop, value: v}
				if v < ThresholdVerify {
					p.blocked = true
					t.blocked = true
					t.fc.BlockedSeq = e.Seq
				}
				b.addPoint(t, p)
			}
		}
		if e.Agent != "" {
			b.lastAgent = e.Agent
		}
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		id, _ := e.Str("id")
		if id == "" {
			return
		}
		t := b.facts[id]
		if t == nil {
			t = &confTracked{fc: FactConfidence{ID: id, Points: []ConfidencePoint{}, Labels: []string{}}, assessors: map[string]*Assessment{}}
			b.facts[id] = t
			b.order = append(b.order, t)
		}
		if text, ok := e.Str("text"); ok {
			t.fc.Text = text
		}
		c, ok := numberAt(e, "confidence")
		if !ok || c < 0 || c > 1 {
			return
		}
		kind := uint8(pointAdded)
		if e.Type == lctl.TypeFactModified {
			kind = pointModified
		}
		reason, _ := e.Str("reason")
		t.value, t.hasValue = c, true
		t.decayed = false
		t.verified = isVerification(reason) || e.Get("consensus") != nil
		p := confPoint{seq: e.Seq, agent: b.names.of(e.Agent), kind: kind, value: c, reason: b.names.of(reason)}
		if c < ThresholdVerify {
			p.blocked = true
			if !t.blocked {
				t.fc.BlockedSeq = e.Seq
			}
			t.blocked = true
		} else {
			t.blocked = false
			t.fc.BlockedSeq = 0
		}
		b.addPoint(t, p)
		w := b.reliability[e.Agent]
		if w == 0 {
			w = 1
		}
		if a := t.assessors[e.Agent]; a != nil {
			a.Confidence, a.Weight = c, w
		} else {
			t.assessors[e.Agent] = &Assessment{Agent: e.Agent, Confidence: c, Weight: w}
			t.order = append(t.order, e.Agent)
		}
		if cons, ok := e.Get("consensus").(map[string]any); ok {
			if ag, ok := numberOf(cons["agreement"]); ok {
				t.agreement = &ag
			}
			if list, ok := cons["assessors"].([]any); ok {
				t.recorded = t.recorded[:0]
				for _, a := range list {
					if s, ok := a.(string); ok && s != "" {
						t.recorded = append(t.recorded, s)
					}
				}
			}
		}
		if list, ok := e.Get("assessments").([]any); ok {
			for _, x := range list {
				m, _ := x.(map[string]any)
				agent, _ := m["agent"].(string)
				ac, ok := numberOf(m["confidence"])
				if agent == "" || !ok {
					continue
				}
				if a := t.assessors[agent]; a != nil {
					a.Confidence = ac
				} else {
					t.assessors[agent] = &Assessment{Agent: agent, Confidence: ac, Weight: 1}
					t.order = append(t.order, agent)
				}
			}
		}
	}

}

// Report is the confidence report on the events added.
func (b *ConfidenceBuilder) Report() *ConfidenceReport {
	r := b.r
	var rendered [][]byte
	if b.rendered {
		rendered = b.renderPoints()
	}
	for k, t := range b.order {
		fc := t.fc
		if b.rendered {
			fc.Points = nil
			if fc.rendered == nil {
				fc.rendered = rendered[k]
			} else {
				fc.rendered = append(fc.rendered, rendered[k]...)
			}
		} else {
			fc.Points = make([]ConfidencePoint, len(t.points))
			for i, p := range t.points {
				fc.Points[i] = ConfidencePoint{Seq: p.seq, Agent: b.names.at(p.agent), Kind: pointKinds[p.kind],
					Value: p.value, Blocked: p.blocked, Reason: b.names.at(p.reason)}
			}
		}
		lastPoint := t.last
		if n := len(t.points); n > 0 {
			lastPoint = t.points[n-1]
		}
		if t.hasValue {
			v := t.value
			fc.Final = &v
			fc.Band = BandOf(v)
		} else {
			fc.Band = BandUnknown
		}
		if t.verified {
			fc.Labels = append(fc.Labels, "verified")
		}
		if t.decayed {
			fc.Labels = append(fc.Labels, "decayed")
		}
		switch fc.Band {
		case BandWarn:
			fc.Labels = append(fc.Labels, "warn")
		case BandVerify:
			fc.Labels = append(fc.Labels, "needs verification")
		case BandBlock:
			fc.Labels = append(fc.Labels, "below threshold")
		case BandUnknown:
			fc.Labels = append(fc.Labels, "no confidence given")
		}
		if len(t.order) >= 2 {
			fc.Consensus = consensusOf(t.assessors, t.order, t.agreement)
			fc.Consensus.Assessors = append([]string(nil), t.recorded...)
		}
		switch fc.Band {
		case BandBlock:
			r.Warnings = append(r.Warnings, fmt.Sprintf("Warning: %s blocked at step %d due to low confidence.", fc.ID, fc.BlockedSeq))
		case BandVerify:
			last := lastPoint
			r.Warnings = append(r.Warnings, fmt.Sprintf("Warning: %s needs verification at step %d (confidence %.2f).", fc.ID, last.seq, last.value))
		}
		r.Facts = append(r.Facts, fc)
	}
	return r
}

// isVerification tells a reason that confirms a fact.
func isVerification(reason string) bool {
	r := strings.ToLower(reason)
	return strings.Contains(r, "verif") || strings.Contains(r, "confirm") || strings.Contains(r, "consensus")
}

func consensusOf(assessors map[string]*Assessment, order []string, agreement *float64) *Consensus {
	c := &Consensus{Agreement: agreement}
	var sum, weights float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, agent := range order {
		a := assessors[agent]
		c.Assessments = append(c.Assessments, *a)
		sum += a.Confidence * a.Weight
		weights += a.Weight
		lo, hi = math.Min(lo, a.Confidence), math.Max(hi, a.Confidence)
	}
	if weights > 0 {
		c.Score = sum / weights
	}
	c.Conflict = hi - lo
	return c
}

// Render renders a fact's timeline the way the spec does:
// "0.85 → 0.81 → 0.95 (verified)". A point below the block threshold
// shows as BLOCKED.
func (fc FactConfidence) Render() string {
	return string(fc.AppendRender(nil))
}

// AppendRender appends what Render returns to b: a long chain's
// timeline (millions of points) written out without the copies a
// string of it takes.
func (fc FactConfidence) AppendRender(b []byte) []byte {
	start := len(b)
	if fc.Points == nil {
		b = append(b, fc.rendered...)
	}
	for i, p := range fc.Points {
		if i > 0 {
			b = append(b, arrow...)
		}
		b = appendPoint(b, p.Blocked, p.Value)
	}
	if len(b) == start {
		b = append(b, '-')
	}
	if len(fc.Labels) > 0 {
		b = append(b, " ("...)
		for i, l := range fc.Labels {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, l...)
		}
		b = append(b, ')')
	}
	return b
}

// arrow joins the points Render shows.
const arrow = " → "

// appendPoint appends a point as Render shows it: BLOCKED, or the value
// as fmt's %.2f writes it (strconv's 'f' with 2 digits is what it calls).
// renderPoints renders each fact's points as Render shows them, the
// facts shared out to every core: a long chain has millions of points,
// and this is the report's last work, after the stream.
func (b *ConfidenceBuilder) renderPoints() [][]byte {
	out := make([][]byte, len(b.order))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(b.order)) {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= len(b.order) {
					return
				}
				values := &b.order[k].values
				var r []byte
				if n := values.len(); n > 0 {
					// "0.85" and the arrow after it: nine bytes a point.
					r = make([]byte, 0, 9*n+8)
				}
				values.each(func(i int, v *float64) {
					if i > 0 {
						r = append(r, arrow...)
					}
					r = appendPoint(r, isBlockedValue(*v), *v)
				})
				out[k] = r
			}
		})
	}
	wg.Wait()
	return out
}

func appendPoint(b []byte, blocked bool, v float64) []byte {
	switch {
	case blocked:
		return append(b, "BLOCKED"...)
	case math.IsInf(v, 0) || math.IsNaN(v):
		return fmt.Appendf(b, "%.2f", v)
	}
	return appendCents(b, v)
}

// centsMax bounds the values appendCents writes itself: below it, a
// value's hundredths fit a uint64 with room.
const centsMax = 1 << 50

// appendCents appends v as strconv's 'f' format with 2 digits writes it
// (the exact binary value rounded to the nearest hundredth, a tie to the
// even one), for v from 0 (not -0) to below centsMax: a point's value,
// millions of them in a long chain's report, where strconv's general
// path took ~450 instructions each. Anything else goes to strconv.
//
// v is m·2^e exactly (m the 53-bit significand). Its hundredths are
// m·100·2^e: for e ≥ 0 a whole number; for e < 0, m·100 (under 2^60)
// shifted right by -e, the bits shifted out telling how to round (more
// than half: up; exactly half: to even). Nothing is approximated.
func appendCents(b []byte, v float64) []byte {
	if !(v >= 0 && v < centsMax) || math.Signbit(v) {
		return strconv.AppendFloat(b, v, 'f', 2, 64)
	}
	bits := math.Float64bits(v)
	m := bits & (1<<52 - 1)
	e := int(bits>>52) - 1075
	if bits>>52 == 0 {
		e = -1074 // subnormal: no implicit bit
	} else {
		m |= 1 << 52
	}
	var q uint64 // v in hundredths, rounded
	switch x := m * 100; {
	case e >= 0:
		q = x << e
	case e > -64:
		s := uint(-e)
		q = x >> s
		r, half := x&(1<<s-1), uint64(1)<<(s-1)
		if r > half || r == half && q&1 == 1 {
			q++
		}
	default:
		// Below 2^-11 of a hundredth: x < 2^60 ≤ half.
		q = 0
	}
	if q < 100 {
		b = append(b, '0') // a confidence: below 1
	} else {
		b = strconv.AppendUint(b, q/100, 10)
	}
	c := q % 100
	return append(b, '.', byte('0'+c/10), byte('0'+c%10))
}
