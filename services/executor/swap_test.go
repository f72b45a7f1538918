package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// swapCalls is how many times each race test calls its tool while the
// directory on its path is swapped: 2,000 (on main, before the tools
// resolved paths without links, each tool reached the target through the
// link in 2 to 186 of them), 300 under the race detector (make test).
var swapCalls = map[bool]int{false: 2000, true: 300}[raceDetector]

// sandboxSwapCalls is swapCalls for a program started in the sandbox
// (each call starts bubblewrap).
var sandboxSwapCalls = map[bool]int{false: 300, true: 100}[raceDetector]

// raceCallsMax bounds the calls of a race test, in swapCalls, while its
// calls have not yet met both states of the swap.
const raceCallsMax = 20

// flipper swaps the directory ws/d (it must exist) with a symbolic link
// to target (a path inside the workspace) over and over, with
// RENAME_EXCHANGE: at every instant d is either the real directory or the
// link, and a tool that checks the path and then acts on it by name can
// be made to act through the link. stop ends it and returns how many
// swaps it made.
func flipper(tb testing.TB, ws, target string) (stop func() int) {
	tb.Helper()
	d, l := filepath.Join(ws, "d"), filepath.Join(ws, "d-link")
	must(tb, os.Symlink(target, l))
	var done atomic.Bool
	var wg sync.WaitGroup
	var swaps int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, l, unix.RENAME_EXCHANGE); err != nil {
				tb.Errorf("swap: %v", err)
				return
			}
			swaps++
			// Hold each state for a varying while, so that windows of
			// every length between a check and an act are hit.
			n := spins[(swaps/2)%len(spins)]
			if swaps%2 == 1 { // d is the link: briefly
				n /= 10
			}
			for j := 0; j < n; j++ {
				spinSink.Add(1)
			}
		}
	}()
	return func() int {
		done.Store(true)
		wg.Wait()
		// Leave d the real directory, as the tools found it.
		if fi, err := os.Lstat(d); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			must(tb, unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, l, unix.RENAME_EXCHANGE))
		}
		return swaps
	}
}

// spins are the flipper's pauses between swaps, in loop iterations.
var spins = []int{0, 50, 300, 1000, 3000, 10000, 30000}

var spinSink atomic.Int64

// swapCase is one tool raced against the flipper. setup makes the
// workspace (d exists, empty, the flipper not yet started) and the
// protected target; call runs the i-th call through the executor; count
// returns how many of the calls had an effect on the target (read it,
// wrote, deleted or moved something there).
type swapCase struct {
	name   string
	target string // what d's link leads to
	setup  func(tb testing.TB, ws string)
	call   func(tb testing.TB, s *Service, i int) *xctv1.Response
	// hit says that one call's response shows the target (a read of it).
	hit   func(r *xctv1.Response) bool
	count func(tb testing.TB, ws string) int
	// service, when set, builds the executor (default: newService);
	// prepare runs steps before the flipper starts.
	service func(tb testing.TB, ws string) *Service
	prepare func(tb testing.TB, s *Service)
	// perCall: the i-th call uses up an entry made for it (setup or
	// prepare make swapCalls of them), so there are no more calls.
	perCall bool
	// calls, when set, replaces swapCalls (a slow tool).
	calls int
}

// TestSwapRace: a directory on a tool's path is swapped for a symbolic
// link to a protected place (.git, or a directory a policy keeps
// secret) as fast as a concurrent writer of the workspace can, while the
// tool is called swapCalls times through the executor. The tool acts on
// the path it checked or on none: the target is never read, written,
// deleted or renamed. A tool that checked the path and then opened it by
// name acted through the link on a fraction of the calls.
func TestSwapRace(t *testing.T) {
	const secret = "TOP-SECRET-CONTENT"
	countPrefix := func(dir, prefix string) func(testing.TB, string) int {
		return func(tb testing.TB, ws string) int {
			n := 0
			for _, name := range names(tb, filepath.Join(ws, dir)) {
				if strings.HasPrefix(name, prefix) {
					n++
				}
			}
			return n
		}
	}
	missing := func(dir, prefix string, total int) func(testing.TB, string) int {
		return func(tb testing.TB, ws string) int {
			return total - countPrefix(dir, prefix)(tb, ws)
		}
	}
	// Files of the same names in d and in the target, so that a call
	// succeeds whichever it finds.
	both := func(target, prefix, content string, n int) func(testing.TB, string) {
		return func(tb testing.TB, ws string) {
			must(tb, os.MkdirAll(filepath.Join(ws, target), 0o755))
			for i := range n {
				must(tb, os.WriteFile(filepath.Join(ws, target, fmt.Sprintf("%s%d", prefix, i)), []byte(content), 0o644))
				must(tb, os.WriteFile(filepath.Join(ws, "d", fmt.Sprintf("%s%d", prefix, i)), []byte("public"), 0o644))
			}
		}
	}
	secretSetup := func(tb testing.TB, ws string) {
		must(tb, os.MkdirAll(filepath.Join(ws, "vault"), 0o755))
		must(tb, os.WriteFile(filepath.Join(ws, "vault", "secret.txt"), []byte(secret), 0o644))
		must(tb, os.WriteFile(filepath.Join(ws, "d", "secret.txt"), []byte("public"), 0o644))
	}
	showsSecret := func(r *xctv1.Response) bool {
		return strings.Contains(fmt.Sprint(r.GetSuccess().GetResult().AsInterface()), secret)
	}
	cases := []swapCase{
		{
			name: "fs.write", target: ".git",
			setup: func(tb testing.TB, ws string) { must(tb, os.MkdirAll(filepath.Join(ws, ".git"), 0o755)) },
			call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
				return exec(tb, s, "fs.write", map[string]any{"path": fmt.Sprintf("d/hook%d", i), "content": "#!/bin/sh\n"})
			},
			count: countPrefix(".git", "hook"),
		},
		{
			name: "fs.write create_dirs", target: ".git",
			setup: func(tb testing.TB, ws string) { must(tb, os.MkdirAll(filepath.Join(ws, ".git"), 0o755)) },
			call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
				return exec(tb, s, "fs.write", map[string]any{"path": fmt.Sprintf("d/hooks%d/pre-commit", i), "content": "#!/bin/sh\n"})
			},
			count: countPrefix(".git", "hooks"),
		},
		{
			name: "fs.read", target: "vault", setup: secretSetup,
			call: func(tb testing.TB, s *Service, _ int) *xctv1.Response {
				return exec(tb, s, "fs.read", map[string]any{"path": "d/secret.txt"})
			},
			hit: showsSecret,
		},
		{
			name: "fs.list", target: "vault", setup: secretSetup,
			call: func(tb testing.TB, s *Service, _ int) *xctv1.Response {
				return exec(tb, s, "fs.list", map[string]any{"path": "d"})
			},
			hit: func(r *xctv1.Response) bool {
				for _, e := range r.GetSuccess().GetResult().GetStructValue().GetFields()["entries"].GetListValue().GetValues() {
					if e.GetStructValue().GetFields()["size"].GetNumberValue() == float64(len(secret)) {
						return true
					}
				}
				return false
			},
		},
		{
			name: "fs.delete", perCall: true, target: ".git", setup: both(".git", "obj", "x", swapCalls),
			call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
				return exec(tb, s, "fs.delete", map[string]any{"path": fmt.Sprintf("d/obj%d", i)})
			},
			count: missing(".git", "obj", swapCalls),
		},
		{
			name: "fs.delete recursive", perCall: true, target: ".git",
			setup: func(tb testing.TB, ws string) {
				for i := range swapCalls {
					must(tb, os.MkdirAll(filepath.Join(ws, ".git", fmt.Sprintf("ref%d", i)), 0o755))
					must(tb, os.MkdirAll(filepath.Join(ws, "d", fmt.Sprintf("ref%d", i)), 0o755))
				}
			},
			call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
				return exec(tb, s, "fs.delete", map[string]any{"path": fmt.Sprintf("d/ref%d", i), "recursive": true})
			},
			count: missing(".git", "ref", swapCalls),
		},
		{
			name: "fs.move from", perCall: true, target: ".git", setup: both(".git", "obj", "x", swapCalls),
			call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
				return exec(tb, s, "fs.move", map[string]any{"from": fmt.Sprintf("d/obj%d", i), "to": fmt.Sprintf("moved%d", i)})
			},
			count: missing(".git", "obj", swapCalls),
		},
		{
			name: "fs.move to", perCall: true, target: ".git",
			setup: func(tb testing.TB, ws string) {
				must(tb, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
				for i := range swapCalls {
					must(tb, os.WriteFile(filepath.Join(ws, fmt.Sprintf("hook%d", i)), []byte("#!/bin/sh\n"), 0o644))
				}
			},
			call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
				return exec(tb, s, "fs.move", map[string]any{"from": fmt.Sprintf("hook%d", i), "to": fmt.Sprintf("d/hook%d", i)})
			},
			count: countPrefix(".git", "hook"),
		},
		{
			name: "fs.write preview", target: "vault", setup: secretSetup,
			call: func(tb testing.TB, s *Service, _ int) *xctv1.Response {
				st, err := structpb.NewStruct(map[string]any{"path": "d/secret.txt", "content": "new"})
				must(tb, err)
				h := &handler{s: s}
				p, err := h.PreviewStep(context.Background(), &xctv1.PreviewStepRequest{Tool: "fs.write", Arguments: st})
				if err != nil { // a refusal: FailedPrecondition naming the code
					return &xctv1.Response{Outcome: &xctv1.Response_Error{Error: &xctv1.Error{Code: "PREVIEW", Message: err.Error()}}}
				}
				v, err := structpb.NewValue(p.GetPreview().GetContent())
				must(tb, err)
				return &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}
			},
			hit: showsSecret,
		},
	}
	// xct.undo of steps made while d was a directory: removing a file a
	// write created, restoring one a delete removed.
	cases = append(cases, swapCase{
		name: "xct.undo remove", perCall: true, target: ".git",
		setup: func(tb testing.TB, ws string) {
			// In .git, files such as the steps created in d: the undo's
			// checksum matches there too.
			must(tb, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
			for i := range swapCalls {
				must(tb, os.WriteFile(filepath.Join(ws, ".git", fmt.Sprintf("obj%d", i)), []byte("same"), 0o644))
			}
		},
		prepare: func(tb testing.TB, s *Service) {
			for i := range swapCalls {
				if r := execStep(tb, s, fmt.Sprintf("w%d", i), "fs.write", map[string]any{"path": fmt.Sprintf("d/obj%d", i), "content": "same"}); r.GetResponse().GetError() != nil {
					tb.Fatal(r.GetResponse().GetError())
				}
			}
		},
		call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
			return exec(tb, s, UndoToolName, undoArgs(tb, s, fmt.Sprintf("w%d", i)))
		},
		count: missing(".git", "obj", swapCalls),
	}, swapCase{
		name: "xct.undo restore", perCall: true, target: ".git", setup: both(".git", "other", "x", 0),
		prepare: func(tb testing.TB, s *Service) {
			for i := range swapCalls {
				path := fmt.Sprintf("d/obj%d", i)
				if r := execStep(tb, s, fmt.Sprintf("w%d", i), "fs.write", map[string]any{"path": path, "content": "saved"}); r.GetResponse().GetError() != nil {
					tb.Fatal(r.GetResponse().GetError())
				}
				if r := execStep(tb, s, fmt.Sprintf("del%d", i), "fs.delete", map[string]any{"path": path}); r.GetResponse().GetError() != nil {
					tb.Fatal(r.GetResponse().GetError())
				}
			}
		},
		call: func(tb testing.TB, s *Service, i int) *xctv1.Response {
			return exec(tb, s, UndoToolName, undoArgs(tb, s, fmt.Sprintf("del%d", i)))
		},
		count: countPrefix(".git", "obj"),
	}, swapCase{
		// Without a sandbox the program starts in the directory the tool
		// opened; in the sandbox bubblewrap changes to it by its path
		// (see docs/status.md, Issue 11, Session 9).
		name: "shell.exec cwd (sandbox none)", target: "vault", setup: secretSetup,
		service: func(tb testing.TB, ws string) *Service {
			cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: none\n  binaries:\n    - {name: cat, effect: read, path_args: true}\n"))
			must(tb, err)
			s, err := New(Config{Workspace: ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(tb))
			must(tb, err)
			tb.Cleanup(func() { _ = s.Stop(context.Background()) })
			return s
		},
		call: func(tb testing.TB, s *Service, _ int) *xctv1.Response {
			return exec(tb, s, "shell.exec", map[string]any{"argv": []any{"cat", "secret.txt"}, "cwd": "d"})
		},
		hit: showsSecret,
	}, swapCase{
		// In the sandbox bubblewrap changes to the directory by its path:
		// the program starts through the executor's own check that it is
		// the directory the tool opened (internal/sandboxenter; session
		// 10, trust10a). Before, 300 calls read the secret 1, 1 and 5
		// times (three runs; most calls meet the link at the check).
		name: "shell.exec cwd (sandbox)", target: "vault", setup: secretSetup, calls: sandboxSwapCalls,
		service: func(tb testing.TB, ws string) *Service {
			requireSandbox(tb)
			cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  binaries:\n    - {name: cat, effect: read, path_args: true}\n"))
			must(tb, err)
			s, err := New(Config{Workspace: ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(tb))
			must(tb, err)
			tb.Cleanup(func() { _ = s.Stop(context.Background()) })
			return s
		},
		call: func(tb testing.TB, s *Service, _ int) *xctv1.Response {
			return exec(tb, s, "shell.exec", map[string]any{"argv": []any{"cat", "secret.txt"}, "cwd": "d"})
		},
		hit: showsSecret,
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(ws, "d"), 0o755))
			c.setup(t, ws)
			var s *Service
			if c.service != nil {
				s = c.service(t, ws)
			} else {
				s = newService(t, ws)
			}
			if c.prepare != nil {
				c.prepare(t, s)
			}
			// The fs tools have read the workspace whole once before the
			// renamer started (as after any step): a scan the renamer
			// then cuts short adds the targets of that one, where none
			// would leave them unknown and refuse the call.
			s.ws.linkTargets()
			stop := flipper(t, ws, c.target)
			hits, ok, calls := 0, 0, 0
			errs := map[string]int{}
			// swapCalls calls, and more while they have not yet both
			// found the directory and met the link (a busy machine can
			// starve the flipper for a while), up to raceCallsMax.
			n := swapCalls
			if c.calls > 0 {
				n = c.calls
			}
			maxCalls := raceCallsMax * n
			if c.perCall {
				maxCalls = n
			}
			for i := 0; i < n || (ok == 0 || ok == i) && i < maxCalls; i++ {
				calls++
				r := c.call(t, s, i)
				if c.hit != nil && c.hit(r) {
					hits++
				}
				if r.GetError() == nil {
					ok++
				} else {
					errs[r.GetError().GetCode()+": "+firstWords(r.GetError().GetMessage())]++
				}
			}
			swaps := stop()
			if c.count != nil {
				hits = c.count(t, ws)
			}
			t.Logf("%s: %d of %d calls reached %s through the link (%d succeeded, %d swaps)", c.name, hits, calls, c.target, ok, swaps)
			t.Logf("errors: %v", errs)
			// The swap was raced: some calls found the directory, some
			// the link.
			if ok == 0 || ok == calls || swaps == 0 {
				t.Errorf("%s: %d of %d calls succeeded with %d swaps: the calls did not race the swap", c.name, ok, calls, swaps)
			}
			if hits != 0 {
				t.Errorf("%s acted on %s through a swapped-in link in %d of %d calls", c.name, c.target, hits, calls)
			}
		})
	}
}

// firstWords is the start of an error message without its numbers, to
// count the errors by kind.
func firstWords(s string) string {
	f := strings.Fields(strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, s))
	if len(f) > 8 {
		f = f[:8]
	}
	return strings.Join(f, " ")
}
