package session_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/session"
)

// steps records the spec's custom-orchestrator example (part 7).
func steps(t *testing.T, s *session.Session) {
	t.Helper()
	ctx := context.Background()
	step, err := s.StepStart(ctx, "Analyze requirements", "spec.md", map[string]any{"model": "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddFact(ctx, session.Fact{ID: "F1", Text: "Requirements analyzed", Confidence: 0.9, Tags: []string{"req"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ToolCall(ctx, session.ToolCall{Tool: "read", Input: map[string]string{"path": "spec.md"}, Output: 42, Duration: 3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	c := 0.95
	if _, err := s.Agent("reviewer").ModifyFact(ctx, session.FactChange{ID: "F1", Confidence: &c, Reason: "verified"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Error(ctx, session.ErrorInfo{Category: "execution_error", Type: "timeout", Message: "slow", Recoverable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := step.End(ctx, "success", "done", lctl.Tokens{Input: 10, Output: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddFact(ctx, session.Fact{ID: "F2", Text: "Code generated", Confidence: 0.85}); err != nil {
		t.Fatal(err)
	}
}

func TestFileSession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workflow.lctl.json")
	s, err := session.NewFile("workflow", path, session.Options{Agent: "planner"})
	if err != nil {
		t.Fatal(err)
	}
	steps(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddFact(context.Background(), session.Fact{ID: "F3"}); !errors.Is(err, session.ErrClosed) {
		t.Errorf("record after close: %v", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := lctl.DecodeFile(bytes.NewReader(raw), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Events) != 8 || f.Chain.ID != "workflow" {
		t.Fatalf("%d events of %s", len(f.Events), f.Chain.ID)
	}
	// The hash chain and the checkpoint's state hash check out.
	if r := analysis.Verify("workflow", f.Events); !r.OK {
		t.Fatalf("the session's file does not verify: %+v", r.Problems)
	}
	st := lctl.Replay("workflow", f.Events, 0)
	if len(st.Facts) != 2 || *st.Facts["F1"].Confidence != 0.95 || st.Tokens.Input != 10 || len(st.Errors) != 1 || st.Agents[0] != "planner" {
		t.Errorf("state = %+v", st)
	}
	cp := f.Events[6]
	want, _ := lctl.Replay("workflow", f.Events, 6).Hash()
	if cp.Type != "checkpoint" || cp.Agent != session.SystemAgent || cp.Data["state_hash"] != want {
		t.Errorf("checkpoint = %+v, want state_hash %s", cp, want)
	}
	if tc := f.Events[2].Data; tc["output"] != 42.0 || tc["duration_ms"] != 3.0 || tc["status"] != "success" {
		t.Errorf("tool call = %v", tc)
	}
}

func TestSessionValidation(t *testing.T) {
	if _, err := session.New("bad id!", session.Options{}); !errors.Is(err, lctl.ErrInvalidChainID) {
		t.Errorf("bad chain id: %v", err)
	}
	s, _ := session.New("v", session.Options{})
	ctx := context.Background()
	for name, err := range map[string]error{
		"fact without id":   func() error { _, err := s.AddFact(ctx, session.Fact{}); return err }(),
		"confidence > 1":    func() error { _, err := s.AddFact(ctx, session.Fact{ID: "F", Confidence: 1.5}); return err }(),
		"tool without name": func() error { _, err := s.ToolCall(ctx, session.ToolCall{}); return err }(),
		"no type":           func() error { _, err := s.Record(ctx, "", "a", nil); return err }(),
		"not JSON":          func() error { _, err := s.Record(ctx, "x", "a", map[string]any{"f": func() {}}); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if len(s.Events()) != 0 {
		t.Errorf("rejected events were recorded: %v", s.Events())
	}
}

// TestClockNeverGoesBack: a clock that jumps back does not make the
// session's timestamps go backwards.
func TestClockNeverGoesBack(t *testing.T) {
	times := []time.Time{time.Date(2024, 1, 1, 0, 0, 10, 0, time.UTC), time.Date(2024, 1, 1, 0, 0, 5, 0, time.UTC)}
	i := 0
	s, _ := session.New("clock", session.Options{Now: func() time.Time { t := times[min(i, 1)]; i++; return t }})
	for range 2 {
		if _, err := s.Record(context.Background(), "x", "a", nil); err != nil {
			t.Fatal(err)
		}
	}
	if ps := lctl.CheckSequence("clock", s.Events()); len(ps) != 0 {
		t.Errorf("problems: %v", ps)
	}
}

func TestNATSSession(t *testing.T) {
	ns := testutil.RunJetStream(t)
	nc := testutil.Connect(t, ns)
	ctx := context.Background()
	s, err := lctllive.NewSession(ctx, nc, "nats-run", session.Options{Agent: "planner", KeepEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	steps(t, s)
	log, err := eventlog.Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := log.ReadChain(ctx, "nats-run")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 8 {
		t.Fatalf("%d events on the stream", len(stored))
	}
	if r := analysis.Verify("nats-run", stored); !r.OK {
		t.Fatalf("the stream's chain does not verify: %+v", r.Problems)
	}
	if kept := s.Events(); kept[7].Hash != stored[7].Hash {
		t.Errorf("kept events differ from the stream's")
	}
	path := filepath.Join(t.TempDir(), "out.lctl.yaml")
	if err := s.Export(path); err != nil {
		t.Fatal(err)
	}
	// A second writer of the same chain is refused: one writer per chain.
	s2, err := lctllive.NewSession(ctx, nc, "nats-run", session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Record(ctx, "x", "a", nil); !errors.Is(err, eventlog.ErrConflict) {
		t.Errorf("second writer: %v", err)
	}
	if !errors.Is(s2.Err(), eventlog.ErrConflict) {
		t.Errorf("Err() = %v", s2.Err())
	}
	// Without KeepEvents nothing is kept, and Export says so.
	s3, _ := lctllive.NewSession(ctx, nc, "lean", session.Options{})
	if _, err := s3.Record(ctx, "x", "a", nil); err != nil {
		t.Fatal(err)
	}
	if len(s3.Events()) != 0 || s3.Export(path) == nil || s3.State().EventCount != 1 {
		t.Errorf("lean session kept events")
	}
}

// TestInterceptors records calls through real gRPC on loopback: a health
// server stands in for any service.
func TestInterceptors(t *testing.T) {
	s, _ := session.New("grpc", session.Options{Agent: "client"})
	var recordErrs []error
	var mu sync.Mutex
	onErr := func(err error) { mu.Lock(); recordErrs = append(recordErrs, err); mu.Unlock() }

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(s.UnaryServerInterceptor(session.InterceptorOptions{Agent: "server", OnRecordError: onErr})),
		grpc.StreamInterceptor(s.StreamServerInterceptor(session.InterceptorOptions{Agent: "server", OnRecordError: onErr})),
	)
	h := health.NewServer()
	h.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(s.UnaryClientInterceptor(session.InterceptorOptions{OnRecordError: onErr})),
		grpc.WithStreamInterceptor(s.StreamClientInterceptor(session.InterceptorOptions{Agent: "watcher", OmitPayloads: true, OnRecordError: onErr})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"}); err != nil {
		t.Fatal(err)
	}
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("check unknown: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	stream, err := client.Watch(wctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	srv.GracefulStop() // the server's stream handler returns: recorded

	events := s.Events()
	var lines []string
	for i := range events {
		lines = append(lines, analysis.Line(&events[i]))
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		"server: tool_call /grpc.health.v1.Health/Check",
		"client: tool_call /grpc.health.v1.Health/Check",
		"server: error NOT_FOUND (input_error/missing_context: unknown service, not recoverable)",
		"client: error NOT_FOUND (input_error/missing_context: unknown service, not recoverable)",
		"watcher: error CANCELED",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	for i := range events {
		e := events[i]
		if e.Agent == "client" && e.Type == "tool_call" {
			if in, _ := e.Data["input"].(map[string]any); in["service"] != "svc" {
				t.Errorf("client call input = %v", e.Data["input"])
			}
			if out, _ := e.Data["output"].(map[string]any); out["status"] != "SERVING" {
				t.Errorf("client call output = %v", e.Data["output"])
			}
		}
		if e.Agent == "watcher" && e.Data["input"] != nil {
			t.Errorf("OmitPayloads recorded the input: %v", e.Data)
		}
	}
	if r := analysis.Verify("grpc", events); !r.OK {
		t.Errorf("recorded chain does not verify: %v", r.Problems)
	}
	if len(recordErrs) != 0 {
		t.Errorf("record errors: %v", recordErrs)
	}
}
