package validator_test

import (
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// TestDefaultPolicyProtectedPaths: the built-in policy denies fs changes of
// the executor's protected paths, however spelled, and only those.
func TestDefaultPolicyProtectedPaths(t *testing.T) {
	t.Parallel()
	move := &xctv1.ToolDescriptor{Name: "fs.move", InputSchema: `{"type":"object","properties":{"from":{"type":"string"},"to":{"type":"string"}},"required":["from","to"]}`,
		Effect: xctv1.Effect_EFFECT_REVERSIBLE}
	s := newService(t, "", append(testTools(), move)...)
	for _, path := range []string{".git/config", ".GIT/config", "sub/.git/hooks/pre-commit", ".git", ".git./config",
		".npmrc", "app/.envrc", ".gitmodules", ".xct/x", "a/.ssh/authorized_keys", ".pre-commit-config.yaml"} {
		v := validate(t, s, request(t, "fs.write", map[string]any{"path": path, "content": "x"}))
		checkVerdict(t, v, deny, wire.CodePolicyDenied, "allow-reversible", "protected-paths")
	}
	for _, m := range []map[string]any{{"from": ".git", "to": "x"}, {"from": "x", "to": ".git/config"}} {
		checkVerdict(t, validate(t, s, request(t, "fs.move", m)), deny, wire.CodePolicyDenied, "allow-reversible", "protected-paths")
	}
	for _, path := range []string{"config/app.yaml", ".gitignore", "git/config", "my.git/x", "npmrc"} {
		checkVerdict(t, validate(t, s, request(t, "fs.write", map[string]any{"path": path, "content": "x"})), allow, "", "allow-reversible")
	}
	checkVerdict(t, validate(t, s, request(t, "fs.move", map[string]any{"from": "a", "to": "b"})), allow, "", "allow-reversible")
	checkVerdict(t, validate(t, s, request(t, "fs.read", map[string]any{"path": ".git/config"})), allow, "", "allow-read")
}
