package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPPythonServerLoadsNoModuleFromTheWorkspace (session 14,
// attack14): a stdio MCP server configured the way Python servers are
// documented to be run, `python3 -m package`, starts in the workspace,
// and `python -m` puts its working directory first on sys.path. On main
// the model's fs.write of a module named as the server's (allowed: a
// plain file, no protected name) made the next instance of the server
// run the model's code: in the instance of a write call (reversible,
// allowed with no human) and in the read-only instance that lives
// between calls, each time writing where the operator let the server
// keep its cache (`writable:`, outside the workspace: no record, no
// undo, and it outlives the run), then passing on to the real server so
// that the call answered as usual. Now every child process gets
// PYTHONSAFEPATH=1 (unless the configuration sets it): Python 3.11 and
// later then put neither the working directory (-m) nor "" (-c) on
// sys.path.
func TestMCPPythonServerLoadsNoModuleFromTheWorkspace(t *testing.T) {
	requireSandbox(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s (make test-deps installs it): %v", python, err)
	}
	self, err := os.Executable()
	must(t, err)
	lib := t.TempDir()   // where the operator installed the server's module
	cache := t.TempDir() // the server's cache: writable to it
	ws := t.TempDir()
	// The real server: the test binary, started through a module of the
	// operator's (as a Python package's __main__ would start its server).
	must(t, os.WriteFile(filepath.Join(lib, "xct_mcp_shim.py"), []byte(
		"import os\nos.execv(os.environ['XCT_TEST_SELF'], [os.environ['XCT_TEST_SELF'], '-test.run=^$'])\n"), 0o644))
	s := mcpServiceIn(t, ws, "name: py\ncommand: "+python+"\nargs: [-m, xct_mcp_shim]\n"+
		"set_env: {"+mcpStdioEnv+": \"1\", PYTHONPATH: "+lib+", XCT_TEST_SELF: "+self+"}\n"+
		"sandbox: {read_only: ["+self+", "+lib+"], writable: ["+cache+"]}\ntimeout: 10s\nignore_annotations: true\n"+
		"tools: {echo: {effect: read}, crash: {effect: read}, mkfile: {effect: reversible}}")

	// The model's module: it leaves a mark in the cache, then runs the
	// real server, so nothing in the answer tells.
	hostile := "import os\n" +
		"open(os.path.join(" + pyString(cache) + ", 'ran-' + os.urandom(4).hex()), 'w').write('the model\\'s code')\n" +
		"os.execv(os.environ['XCT_TEST_SELF'], [os.environ['XCT_TEST_SELF'], '-test.run=^$'])\n"
	if r := exec(t, s, "fs.write", map[string]any{"path": "xct_mcp_shim.py", "content": hostile}); r.GetError() != nil {
		t.Fatalf("fs.write of the module: %v", r)
	}
	// A write call: its own instance of the server.
	if r := exec(t, s, "mcp.py.mkfile", map[string]any{"text": "made.txt"}); r.GetError() != nil {
		t.Errorf("mkfile: %v", r)
	}
	// The read-only instance, started again after it ended.
	_ = exec(t, s, "mcp.py.crash", map[string]any{})
	if r := exec(t, s, "mcp.py.echo", map[string]any{"text": "hi"}); r.GetError() != nil || !strings.Contains(r.String(), "hi") {
		t.Errorf("echo after the crash: %v", r)
	}
	if marks := names(t, cache); len(marks) > 0 {
		t.Errorf("the model's module ran in the server's sandbox: %v in its cache", marks)
	}
}

// pyString is s as a Python string literal (s has no quote or backslash).
func pyString(s string) string { return "'" + s + "'" }

// TestShellPythonLoadsNoModuleFromTheWorkspace (session 14, attack14):
// the same for shell.exec, whose programs run in the workspace too: a
// read program `python3 -c "import tool"` (the operator's tool on
// PYTHONPATH) imported the model's tool.py from the workspace and wrote
// into the sandbox's writable: directory, outside the read-only
// workspace a read is given.
func TestShellPythonLoadsNoModuleFromTheWorkspace(t *testing.T) {
	requireSandbox(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s (make test-deps installs it): %v", python, err)
	}
	lib, cache, ws := t.TempDir(), t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(lib, "xct_tool.py"), []byte("print('the operator\\'s tool')\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "xct_tool.py"), []byte(
		"import os\nopen(os.path.join("+pyString(cache)+", 'ran-' + os.urandom(4).hex()), 'w').write('x')\nprint('the model\\'s code')\n"), 0o644))
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  set_env: {PYTHONPATH: "+lib+"}\n"+
		"  sandbox: {read_only: ["+lib+"], writable: ["+cache+"]}\n"+
		"  binaries:\n    - {name: python3, path: "+python+", effect: read, allow_flags: [-c]}\n"))
	must(t, err)
	s, err := New(Config{Workspace: ws, Tools: cfg}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(t.Context()) })
	r := exec(t, s, "shell.exec", map[string]any{"argv": []any{"python3", "-c", "import xct_tool"}})
	if r.GetError() != nil || !strings.Contains(r.String(), "the operator's tool") {
		t.Errorf("python3 -c: %v", r)
	}
	if marks := names(t, cache); len(marks) > 0 {
		t.Errorf("the model's module ran: %v in the writable directory", marks)
	}
}

// TestSearchListsLeaveOutTheWorkspace (session 14, attack14): PATH has
// been stripped of relative and workspace entries since session 6; the
// other search lists were passed as configured. An empty entry (a
// trailing ":" from "$LD_LIBRARY_PATH:/opt/lib" with nothing before it)
// is the working directory, the workspace: on main the dynamic loader
// of every program (here the example's read program ls) took the
// model's libc.so.6 from there, and Python imported the model's module
// through PYTHONPATH (PYTHONSAFEPATH does not cover its entries). Now
// LD_LIBRARY_PATH, PYTHONPATH, NODE_PATH, PERL5LIB, PERLLIB, RUBYLIB,
// GEM_PATH and CLASSPATH keep only absolute entries outside the
// workspace, as PATH does, for shell.exec programs and MCP servers.
func TestSearchListsLeaveOutTheWorkspace(t *testing.T) {
	for _, sandboxed := range []bool{true, false} {
		t.Run(map[bool]string{true: "sandboxed", false: "sandbox none"}[sandboxed], func(t *testing.T) {
			sandboxLine := "  sandbox: none\n"
			if sandboxed {
				requireSandbox(t)
				sandboxLine = ""
			}
			ws := t.TempDir()
			cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n"+sandboxLine+
				"  set_env: {LD_LIBRARY_PATH: \"/opt/xct-none:\", PYTHONPATH: \":/opt/xct-none:lib:"+ws+"/py\"}\n"+
				"  binaries:\n    - {name: ls, effect: read}\n    - {name: python3, path: /usr/bin/python3, effect: read, allow_flags: [-c]}\n"))
			must(t, err)
			s, err := New(Config{Workspace: ws, Tools: cfg}, nil, testLogger(t))
			must(t, err)
			t.Cleanup(func() { _ = s.Stop(t.Context()) })
			// The model's files: not a library at all, and modules.
			for p, content := range map[string]string{
				"libc.so.6":       "not a library",
				"xct_tool.py":     "print('the model\\'s code')",
				"lib/xct_tool.py": "print('the model\\'s code')",
				"py/xct_tool.py":  "print('the model\\'s code')",
			} {
				if r := exec(t, s, "fs.write", map[string]any{"path": p, "content": content}); r.GetError() != nil {
					t.Fatalf("fs.write %s: %v", p, r)
				}
			}
			r := exec(t, s, "shell.exec", map[string]any{"argv": []any{"ls"}})
			if res := resultAs[ShellResult](t, r); res.ExitCode != 0 || strings.Contains(res.Stderr, "libc.so.6") {
				t.Errorf("ls loaded the workspace's libc.so.6: %+v", res)
			}
			if _, err := os.Stat("/usr/bin/python3"); err != nil {
				return
			}
			r = exec(t, s, "shell.exec", map[string]any{"argv": []any{"python3", "-c", "import xct_tool"}})
			if res := resultAs[ShellResult](t, r); strings.Contains(res.Stdout, "the model's code") || !strings.Contains(res.Stderr, "No module named 'xct_tool'") {
				t.Errorf("python3 imported the workspace's module: %+v", res)
			}
		})
	}
}
