package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkMCPCall is one step of a stdio MCP server's tool through the
// executor, the server (the test binary) in the OS sandbox, in a
// workspace of 200 files: "read" is a tool configured read, "write" one
// that may write (the protected-path scans before and after, and since
// session 12 an instance of the server of its own, started for the call
// and killed with its PID namespace after it).
func BenchmarkMCPCall(b *testing.B) {
	requireSandbox(b)
	self, err := os.Executable()
	must(b, err)
	ws := b.TempDir()
	for i := range 200 {
		d := filepath.Join(ws, fmt.Sprintf("d%d", i%10))
		must(b, os.MkdirAll(d, 0o755))
		must(b, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.txt", i)), []byte("x"), 0o644))
	}
	entry := "name: local\ncommand: " + self + "\nargs: [-test.run=^$]\nset_env: {" + mcpStdioEnv + ": \"1\"}\ntimeout: 10s\ntools:\n  echo: {effect: read}\n  write: {effect: reversible}"
	cfg, err := ParseToolsConfig("tools.yaml", []byte("mcp:\n  - "+strings.ReplaceAll(entry, "\n", "\n    ")+"\n"))
	must(b, err)
	givenWorkspace(cfg, ws)
	s, err := New(Config{Workspace: ws, Tools: cfg}, nil, nil)
	must(b, err)
	b.Cleanup(func() { _ = s.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(b, s.Start(ctx))
	for _, tool := range []string{"echo", "write"} {
		name := map[string]string{"echo": "read", "write": "write"}[tool]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if r := exec(b, s, "mcp.local."+tool, map[string]any{"text": "hi"}); r.GetError() != nil {
					b.Fatalf("%s: %v", tool, r)
				}
			}
		})
	}
}
