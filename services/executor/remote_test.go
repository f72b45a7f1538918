package executor

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

// toolServer is a ToolService in the test process.
type toolServer struct {
	xctv1.UnimplementedToolServiceServer
	tools  []*xctv1.ToolDescriptor
	invoke func(ctx context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error)
}

func (s *toolServer) Describe(context.Context, *xctv1.DescribeRequest) (*xctv1.DescribeResponse, error) {
	return &xctv1.DescribeResponse{Tools: s.tools}, nil
}

func (s *toolServer) Invoke(ctx context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
	return s.invoke(ctx, req)
}

// serveTools starts a ToolService on a loopback port, stopped when the
// test ends, and returns its address and a function that stops it now.
func serveTools(tb testing.TB, ts *toolServer) (string, func()) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(tb, err)
	g := grpc.NewServer()
	xctv1.RegisterToolServiceServer(g, ts)
	go func() { _ = g.Serve(lis) }()
	var once sync.Once
	stop := func() { once.Do(g.Stop) }
	tb.Cleanup(stop)
	return lis.Addr().String(), stop
}

func toolDesc(name string, effect xctv1.Effect, idem bool) *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{Name: name, Description: "test " + name, InputSchema: `{"type":"object"}`, Effect: effect, Idempotent: idem}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(tb testing.TB) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(tb, err)
	addr := lis.Addr().String()
	must(tb, lis.Close())
	return addr
}

// junkServer accepts connections and answers with bytes that are not
// HTTP/2, then hangs up.
func junkServer(tb testing.TB) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(tb, err)
	tb.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.0 500 garbage\r\n\r\n\x00\xff\x17 not grpc"))
			_ = c.Close()
		}
	}()
	return lis.Addr().String()
}

func TestExternalTools(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	var deadlines []time.Duration
	lastDeadline := map[string]time.Duration{} // by tool
	long := toolDesc("long", xctv1.Effect_EFFECT_READ, true)
	long.Timeout = durationpb.New(time.Hour)
	ts := &toolServer{
		tools: []*xctv1.ToolDescriptor{
			toolDesc("echo", xctv1.Effect_EFFECT_READ, true),
			toolDesc("hang", xctv1.Effect_EFFECT_IRREVERSIBLE, false),
			toolDesc("garbage", xctv1.Effect_EFFECT_READ, true),
			toolDesc("no-outcome", xctv1.Effect_EFFECT_READ, true),
			toolDesc("bad-code", xctv1.Effect_EFFECT_READ, true),
			toolDesc("not-found", xctv1.Effect_EFFECT_IRREVERSIBLE, false),
			toolDesc("big", xctv1.Effect_EFFECT_READ, true),
			toolDesc("internal", xctv1.Effect_EFFECT_READ, true),
			long,
			{Name: "bad-schema", InputSchema: "{"},
			{Name: "a b", InputSchema: `{"type":"object"}`},
			toolDesc("echo", xctv1.Effect_EFFECT_READ, true), // duplicate
		},
		invoke: func(ctx context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
			dl, _ := ctx.Deadline()
			mu.Lock()
			keys = append(keys, req.GetIdempotencyKey())
			deadlines = append(deadlines, time.Until(dl))
			lastDeadline[req.GetTool()] = deadlines[len(deadlines)-1]
			mu.Unlock()
			switch req.GetTool() {
			case "echo", "long":
				v, _ := structpb.NewValue(map[string]any{"args": req.GetArguments().AsMap(), "key": req.GetIdempotencyKey()})
				return &xctv1.InvokeResponse{Response: &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}}, nil
			case "hang":
				<-ctx.Done()
				return nil, ctx.Err()
			case "garbage":
				return &xctv1.InvokeResponse{}, nil
			case "no-outcome":
				return &xctv1.InvokeResponse{Response: &xctv1.Response{}}, nil
			case "bad-code":
				return &xctv1.InvokeResponse{Response: wire.ErrorResponse(&xctv1.Error{Code: "IN_DOUBT", Message: "trust me", Category: "none", Recoverable: true})}, nil
			case "not-found":
				return &xctv1.InvokeResponse{Response: wire.ErrorResponse(&xctv1.Error{Code: "NOT_FOUND", Message: "no such invoice", Recoverable: false})}, nil
			case "big":
				v := structpb.NewStringValue(strings.Repeat("x", 200<<10))
				return &xctv1.InvokeResponse{Response: &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}}, nil
			}
			return nil, status.Error(codes.Internal, "boom")
		},
	}
	addr, stop := serveTools(t, ts)
	yaml := `servers:
  - name: ext
    address: ` + addr + `
    timeout: 10s
    max_output_bytes: 4096
    tools:
      not-found: {effect: reversible, idempotent: true}
      hang: {timeout: 500ms}
  - name: down
    address: ` + closedAddr(t) + `
  - name: junk
    address: ` + junkServer(t) + `
`
	cfg, err := ParseToolsConfig("tools.yaml", []byte(yaml))
	must(t, err)
	s, err := New(Config{Workspace: t.TempDir(), Tools: cfg}, nil, testLogger(t))
	must(t, err)
	defer func() { _ = s.Stop(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, s.Start(ctx))

	descs := map[string]*xctv1.ToolDescriptor{}
	for _, d := range s.Tools() {
		descs[d.GetName()] = d
		if strings.HasPrefix(d.GetName(), "down.") || strings.HasPrefix(d.GetName(), "junk.") {
			t.Errorf("%s is listed: its server is unreachable", d.GetName())
		}
	}
	for _, name := range []string{"ext.echo", "ext.hang", "ext.garbage", "ext.bad-code", "ext.not-found", "ext.big", "ext.long"} {
		if descs[name] == nil {
			t.Fatalf("%s not listed: %v", name, descs)
		}
	}
	if descs["ext.bad-schema"] != nil || descs["ext.a b"] != nil {
		t.Fatal("invalid tools listed")
	}
	if d := descs["ext.long"]; d.GetTimeout().AsDuration() != 10*time.Second || d.GetMaxOutputBytes() != 4096 || !strings.Contains(d.GetDescription(), "tool server ext") {
		t.Fatalf("caps not applied: %v", d)
	}
	if d := descs["ext.hang"]; d.GetTimeout().AsDuration() != 500*time.Millisecond {
		t.Fatalf("caps not applied: %v", d)
	}
	if d := descs["ext.not-found"]; d.GetEffect() != xctv1.Effect_EFFECT_REVERSIBLE || !d.GetIdempotent() || d.GetEffectFrom() != "config" || d.GetSource() != "grpc:ext" {
		t.Fatalf("override not applied: %v", d)
	}

	id := newStepID()
	r := execStep(t, s, id, "ext.echo", map[string]any{"n": 1})
	got := resultAs[map[string]any](t, r.GetResponse())
	if got["key"] != id || got["args"].(map[string]any)["n"] != float64(1) {
		t.Fatalf("echo: %v", got)
	}
	mu.Lock()
	if dl := deadlines[len(deadlines)-1]; dl <= 0 || dl > 10*time.Second {
		t.Errorf("the server saw a deadline %v away, want the step's (10s)", dl)
	}
	mu.Unlock()

	cases := []struct {
		tool string
		code wire.Code
	}{
		{"ext.hang", wire.CodeTimeout},
		{"ext.garbage", wire.CodeToolFailure},
		{"ext.no-outcome", wire.CodeToolFailure},
		{"ext.bad-code", wire.CodeToolFailure},
		{"ext.not-found", wire.CodeNotFound},
		{"ext.big", wire.CodeOutputTooLarge},
		{"ext.internal", wire.CodeToolFailure},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			e := exec(t, s, c.tool, nil).GetError()
			if e.GetCode() != string(c.code) {
				t.Fatalf("code = %q (%s), want %q", e.GetCode(), e.GetMessage(), c.code)
			}
			// ext.hang ends on its own 500 ms cap, not the server's
			// 10 s: the deadline its call carried says so, whatever the
			// machine's load (the others answer at once; a hang of theirs
			// would end TIMEOUT, not their code).
			if c.tool == "ext.hang" {
				mu.Lock()
				dl, ok := lastDeadline["hang"]
				mu.Unlock()
				if !ok || dl <= 0 || dl > 500*time.Millisecond {
					t.Fatalf("ext.hang's call carried a deadline %v away (seen: %v), want at most its 500ms", dl, ok)
				}
			}
			// The taxonomy is the executor's, whatever the server said.
			want := wire.Errorf(c.code, "")
			if e.GetCategory() != want.GetCategory() || e.GetRecoverable() != want.GetRecoverable() {
				t.Fatalf("taxonomy %v", e)
			}
			if c.tool == "ext.bad-code" && e.GetDetails().AsMap()["reported_code"] != "IN_DOUBT" {
				t.Fatalf("details %v", e.GetDetails())
			}
		})
	}
	// The server goes away: its tools fail, the executor keeps serving. A
	// call on the connection that broke may have reached the server
	// (outcome unknown); once no connection can be made, a call is never
	// sent: a definite failure.
	stop()
	if e := exec(t, s, "ext.echo", nil).GetError(); e.GetCode() != string(wire.CodeToolFailure) {
		t.Fatalf("server gone: %v", e)
	}
	testutil.Eventually(t, time.Minute, func() error {
		e := exec(t, s, "ext.echo", nil).GetError()
		if e.GetCode() != string(wire.CodeToolFailure) || e.GetDetails().AsMap()["outcome_unknown"] != false || !strings.Contains(e.GetMessage(), "not sent") {
			return fmt.Errorf("server gone: %v", e)
		}
		// Nothing acted and the server may come back: the model is told
		// to retry later, not to give the step up.
		if e.GetSuggestedAction() != "retry_later" || !e.GetRecoverable() {
			t.Fatalf("a call not sent to a tool server: suggested_action %q, recoverable %v; want retry_later", e.GetSuggestedAction(), e.GetRecoverable())
		}
		return nil
	})
	if r := exec(t, s, "fs.list", nil); codeOf(r) != "" {
		t.Fatalf("fs.list: %v", r)
	}
}
