package tracer_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/cli"
	"github.com/xct-dev/xct/services/tracer"
)

// otlpTracer is a started tracer with its gRPC and HTTP addresses.
type otlpTracer struct {
	svc      *tracer.Service
	client   lctlv1.TracerServiceClient
	otlp     coltracepb.TraceServiceClient
	grpcAddr string
	// token is a submitter's: it may export spans and read chains.
	token   string
	httpURL string
	// creds are the principals' credentials (alice's is token).
	creds *grpcxtest.Creds
}

func startOTLPTracer(t testing.TB, e *env, cfg tracer.OTLPConfig) *otlpTracer {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	svc, err := tracer.New(tracer.Config{DataDir: e.dataDir, Replicas: 1, HTTPListen: "127.0.0.1:0", OTLP: cfg}, e.nc, log)
	if err != nil {
		t.Fatal(err)
	}
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("tracer", log, creds.ServerOptions()...)
	svc.Register(srv.GRPC)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpcx.Dial(srv.Addr(), grpcx.WithToken(creds.Token(t, "alice")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		conn.Close()
		srv.Stop(ctx)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop tracer: %v", err)
		}
	})
	return &otlpTracer{
		svc: svc, client: lctlv1.NewTracerServiceClient(conn), otlp: coltracepb.NewTraceServiceClient(conn),
		grpcAddr: srv.Addr(), token: creds.Token(t, "alice"), httpURL: "http://" + svc.HTTPAddr() + tracer.OTLPTracesPath,
		creds: creds,
	}
}

// agentRun records, with the OTel SDK, what an instrumented agent framework
// would: an agent that calls a model and a tool, then hands off to a
// reviewer whose tool fails. It returns the trace id.
func agentRun(ctx context.Context, tr trace.Tracer) trace.TraceID {
	ctx, root := tr.Start(ctx, "invoke_agent planner", trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", "planner"),
		attribute.String("gen_ai.conversation.id", "conv-1"),
	))
	_, chat := tr.Start(ctx, "chat gpt-4o", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", "gpt-4o"),
		attribute.Int("gen_ai.usage.input_tokens", 500),
		attribute.Int("gen_ai.usage.output_tokens", 200),
	))
	chat.End()
	_, tool := tr.Start(ctx, "execute_tool fs.read", trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", "fs.read"),
		attribute.String("gen_ai.tool.call.id", "call-1"),
	))
	tool.End()
	rctx, reviewer := tr.Start(ctx, "invoke_agent reviewer", trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", "reviewer"),
	))
	_, failing := tr.Start(rctx, "execute_tool http.request", trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", "http.request"),
	))
	failing.RecordError(errors.New("dial tcp 127.0.0.1:9: connection refused"))
	failing.SetStatus(codes.Error, "connection refused")
	failing.End()
	reviewer.End()
	root.End()
	return root.SpanContext().TraceID()
}

// wantRun is the chain agentRun makes, as agent:type.
var wantRun = []string{
	"planner:step_start",
	"planner:step_start", "planner:step_end", // chat
	"planner:tool_call",
	"planner:handoff",
	"reviewer:step_start",
	"reviewer:error", "reviewer:tool_call",
	"reviewer:step_end",
	"planner:step_end",
}

func TestOTLPExportersToChains(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Hold is long enough that the one-span-per-export exporter never
	// leaves a gap that long before the root span, short enough for the
	// late span below not to make the test slow.
	tt := startOTLPTracer(t, e, tracer.OTLPConfig{Hold: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res := resource.NewSchemaless(attribute.String("service.name", "agent-app"))

	grpcExp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(tt.grpcAddr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithHeaders(map[string]string{"authorization": "Bearer " + tt.token}))
	if err != nil {
		t.Fatal(err)
	}
	httpExp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(tt.httpURL), otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tp   *sdktrace.TracerProvider
	}{
		// One export per span: the root arrives last, so the tracer holds
		// the children until it comes.
		{"grpc", sdktrace.NewTracerProvider(sdktrace.WithSyncer(grpcExp), sdktrace.WithResource(res))},
		// One batch, gzip-compressed protobuf over HTTP.
		{"http", sdktrace.NewTracerProvider(sdktrace.WithBatcher(httpExp), sdktrace.WithResource(res))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tid := agentRun(ctx, tc.tp.Tracer("test"))
			if err := tc.tp.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			chainID := "otel-" + tid.String()
			if err := tt.svc.WaitForSeq(ctx, chainID, uint64(len(wantRun))); err != nil {
				t.Fatal(err)
			}
			got, err := tt.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: chainID})
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, ev := range got.GetEvents() {
				types = append(types, ev.GetAgent()+":"+ev.GetType())
			}
			if !slices.Equal(types, wantRun) {
				t.Fatalf("events:\n got %v\nwant %v", types, wantRun)
			}
			stats, err := tt.client.ChainStats(ctx, &lctlv1.ChainStatsRequest{ChainId: chainID})
			if err != nil {
				t.Fatal(err)
			}
			st := stats
			if st.GetTokensIn() != 500 || st.GetTokensOut() != 200 || st.GetToolCalls() != 2 || st.GetErrors() != 1 ||
				!slices.Equal(st.GetAgents(), []string{"planner", "reviewer"}) {
				t.Errorf("stats %v", st)
			}
			// lctl itself, against the live chain.
			for _, args := range [][]string{{"replay"}, {"stats"}, {"verify"}} {
				var out, errOut bytes.Buffer
				argv := append(append([]string{}, args...), "--tracer="+tt.grpcAddr, "--token="+tt.token, "--chain", chainID)
				if code := cli.Run(ctx, argv, cli.Env{Stdout: &out, Stderr: &errOut, Live: lctllive.Live{}}); code != 0 {
					t.Fatalf("lctl %v: exit %d\n%s%s", args, code, out.String(), errOut.String())
				}
				if args[0] == "replay" && !strings.Contains(out.String(), "reviewer: error") {
					t.Errorf("lctl replay:\n%s", out.String())
				}
				if args[0] == "stats" && !strings.Contains(out.String(), "Tokens: 700 (in: 500 / out: 200)") {
					t.Errorf("lctl stats:\n%s", out.String())
				}
			}
			if err := tc.tp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}

	// A span of the same trace exported after the trace was written
	// continues its chain.
	t.Run("late span", func(t *testing.T) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(must(otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(tt.httpURL)))))
		defer func() { _ = tp.Shutdown(ctx) }()
		tid := agentRun(ctx, tp.Tracer("test"))
		chainID := "otel-" + tid.String()
		if err := tt.svc.WaitForSeq(ctx, chainID, uint64(len(wantRun))); err != nil {
			t.Fatal(err)
		}
		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled, Remote: true})
		_, late := tp.Tracer("test").Start(trace.ContextWithRemoteSpanContext(ctx, parent), "execute_tool fs.write", trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", "fs.write")))
		late.End()
		// The late span has a (remote) parent and no root follows: it is
		// written once Hold has passed.
		if err := tt.svc.WaitForSeq(ctx, chainID, uint64(len(wantRun))+1); err != nil {
			t.Fatal(err)
		}
		got, err := tt.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: chainID})
		if err != nil {
			t.Fatal(err)
		}
		evs := got.GetEvents()
		last := evs[len(evs)-1]
		if last.GetType() != lctl.TypeToolCall || !strings.Contains(string(must(protojson.Marshal(last))), "fs.write") {
			t.Errorf("late event %v", last)
		}
		ver, err := tt.client.VerifyChain(ctx, &lctlv1.VerifyChainRequest{ChainId: chainID})
		if err != nil || !ver.GetOk() {
			t.Errorf("verify after a late append: %v %v", ver, err)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func post(t *testing.T, url, contentType, encoding string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestOTLPBadInput: what a broken or hostile exporter gets back, and that a
// payload missing attributes is still converted, with warnings naming the
// spans.
func TestOTLPBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := startOTLPTracer(t, e, tracer.OTLPConfig{MaxBody: 64 << 10, Hold: -1})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	statusOf := func(ct string, b []byte) string {
		st := &spb.Status{}
		var err error
		if ct == "application/json" {
			err = protojson.Unmarshal(b, st)
		} else {
			err = proto.Unmarshal(b, st)
		}
		if err != nil {
			t.Fatalf("response is not a google.rpc.Status: %v: %q", err, b)
		}
		return st.GetMessage()
	}
	tests := []struct {
		name, ct, enc string
		body          []byte
		code          int
		msg           string
	}{
		{"malformed protobuf", "application/x-protobuf", "", []byte{0x0a, 0xff, 0xff}, 400, "OTLP protobuf"},
		{"malformed JSON", "application/json", "", []byte(`{"resourceSpans": [`), 400, "OTLP JSON: unexpected EOF"},
		{"bad hex id", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`), 400, `traceId: "zz" is not a hex id`},
		{"bad gzip", "application/json", "gzip", []byte("not gzip"), 400, "gzip body"},
		{"oversized", "application/x-protobuf", "", make([]byte, 65<<10), 413, "over the limit"},
		{"gzip bomb", "application/x-protobuf", "gzip", gz(t, make([]byte, 4<<20)), 413, "over the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, b := post(t, tt.httpURL, tc.ct, tc.enc, tc.body)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, b)
			}
			if msg := statusOf(tc.ct, b); !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q, want %q", msg, tc.msg)
			}
		})
	}
	if code, _ := post(t, tt.httpURL, "text/plain", "", []byte("x")); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d", code)
	}
	if code, _ := post(t, tt.httpURL, "application/json", "br", []byte("x")); code != http.StatusUnsupportedMediaType {
		t.Errorf("Content-Encoding br: %d", code)
	}
	if resp, err := http.Get(tt.httpURL); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}

	// Missing attributes (the converter's fixture): 200, converted, with
	// partial_success naming the spans and nothing rejected.
	raw, err := os.ReadFile("../../lctl/otlp/testdata/genai.json")
	if err != nil {
		t.Fatal(err)
	}
	code, b := post(t, tt.httpURL, "application/json", "", raw)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	resp := &coltracepb.ExportTraceServiceResponse{}
	if err := protojson.Unmarshal(b, resp); err != nil {
		t.Fatal(err)
	}
	ps := resp.GetPartialSuccess()
	if ps.GetRejectedSpans() != 0 || !strings.Contains(ps.GetErrorMessage(), `span 00f067aa0ba902bc "execute_tool": tool span has no gen_ai.tool.name`) {
		t.Errorf("partial success %v", ps)
	}
	if err := tt.svc.WaitForSeq(ctx, "otel-4bf92f3577b34da6a3ce929d0e0e4736", 11); err != nil {
		t.Fatal(err)
	}

	// Over gRPC: a span without a valid trace id is rejected and counted;
	// the valid span next to it is written.
	good, _ := hex.DecodeString("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
		{TraceId: []byte("short"), SpanId: []byte("01234567"), Name: "broken"},
		{TraceId: good, SpanId: []byte("01234567"), Name: "fine", StartTimeUnixNano: uint64(time.Now().UnixNano()), EndTimeUnixNano: uint64(time.Now().UnixNano())},
	}}}}}}
	gr, err := tt.otlp.Export(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if gr.GetPartialSuccess().GetRejectedSpans() != 1 || !strings.Contains(gr.GetPartialSuccess().GetErrorMessage(), `"broken": rejected: trace id must be 16 bytes`) {
		t.Errorf("gRPC partial success %v", gr.GetPartialSuccess())
	}
	if err := tt.svc.WaitForSeq(ctx, "otel-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 1); err != nil {
		t.Fatal(err)
	}
}

// TestOTLPHTTPNeedsAToken: with authentication on, an OTLP/HTTP export
// without a valid bearer token is refused before its body is read (401), a
// principal without the submitter role gets 403, and neither writes a
// chain; a submitter's export is accepted.
func TestOTLPHTTPNeedsAToken(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(`
- {principal: agent, roles: [submitter], token: agent-secret-token}
- {principal: dave, roles: [auditor], token: dave-secret-token}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(context.Background(), auth.Config{TokensFile: tokens}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	r := e.startTracerWith(t, tracer.Config{HTTPListen: "127.0.0.1:0", OTLP: tracer.OTLPConfig{Hold: -1}, OTLPAuthorize: tracer.OTLPAuthorizer(a)})
	url := "http://" + r.svc.HTTPAddr() + tracer.OTLPTracesPath
	raw, err := os.ReadFile("../../lctl/otlp/testdata/genai.json")
	if err != nil {
		t.Fatal(err)
	}
	send := func(token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	chains := func() int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		resp, err := r.client.ListChains(ctx, &lctlv1.ListChainsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetChains())
	}
	for _, tc := range []struct {
		name, token string
		code        int
		msg         string
	}{
		{"no token", "", http.StatusUnauthorized, "bearer token is required"},
		{"unknown token", "not-a-real-token-at-all", http.StatusUnauthorized, "bearer token is required"},
		{"auditor", "dave-secret-token", http.StatusForbidden, "dave may not export traces"},
	} {
		if code, body := send(tc.token); code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %d %s, want %d %q", tc.name, code, body, tc.code, tc.msg)
		}
	}
	if n := chains(); n != 0 {
		t.Fatalf("refused exports wrote %d chains", n)
	}
	if code, body := send("agent-secret-token"); code != http.StatusOK {
		t.Fatalf("submitter: %d %s", code, body)
	}
	testutil.Eventually(t, waitTimeout, func() error {
		if n := chains(); n == 0 {
			return errors.New("no chain yet")
		}
		return nil
	})
	// The chain's first event names its exporter, the token's principal.
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	list, err := r.client.ListChains(ctx, &lctlv1.ListChainsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, func() error {
		got, err := r.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: list.GetChains()[0].GetChainId()})
		if err != nil || len(got.GetEvents()) == 0 {
			return fmt.Errorf("chain: %w", err)
		}
		if ref, _ := got.GetEvents()[0].GetData().AsMap()["otel"].(map[string]any); ref["exporter"] != "agent" {
			return fmt.Errorf("the first event's otel reference: %v", ref)
		}
		return nil
	})
}

// TestOTLPTraceIsItsExportersOwn: the chain of a trace takes the spans of
// the principal who exported its first ones, and no other's: another
// submitter knows the trace id (ListChains shows it) and must not add to
// that trace. Spans are held per exporter, so the other's spans held for
// the same trace neither mix into the first one's nor hold them back.
func TestOTLPTraceIsItsExportersOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := startOTLPTracer(t, e, tracer.OTLPConfig{Hold: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	traceID := []byte{0x0e, 0x11, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f}
	id := "otel-" + hex.EncodeToString(traceID)
	dev := coltracepb.NewTraceServiceClient(tt.creds.Dial(t, tt.grpcAddr, "dev"))
	root := func(b byte) []byte { return []byte{b, b, b, b, b, b, b, b} }
	export := func(c coltracepb.TraceServiceClient, span, parent []byte) *coltracepb.ExportTraceServiceResponse {
		t.Helper()
		now := uint64(time.Now().UnixNano())
		resp, err := c.Export(ctx, &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: traceID, SpanId: span, ParentSpanId: parent, Name: "work", StartTimeUnixNano: now, EndTimeUnixNano: now + 1000,
		}}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// alice's child span and dev's are held, each for its exporter.
	if r := export(tt.otlp, root(2), root(1)); r.GetPartialSuccess().GetRejectedSpans() != 0 {
		t.Fatalf("alice's child span: %v", r)
	}
	if r := export(dev, root(9), root(1)); r.GetPartialSuccess().GetRejectedSpans() != 0 {
		t.Fatalf("dev's child span: %v", r)
	}
	// alice's root writes her trace: her two spans, not dev's.
	if r := export(tt.otlp, root(1), nil); r.GetPartialSuccess().GetRejectedSpans() != 0 {
		t.Fatalf("alice's root span: %v", r)
	}
	// dev's root: dev's spans are refused, not retried.
	r := export(dev, root(8), nil)
	if r.GetPartialSuccess().GetRejectedSpans() != 2 || !strings.Contains(r.GetPartialSuccess().GetErrorMessage(), "another exporter") {
		t.Fatalf("dev's spans for alice's trace: %v", r)
	}
	events, err := e.log.ReadChain(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var spans []string
	for _, ev := range events {
		if ref, ok := ev.Data["otel"].(map[string]any); ok {
			spans = append(spans, fmt.Sprint(ref["span_id"]))
		}
	}
	slices.Sort(spans)
	if fmt.Sprint(spans) != "[0101010101010101 0202020202020202]" {
		t.Fatalf("the trace's chain holds spans %v, want alice's two", spans)
	}
	if ref, _ := events[0].Data["otel"].(map[string]any); ref["exporter"] != "alice" {
		t.Errorf("the first event's otel reference: %v", ref)
	}
	for _, ev := range events[1:] {
		if ref, _ := ev.Data["otel"].(map[string]any); ref["exporter"] != nil {
			t.Errorf("event %d (%s) names the exporter too: %v", ev.Seq, ev.Type, ref)
		}
	}
}

// TestOTLPNeverWritesAForeignChain: the tracer resumes the chain
// otel-<trace id> to append a trace's spans; a chain of that id that it
// did not start (another writer's: a run started under that id before
// StartRun refused it) is not its to extend. The spans are refused, the
// exporter told so, and the chain stays as its writer left it.
func TestOTLPNeverWritesAForeignChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := startOTLPTracer(t, e, tracer.OTLPConfig{Hold: -1})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	traceID := []byte{0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f}
	id := "otel-" + hex.EncodeToString(traceID)
	foreign := appendGenerated(t, e, id, 3)
	now := uint64(time.Now().UnixNano())
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: traceID, SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Name: "work", StartTimeUnixNano: now, EndTimeUnixNano: now + 1000,
	}}}}}}}
	resp, err := tt.otlp.Export(ctx, req)
	if err != nil {
		t.Fatalf("export: %v (a foreign chain is a refusal, not a failure to retry)", err)
	}
	if resp.GetPartialSuccess().GetRejectedSpans() != 1 || !strings.Contains(resp.GetPartialSuccess().GetErrorMessage(), "not written by the tracer") {
		t.Fatalf("export: %v", resp)
	}
	events, err := e.log.ReadChain(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != len(foreign) || events[len(events)-1].Hash != foreign[len(foreign)-1].Hash {
		t.Fatalf("the foreign chain has %d events, want its writer's %d", len(events), len(foreign))
	}
}

// TestOTLPChainsOldAndNew runs the tracer as its own NATS user (which may
// publish to the otel chains' stream, LCTL_OTEL, and to no run's chain).
// A chain an older tracer wrote at its old subject on LCTL
// (lctl.chain.otel-<trace id>) is still materialized and served; spans of
// its trace are refused (the tracer cannot append there any more, and a
// second chain of the same id is not started), the exporter told why. A
// new trace's chain is written on LCTL_OTEL and served.
func TestOTLPChainsOldAndNew(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	admin := testutil.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	l, err := eventlog.Open(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	oldTrace := []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01}
	oldID := "otel-" + hex.EncodeToString(oldTrace)
	prev := ""
	for i := range 2 {
		e := lctl.Event{ChainID: oldID, Seq: uint64(i + 1), Type: lctl.TypeStepStart, Timestamp: "2026-01-01T00:00:00Z", Agent: "agent",
			Data: map[string]any{"otel": map[string]any{"span_id": fmt.Sprint(i)}}}
		raw, err := e.SealEncoded(prev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.JetStream().Publish(ctx, eventlog.LegacySubject(oldID), raw); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
	}
	tracerConn, err := nats.Connect(ns.ClientURL(), testutil.NATSAs(natsauth.Tracer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tracerConn.Close)
	tt := startOTLPTracer(t, &env{nc: tracerConn, log: l, dataDir: t.TempDir()}, tracer.OTLPConfig{Hold: -1})
	served := func(id string, n int) {
		t.Helper()
		testutil.Eventually(t, waitTimeout, func() error {
			got, err := tt.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: id})
			if err != nil {
				return err
			}
			if len(got.GetEvents()) != n {
				return fmt.Errorf("%s: %d events served, want %d", id, len(got.GetEvents()), n)
			}
			return nil
		})
	}
	served(oldID, 2)
	now := uint64(time.Now().UnixNano())
	span := func(trace []byte) *coltracepb.ExportTraceServiceRequest {
		return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: trace, SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Name: "work", StartTimeUnixNano: now, EndTimeUnixNano: now + 1000,
		}}}}}}}
	}
	resp, err := tt.otlp.Export(ctx, span(oldTrace))
	if err != nil {
		t.Fatalf("export to the old chain: %v (a refusal, not a failure to retry)", err)
	}
	if resp.GetPartialSuccess().GetRejectedSpans() != 1 || !strings.Contains(resp.GetPartialSuccess().GetErrorMessage(), "old subject") {
		t.Fatalf("export to the old chain: %v", resp)
	}
	if events, err := l.ReadChain(ctx, oldID); err != nil || len(events) != 2 || events[1].Hash != prev {
		t.Fatalf("the old chain after the export: %d events, %v", len(events), err)
	}
	newTrace := []byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10}
	newID := "otel-" + hex.EncodeToString(newTrace)
	resp, err = tt.otlp.Export(ctx, span(newTrace))
	if err != nil || resp.GetPartialSuccess().GetRejectedSpans() != 0 {
		t.Fatalf("export of a new trace: %v, %v", resp, err)
	}
	events, err := l.ReadChain(ctx, newID)
	if err != nil || len(events) == 0 {
		t.Fatalf("the new chain: %d events, %v", len(events), err)
	}
	otelStream, err := l.JetStream().Stream(ctx, eventlog.OTelStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otelStream.GetLastMsgForSubject(ctx, eventlog.Subject(newID)); err != nil {
		t.Fatalf("the new chain is not on %s: %v", eventlog.OTelStreamName, err)
	}
	served(newID, len(events))
	// A trace big enough to be written in atomic batches: the tracer's
	// user may (a batch is publishes to the chain's subject and a
	// request committing it).
	big, bigID := otlpTrace(3, eventlog.MinDiskBatch+44)
	if resp, err := tt.otlp.Export(ctx, big); err != nil || resp.GetPartialSuccess().GetRejectedSpans() != 0 {
		t.Fatalf("export of a %d-span trace: %v, %v", eventlog.MinDiskBatch+44, resp, err)
	}
	if n, err := l.LastSeq(ctx, bigID); err != nil || n != eventlog.MinDiskBatch+45 {
		t.Fatalf("the big trace's chain: %d events, %v; want %d", n, err, eventlog.MinDiskBatch+45)
	}
}

// TestOTLPSpansRedacted (session 10, lead; trust10c found it): a secret in
// what an exporter's spans carry — an attribute stored under a secret's
// key, a token's shape inside another attribute, a status message — is
// replaced by a marker before the span goes on its chain, which every
// reader reads and nothing purges. Before, the chain held them as sent.
func TestOTLPSpansRedacted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := startOTLPTracer(t, e, tracer.OTLPConfig{Hold: -1})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	const token = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	const password = "hunter2-correct-horse"
	traceID, _ := hex.DecodeString("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	now := uint64(time.Now().UnixNano())
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: traceID, SpanId: []byte("01234567"), Name: "execute_tool http.request",
		StartTimeUnixNano: now, EndTimeUnixNano: now + 1000,
		Attributes: []*commonpb.KeyValue{
			str("gen_ai.operation.name", "execute_tool"),
			str("gen_ai.tool.name", "http.request"),
			str("gen_ai.tool.call.arguments", `{"url": "https://api.test/x", "headers": {"Authorization": "Bearer `+token+`"}}`),
			str("db.password", password),
		},
		Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "401 for token " + token},
	}}}}}}}
	if _, err := tt.otlp.Export(ctx, req); err != nil {
		t.Fatal(err)
	}
	const chainID = "otel-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	if err := tt.svc.WaitForSeq(ctx, chainID, 2); err != nil { // the span is two events: its error and its tool call
		t.Fatal(err)
	}
	got, err := tt.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: chainID})
	if err != nil {
		t.Fatal(err)
	}
	chain := string(must(protojson.Marshal(got)))
	for _, secret := range []string{token, token[4:], password} {
		if strings.Contains(chain, secret) {
			t.Errorf("the chain holds %q:\n%s", secret, chain)
		}
	}
	if !strings.Contains(chain, redact.MarkerPrefix) || !strings.Contains(chain, "http.request") || !strings.Contains(chain, "api.test") {
		t.Errorf("the span is not on the chain with its secrets marked:\n%s", chain)
	}
}

// TestOTLPTraceWrittenWholeOrNotAtAll (session 15, ops15): the tracer
// writes a trace's events in atomic batches (on this one-replica stream,
// a write of eventlog.MinDiskBatch events or more). With its stream
// (LCTL_OTEL) refusing past a few messages, an export of a 300-span
// trace failed with Unavailable, so the exporter retries, and left
// nothing of the trace on its chain; before, the tracer appended one
// event at a time and left the events that fit (a chain whose agent span
// had started and never ended, its spans marked converted, so a retry
// never finished it). The retry after the limit is lifted writes the
// whole trace, its hashes intact.
func TestOTLPTraceWrittenWholeOrNotAtAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := startOTLPTracer(t, e, tracer.OTLPConfig{Hold: -1})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	js := e.log.JetStream()
	otel, err := js.Stream(ctx, eventlog.OTelStreamName)
	if err != nil {
		t.Fatal(err)
	}
	setLimit := func(maxMsgs int64) {
		t.Helper()
		c := otel.CachedInfo().Config
		c.MaxMsgs, c.Discard = maxMsgs, jetstream.DiscardNew
		if _, err := js.UpdateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	setLimit(10)
	const spans = 300
	req, chainID := otlpTrace(1, spans)
	if _, err := tt.otlp.Export(ctx, req); status.Code(err) != grpccodes.Unavailable {
		t.Fatalf("export past the stream's limit: %v, want Unavailable (the exporter retries)", err)
	}
	if _, err := e.log.LastSeq(ctx, chainID); !errors.Is(err, eventlog.ErrChainNotFound) {
		t.Fatalf("after the refused export the chain %s exists (%v): part of the trace was written", chainID, err)
	}
	info, err := otel.Info(ctx)
	if err != nil || info.State.Msgs != 0 {
		t.Fatalf("%s holds %d messages after the refused export (%v), want 0", eventlog.OTelStreamName, info.State.Msgs, err)
	}
	setLimit(-1)
	resp, err := tt.otlp.Export(ctx, req)
	if err != nil || resp.GetPartialSuccess().GetRejectedSpans() != 0 {
		t.Fatalf("the exporter's retry: %v, %v", resp, err)
	}
	events, err := e.log.ReadChain(ctx, chainID)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	var starts, ends, tools int
	for _, ev := range events {
		switch ev.Type {
		case lctl.TypeStepStart:
			starts++
		case lctl.TypeStepEnd:
			ends++
		case lctl.TypeToolCall:
			tools++
		}
	}
	if starts != 1 || ends != 1 || tools != spans-1 || events[len(events)-1].Type != lctl.TypeStepEnd {
		t.Fatalf("the trace's chain: %d events, %d step starts, %d ends, %d tool calls; want the agent's step around %d tool calls", len(events), starts, ends, tools, spans-1)
	}
}
