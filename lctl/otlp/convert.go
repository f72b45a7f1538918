// Package otlp turns OpenTelemetry traces (OTLP trace/v1 ResourceSpans)
// into LCTL chains: one chain per trace, its spans mapped to the spec's
// events by the GenAI semantic conventions and those of OpenInference and
// OpenLLMetry (docs/otel.md lists what maps to what). It is pure: the
// tracer uses it to ingest OTLP exports, `lctl convert --from otlp` to
// convert collector files.
//
// Conversion never fails on a span: a span that lacks what its kind needs
// is converted as far as it goes, with a Warning that names it (span id and
// name). Only spans without a valid trace or span id are rejected, since
// they cannot be placed in a chain.
package otlp

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/xct-dev/xct/lctl"
)

// ChainPrefix starts every chain id made from a trace: "otel-" and the
// trace id's 32 hex digits. The prefix keeps OTel chains apart from the
// chains XCT writes itself, so ingesting XCT's own exported trace never
// writes to a run's chain.
const ChainPrefix = "otel-"

// ChainID returns the chain id of a trace id (16 bytes).
func ChainID(traceID []byte) string { return ChainPrefix + hex.EncodeToString(traceID) }

// Span is one span with the resource and scope it was reported under.
type Span struct {
	Span     *tracepb.Span
	Resource []*commonpb.KeyValue
	Scope    string
}

// Trace is the spans of one trace, in the order they were received.
type Trace struct {
	TraceID []byte
	ChainID string
	Spans   []Span
}

// Warning says what a span lacked or what conversion had to assume.
type Warning struct {
	TraceID  string `json:"trace_id,omitempty"`
	SpanID   string `json:"span_id,omitempty"`
	SpanName string `json:"span_name,omitempty"`
	Message  string `json:"message"`
}

// String names the span: `span 00f067aa0ba902b7 "chat gpt-4o": message`.
func (w Warning) String() string {
	if w.SpanID == "" && w.SpanName == "" {
		return w.Message
	}
	return fmt.Sprintf("span %s %q: %s", w.SpanID, w.SpanName, w.Message)
}

func spanWarning(s *tracepb.Span, format string, args ...any) Warning {
	return Warning{
		TraceID:  hex.EncodeToString(s.GetTraceId()),
		SpanID:   hex.EncodeToString(s.GetSpanId()),
		SpanName: truncate(sanitize(s.GetName()), 200),
		Message:  fmt.Sprintf(format, args...),
	}
}

// Group splits resource spans into traces, in order of first appearance.
// Spans whose trace id is not 16 bytes, or whose span id is not 8 bytes, or
// which are nil, are rejected: counted and named in the warnings.
func Group(rss []*tracepb.ResourceSpans) (traces []*Trace, rejected int, warnings []Warning) {
	byID := map[string]*Trace{}
	for _, rs := range rss {
		res := rs.GetResource().GetAttributes()
		for _, ss := range rs.GetScopeSpans() {
			scope := sanitize(ss.GetScope().GetName())
			for _, s := range ss.GetSpans() {
				switch {
				case s == nil:
					rejected++
					warnings = append(warnings, Warning{Message: "an empty span was rejected"})
					continue
				case len(s.GetTraceId()) != 16 || allZero(s.GetTraceId()):
					rejected++
					warnings = append(warnings, spanWarning(s, "rejected: trace id must be 16 bytes, not all zero (got %d bytes)", len(s.GetTraceId())))
					continue
				case len(s.GetSpanId()) != 8 || allZero(s.GetSpanId()):
					rejected++
					warnings = append(warnings, spanWarning(s, "rejected: span id must be 8 bytes, not all zero (got %d bytes)", len(s.GetSpanId())))
					continue
				}
				key := string(s.GetTraceId())
				t := byID[key]
				if t == nil {
					t = &Trace{TraceID: s.GetTraceId(), ChainID: ChainID(s.GetTraceId())}
					byID[key] = t
					traces = append(traces, t)
				}
				t.Spans = append(t.Spans, Span{Span: s, Resource: res, Scope: scope})
			}
		}
	}
	return traces, rejected, warnings
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Draft is an event before it has a seq and a place in a hash chain.
type Draft struct {
	Time  time.Time
	Type  string
	Agent string
	Data  map[string]any
}

// Options carry what an earlier conversion of the same trace left behind,
// so spans that arrive in a later export continue the chain.
type Options struct {
	// NotBefore is the timestamp of the chain's last event: no event is
	// dated earlier, so timestamps never go backwards in the chain (the
	// span's own times stay in the event's data).
	NotBefore time.Time
	// PrevAgent is the agent of the chain's last step, for handoffs.
	PrevAgent string
	// Agents maps span ids (hex) of agent spans converted earlier to their
	// agent names, so children that arrive later are attributed to them.
	Agents map[string]string
	// Seen holds span ids (hex) already converted into the chain; spans
	// sent again (an exporter's retry) are skipped.
	Seen map[string]bool
}

// Result is one trace converted.
type Result struct {
	Events   []Draft
	Warnings []Warning
	// Agents maps the span ids of agent spans in this batch to their
	// agent names (to pass on in Options.Agents).
	Agents map[string]string
	// Spans are the span ids converted (to pass on in Options.Seen).
	Spans []string
	// Skipped counts spans already in Options.Seen or repeated in the
	// batch.
	Skipped int
	// LastAgent is the agent of the last step started (for
	// Options.PrevAgent).
	LastAgent string
}

// Kinds of span, by what they map to.
type spanKind int

const (
	kindOther spanKind = iota // a generic "span" event
	kindAgent                 // an agent invocation: step_start/step_end, names the agent
	kindStep                  // a chain, workflow or task: a step of the enclosing agent
	kindModel                 // a model call: step_start/step_end with model and tokens
	kindTool                  // a tool call: tool_call
)

func (k spanKind) String() string {
	return [...]string{"span", "agent", "step", "model", "tool"}[k]
}

// node is a span being converted.
type node struct {
	span   *tracepb.Span
	id     string
	parent string
	attrs  attrs
	res    attrs
	scope  string
	kind   spanKind
	op     string // the operation named by the convention, e.g. "chat"
	agent  string // the agent the span's events are attributed to
	own    string // the agent name this span defines (kindAgent, top-level kindStep)
	depth  int
	start  time.Time
	end    time.Time
}

// EventSpan is the event type of a span no convention classifies. The
// reducer keeps it as an unknown type; replay shows it.
const EventSpan = "span"

// EventHandoff is the event recorded when the agent doing the work
// changes. The reducer knows it (lctl.TypeHandoff) and counts it; replay
// shows who handed over to whom.
const EventHandoff = "handoff"

// ConvertTrace converts the spans of one trace into drafts ordered by time.
// It never fails; what spans lack is in the warnings.
func ConvertTrace(t *Trace, opts Options) Result {
	r := Result{Agents: map[string]string{}}
	nodes := make([]*node, 0, len(t.Spans))
	byID := make(map[string]*node, len(t.Spans))
	for _, sp := range t.Spans {
		s := sp.Span
		id := hex.EncodeToString(s.GetSpanId())
		if opts.Seen[id] || byID[id] != nil {
			r.Skipped++
			continue
		}
		n := &node{span: s, id: id, attrs: attrMap(s.GetAttributes()), res: attrMap(sp.Resource), scope: sp.Scope}
		if len(s.GetParentSpanId()) > 0 {
			n.parent = hex.EncodeToString(s.GetParentSpanId())
		}
		n.kind, n.op = classify(n.attrs)
		n.start, n.end = spanTimes(s, &r)
		nodes = append(nodes, n)
		byID[id] = n
		r.Spans = append(r.Spans, id)
	}
	// Depth and agent attribution follow parents; a parent outside the
	// batch is looked up in opts.Agents. Cycles (a malformed payload) are
	// cut where they close.
	res := newResolver(byID, opts.Agents, &r)
	for _, n := range nodes {
		res.visit(n)
	}
	var ev []timed
	for _, n := range nodes {
		ev = append(ev, spanEvents(n, &r)...)
	}
	slices.SortStableFunc(ev, func(a, b timed) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	prev := opts.PrevAgent
	notBefore := opts.NotBefore
	for _, e := range ev {
		if e.d.Type == lctl.TypeStepStart && e.agentStep && e.d.Agent != "" {
			if prev != "" && prev != e.d.Agent {
				r.Events = append(r.Events, Draft{Time: e.d.Time, Type: EventHandoff, Agent: prev, Data: map[string]any{
					"from": prev, "to": e.d.Agent, "otel": e.d.Data["otel"],
				}})
			}
			prev = e.d.Agent
		}
		r.Events = append(r.Events, e.d)
	}
	for i := range r.Events {
		d := &r.Events[i]
		if d.Time.Before(notBefore) {
			d.Data = withOriginalTime(d.Data, d.Time)
			d.Time = notBefore
		}
		notBefore = d.Time
	}
	r.LastAgent = prev
	return r
}

// withOriginalTime copies data and records the span time an event had
// before it was moved forward to keep the chain's timestamps in order.
func withOriginalTime(data map[string]any, t time.Time) map[string]any {
	out := make(map[string]any, len(data)+1)
	for k, v := range data {
		out[k] = v
	}
	out["span_time"] = lctl.FormatTime(t)
	return out
}

// spanTimes returns a span's start and end, warning about what is missing
// or inverted.
func spanTimes(s *tracepb.Span, r *Result) (start, end time.Time) {
	st, et := s.GetStartTimeUnixNano(), s.GetEndTimeUnixNano()
	const maxNano = 1<<63 - 1
	if st > maxNano || et > maxNano {
		r.Warnings = append(r.Warnings, spanWarning(s, "timestamp beyond year 2262; clamped"))
		st, et = min(st, maxNano), min(et, maxNano)
	}
	switch {
	case st == 0 && et == 0:
		r.Warnings = append(r.Warnings, spanWarning(s, "no start_time_unix_nano or end_time_unix_nano; dated at the Unix epoch"))
	case st == 0:
		r.Warnings = append(r.Warnings, spanWarning(s, "no start_time_unix_nano; using its end time"))
		st = et
	case et == 0:
		r.Warnings = append(r.Warnings, spanWarning(s, "no end_time_unix_nano; using its start time"))
		et = st
	case et < st:
		r.Warnings = append(r.Warnings, spanWarning(s, "ends before it starts; using its start time as its end"))
		et = st
	}
	return time.Unix(0, int64(st)).UTC(), time.Unix(0, int64(et)).UTC()
}

// classify decides what a span maps to, by the first convention that says:
// the GenAI semantic conventions, then OpenInference, then OpenLLMetry,
// then the attributes that only one kind of span carries.
func classify(a attrs) (spanKind, string) {
	op := strings.ToLower(a.str("gen_ai.operation.name"))
	switch op {
	case "invoke_agent", "create_agent":
		return kindAgent, op
	case "chat", "text_completion", "generate_content", "embeddings":
		return kindModel, op
	case "execute_tool":
		return kindTool, op
	}
	switch strings.ToUpper(a.str("openinference.span.kind")) {
	case "AGENT":
		return kindAgent, "agent"
	case "CHAIN":
		return kindStep, "chain"
	case "LLM":
		return kindModel, "llm"
	case "EMBEDDING":
		return kindModel, "embedding"
	case "TOOL":
		return kindTool, "tool"
	case "RETRIEVER":
		return kindTool, "retriever"
	case "RERANKER":
		return kindTool, "reranker"
	}
	switch k := strings.ToLower(a.str("traceloop.span.kind")); k {
	case "agent":
		return kindAgent, k
	case "workflow", "task":
		return kindStep, k
	case "tool":
		return kindTool, k
	}
	if t := strings.ToLower(a.str("llm.request.type")); t != "" {
		return kindModel, t
	}
	if _, ok := a.key("gen_ai.request.model", "gen_ai.response.model", "llm.model_name", "llm.request.model"); ok {
		return kindModel, cmp.Or(op, "llm")
	}
	if _, ok := a.key("gen_ai.tool.name", "tool.name"); ok {
		return kindTool, cmp.Or(op, "tool")
	}
	if _, ok := a.key("gen_ai.agent.name", "agent.name"); ok {
		return kindAgent, cmp.Or(op, "agent")
	}
	return kindOther, op
}

// agentName is the name an agent span gives its agent.
func agentName(n *node) string {
	if s := n.attrs.str("gen_ai.agent.name", "agent.name", "traceloop.entity.name", "gen_ai.agent.id"); s != "" {
		return s
	}
	name := strings.TrimSpace(sanitize(n.span.GetName()))
	name = strings.TrimSpace(strings.TrimPrefix(name, "invoke_agent"))
	name = strings.TrimSpace(strings.TrimPrefix(name, "create_agent"))
	return name
}

// resolver works out, for every node, its depth in the batch and the agent
// its events belong to: an agent span names its own agent; a step or any
// other span belongs to the nearest enclosing agent (or step), and a step
// with none names one itself. Parents outside the batch are looked up in
// known. Parent links that loop (a malformed payload) are cut.
type resolver struct {
	byID  map[string]*node
	known map[string]string
	r     *Result
	state map[*node]int // 0 new, 1 in progress, 2 done
	ctx   map[*node]string
	depth map[*node]int
}

func newResolver(byID map[string]*node, known map[string]string, r *Result) *resolver {
	return &resolver{byID: byID, known: known, r: r, state: map[*node]int{}, ctx: map[*node]string{}, depth: map[*node]int{}}
}

// parentCtx is the agent visible to n from its parent, and n's depth.
func (v *resolver) parentCtx(n *node) (string, int) {
	if n.parent == "" {
		return "", 0
	}
	p := v.byID[n.parent]
	if p == nil {
		return v.known[n.parent], 0
	}
	c, d, ok := v.visit(p)
	if !ok {
		v.r.Warnings = append(v.r.Warnings, spanWarning(n.span, "its parent chain loops back to it (through span %s); treated as a root", n.parent))
		return "", 0
	}
	return c, d + 1
}

// visit resolves n and returns the agent n's children see and n's depth;
// ok is false when n is already being resolved (a loop).
func (v *resolver) visit(n *node) (ctx string, depth int, ok bool) {
	switch v.state[n] {
	case 1:
		return "", 0, false
	case 2:
		return v.ctx[n], v.depth[n], true
	}
	v.state[n] = 1
	enclosing, d := v.parentCtx(n)
	n.depth = d
	switch n.kind {
	case kindAgent:
		_, named := n.attrs.key("gen_ai.agent.name", "agent.name", "traceloop.entity.name", "gen_ai.agent.id")
		n.own = agentName(n)
		switch {
		case n.own == "":
			n.own = "unknown-agent"
			v.r.Warnings = append(v.r.Warnings, spanWarning(n.span, "agent span has no gen_ai.agent.name (or agent.name, traceloop.entity.name) and no name; recorded as agent %q", n.own))
		case !named:
			v.r.Warnings = append(v.r.Warnings, spanWarning(n.span, "agent span has no gen_ai.agent.name; agent named after the span"))
		}
		n.agent = n.own
		ctx = n.own
	case kindStep:
		n.agent = enclosing
		if n.agent == "" {
			n.own = cmp.Or(agentName(n), fallbackAgent(n))
			n.agent = n.own
		}
		ctx = n.agent
	default:
		n.agent = enclosing
		if n.agent == "" {
			n.agent = cmp.Or(n.attrs.str("gen_ai.agent.name", "agent.name"), fallbackAgent(n))
		}
		ctx = enclosing
	}
	if n.kind == kindAgent || n.kind == kindStep {
		v.r.Agents[n.id] = n.agent
	}
	v.state[n], v.ctx[n], v.depth[n] = 2, ctx, d
	return ctx, d, true
}

// fallbackAgent names the doer of a span outside every agent: its service.
func fallbackAgent(n *node) string {
	return cmp.Or(n.res.str("service.name"), "otel")
}

// timed is a draft with its sort key: at equal times, ends of deeper spans
// come first, then starts of shallower spans.
type timed struct {
	at        time.Time
	order     int
	d         Draft
	agentStep bool // a step_start of an agent or step span (may hand off)
}

const depthCap = 1 << 20

func startOrder(depth int) int { return depthCap + min(depth, depthCap-1) }
func endOrder(depth int) int   { return depthCap - 1 - min(depth, depthCap-1)*2 }

// otelRef is what every event of a span carries to find the span again.
func otelRef(n *node) map[string]any {
	ref := map[string]any{
		"trace_id": hex.EncodeToString(n.span.GetTraceId()),
		"span_id":  n.id,
		"name":     truncate(sanitize(n.span.GetName()), 512),
	}
	if n.parent != "" {
		ref["parent_span_id"] = n.parent
	}
	if svc := n.res.str("service.name"); svc != "" {
		ref["service"] = svc
	}
	if n.scope != "" {
		ref["scope"] = n.scope
	}
	return ref
}

// spanEvents maps one span to its events.
func spanEvents(n *node, r *Result) []timed {
	s := n.span
	ref := otelRef(n)
	durMS := float64(n.end.Sub(n.start).Microseconds()) / 1000
	failed := s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR
	attrsJSON, cutAttrs := jsonValues(s.GetAttributes())
	startData := map[string]any{"otel": ref, "attributes": attrsJSON}
	if cutAttrs {
		startData["attributes_truncated"] = true
	}
	var out []timed
	switch n.kind {
	case kindAgent, kindStep:
		startData["intent"] = cmp.Or(n.op, "agent")
		if n.kind == kindStep {
			startData["intent"] = cmp.Or(n.attrs.str("traceloop.entity.name"), truncate(sanitize(s.GetName()), 200), n.op)
		}
		if in := n.attrs.str("input.value", "traceloop.entity.input", "gen_ai.input.messages"); in != "" {
			startData["input_summary"], _ = cut(in)
		}
		if m := n.attrs.str("gen_ai.request.model", "llm.model_name"); m != "" {
			startData["agent_profile"] = map[string]any{"model": m}
		}
		if c := n.attrs.str("gen_ai.conversation.id", "session.id"); c != "" {
			startData["conversation_id"] = c
		}
		end := map[string]any{"otel": ref, "outcome": outcome(failed), "duration_ms": durMS}
		if out := n.attrs.str("output.value", "traceloop.entity.output", "gen_ai.output.messages"); out != "" {
			end["output_summary"], _ = cut(out)
		}
		if in, _, ok, _ := n.attrs.count("gen_ai.usage.input_tokens"); ok {
			// Agent spans may report their run's totals; they are kept
			// as reported, not counted again (the model spans count).
			o, _, _, _ := n.attrs.count("gen_ai.usage.output_tokens")
			end["reported_tokens"] = map[string]any{"input": float64(in), "output": float64(o)}
		}
		out = append(out,
			timed{at: n.start, order: startOrder(n.depth), agentStep: true, d: Draft{Time: n.start, Type: lctl.TypeStepStart, Agent: n.agent, Data: startData}},
			timed{at: n.end, order: endOrder(n.depth), d: Draft{Time: n.end, Type: lctl.TypeStepEnd, Agent: n.agent, Data: end}},
		)
	case kindModel:
		model := n.attrs.str("gen_ai.response.model", "gen_ai.request.model", "llm.model_name", "llm.response.model", "llm.request.model")
		if model == "" {
			r.Warnings = append(r.Warnings, spanWarning(s, "model span has no gen_ai.request.model (or gen_ai.response.model, llm.model_name); tokens are counted under an unknown model"))
		}
		provider := n.attrs.str("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
		mdl := map[string]any{}
		if model != "" {
			mdl["id"] = model
		}
		if req := n.attrs.str("gen_ai.request.model", "llm.request.model"); req != "" && req != model {
			mdl["requested"] = req
		}
		if provider != "" {
			mdl["provider"] = provider
		}
		startData["intent"] = cmp.Or(n.op, "llm")
		startData["model"] = mdl
		if in := n.attrs.str("input.value", "gen_ai.input.messages", "gen_ai.prompt"); in != "" {
			startData["input_summary"], _ = cut(in)
		}
		end := map[string]any{"otel": ref, "outcome": outcome(failed), "duration_ms": durMS}
		if model != "" {
			end["model"] = model
		}
		in, inKey, inOK, inBad := n.attrs.count("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt", "llm.usage.prompt_tokens")
		outN, outKey, outOK, outBad := n.attrs.count("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion", "llm.usage.completion_tokens")
		for _, bad := range []string{inBad, outBad} {
			if bad != "" {
				r.Warnings = append(r.Warnings, spanWarning(s, "%s is not a non-negative whole number; ignored", bad))
			}
		}
		switch {
		case inOK || outOK:
			end["tokens"] = map[string]any{"input": float64(in), "output": float64(outN)}
			if !inOK {
				r.Warnings = append(r.Warnings, spanWarning(s, "model span reports output tokens (%s) but no input tokens (gen_ai.usage.input_tokens); input counted as 0", outKey))
			}
			if !outOK {
				r.Warnings = append(r.Warnings, spanWarning(s, "model span reports input tokens (%s) but no output tokens (gen_ai.usage.output_tokens); output counted as 0", inKey))
			}
		case n.op == "embeddings" || n.op == "embedding":
		default:
			r.Warnings = append(r.Warnings, spanWarning(s, "model span has no token usage (gen_ai.usage.input_tokens/output_tokens, llm.token_count.prompt/completion)"))
		}
		if c, ok := n.attrs.number("gen_ai.usage.cost", "llm.cost.total", "gen_ai.usage.total_cost"); ok {
			end["cost"] = c
		}
		if fr, ok := n.attrs["gen_ai.response.finish_reasons"]; ok {
			end["finish_reasons"], _ = jsonValue(fr, 0)
		}
		if out := n.attrs.str("output.value", "gen_ai.output.messages", "gen_ai.completion"); out != "" {
			end["output_summary"], _ = cut(out)
		}
		out = append(out,
			timed{at: n.start, order: startOrder(n.depth), d: Draft{Time: n.start, Type: lctl.TypeStepStart, Agent: n.agent, Data: startData}},
			timed{at: n.end, order: endOrder(n.depth), d: Draft{Time: n.end, Type: lctl.TypeStepEnd, Agent: n.agent, Data: end}},
		)
	case kindTool:
		tool := n.attrs.str("gen_ai.tool.name", "tool.name", "traceloop.entity.name")
		if tool == "" {
			tool = strings.TrimSpace(strings.TrimPrefix(sanitize(s.GetName()), "execute_tool"))
			if tool == "" {
				tool = "unknown-tool"
			}
			r.Warnings = append(r.Warnings, spanWarning(s, "tool span has no gen_ai.tool.name (or tool.name); tool recorded as %q", tool))
		}
		d := startData
		d["tool"] = tool
		d["duration_ms"] = durMS
		d["status"] = "success"
		if failed {
			d["status"] = "error"
		}
		if n.op == "retriever" || n.op == "reranker" {
			d["tool_type"] = n.op
		} else if tt := n.attrs.str("gen_ai.tool.type"); tt != "" {
			d["tool_type"] = tt
		}
		if id := n.attrs.str("gen_ai.tool.call.id", "tool_call.id"); id != "" {
			d["call_id"] = id
		}
		if in := n.attrs.str("gen_ai.tool.call.arguments", "input.value", "tool.parameters", "traceloop.entity.input"); in != "" {
			d["input"], _ = cut(in)
		}
		if o := n.attrs.str("gen_ai.tool.call.result", "output.value", "traceloop.entity.output"); o != "" {
			d["output"], _ = cut(o)
		}
		// The call is recorded when it ended, with its duration.
		out = append(out, timed{at: n.end, order: endOrder(n.depth), d: Draft{Time: n.end, Type: lctl.TypeToolCall, Agent: n.agent, Data: d}})
	default:
		d := startData
		d["kind"] = strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")
		d["duration_ms"] = durMS
		d["status"] = statusName(s.GetStatus().GetCode())
		out = append(out, timed{at: n.start, order: startOrder(n.depth), d: Draft{Time: n.start, Type: EventSpan, Agent: n.agent, Data: d}})
	}
	out = append(out, errorEvents(n, failed, ref)...)
	return out
}

func outcome(failed bool) string {
	if failed {
		return "error"
	}
	return "success"
}

func statusName(c tracepb.Status_StatusCode) string {
	switch c {
	case tracepb.Status_STATUS_CODE_OK:
		return "ok"
	case tracepb.Status_STATUS_CODE_ERROR:
		return "error"
	}
	return "unset"
}

// errorEvents maps a span's exception events and its ERROR status to LCTL
// error events: one per exception event (recoverable when the span did not
// fail), or one for the status when no exception says more.
func errorEvents(n *node, failed bool, ref map[string]any) []timed {
	s := n.span
	var out []timed
	for _, ev := range s.GetEvents() {
		if ev == nil || ev.GetName() != "exception" {
			continue
		}
		a := attrMap(ev.GetAttributes())
		at := n.end
		if t := ev.GetTimeUnixNano(); t > 0 && t <= 1<<63-1 {
			at = time.Unix(0, int64(t)).UTC()
		}
		typ := a.str("exception.type")
		msg := a.str("exception.message")
		d := errorData(n, typ, cmp.Or(msg, s.GetStatus().GetMessage(), "exception recorded on the span"), !failed, ref)
		if st := a.str("exception.stacktrace"); st != "" {
			d["context"] = map[string]any{"stacktrace": truncate(st, maxValue)}
		}
		// An exception is dated when it was recorded; at the span's end it
		// precedes the span's own end event.
		out = append(out, timed{at: at, order: endOrder(n.depth) - 1, d: Draft{Time: at, Type: lctl.TypeError, Agent: n.agent, Data: d}})
	}
	if failed && len(out) == 0 {
		typ := n.attrs.str("error.type")
		msg := cmp.Or(sanitize(s.GetStatus().GetMessage()), "span ended with status ERROR")
		out = append(out, timed{at: n.end, order: endOrder(n.depth) - 1, d: Draft{Time: n.end, Type: lctl.TypeError, Agent: n.agent, Data: errorData(n, typ, msg, false, ref)}})
	}
	return out
}

// errorData classifies an error by the LCTL taxonomy: what its type and
// message say first (timeout, rate limit, exhausted resources, filtered
// content), else by the kind of span that failed.
func errorData(n *node, typ, msg string, recoverable bool, ref map[string]any) map[string]any {
	if typ == "" {
		typ = n.attrs.str("error.type")
	}
	category, kind := classifyError(n.kind, typ+" "+msg)
	d := map[string]any{
		"category":    category,
		"type":        kind,
		"message":     truncate(msg, maxValue),
		"recoverable": recoverable,
		"otel":        ref,
	}
	if typ != "" {
		d["code"] = truncate(typ, 200)
	}
	return d
}

func classifyError(k spanKind, text string) (category, kind string) {
	t := strings.ToLower(text)
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(t, w) {
				return true
			}
		}
		return false
	}
	switch {
	case has("timeout", "timed out", "deadline"):
		return "execution_error", "timeout"
	case has("ratelimit", "rate limit", "rate_limit", "too many requests", "429"):
		return "execution_error", "rate_limited"
	case has("context_length", "context length", "maximum context", "token limit", "resource_exhausted", "quota"):
		return "execution_error", "resource_exhausted"
	case has("content_filter", "content filter", "safety"):
		return "output_error", "unsafe_content"
	}
	switch k {
	case kindTool:
		return "execution_error", "tool_failure"
	case kindModel:
		return "output_error", "generation_failed"
	case kindAgent, kindStep:
		return "orchestration_error", "delegation_rejected"
	}
	return "execution_error", "unclassified"
}

// Chain is one trace converted into a sealed LCTL chain.
type Chain struct {
	ID       string
	Events   []lctl.Event
	Warnings []Warning
}

// Convert converts resource spans into sealed chains, one per trace, in
// order of each trace's first span. Rejected spans are named in the
// warnings of the result (not of a chain).
func Convert(rss []*tracepb.ResourceSpans) (chains []Chain, rejected int, warnings []Warning, err error) {
	traces, rejected, warnings := Group(rss)
	for _, t := range traces {
		r := ConvertTrace(t, Options{})
		events, err := Seal(t.ChainID, r.Events, 0, "")
		if err != nil {
			return nil, rejected, warnings, err
		}
		chains = append(chains, Chain{ID: t.ChainID, Events: events, Warnings: r.Warnings})
	}
	return chains, rejected, warnings, nil
}

// Seal numbers drafts after seq and links them after prevHash, the way the
// event log seals what it appends.
func Seal(chainID string, drafts []Draft, seq uint64, prevHash string) ([]lctl.Event, error) {
	out := make([]lctl.Event, 0, len(drafts))
	for _, d := range drafts {
		data, err := lctl.DataOf(d.Data)
		if err != nil {
			return nil, fmt.Errorf("chain %s: %w", chainID, err)
		}
		seq++
		e := lctl.Event{ChainID: chainID, Seq: seq, Type: d.Type, Timestamp: lctl.FormatTime(d.Time), Agent: d.Agent, Data: data}
		if err := e.Seal(prevHash); err != nil {
			return nil, err
		}
		prevHash = e.Hash
		out = append(out, e)
	}
	return out, nil
}
