package executor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// funcTool is a test tool made of a descriptor and a function.
type funcTool struct {
	desc *xctv1.ToolDescriptor
	fn   func(ctx context.Context, args map[string]any) (any, *xctv1.Error)
}

func (t *funcTool) Descriptor() *xctv1.ToolDescriptor { return t.desc }
func (t *funcTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	return t.fn(ctx, args)
}

// testTool is a READ tool with an open object schema.
func testTool(name string, timeout time.Duration, maxBytes int64, fn func(context.Context, map[string]any) (any, *xctv1.Error)) *funcTool {
	d := &xctv1.ToolDescriptor{
		Name:           name,
		Description:    "test tool",
		InputSchema:    `{"type":"object"}`,
		Effect:         xctv1.Effect_EFFECT_READ,
		Idempotent:     true,
		MaxOutputBytes: maxBytes,
	}
	if timeout > 0 {
		d.Timeout = durationpb.New(timeout)
	}
	return &funcTool{desc: d, fn: fn}
}

// sandbox is a temporary directory holding the workspace "ws" next to
// files that must never be touched: "outside.txt" and "outdir/f.txt".
type sandbox struct {
	dir, ws, outside, outdir string
}

const secret = "outside secret\n"

func newSandbox(tb testing.TB) sandbox {
	tb.Helper()
	dir := tb.TempDir()
	sb := sandbox{dir: dir, ws: filepath.Join(dir, "ws"), outside: filepath.Join(dir, "outside.txt"), outdir: filepath.Join(dir, "outdir")}
	must(tb, os.Mkdir(sb.ws, 0o755))
	must(tb, os.Mkdir(sb.outdir, 0o755))
	must(tb, os.WriteFile(sb.outside, []byte(secret), 0o644))
	must(tb, os.WriteFile(filepath.Join(sb.outdir, "f.txt"), []byte(secret), 0o644))
	return sb
}

// links adds symbolic links inside the workspace that lead out of it.
func (sb sandbox) links(tb testing.TB) {
	tb.Helper()
	for name, target := range map[string]string{
		"link-abs":    sb.outside,
		"link-rel":    "../outside.txt",
		"dirlink-abs": sb.outdir,
		"dirlink-rel": "../outdir",
		"up":          "..",
	} {
		must(tb, os.Symlink(target, filepath.Join(sb.ws, name)))
	}
}

// untouched fails the test if anything outside the workspace changed.
func (sb sandbox) untouched(tb testing.TB) {
	tb.Helper()
	for _, f := range []string{sb.outside, filepath.Join(sb.outdir, "f.txt")} {
		got, err := os.ReadFile(f)
		if err != nil || string(got) != secret {
			tb.Fatalf("%s changed: %q, %v", f, got, err)
		}
	}
	for dir, want := range map[string][]string{sb.dir: {"outdir", "outside.txt", "ws"}, sb.outdir: {"f.txt"}} {
		if got := names(tb, dir); !slices.Equal(got, want) {
			tb.Fatalf("%s holds %v, want %v", dir, got, want)
		}
	}
}

func names(tb testing.TB, dir string) []string {
	tb.Helper()
	des, err := os.ReadDir(dir)
	must(tb, err)
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// newService builds an executor over ws with a 1 KiB output cap.
func newService(tb testing.TB, ws string, extra ...Tool) *Service {
	tb.Helper()
	s, err := New(Config{Workspace: ws, MaxOutputBytes: 1024}, nil, nil, extra...)
	must(tb, err)
	tb.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// exec runs one step through the service, as a new step, and returns its
// response.
func exec(tb testing.TB, s *Service, tool string, args map[string]any) *xctv1.Response {
	tb.Helper()
	st, err := structpb.NewStruct(args)
	must(tb, err)
	resp, err := s.execute(context.Background(), &xctv1.ExecuteRequest{RunId: "run", StepId: newStepID(), Tool: tool, Arguments: st})
	must(tb, err)
	if resp.GetDuration() == nil {
		tb.Fatal("no duration")
	}
	return resp.GetResponse()
}

// newStepID is a fresh step id.
func newStepID() string {
	return rand.Text()
}

// codeOf is a response's error code, "" for success.
func codeOf(r *xctv1.Response) string { return r.GetError().GetCode() }

// notKeptOf is the reason a successful response gives for not keeping its
// tool's result ("" when it kept it, or is not a success).
func notKeptOf(r *xctv1.Response) string {
	m, _ := r.GetSuccess().GetResult().AsInterface().(map[string]any)
	if m["result_not_kept"] != true {
		return ""
	}
	reason, _ := m["reason"].(string)
	return reason
}

// resultAs decodes a successful response's result into T.
func resultAs[T any](tb testing.TB, r *xctv1.Response) T {
	tb.Helper()
	var v T
	if r.GetError() != nil {
		tb.Fatalf("error %s: %s", r.GetError().GetCode(), r.GetError().GetMessage())
	}
	raw, err := json.Marshal(r.GetSuccess().GetResult().AsInterface())
	must(tb, err)
	must(tb, json.Unmarshal(raw, &v))
	return v
}

// run runs a tool like exec does, but with arguments a protobuf Struct
// cannot carry (invalid UTF-8), as a tool called in-process could get.
func run(tb testing.TB, s *Service, tool string, args map[string]any) *xctv1.Response {
	tb.Helper()
	if !s.begin() {
		tb.Fatal("service stopped")
	}
	st, ok := s.tool(tool)
	if !ok {
		tb.Fatalf("no tool %s", tool)
	}
	r, err := s.run(context.Background(), st, args, nil)
	must(tb, err)
	return r
}

// testLogger logs to the test's output.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// undoArgs are the arguments of an xct.undo of step id as the orchestrator
// makes them: the step id and the actions the tool's preview lists (none
// when it lists nothing, so the undo's own refusal shows).
func undoArgs(tb testing.TB, s *Service, id string) map[string]any {
	tb.Helper()
	actions := []any{}
	if p, e := (&undoTool{s: s}).Preview(context.Background(), map[string]any{"step_id": id}); e == nil {
		must(tb, json.Unmarshal([]byte(p.GetContent()), &actions))
	}
	return map[string]any{"step_id": id, "actions": actions}
}
