package executor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"defaults", Config{Workspace: "ws"}, nil},
		{"all set", Config{Workspace: "ws", Replicas: 3, DefaultTimeout: time.Second, MaxOutputBytes: 10}, nil},
		{"no workspace", Config{}, ErrNoWorkspace},
		{"negative replicas", Config{Workspace: "ws", Replicas: -1}, ErrBadConfig},
		{"negative timeout", Config{Workspace: "ws", DefaultTimeout: -time.Second}, ErrBadConfig},
		{"negative output cap", Config{Workspace: "ws", MaxOutputBytes: -1}, ErrBadConfig},
		{"negative undo cap", Config{Workspace: "ws", MaxUndoBytes: -1}, ErrBadConfig},
		{"negative step grace", Config{Workspace: "ws", StepGrace: -time.Second}, ErrBadConfig},
		{"negative retention", Config{Workspace: "ws", StepRetention: -time.Second}, ErrBadConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); !errors.Is(err, tt.want) {
				t.Fatalf("Validate() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestConfigFlags(t *testing.T) {
	t.Parallel()
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if cfg.DefaultTimeout != DefaultToolTimeout || cfg.MaxOutputBytes != DefaultMaxOutputBytes || cfg.Workspace == "" {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg.StepGrace != DefaultStepGrace || cfg.StepRetention != DefaultStepRetention || cfg.MaxUndoBytes != DefaultMaxUndoBytes || cfg.ToolsConfigFile != "" || cfg.RecordFormat != FormatProto {
		t.Fatalf("defaults: %+v", cfg)
	}
	must(t, fs.Parse([]string{"-workspace", "/srv/ws", "-tool-timeout", "3s", "-tool-max-output", "4096",
		"-tool-max-undo", "100", "-tools-config", "tools.yaml", "-step-grace", "1s", "-step-retention", "0", "-step-record-format", "json",
		"-unsandboxed-reads-secrets"}))
	want := Config{Workspace: "/srv/ws", DefaultTimeout: 3 * time.Second, MaxOutputBytes: 4096,
		MaxUndoBytes: 100, ToolsConfigFile: "tools.yaml", StepGrace: time.Second, RecordFormat: FormatJSON,
		UnsandboxedReadsSecrets: true}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("parsed %+v, want %+v", cfg, want)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, map[string]any) (any, *xctv1.Error) { return nil, nil }
	withSchema := func(schema string) Tool {
		tool := testTool("test.schema", 0, 0, noop)
		tool.desc.InputSchema = schema
		return tool
	}
	tests := []struct {
		name  string
		extra []Tool
		want  error
	}{
		{"built-ins only", nil, nil},
		{"extra tool", []Tool{testTool("test.noop", 0, 0, noop)}, nil},
		{"duplicate of a built-in", []Tool{testTool("fs.read", 0, 0, noop)}, ErrDuplicateTool},
		{"duplicate extra", []Tool{testTool("a.b", 0, 0, noop), testTool("a.b", 0, 0, noop)}, ErrDuplicateTool},
		{"empty name", []Tool{testTool("", 0, 0, noop)}, ErrInvalidTool},
		{"empty name part", []Tool{testTool("a..b", 0, 0, noop)}, ErrInvalidTool},
		{"space in name", []Tool{testTool("a b", 0, 0, noop)}, ErrInvalidTool},
		{"wildcard in name", []Tool{testTool("a.*", 0, 0, noop)}, ErrInvalidTool},
		{"no schema", []Tool{withSchema("")}, ErrInvalidTool},
		{"schema not JSON", []Tool{withSchema("{")}, ErrInvalidTool},
		{"schema not an object", []Tool{withSchema("true")}, ErrInvalidTool},
		{"nil descriptor", []Tool{&funcTool{fn: noop}}, ErrInvalidTool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Workspace: t.TempDir()}, nil, nil, tt.extra...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("New() = %v, want %v", err, tt.want)
			}
			if s != nil {
				must(t, s.Stop(context.Background()))
			}
		})
	}
	t.Run("bad config", func(t *testing.T) {
		if _, err := New(Config{}, nil, nil); !errors.Is(err, ErrNoWorkspace) {
			t.Fatalf("New() = %v", err)
		}
	})
	t.Run("workspace is a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		must(t, os.WriteFile(f, nil, 0o644))
		if _, err := New(Config{Workspace: f}, nil, nil); !errors.Is(err, ErrWorkspace) {
			t.Fatalf("New() = %v", err)
		}
	})
	t.Run("workspace is created", func(t *testing.T) {
		ws := filepath.Join(t.TempDir(), "a", "b")
		newService(t, ws)
		if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
			t.Fatalf("workspace: %v", err)
		}
	})
}

func TestTools(t *testing.T) {
	t.Parallel()
	extra := testTool("test.noop", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) { return nil, nil })
	s, err := New(Config{Workspace: t.TempDir(), DefaultTimeout: 7 * time.Second, MaxOutputBytes: 99}, nil, nil, extra)
	must(t, err)
	defer func() { _ = s.Stop(context.Background()) }()
	tools := s.Tools()
	var names []string
	for _, d := range tools {
		names = append(names, d.GetName())
		if d.GetTimeout().AsDuration() != 7*time.Second || d.GetMaxOutputBytes() != 99 {
			t.Errorf("%s: defaults not applied: %v", d.GetName(), d)
		}
		if d.GetDescription() == "" || d.GetInputSchema() == "" {
			t.Errorf("%s: no description or schema", d.GetName())
		}
	}
	if want := []string{"fs.delete", "fs.list", "fs.move", "fs.read", "fs.write", "test.noop", "xct.undo"}; !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}
	type class struct {
		effect     xctv1.Effect
		idempotent bool
	}
	want := map[string]class{
		"fs.read":   {xctv1.Effect_EFFECT_READ, true},
		"fs.list":   {xctv1.Effect_EFFECT_READ, true},
		"fs.write":  {xctv1.Effect_EFFECT_REVERSIBLE, true},
		"fs.delete": {xctv1.Effect_EFFECT_REVERSIBLE, false}, // a second run reports NOT_FOUND
		"fs.move":   {xctv1.Effect_EFFECT_REVERSIBLE, false},
	}
	for _, d := range tools {
		if w, ok := want[d.GetName()]; ok && (class{d.GetEffect(), d.GetIdempotent()}) != w {
			t.Errorf("%s: effect %v idempotent %v, want %+v", d.GetName(), d.GetEffect(), d.GetIdempotent(), w)
		}
	}
	// The caller owns the copies, and the tool's own descriptor is untouched.
	tools[0].Name = "changed"
	if s.Tools()[0].GetName() != "fs.delete" || extra.desc.GetTimeout() != nil {
		t.Fatal("catalog shared with callers or tools")
	}
}

func TestExecute(t *testing.T) {
	t.Parallel()
	released := make(chan struct{})
	committedEarly := make(chan struct{})
	var lateCommit *xctv1.Error
	calls := 0
	tools := []Tool{
		testTool("test.echo", 0, 0, func(_ context.Context, args map[string]any) (any, *xctv1.Error) {
			calls++
			return map[string]any{"args": args, "n": []int{1, 2}}, nil
		}),
		testTool("test.block", 10*time.Millisecond, 0, func(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
			<-ctx.Done()
			return "too late", nil
		}),
		testTool("test.commit-late", 10*time.Millisecond, 0, func(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
			<-ctx.Done()
			lateCommit = Commit(ctx)
			defer close(released)
			if lateCommit != nil {
				return nil, lateCommit
			}
			return "effect landed after the deadline", nil
		}),
		testTool("test.commit-early", 10*time.Millisecond, 0, func(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
			if e := Commit(ctx); e != nil {
				return nil, e
			}
			close(committedEarly)
			<-ctx.Done() // the deadline passes while the effect is being applied
			return "committed", nil
		}),
		testTool("test.big", 0, 100, func(context.Context, map[string]any) (any, *xctv1.Error) {
			return strings.Repeat("x", 200), nil
		}),
		testTool("test.fits", 0, 100, func(context.Context, map[string]any) (any, *xctv1.Error) {
			return strings.Repeat("x", 98), nil // 100 bytes as JSON
		}),
		testTool("test.panic", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
			panic("boom")
		}),
		testTool("test.nan", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
			return math.NaN(), nil
		}),
		testTool("test.fail", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
			return nil, wire.Errorf(wire.CodeNotFound, "no such thing")
		}),
		testTool("test.nocode", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
			return nil, &xctv1.Error{Message: "forgot the code"}
		}),
		testTool("test.null", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
			return nil, nil
		}),
	}
	s := newService(t, t.TempDir(), tools...)

	t.Run("success", func(t *testing.T) {
		r := exec(t, s, "test.echo", map[string]any{"k": "v"})
		got := resultAs[map[string]any](t, r)
		if fmt.Sprint(got) != "map[args:map[k:v] n:[1 2]]" {
			t.Fatalf("result = %v", got)
		}
	})
	t.Run("null result", func(t *testing.T) {
		r := exec(t, s, "test.null", nil)
		if r.GetSuccess() == nil || r.GetSuccess().GetResult().AsInterface() != nil {
			t.Fatalf("response = %v", r)
		}
	})
	cases := []struct {
		name, tool string
		code       wire.Code
		notKept    string // a success whose result was not kept, and why
	}{
		{"unknown tool", "no.such", wire.CodeUnknownTool, ""},
		{"timeout", "test.block", wire.CodeTimeout, ""},
		// The tool succeeded: its result was not kept, the step is no
		// failure (a model told "failed" would run it again).
		{"output too large", "test.big", "", NotKeptTooLarge},
		{"output at the cap", "test.fits", "", ""},
		{"panic", "test.panic", wire.CodeToolFailure, ""},
		{"result not JSON", "test.nan", "", NotKeptNotJSON},
		{"tool error", "test.fail", wire.CodeNotFound, ""},
		{"tool error without code", "test.nocode", wire.CodeToolFailure, ""},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			r := exec(t, s, tt.tool, nil)
			if got := codeOf(r); got != string(tt.code) {
				t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), tt.code)
			}
			if got := notKeptOf(r); got != tt.notKept {
				t.Fatalf("result not kept for %q (%v), want %q", got, r.GetSuccess(), tt.notKept)
			}
			if e := r.GetError(); e != nil && (e.GetMessage() == "" || e.GetCategory() == "") {
				t.Fatalf("error lacks message or taxonomy: %v", e)
			}
		})
	}
	t.Run("unknown tool lists the catalog", func(t *testing.T) {
		d := exec(t, s, "no.such", nil).GetError().GetDetails().AsMap()
		if d["tool"] != "no.such" || !slices.Contains(d["tools"].([]any), any("fs.read")) {
			t.Fatalf("details = %v", d)
		}
	})
	t.Run("commit after the deadline is refused", func(t *testing.T) {
		r := exec(t, s, "test.commit-late", nil)
		<-released
		if codeOf(r) != string(wire.CodeTimeout) || lateCommit.GetCode() != string(wire.CodeTimeout) {
			t.Fatalf("response %v, commit %v", r, lateCommit)
		}
	})
	t.Run("commit before the deadline is reported", func(t *testing.T) {
		r := exec(t, s, "test.commit-early", nil)
		<-committedEarly
		if got := resultAs[string](t, r); got != "committed" {
			t.Fatalf("result = %q", got)
		}
	})
	t.Run("keeps serving after a panic", func(t *testing.T) {
		before := calls
		exec(t, s, "test.panic", nil)
		if codeOf(exec(t, s, "test.echo", nil)) != "" || calls != before+1 {
			t.Fatal("executor stopped serving")
		}
	})
	t.Run("caller gone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.execute(ctx, &xctv1.ExecuteRequest{StepId: "s", Tool: "test.block"})
		if status.Code(err) != codes.Canceled {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestStop(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	hold := testTool("test.hold", time.Hour, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
		close(started)
		<-release
		return "done", nil
	})
	s, err := New(Config{Workspace: t.TempDir()}, nil, nil, hold)
	must(t, err)
	result := make(chan *xctv1.Response, 1)
	go func() {
		resp, _ := s.execute(context.Background(), &xctv1.ExecuteRequest{StepId: "s", Tool: "test.hold"})
		result <- resp.GetResponse()
	}()
	<-started
	// Stop waits for the running tool; a caller that cannot wait gives up.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop() = %v", err)
	}
	close(release)
	if r := <-result; codeOf(r) != "" {
		t.Fatalf("running step: %v", r)
	}
	// New steps are refused once stopping.
	_, err = s.execute(context.Background(), &xctv1.ExecuteRequest{StepId: "s", Tool: "fs.list"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("after Stop: %v", err)
	}
	must(t, s.Stop(context.Background()))
}

// TestGRPC runs the service behind a real gRPC server on loopback TCP.
func TestGRPC(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noop := testTool("test.noop", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) { return map[string]any{}, nil })
	s := newService(t, t.TempDir(), noop)
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("executor", testLogger(t), creds.ServerOptions()...)
	s.Register(srv.GRPC)
	must(t, srv.Listen("127.0.0.1:0"))
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		srv.Stop(ctx)
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	client := xctv1.NewExecutorServiceClient(creds.Dial(t, srv.Addr(), grpcxtest.Service))
	b := newBinder(t)
	b.trust(t, s)

	list, err := client.ListTools(ctx, &xctv1.ListToolsRequest{})
	must(t, err)
	var names []string
	for _, d := range list.GetTools() {
		names = append(names, d.GetName())
	}
	if want := []string{"fs.delete", "fs.list", "fs.move", "fs.read", "fs.write", "test.noop", "xct.undo"}; !slices.Equal(names, want) {
		t.Fatalf("ListTools = %v, want %v", names, want)
	}

	execute := func(tool string, args map[string]any) *xctv1.ExecuteResponse {
		t.Helper()
		resp, err := client.Execute(ctx, b.request(t, "r1", tool, args))
		must(t, err)
		if resp.GetDuration() == nil {
			t.Fatal("no duration")
		}
		return resp
	}
	w := resultAs[WriteResult](t, execute("fs.write", map[string]any{"path": "notes/a.md", "content": "# hi"}).GetResponse())
	if !w.Created || w.BytesWritten != 4 || !strings.HasPrefix(w.Checksum, "sha256:") {
		t.Fatalf("write = %+v", w)
	}
	rd := resultAs[ReadResult](t, execute("fs.read", map[string]any{"path": "notes/a.md"}).GetResponse())
	if rd.Content != "# hi" || rd.Checksum != w.Checksum {
		t.Fatalf("read = %+v", rd)
	}
	if got := codeOf(execute("fs.read", map[string]any{"path": "../etc/passwd"}).GetResponse()); got != string(wire.CodePermissionDenied) {
		t.Fatalf("escape: %q", got)
	}
	if got := codeOf(execute("no.such", nil).GetResponse()); got != string(wire.CodeUnknownTool) {
		t.Fatalf("unknown tool: %q", got)
	}
	// Only a malformed request is a gRPC error.
	for _, req := range []*xctv1.ExecuteRequest{{Tool: "fs.list"}, {StepId: "s"}, {StepId: "a.b", Tool: "fs.list"}, {StepId: strings.Repeat("x", 129), Tool: "fs.list"}} {
		if _, err := client.Execute(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Execute(%v) = %v, want InvalidArgument", req, err)
		}
	}
}

// TestCatalogPublished starts the executor against an embedded JetStream
// and reads its catalog back the way the validator does.
func TestCatalogPublished(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	s, err := New(Config{Workspace: t.TempDir()}, nc, testLogger(t))
	must(t, err)
	must(t, s.Start(ctx))
	defer func() { _ = s.Stop(ctx) }()
	js, err := jetstream.New(nc)
	must(t, err)
	c, err := catalog.Watch(ctx, js)
	must(t, err)
	for _, want := range s.Tools() {
		got, ok := c.Get(want.GetName())
		if !ok || !proto.Equal(got, want) {
			t.Fatalf("%s: published %v, want %v", want.GetName(), got, want)
		}
	}
	if n := len(c.List()); n != len(s.Tools()) {
		t.Fatalf("catalog holds %d tools", n)
	}
	// Starting again (a restart) publishes the same catalog without error.
	must(t, s.Start(ctx))
}

func TestStartWithoutNATS(t *testing.T) {
	t.Parallel()
	s := newService(t, t.TempDir())
	must(t, s.Start(context.Background()))
}
