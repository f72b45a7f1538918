package validator_test

import (
	"path"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/executor"
)

// TestDefaultPolicyProtectedPaths: the built-in policy denies fs changes of
// the executor's protected paths, however spelled, and only those.
func TestDefaultPolicyProtectedPaths(t *testing.T) {
	t.Parallel()
	move := &xctv1.ToolDescriptor{Name: "fs.move", InputSchema: `{"type":"object","properties":{"from":{"type":"string"},"to":{"type":"string"}},"required":["from","to"]}`,
		Effect: xctv1.Effect_EFFECT_REVERSIBLE}
	s := newService(t, "", append(testTools(), move)...)
	for _, path := range []string{".git/config", ".GIT/config", "sub/.git/hooks/pre-commit", ".git", ".git./config",
		".npmrc", "app/.envrc", ".gitmodules", ".xct/x", "a/.ssh/authorized_keys", ".pre-commit-config.yaml",
		// Session 11 (trust11c): what runs code for whoever opens the
		// workspace next.
		".vscode/tasks.json", ".VSCode/settings.json", "app/.devcontainer/devcontainer.json", ".devcontainer.json", ".idea/workspace.xml",
		"mise.toml", ".mise.toml", "mise.local.toml", ".mise/config.toml", ".tool-versions", "bunfig.toml", ".exrc", ".nvim.lua", "lefthook.yml",
		// Session 15 (attack15a): cargo's configuration, read by commands that build nothing.
		".cargo/config.toml", "crates/a/.cargo/config"} {
		v := validate(t, s, request(t, "fs.write", map[string]any{"path": path, "content": "x"}))
		checkVerdict(t, v, deny, wire.CodePolicyDenied, "allow-reversible", "protected-paths")
	}
	for _, m := range []map[string]any{{"from": ".git", "to": "x"}, {"from": "x", "to": ".git/config"}} {
		checkVerdict(t, validate(t, s, request(t, "fs.move", m)), deny, wire.CodePolicyDenied, "allow-reversible", "protected-paths")
	}
	for _, path := range []string{"config/app.yaml", ".gitignore", "git/config", "my.git/x", "npmrc",
		"vscode/tasks.json", "tasks.json", "devcontainer.json", "mise.toml.txt", "docs/bunfig.md"} {
		checkVerdict(t, validate(t, s, request(t, "fs.write", map[string]any{"path": path, "content": "x"})), allow, "", "allow-reversible")
	}
	checkVerdict(t, validate(t, s, request(t, "fs.move", map[string]any{"from": "a", "to": "b"})), allow, "", "allow-reversible")
	checkVerdict(t, validate(t, s, request(t, "fs.read", map[string]any{"path": ".git/config"})), allow, "", "allow-read")
}

// TestDefaultPolicyAgreesWithExecutor: the built-in policy's rule
// protected-paths denies an fs change of every one of the executor's
// protected paths (executor.DefaultProtectedPaths), at the top, below a
// directory, and spelled in upper case: the two lists are kept by hand,
// and a name added to one alone fails here (session 11, trust11c).
func TestDefaultPolicyAgreesWithExecutor(t *testing.T) {
	t.Parallel()
	s := newService(t, "", testTools()...)
	for _, name := range executor.DefaultProtectedPaths {
		var paths []string
		if dir, ok := strings.CutSuffix(name, "/"); ok {
			paths = []string{dir, path.Join(dir, "x"), path.Join("a", dir, "b", "c"), strings.ToUpper(dir) + "/x"}
		} else {
			paths = []string{name, path.Join("a", "b", name), strings.ToUpper(name)}
		}
		for _, p := range paths {
			v := validate(t, s, request(t, "fs.write", map[string]any{"path": p, "content": "x"}))
			checkVerdict(t, v, deny, wire.CodePolicyDenied, "allow-reversible", "protected-paths")
		}
	}
}
