package tracer_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/xct-dev/xct/services/tracer"
)

// BenchmarkOTLPExport measures OTLP ingest end to end: one gRPC export
// (real gRPC on loopback, with a token) of a whole trace of spans per
// iteration, to a tracer that writes each export before answering
// (Hold < 0), on an embedded JetStream server. The trace is an agent's
// root span and its tool calls (two events each: the call and its
// result), so the spans' events land on the chain otel-<trace id> in the
// order they happened. spans/s and events/s are what the exporter sees:
// the export returns once every event is durable.
func BenchmarkOTLPExport(b *testing.B) {
	for _, spans := range []int{100, 2000} {
		b.Run(fmt.Sprintf("spans=%d", spans), func(b *testing.B) { benchOTLPExport(b, spans) })
	}
}

func benchOTLPExport(b *testing.B, spans int) {
	e := newEnv(b)
	tt := startOTLPTracer(b, e, tracer.OTLPConfig{Hold: -1})
	ctx := context.Background()
	var events uint64
	var cpu time.Duration // the process's CPU time in the exports: tracer and NATS server
	trace := 0
	for b.Loop() {
		b.StopTimer()
		trace++
		req, chainID := otlpTrace(trace, spans)
		b.StartTimer()
		c0 := processCPU()
		resp, err := tt.otlp.Export(ctx, req)
		cpu += processCPU() - c0
		if err != nil || resp.GetPartialSuccess().GetRejectedSpans() != 0 {
			b.Fatalf("export: %v, %v", resp, err)
		}
		b.StopTimer()
		n, err := e.log.LastSeq(ctx, chainID)
		if err != nil {
			b.Fatal(err)
		}
		events += n
		b.StartTimer()
	}
	b.ReportMetric(float64(spans*b.N)/b.Elapsed().Seconds(), "spans/s")
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	// On a shared machine the rate depends on the load; CPU per span
	// does not (2 cores / CPU per span is the rate on an idle machine).
	b.ReportMetric(float64(cpu.Microseconds())/float64(spans*b.N), "cpu-µs/span")
}

// otlpTrace is trace number n: an agent's root span and spans-1 tool
// calls inside it, with its chain's id.
func otlpTrace(n, spans int) (*coltracepb.ExportTraceServiceRequest, string) {
	traceID := make([]byte, 16)
	traceID[0] = 0xbe
	binary.BigEndian.PutUint64(traceID[8:], uint64(n))
	const start = uint64(1_700_000_000_000_000_000)
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	spanID := func(i int) []byte {
		id := make([]byte, 8)
		binary.BigEndian.PutUint64(id, uint64(i+1))
		return id
	}
	out := make([]*tracepb.Span, spans)
	out[0] = &tracepb.Span{TraceId: traceID, SpanId: spanID(0), Name: "invoke_agent planner",
		StartTimeUnixNano: start, EndTimeUnixNano: start + uint64(spans+1)*1000,
		Attributes: []*commonpb.KeyValue{str("gen_ai.operation.name", "invoke_agent"), str("gen_ai.agent.name", "planner")}}
	for i := 1; i < spans; i++ {
		out[i] = &tracepb.Span{TraceId: traceID, SpanId: spanID(i), ParentSpanId: spanID(0), Name: "execute_tool fs.read",
			StartTimeUnixNano: start + uint64(i)*1000, EndTimeUnixNano: start + uint64(i)*1000 + 500,
			Attributes: []*commonpb.KeyValue{str("gen_ai.operation.name", "execute_tool"), str("gen_ai.tool.name", "fs.read"),
				str("gen_ai.tool.call.id", fmt.Sprintf("call-%d", i)), str("input.value", `{"path":"README.md"}`)}}
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: out}}}}},
		fmt.Sprintf("otel-%x", traceID)
}
