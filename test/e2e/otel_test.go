package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
)

// otlpReceiver is a real OTLP/gRPC trace receiver that keeps what it gets.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	// resources holds each span's resource attributes, by span id.
	resources map[string][]*commonpb.KeyValue
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resources == nil {
		r.resources = map[string][]*commonpb.KeyValue{}
	}
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
			for _, s := range ss.GetSpans() {
				r.resources[string(s.GetSpanId())] = rs.GetResource().GetAttributes()
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) snapshot() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rcv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return rcv, lis.Addr().String()
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			switch v := kv.GetValue().GetValue().(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_IntValue:
				return fmt.Sprint(v.IntValue)
			}
		}
	}
	return ""
}

// TestRunIsTracedOverOTLP checks that a run exports one trace over OTLP:
// the run's invoke_agent span, its chat and execute_tool spans, and the
// validator's and executor's gRPC server spans, which prove that trace
// context crossed the hops. It sets the process environment and the global
// tracer provider, so it must not run in parallel.
func TestRunIsTracedOverOTLP(t *testing.T) {
	rcv, addr := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	c := startCluster(t)
	c.writeScript(t, "otel.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: traced.txt, content: "hello"}, goal: write}
  - done: true
    message: written
`)
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:otel.yaml"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || len(run.GetSteps()) != 1 {
		t.Fatalf("run ended %s (%d steps): %s", run.GetStatus(), len(run.GetSteps()), run.GetMessage())
	}
	stepID := run.GetSteps()[0].GetStepId()
	// Stopping the app flushes its spans.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.app.Stop(ctx)

	testutil.Eventually(t, time.Minute, func() error {
		spans := rcv.snapshot()
		var root *tracepb.Span
		for _, s := range spans {
			if strings.HasPrefix(s.GetName(), "invoke_agent ") && spanAttr(s, "gen_ai.conversation.id") == run.GetRunId() {
				root = s
			}
		}
		if root == nil {
			return fmt.Errorf("no invoke_agent span for %s among %d spans", run.GetRunId(), len(spans))
		}
		if got := spanAttr(root, "gen_ai.operation.name"); got != "invoke_agent" {
			return fmt.Errorf("invoke_agent operation %q", got)
		}
		if len(root.GetParentSpanId()) != 0 {
			return fmt.Errorf("invoke_agent is not a root span")
		}
		var step []byte
		for _, s := range spans {
			if s.GetName() == "execute_tool fs.write" {
				step = s.GetSpanId()
			}
		}
		found := map[string]bool{}
		for _, s := range spans {
			if string(s.GetTraceId()) != string(root.GetTraceId()) {
				continue
			}
			switch {
			case strings.HasPrefix(s.GetName(), "chat ") && spanAttr(s, "gen_ai.operation.name") == "chat" && spanAttr(s, "gen_ai.provider.name") == "scripted":
				found["chat"] = true
			case s.GetName() == "execute_tool fs.write":
				if id := spanAttr(s, "gen_ai.tool.call.id"); id != stepID {
					return fmt.Errorf("execute_tool gen_ai.tool.call.id %q, want %q", id, stepID)
				}
				if spanAttr(s, "gen_ai.tool.name") != "fs.write" || spanAttr(s, "lctl.seq") == "" {
					return fmt.Errorf("execute_tool attributes %v", s.GetAttributes())
				}
				found["execute_tool"] = true
			case s.GetKind() == tracepb.Span_SPAN_KIND_SERVER && strings.HasSuffix(s.GetName(), "ValidatorService/Validate"):
				found["validator server"] = true
			case s.GetKind() == tracepb.Span_SPAN_KIND_SERVER && strings.HasSuffix(s.GetName(), "ExecutorService/Execute"):
				found["executor server"] = true
			case s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT && strings.HasSuffix(s.GetName(), "ExecutorService/Execute"):
				// The executor call nests under the step's span.
				found["executor call under the step"] = string(s.GetParentSpanId()) == string(step)
			}
		}
		for _, want := range []string{"chat", "execute_tool", "validator server", "executor server", "executor call under the step"} {
			if !found[want] {
				return fmt.Errorf("no %s span in the run's trace (have %v)", want, found)
			}
		}
		return nil
	})
}
