package analysis

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// StepTiming is one step and how long it took.
type StepTiming struct {
	Agent string `json:"agent"`
	// Step is the step's number as people refer to it: XCT's step number,
	// or the seq of its step_start (the spec's "step 6").
	Step     int64  `json:"step"`
	StartSeq uint64 `json:"start_seq"`
	EndSeq   uint64 `json:"end_seq,omitempty"`
	Intent   string `json:"intent,omitempty"`
	Tool     string `json:"tool,omitempty"`
	// DurationMS is step_end's duration_ms, or the time between the
	// step's start and end events: with the steps inside it.
	DurationMS float64 `json:"duration_ms"`
	// SelfMS is the step's own time: DurationMS less the steps inside it
	// (an agent span's model calls, a sub-agent), never below 0. It is
	// DurationMS for a step with none inside.
	SelfMS float64 `json:"self_ms"`
	// ParentSeq is the start seq of the step this one runs inside (an
	// OpenTelemetry parent span, or the same agent's open step), 0 at the
	// top.
	ParentSeq uint64 `json:"parent_seq,omitempty"`
	// Stream is true for a stream (stream_start to stream_end, spec part
	// 9), timed like a step.
	Stream bool `json:"stream,omitempty"`
	// Tokens are a stream's tokens: stream_end's total_tokens, else the
	// sum of its chunks'.
	Tokens int64 `json:"tokens,omitempty"`
	// Share is the step's own time's part of the total, 0..1.
	Share float64 `json:"share"`
	// ToolMS sums the tool calls made during the step.
	ToolMS float64 `json:"tool_ms"`
	// Unfinished is true for a step that never ended; its duration runs to
	// the last event of the chain.
	Unfinished bool `json:"unfinished,omitempty"`
	// nested is set for a step inside another step that ended: its time is
	// already in that one's, so totals leave it out.
	nested bool
}

// AgentTime is one agent's part of the time.
type AgentTime struct {
	Agent      string  `json:"agent"`
	DurationMS float64 `json:"duration_ms"`
	Share      float64 `json:"share"`
	Steps      int     `json:"steps"`
}

// ToolTime is one tool's part of the time.
type ToolTime struct {
	Tool       string  `json:"tool"`
	DurationMS float64 `json:"duration_ms"`
	Calls      int     `json:"calls"`
}

// BottleneckReport is the spec's `lctl bottleneck`.
type BottleneckReport struct {
	ChainID string `json:"chain_id"`
	// Steps are the slowest steps, slowest first (at most the top asked
	// for); AllSteps counts every timed step.
	Steps    []StepTiming `json:"steps"`
	AllSteps int          `json:"all_steps"`
	TotalMS  float64      `json:"total_ms"`
	ByAgent  []AgentTime  `json:"by_agent"`
	ByTool   []ToolTime   `json:"by_tool"`
	// Unfinished lists steps that never ended.
	Unfinished     []StepTiming `json:"unfinished"`
	Recommendation string       `json:"recommendation"`
}

// Bottlenecks finds where a chain's time went: its slowest steps with their
// share of the total, time per agent and per tool, and a recommendation.
// top bounds the steps listed (0 means 5).
func Bottlenecks(chainID string, events []lctl.Event, top int) *BottleneckReport {
	b := NewBottleneckBuilder()
	for i := range events {
		b.Add(&events[i])
	}
	return b.Report(chainID, top)
}

// BottleneckBuilder takes a chain one event at a time (a stream) and
// gives Bottlenecks' report.
type BottleneckBuilder struct {
	steps *stepTimer
	tools *toolTimer
}

// NewBottleneckBuilder returns a builder before the first event.
func NewBottleneckBuilder() *BottleneckBuilder {
	return &BottleneckBuilder{steps: newStepTimer(), tools: newToolTimer()}
}

// Untitled makes the report's steps carry neither intent nor tool (a
// step_start's intent and tool are not read): for a caller that shows
// neither (lctl bottleneck's text). Before the first event.
func (b *BottleneckBuilder) Untitled() { b.steps.untitled = true }

// BottleneckUnread names, per type, the members of the data a
// BottleneckBuilder never reads of those a stream would keep at length
// or copy (lctl.StreamOptions.Unread): a step's id (a new string at each
// step, copied and put in the decoder's tables on its first event: the
// step timer goes by the step's number), and with untitled (Untitled) a
// step's intent.
func BottleneckUnread(untitled bool) func(typ string) string {
	return func(typ string) string {
		switch typ {
		case lctl.TypeStepStart:
			if untitled {
				return "intent,step_id"
			}
			return "step_id"
		case lctl.TypeStepEnd, lctl.TypeToolCall:
			return "step_id"
		}
		return ""
	}
}

// BottleneckData says whether Add reads the data of an event of type typ:
// a stream need not decode any other's (lctl.StreamOptions.Data). Add
// reads steps, tool calls and streams.
func BottleneckData(typ string) bool {
	switch typ {
	case lctl.TypeStepStart, lctl.TypeStepEnd, lctl.TypeToolCall, lctl.TypeStreamStart, lctl.TypeStreamChunk, lctl.TypeStreamEnd:
		return true
	}
	return false
}

// Add takes the next event of the chain. It reads the data of the types
// BottleneckData names and of no other.
func (b *BottleneckBuilder) Add(e *lctl.Event) {
	b.steps.add(e)
	b.tools.add(e)
}

// Report is Bottlenecks' report on the events added.
func (b *BottleneckBuilder) Report(chainID string, top int) *BottleneckReport {
	if top <= 0 {
		top = 5
	}
	r := &BottleneckReport{ChainID: chainID, Steps: []StepTiming{}, ByAgent: []AgentTime{}, ByTool: []ToolTime{}, Unfinished: []StepTiming{}}
	// One pass over the steps in the order they ended, nothing copied but
	// the slowest (the report lists only the top): the total and each
	// agent's time summed in that order, as a sort of every step after a
	// copy of them all did before.
	agents := map[string]*AgentTime{}
	slowest := newTopSteps(top)
	finished := 0
	b.steps.each(func(t *StepTiming) {
		if t.Unfinished {
			r.Unfinished = append(r.Unfinished, *t)
			return
		}
		finished++
		if !t.nested {
			r.TotalMS += t.DurationMS
		}
		a := agents[t.Agent]
		if a == nil {
			a = &AgentTime{Agent: t.Agent}
			agents[t.Agent] = a
		}
		a.DurationMS += t.SelfMS
		a.Steps++
		slowest.add(t)
	})
	for _, a := range agents {
		if r.TotalMS > 0 {
			a.Share = a.DurationMS / r.TotalMS
		}
		r.ByAgent = append(r.ByAgent, *a)
	}
	sort.SliceStable(r.ByAgent, func(i, j int) bool {
		if r.ByAgent[i].DurationMS != r.ByAgent[j].DurationMS {
			return r.ByAgent[i].DurationMS > r.ByAgent[j].DurationMS
		}
		return r.ByAgent[i].Agent < r.ByAgent[j].Agent
	})
	// Slowest by own time: an agent step's model calls are listed for
	// themselves, not again inside it.
	r.AllSteps = finished
	steps := slowest.top
	if slowest.whole {
		// Every finished step, sorted (each is the same the second time).
		steps = make([]StepTiming, 0, finished)
		b.steps.each(func(t *StepTiming) {
			if !t.Unfinished {
				steps = append(steps, *t)
			}
		})
		sort.SliceStable(steps, func(i, j int) bool { return steps[i].SelfMS > steps[j].SelfMS })
		if len(steps) > top {
			steps = steps[:top]
		}
	}
	if len(steps) > 0 {
		r.Steps = steps
	}
	for i := range r.Steps {
		if r.TotalMS > 0 {
			r.Steps[i].Share = r.Steps[i].SelfMS / r.TotalMS
		}
	}
	r.ByTool = b.tools.finish()
	r.Recommendation = recommend(r)
	return r
}

// toolTimer sums the tool calls' time per tool as the events go by.
type toolTimer struct{ byTool map[string]*ToolTime }

func newToolTimer() *toolTimer { return &toolTimer{byTool: map[string]*ToolTime{}} }

func (tt *toolTimer) add(e *lctl.Event) {
	if e.Type != lctl.TypeToolCall {
		return
	}
	name, _ := e.Str("tool")
	if name == "" {
		name = "(unnamed)"
	}
	t := tt.byTool[name]
	if t == nil {
		t = &ToolTime{Tool: name}
		tt.byTool[name] = t
	}
	t.Calls++
	if ms, ok := numberAt(e, "duration_ms"); ok && ms > 0 {
		t.DurationMS += ms
	}
}

func (tt *toolTimer) finish() []ToolTime {
	out := make([]ToolTime, 0, len(tt.byTool))
	for _, t := range tt.byTool {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].DurationMS != out[j].DurationMS {
			return out[i].DurationMS > out[j].DurationMS
		}
		return out[i].Tool < out[j].Tool
	})
	return out
}

// recommend says what to look at first.
func recommend(r *BottleneckReport) string {
	if len(r.Steps) == 0 {
		if len(r.Unfinished) > 0 {
			u := r.Unfinished[0]
			return fmt.Sprintf("%s's step %d never ended: look there first.", u.Agent, u.Step)
		}
		return "No step timing data found."
	}
	msg := ""
	top := r.ByAgent[0]
	switch {
	case len(r.ByAgent) == 1:
		s := r.Steps[0]
		what := fmt.Sprintf("step (step %d)", s.Step)
		if s.Stream {
			what = fmt.Sprintf("stream (at seq %d)", s.Step)
		}
		msg = fmt.Sprintf("%s is the only agent; its slowest %s takes %s of the time.", unnamedAgent(top.Agent), what, percent(s.Share))
		if len(r.Steps) == 1 || s.Share >= 0.5 {
			msg += " Consider caching or a faster model for it."
		}
	case top.Share >= 0.4:
		msg = fmt.Sprintf("%s is bottleneck. Consider parallelization.", unnamedAgent(top.Agent))
	default:
		msg = fmt.Sprintf("No single agent dominates: the busiest, %s, takes %s of the time.", top.Agent, percent(top.Share))
	}
	// Where the busiest agent's time goes: in tool calls, or in thinking.
	var toolMS, agentMS float64
	for _, s := range r.Steps {
		if s.Agent == top.Agent {
			toolMS += s.ToolMS
			agentMS += s.SelfMS
		}
	}
	if agentMS > 0 && toolMS/agentMS >= 0.5 {
		msg += fmt.Sprintf(" Most of its time is in tool calls (%s): consider caching or batching them.", percent(toolMS/agentMS))
	}
	if len(r.Unfinished) > 0 {
		u := r.Unfinished[0]
		msg += fmt.Sprintf(" %s's step %d never ended.", u.Agent, u.Step)
	}
	return msg
}

// percent renders a share the way the spec does: 50%.
func percent(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }

// openStep is a step that started and has not ended yet.
type openStep struct {
	timing StepTiming
	start  time.Time
	index  int
	// parent is the step it runs inside; childMS sums the durations of
	// the steps inside it that ended; ended is set at its end.
	parent  *openStep
	childMS float64
	ended   bool
	spanID  string
	// streamed sums a stream's chunk tokens; reportsTokens is set when
	// the step's step_end reports tokens.
	streamed      int64
	reportsTokens bool
	// numbered is set for a step with an XCT step number (in byNumber);
	// parentOfSome once a step or stream was put inside it.
	numbered     bool
	parentOfSome bool
}

// stepTimer pairs step starts and ends as the events go by.
type stepTimer struct {
	out      chunked[StepTiming]
	outSteps chunked[*openStep] // out's steps, to tell nested ones at the end (nil: at the top, not a stream)
	bySpan   map[string]*openStep
	agents   agentSlots // each agent's open steps, stream and orphan
	order    []*openStep
	byNumber stepIndex
	lastTime time.Time
	// free holds ended steps nothing refers to any more (reuse), for the
	// next steps to start in: one allocation per step otherwise.
	free []*openStep
	// noReuse and reused are for the test that reuse changes nothing.
	noReuse bool
	reused  int
	// untitled leaves the steps' Intent and Tool empty (stats sums the
	// steps and never names one).
	untitled bool
	// durations (with untitled) keeps of an ended step that is not kept
	// for the end (outermost, not a stream: every XCT step) only its
	// duration, in durs, and out holds the others' timings alone: each
	// then gives such a step as a StepTiming with its DurationMS and no
	// other member. What stats reads of them (136 bytes a step were most
	// of what its heap grew by: ~28 MB on a 1M-event chain).
	durations bool
	durs      chunked[float64] // with durations: every ended step's DurationMS, in outSteps' order
}

func newStepTimer() *stepTimer {
	return &stepTimer{bySpan: map[string]*openStep{}}
}

// agentSlot is what the step timer keeps of an agent.
type agentSlot struct {
	name  string
	stack []*openStep // its open steps, outermost first
	// current is its innermost open step, for tool time; stream its open
	// stream.
	current, stream *openStep
	// orphan is a stream that ended outside every step, with its place in
	// out (hasOrphan): XCT's loop calls the model before it records the
	// step, so such a stream belongs to the agent's next numbered step.
	orphan    orphanStream
	hasOrphan bool
}

// agentSlots finds an agent's slot: a chain has a handful of agents, and
// a look along a short list (equal names are mostly the same string)
// costs less than the four maps by agent a step went through.
type agentSlots struct {
	list   []*agentSlot
	byName map[string]*agentSlot // past agentList agents
}

const agentList = 16

func (a *agentSlots) of(name string) *agentSlot {
	for _, s := range a.list {
		if s.name == name {
			return s
		}
	}
	if a.byName != nil {
		if s := a.byName[name]; s != nil {
			return s
		}
	}
	s := &agentSlot{name: name}
	if len(a.list) < agentList {
		a.list = append(a.list, s)
		return s
	}
	if a.byName == nil {
		a.byName = map[string]*agentSlot{}
	}
	a.byName[name] = s
	return s
}

// stepIndex maps XCT step numbers to their open steps: a short list (a
// few steps are open at once), a map once more are.
type stepIndex struct {
	nums  []int64
	steps []*openStep
	m     map[int64]*openStep
}

const stepIndexList = 16

func (x *stepIndex) get(n int64) *openStep {
	if x.m != nil {
		return x.m[n]
	}
	for i, k := range x.nums {
		if k == n {
			return x.steps[i]
		}
	}
	return nil
}

func (x *stepIndex) set(n int64, o *openStep) {
	if x.m != nil {
		x.m[n] = o
		return
	}
	for i, k := range x.nums {
		if k == n {
			x.steps[i] = o
			return
		}
	}
	if len(x.nums) < stepIndexList {
		x.nums, x.steps = append(x.nums, n), append(x.steps, o)
		return
	}
	x.m = make(map[int64]*openStep, 2*stepIndexList)
	for i, k := range x.nums {
		x.m[k] = x.steps[i]
	}
	x.m[n] = o
	x.nums, x.steps = nil, nil
}

func (x *stepIndex) del(n int64) {
	if x.m != nil {
		delete(x.m, n)
		return
	}
	for i, k := range x.nums {
		if k == n {
			last := len(x.nums) - 1
			x.nums[i], x.steps[i] = x.nums[last], x.steps[last]
			x.steps[last] = nil
			x.nums, x.steps = x.nums[:last], x.steps[:last]
			return
		}
	}
}

// stepNumber is a step_start's or step_end's step number (intAt of its
// "step"), read once for the readers of an event that all want it (the
// step timer, the model resolver): each read walks the data's members.
// known false: not read yet.
type stepNumber struct {
	n         int64
	ok, known bool
}

// of returns intAt(e, "step"), read now unless known.
func (s *stepNumber) of(e *lctl.Event) (int64, bool) {
	if !s.known {
		s.n, s.ok = intAt(e, "step")
		s.known = true
	}
	return s.n, s.ok
}

func (st *stepTimer) add(e *lctl.Event) { st.addStep(e, &stepNumber{}) }

// addStep is add with the event's step number, when it is a step_start
// or a step_end, read once by step (stepNumber).
func (st *stepTimer) addStep(e *lctl.Event, step *stepNumber) {
	t := e.Time()
	if !t.IsZero() {
		st.lastTime = t
	}
	switch e.Type {
	case lctl.TypeStepStart:
		o := st.newStep()
		*o = openStep{start: t, index: len(st.order)}
		o.timing = StepTiming{Agent: e.Agent, Step: int64(e.Seq), StartSeq: e.Seq}
		if !st.untitled {
			o.timing.Intent, _ = e.Str("intent")
			o.timing.Tool, _ = e.Str("tool")
		}
		n, numbered := step.of(e)
		if numbered {
			o.timing.Step = n
			o.numbered = true
			st.byNumber.set(n, o)
		}
		o.parent = st.parentOf(e, o, numbered)
		if o.parent != nil {
			o.timing.ParentSeq = o.parent.timing.StartSeq
			o.parent.parentOfSome = true
		}
		if numbered && o.parent == nil {
			st.adopt(e.Agent, o)
		}
		a := st.agents.of(e.Agent)
		a.stack = append(a.stack, o)
		a.current = o
		st.order = appendDoubling(st.order, o)
	case lctl.TypeToolCall:
		var o *openStep
		if n, ok := intAt(e, "step"); ok {
			o = st.byNumber.get(n)
		}
		if o == nil {
			o = st.agents.of(e.Agent).current
		}
		if o != nil {
			if ms, ok := numberAt(e, "duration_ms"); ok && ms > 0 {
				o.timing.ToolMS += ms
			}
		}
	case lctl.TypeStepEnd:
		var o *openStep
		if n, ok := step.of(e); ok {
			o = st.byNumber.get(n)
			st.byNumber.del(n)
		}
		a := st.agents.of(e.Agent)
		stack := a.stack
		if o == nil && len(stack) > 0 {
			o = stack[len(stack)-1]
		}
		if o == nil {
			return
		}
		for k := len(stack) - 1; k >= 0; k-- {
			if stack[k] == o {
				a.stack = slices.Delete(stack, k, k+1)
				break
			}
		}
		if s := a.stack; len(s) > 0 {
			a.current = s[len(s)-1]
		} else {
			a.current = nil
		}
		o.timing.EndSeq = e.Seq
		if ms, ok := numberAt(e, "duration_ms"); ok && ms >= 0 {
			o.timing.DurationMS = ms
		} else if !t.IsZero() && !o.start.IsZero() {
			o.timing.DurationMS = float64(t.Sub(o.start).Microseconds()) / 1000
		}
		if _, _, pair := e.TokenPair(); pair {
			o.reportsTokens = true // an object: its pair read by the stream
		} else {
			_, o.reportsTokens = e.Object("tokens")
		}
		st.end(o)
		st.reuse(o, e.Agent)
	case lctl.TypeStreamStart, lctl.TypeStreamChunk, lctl.TypeStreamEnd:
		st.stream(e, t) // stream.go
	}
}

// newStep returns a step to start: one that ended and that nothing refers
// to, else a new one.
func (st *stepTimer) newStep() *openStep {
	if k := len(st.free); k > 0 {
		o := st.free[k-1]
		st.free = st.free[:k-1]
		st.reused++
		return o
	}
	return &openStep{}
}

// reuse keeps o, a step that just ended at its agent's step_end, for the
// next step to start in when nothing refers to it any more: not kept for
// the end (outermost, not a stream), no step or stream was put inside it,
// it left its agent's stack and current step (its step_end was its
// agent's) and the number index.
func (st *stepTimer) reuse(o *openStep, agent string) {
	if o.parent != nil || o.timing.Stream || o.parentOfSome || agent != o.timing.Agent ||
		(o.numbered && st.byNumber.get(o.timing.Step) == o) || st.agents.of(agent).current == o || len(st.free) >= 64 || st.noReuse {
		return
	}
	st.free = append(st.free, o)
}

// each calls fn with each step that ended, in the order they ended, then
// with the unfinished ones, timed to the last event (once, at the end: it
// marks the nested steps and times the unfinished ones in place). The
// steps are not copied into one list. With durations, the steps kept as
// their durations come in one StepTiming, reused: fn keeps no pointer.
func (st *stepTimer) each(fn func(t *StepTiming)) {
	if st.durations {
		kept := 0          // the next of out's
		var top StepTiming // one for them all: fn may keep no pointer to it
		st.durs.each(func(i int, ms *float64) {
			o := *st.outSteps.at(i)
			if o == nil {
				top = StepTiming{DurationMS: *ms}
				fn(&top)
				return
			}
			t := st.out.at(kept)
			kept++
			t.nested = o.insideEnded()
			fn(t)
		})
	} else {
		st.out.each(func(i int, t *StepTiming) {
			o := *st.outSteps.at(i)
			t.nested = o != nil && o.insideEnded()
			fn(t)
		})
	}
	for _, o := range st.order {
		if o == nil {
			continue
		}
		o.timing.Unfinished = true
		if !st.lastTime.IsZero() && !o.start.IsZero() {
			o.timing.DurationMS = float64(st.lastTime.Sub(o.start).Microseconds()) / 1000
		}
		o.timing.SelfMS = max(0, o.timing.DurationMS-o.childMS)
		fn(&o.timing)
	}
}

// topSteps keeps the slowest steps by own time as they go by, slowest
// first, of two equally slow the one seen first first: exactly the first n
// of a stable sort of them all (sort.SliceStable, SelfMS descending),
// without sorting them all. Past topSelect, or when a NaN (which the sort
// orders its own way) goes by, it gives up (whole): the caller sorts them
// all as before.
type topSteps struct {
	n     int
	top   []StepTiming
	whole bool
}

// topSelect bounds the n kept by insertion.
const topSelect = 64

func newTopSteps(n int) *topSteps { return &topSteps{n: n, whole: n > topSelect} }

func (s *topSteps) add(t *StepTiming) {
	if s.whole {
		return
	}
	if math.IsNaN(t.SelfMS) {
		s.whole, s.top = true, nil
		return
	}
	k := len(s.top)
	if k == s.n && !(t.SelfMS > s.top[k-1].SelfMS) {
		return
	}
	j := k
	for j > 0 && t.SelfMS > s.top[j-1].SelfMS {
		j--
	}
	if k < s.n {
		s.top = append(s.top, StepTiming{})
	}
	copy(s.top[j+1:], s.top[j:])
	s.top[j] = *t
}

// unnamedAgent names an agent in a sentence; events without one are "the
// unnamed agent".
func unnamedAgent(a string) string {
	if a == "" {
		return "The unnamed agent"
	}
	return a
}
