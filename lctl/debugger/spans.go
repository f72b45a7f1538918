package debugger

import (
	"github.com/xct-dev/xct/lctl"
)

// Chains converted from OpenTelemetry (lctl/otlp) nest steps: an agent
// span holds a chain span that holds model and tool spans, all of one
// agent and without step numbers. Their events carry data.otel.span_id
// and parent_span_id, which say exactly which step an event belongs to;
// the debugger follows them instead of guessing by agent.

// spanOf returns an event's OpenTelemetry span id and parent span id.
func spanOf(d map[string]any) (id, parent string) {
	o, ok := d["otel"].(map[string]any)
	if !ok {
		return "", ""
	}
	id, _ = o["span_id"].(string)
	parent, _ = o["parent_span_id"].(string)
	return id, parent
}

// stepLabel is a step node's title: its intent; for a model call (an
// OpenTelemetry LLM/chat span) the model's name; for a span named only by
// its kind, the span's name.
func stepLabel(d map[string]any) string {
	intent := str(d, "intent")
	otelName := ""
	if o, ok := d["otel"].(map[string]any); ok {
		otelName, _ = o["name"].(string)
	}
	switch intent {
	case "llm", "chat", "LLM", "text_completion", "generate_content":
		if m := modelName(d); m != "" {
			return m
		}
	case "agent", "chain", "CHAIN", "AGENT", "":
		if otelName != "" && intent != "" {
			return otelName
		}
	}
	return firstNonEmpty(intent, str(d, "tool"), modelName(d), otelName, "step")
}

// modelName reads data.model: a name, or {id, provider}.
func modelName(d map[string]any) string {
	switch m := d["model"].(type) {
	case string:
		return m
	case map[string]any:
		id, _ := m["id"].(string)
		return id
	}
	return ""
}

// spanOwner finds the open step an event belongs to by its span: its own
// span for a step_end, else its parent span.
func (f *flow) spanOwner(e *lctl.Event) *flowNode {
	id, parent := spanOf(e.Data)
	if e.Type == lctl.TypeStepEnd && id != "" {
		return f.bySpan[id]
	}
	if n := f.bySpan[id]; n != nil && id != "" {
		return n
	}
	if parent != "" {
		return f.bySpan[parent]
	}
	return nil
}

// spanStart finds, looking back from pos, the step_start of the step the
// event at pos belongs to by its span (-1 when the event has no span or
// the start is not within reach).
func spanStart(c *Chain, pos int) int {
	e := &c.Events[pos]
	id, parent := spanOf(e.Data)
	want := parent
	if e.Type == lctl.TypeStepEnd || e.Type == lctl.TypeStepStart {
		want = id
	}
	if want == "" {
		return -1
	}
	for i := pos; i >= 0 && pos-i <= maxStepScan; i-- {
		x := &c.Events[i]
		if x.Type != lctl.TypeStepStart {
			continue
		}
		if sid, _ := spanOf(x.Data); sid == want {
			return i
		}
	}
	return -1
}

// inSpan says whether the event x belongs to the step whose span is id.
func inSpan(x *lctl.Event, id string) bool {
	sid, parent := spanOf(x.Data)
	if x.Type == lctl.TypeStepEnd || x.Type == lctl.TypeStepStart {
		return sid == id
	}
	return parent == id || sid == id
}
