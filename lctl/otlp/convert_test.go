package otlp_test

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/otlp"
)

// convertFile converts a fixture and checks what every conversion must
// give: valid chain ids, sealed chains that verify, timestamps in order.
func convertFile(t *testing.T, name string) []otlp.Chain {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	reqs, err := otlp.ReadJSONFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var rss []*tracepb.ResourceSpans
	for _, r := range reqs {
		rss = append(rss, r.GetResourceSpans()...)
	}
	chains, rejected, warnings, err := otlp.Convert(rss)
	if err != nil || rejected != 0 || len(warnings) != 0 {
		t.Fatalf("convert %s: err %v, rejected %d, warnings %v", name, err, rejected, warnings)
	}
	for _, c := range chains {
		checkChain(t, c.ID, c.Events)
	}
	return chains
}

func checkChain(t *testing.T, id string, events []lctl.Event) {
	t.Helper()
	if err := lctl.ValidateChainID(id); err != nil {
		t.Fatal(err)
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain %s does not verify: %v", id, err)
	}
	if p := lctl.CheckSequence(id, events); len(p) != 0 {
		t.Fatalf("chain %s: %v", id, p)
	}
}

func types(events []lctl.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Agent+":"+e.Type)
	}
	return out
}

func TestOpenInference(t *testing.T) {
	chains := convertFile(t, "openinference.json")
	if len(chains) != 1 || chains[0].ID != "otel-5b8efff798038103d269b633813fc60c" {
		t.Fatalf("chains: %+v", chains)
	}
	c := chains[0]
	want := []string{
		"researcher:step_start", "researcher:step_start", "researcher:step_start", "researcher:step_end",
		"researcher:tool_call", "researcher:error", "researcher:tool_call",
		"researcher:step_start", "researcher:step_end", "researcher:step_end", "researcher:step_end",
	}
	if got := types(c.Events); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	s := lctl.Replay(c.ID, c.Events, 0)
	if s.Tokens.Input != 120 || s.Tokens.Output != 40 {
		t.Errorf("tokens %+v, want 120/40 from llm.token_count.*", s.Tokens)
	}
	if len(s.ToolCalls) != 2 || s.ToolCalls[0].Tool != "web_search" || s.ToolCalls[1].Status != "error" || s.ToolCalls[1].DurationMS != 3000 {
		t.Errorf("tool calls %+v", s.ToolCalls)
	}
	if len(s.Errors) != 1 || s.Errors[0].Category != "execution_error" || s.Errors[0].Type != "timeout" || s.Errors[0].Code != "TimeoutError" || s.Errors[0].Recoverable {
		t.Errorf("errors %+v", s.Errors)
	}
	if !slices.Equal(s.Agents, []string{"researcher"}) {
		t.Errorf("agents %v", s.Agents)
	}
	// The span and its event find each other.
	llm := c.Events[2]
	ref := llm.Data["otel"].(map[string]any)
	if ref["span_id"] != "eee19b7ec3c1b176" || ref["parent_span_id"] != "eee19b7ec3c1b175" || ref["trace_id"] != "5b8efff798038103d269b633813fc60c" || ref["service"] != "research-app" {
		t.Errorf("otel ref %v", ref)
	}
	if m := llm.Data["model"].(map[string]any); m["id"] != "gpt-4o-mini" || m["provider"] != "openai" {
		t.Errorf("model %v", m)
	}
	// The one LLM span without token counts is named in a warning.
	if len(c.Warnings) != 1 || c.Warnings[0].SpanID != "eee19b7ec3c1b179" || !strings.Contains(c.Warnings[0].String(), `"ChatOpenAI"`) {
		t.Errorf("warnings %v", c.Warnings)
	}
}

func TestOpenLLMetryCrewAcrossExports(t *testing.T) {
	chains := convertFile(t, "openllmetry.jsonl")
	if len(chains) != 1 {
		t.Fatalf("%d chains", len(chains))
	}
	c := chains[0]
	s := lctl.Replay(c.ID, c.Events, 0)
	if !slices.Equal(s.Agents, []string{"crew", "Researcher", "Writer"}) {
		t.Errorf("agents %v", s.Agents)
	}
	// Legacy gen_ai.usage.prompt/completion_tokens and the current names.
	if s.Tokens.Input != 500 || s.Tokens.Output != 170 {
		t.Errorf("tokens %+v", s.Tokens)
	}
	var handoffs [][2]string
	for _, e := range c.Events {
		if e.Type == otlp.EventHandoff {
			handoffs = append(handoffs, [2]string{e.Data["from"].(string), e.Data["to"].(string)})
		}
	}
	if !slices.Equal(handoffs, [][2]string{{"crew", "Researcher"}, {"Researcher", "Writer"}}) {
		t.Errorf("handoffs %v", handoffs)
	}
	if len(s.Errors) != 1 || s.Errors[0].Type != "rate_limited" || s.Errors[0].Agent != "Writer" {
		t.Errorf("errors %+v", s.Errors)
	}
	// The HTTP client span is kept as a generic span event.
	if s.EventTypes[otlp.EventSpan] != 1 {
		t.Errorf("generic spans: %v", s.EventTypes)
	}
	// The error of a span comes before the span's own end.
	for i, e := range c.Events {
		if e.Type == lctl.TypeError && c.Events[i+1].Type != lctl.TypeStepEnd {
			t.Errorf("error at %d not followed by its span's step_end", e.Seq)
		}
	}
	// Cost per model: the response model is priced by prefix.
	prices := &analysis.Prices{Models: map[string]analysis.ModelPrice{"gpt-4o": {InputPer1K: 1, OutputPer1K: 2}}}
	st := analysis.ComputeStats(c.ID, c.Events, prices)
	if st.Cost == nil || math.Abs(*st.Cost-0.3) > 1e-9 {
		t.Errorf("cost %v by model %+v", st.Cost, st.CostByModel)
	}
}

func TestGenAIMissingAttributes(t *testing.T) {
	chains := convertFile(t, "genai.json")
	if len(chains) != 2 || chains[1].ID != "otel-4bf92f3577b34da6a3ce929d0e0e4737" {
		t.Fatalf("chains %d", len(chains))
	}
	c := chains[0]
	s := lctl.Replay(c.ID, c.Events, 0)
	if s.Tokens.Input != 500 || s.Tokens.Output != 200 || len(s.ToolCalls) != 2 {
		t.Errorf("state: tokens %+v tools %+v", s.Tokens, s.ToolCalls)
	}
	var msgs []string
	for _, w := range c.Warnings {
		msgs = append(msgs, w.String())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		`span 00f067aa0ba902ba "invoke_agent": agent span has no gen_ai.agent.name`,
		`span 00f067aa0ba902bb "chat": model span has no gen_ai.request.model`,
		`span 00f067aa0ba902bb "chat": gen_ai.usage.input_tokens is not a non-negative whole number`,
		`span 00f067aa0ba902bc "execute_tool": tool span has no gen_ai.tool.name`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in\n%s", want, all)
		}
	}
}

// TestContinuation converts a trace in two exports the way the tracer
// does: the second continues the first without repeating spans, keeping
// timestamps in order and the agents of parents it does not see.
func TestContinuation(t *testing.T) {
	tid := []byte("0123456789abcdef")
	sp := func(id, parent byte, name string, start, end uint64, kv ...*commonpb.KeyValue) *tracepb.Span {
		s := &tracepb.Span{TraceId: tid, SpanId: []byte{0, 0, 0, 0, 0, 0, 0, id}, Name: name, StartTimeUnixNano: start, EndTimeUnixNano: end, Attributes: kv}
		if parent != 0 {
			s.ParentSpanId = []byte{0, 0, 0, 0, 0, 0, 0, parent}
		}
		return s
	}
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	const sec = uint64(1e9)
	batch := func(spans ...*tracepb.Span) *otlp.Trace {
		tr, _, _ := otlp.Group([]*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}})
		return tr[0]
	}
	agent := sp(1, 0, "invoke_agent a", 10*sec, 20*sec, str("gen_ai.operation.name", "invoke_agent"), str("gen_ai.agent.name", "alice"))
	first := otlp.ConvertTrace(batch(agent), otlp.Options{})
	seen := map[string]bool{}
	for _, id := range first.Spans {
		seen[id] = true
	}
	last := first.Events[len(first.Events)-1].Time
	// A tool span of alice's, ended before the agent span, arrives later,
	// with the agent span again (an exporter's retry).
	tool := sp(2, 1, "execute_tool x", 11*sec, 12*sec, str("gen_ai.operation.name", "execute_tool"), str("gen_ai.tool.name", "x"))
	second := otlp.ConvertTrace(batch(agent, tool), otlp.Options{NotBefore: last, PrevAgent: first.LastAgent, Agents: first.Agents, Seen: seen})
	if second.Skipped != 1 || len(second.Events) != 1 {
		t.Fatalf("second: skipped %d, events %+v", second.Skipped, second.Events)
	}
	e := second.Events[0]
	if e.Agent != "alice" || !e.Time.Equal(last) || e.Data["span_time"] != "1970-01-01T00:00:12Z" {
		t.Errorf("late event %+v", e)
	}
}

// TestRejectsBadIDs: spans without valid ids are rejected and named; the
// others in the same request are converted.
func TestRejectsBadIDs(t *testing.T) {
	good := &tracepb.Span{TraceId: []byte("0123456789abcdef"), SpanId: []byte("01234567"), Name: "ok", StartTimeUnixNano: 1, EndTimeUnixNano: 2}
	badTrace := &tracepb.Span{TraceId: []byte("short"), SpanId: []byte("01234567"), Name: "bad-trace"}
	badSpan := &tracepb.Span{TraceId: []byte("0123456789abcdef"), SpanId: make([]byte, 8), Name: "zero-span"}
	chains, rejected, warnings, err := otlp.Convert([]*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{good, badTrace, badSpan}}}}})
	if err != nil || rejected != 2 || len(chains) != 1 || len(chains[0].Events) != 1 {
		t.Fatalf("rejected %d chains %+v err %v", rejected, chains, err)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0].String(), `"bad-trace": rejected: trace id must be 16 bytes`) ||
		!strings.Contains(warnings[1].String(), `"zero-span": rejected: span id`) {
		t.Errorf("warnings %v", warnings)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"resourceSpans": [`, "OTLP JSON: unexpected EOF"},
		{`[]`, "the request must be an object"},
		{`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}`, `$.resourceSpans[0].scopeSpans[0].spans[0].traceId: "xyz" is not a hex id`},
		{`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":5}]}]}]}`, "OTLP JSON"},
		{`{} {}`, "data after the request object"},
	}
	for _, tt := range tests {
		_, err := otlp.DecodeJSON([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeJSON(%s) = %v, want %q", tt.in, err, tt.want)
		}
	}
	// A bad id 3000 levels down is named by the start and the end of its
	// path, not by a path of the whole depth.
	deep := `{"resourceSpans":[],"x":` + strings.Repeat(`{"key":[`, 3000) + `{"spanId":"q"}` + strings.Repeat("]}", 3000) + "}"
	if _, err := otlp.DecodeJSON([]byte(deep)); err == nil || len(err.Error()) > 600 ||
		!strings.Contains(err.Error(), `$.x.key[0].key[0]`) || !strings.Contains(err.Error(), "…") ||
		!strings.Contains(err.Error(), `key[0].spanId: "q" is not a hex id`) {
		t.Errorf("DecodeJSON of a bad id 3000 levels deep: %v", err)
	}
	if _, err := otlp.ReadJSONFile(strings.NewReader("{\"resourceSpans\":[]}\n{bad\n")); err == nil || !strings.Contains(err.Error(), "line 2:") {
		t.Errorf("ReadJSONFile: %v, want an error naming line 2", err)
	}
}

// FuzzConvert feeds arbitrary bytes as OTLP protobuf and JSON: decoding
// may fail, converting must not, and every chain it makes must verify with
// its timestamps in order.
func FuzzConvert(f *testing.F) {
	for _, name := range []string{"openinference.json", "openllmetry.jsonl", "genai.json"} {
		raw, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		if reqs, err := otlp.ReadJSONFile(strings.NewReader(string(raw))); err == nil {
			for _, r := range reqs {
				b, _ := proto.Marshal(r)
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var reqs []*coltracepb.ExportTraceServiceRequest
		if r, err := otlp.DecodeProto(b); err == nil {
			reqs = append(reqs, r)
		}
		if r, err := otlp.DecodeJSON(b); err == nil {
			reqs = append(reqs, r)
		}
		for _, r := range reqs {
			chains, _, _, err := otlp.Convert(r.GetResourceSpans())
			if err != nil {
				t.Fatalf("convert: %v", err)
			}
			for _, c := range chains {
				checkChain(t, c.ID, c.Events)
				_ = analysis.ComputeStats(c.ID, c.Events, nil)
			}
		}
	})
}
