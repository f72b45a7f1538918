package executor

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExampleToolsConfigIsSafe: the shipped example sandboxes its
// programs and stdio servers, and its allow-lists refuse the arguments
// that act (find -exec, git -c, git config): safe under a permissive
// policy.
func TestExampleToolsConfigIsSafe(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"ls", "git", "uvx", "find"} {
		must(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755))
	}
	t.Setenv("PATH", os.Getenv("PATH")+string(os.PathListSeparator)+bin)
	cfg, err := LoadToolsConfig(filepath.Join("testdata", "tools.example.yaml"))
	must(t, err)
	if cfg.Shell.Sandbox.disabled() || cfg.FS == nil {
		t.Fatal("the example runs programs without a sandbox, or has no fs section")
	}
	for _, m := range cfg.MCP {
		if m.Sandbox.disabled() {
			t.Errorf("MCP server %s runs without a sandbox", m.Name)
		}
	}
	var git, find *BinaryConfig
	for i := range cfg.Shell.Binaries {
		switch b := &cfg.Shell.Binaries[i]; b.Name {
		case "git":
			git = b
		case "find":
			find = b
		}
	}
	st := &shellTool{ws: &workspace{}}
	for _, c := range []struct {
		b    *BinaryConfig
		args []string
	}{
		{find, []string{".", "-exec", "sh", "-c", "id", ";"}},
		{find, []string{"--", ".", "-exec", "sh", ";"}},
		{find, []string{".", "-delete"}},
		{find, []string{".", "-fprint", "x"}},
		{git, []string{"-c", "core.fsmonitor=id", "status"}},
		{git, []string{"config", "alias.st", "!id"}},
		{git, []string{"submodule", "foreach", "id"}},
		{git, []string{"--no-pager", "log", "--output=/tmp/x"}},
	} {
		if e := st.checkArgs(c.b, c.args, "."); e == nil {
			t.Errorf("%s %v allowed", c.b.Name, c.args)
		}
	}
}
