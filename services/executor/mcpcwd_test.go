package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPServerRunsNoLauncherCodeFromTheWorkspace (session 14, attack14):
// a stdio MCP server started in the workspace, by a launcher that
// resolves what it runs from its working directory as npx does (a
// node_modules/.bin/<name> found there runs before any other), ran the
// model's code: the model writes node_modules/.bin/xct-srv with fs.write
// (a plain file, no protected name), and the next instance of the server
// (a write call's, and the read-only one started again after it ended)
// ran it with the server's writable directories (outside the workspace:
// no record, no undo). Now a server starts in an empty read-only
// directory of its own; the workspace is still at its path (the test
// server is given it, and writes there). With cwd: workspace, the
// operator's choice, it starts in the workspace as before.
func TestMCPServerRunsNoLauncherCodeFromTheWorkspace(t *testing.T) {
	self, err := os.Executable()
	must(t, err)
	for _, c := range []struct {
		name, extra string
		sandboxed   bool
		ran         bool // the model's code is expected to run
	}{
		{"sandboxed", "", true, false},
		{"sandbox none", "sandbox: none\n", false, false},
		{"sandboxed in the workspace", "cwd: workspace\n", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib := t.TempDir()   // the operator's launcher
			cache := t.TempDir() // the server's cache: writable to it
			ws := t.TempDir()
			sandbox := c.extra
			if c.sandboxed {
				requireSandbox(t)
				sandbox += "sandbox: {read_only: [" + self + ", " + lib + "], writable: [" + cache + "]}\n"
			}
			launcher := filepath.Join(lib, "launch")
			must(t, os.WriteFile(launcher, []byte("#!/bin/sh\n"+
				"if [ -f node_modules/.bin/xct-srv ]; then exec /bin/sh node_modules/.bin/xct-srv; fi\n"+
				"exec \"$XCT_TEST_SELF\" '-test.run=^$'\n"), 0o755))
			s := mcpServiceIn(t, ws, "name: js\ncommand: "+launcher+"\n"+
				"set_env: {"+mcpStdioEnv+": \"1\", XCT_TEST_SELF: "+self+"}\n"+sandbox+
				"timeout: 10s\nignore_annotations: true\n"+
				"tools: {echo: {effect: read}, crash: {effect: read}, mkfile: {effect: reversible}}")

			// The model's program: it leaves a mark in the cache, then
			// runs the real server, so nothing in the answer tells.
			hostile := "echo the model > " + cache + "/ran-$$\nexec \"$XCT_TEST_SELF\" '-test.run=^$'\n"
			// Since session 18 the fs tools refuse to write installed
			// packages; a write program may still (an install).
			must(t, os.MkdirAll(filepath.Join(ws, "node_modules", ".bin"), 0o755))
			must(t, os.WriteFile(filepath.Join(ws, "node_modules", ".bin", "xct-srv"), []byte(hostile), 0o644))
			// A write call (sandboxed: its own instance of the server),
			// which writes in the workspace by its path.
			if r := exec(t, s, "mcp.js.mkfile", map[string]any{"text": "made.txt"}); r.GetError() != nil {
				t.Errorf("mkfile: %v", r)
			}
			if _, err := os.Stat(filepath.Join(ws, "made.txt")); err != nil {
				t.Errorf("the write call's file is not in the workspace: %v", err)
			}
			// The read-only instance, started again after it ended.
			_ = exec(t, s, "mcp.js.crash", map[string]any{})
			if r := exec(t, s, "mcp.js.echo", map[string]any{"text": "hi"}); r.GetError() != nil || !strings.Contains(r.String(), "hi") {
				t.Errorf("echo after the crash: %v", r)
			}
			marks := names(t, cache)
			if !c.ran && len(marks) > 0 {
				t.Errorf("the model's program ran as the server: %v in its cache", marks)
			}
			if c.ran && len(marks) == 0 {
				t.Errorf("cwd: workspace: the server did not start in the workspace (no mark of the launcher finding the program there)")
			}
		})
	}
}
