package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFilesOutsideTheWorkspace: a process serving the executor
// refuses files and directories it is configured with inside the
// workspace (the model reads and rewrites it), through symbolic links
// too; outside, or in a process without the executor, they are its own.
func TestConfigFilesOutsideTheWorkspace(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ws, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	all := []string{TargetExecutor, TargetValidator, TargetTracer, TargetOrchestrator}
	for _, tc := range []struct {
		name    string
		targets []string
		set     func(c *Config)
		want    string // "" for no refusal
	}{
		{"policy inside", all, func(c *Config) { c.Validator.PolicyFile = filepath.Join(ws, "sub", "p.yaml") }, "--policy"},
		{"second policy inside", all, func(c *Config) {
			c.Validator.PolicyFile = filepath.Join(base, "a.yaml") + "," + filepath.Join(ws, "b.yaml")
		}, "--policy"},
		{"tools config through a link", all, func(c *Config) { c.Executor.ToolsConfigFile = filepath.Join(base, "link", "tools.yaml") }, "--tools-config"},
		{"scripts are the workspace", all, func(c *Config) { c.Orchestrator.ScriptsDir = ws }, "--scripts-dir"},
		{"tokens inside", all, func(c *Config) { c.Auth.TokensFile = filepath.Join(ws, "not-yet", "tokens.yaml") }, "--auth-tokens"},
		{"tls key inside", all, func(c *Config) { c.Security.TLS.Key = filepath.Join(ws, "k.pem") }, "--tls-key"},
		// Session 9 (trust9b): three were not looked at. A JWKS file is
		// read again when it changes: the model's fs.write of its own key
		// there let whoever holds that key sign in with any roles. The
		// checkpoint key (also re-read) signs the chains' checkpoints; the
		// redaction rules decide what the chains hide.
		{"oidc jwks file inside", all, func(c *Config) { c.Auth.OIDCJWKS = filepath.Join(ws, "jwks.json") }, "--oidc-jwks"},
		{"oidc jwks URL", all, func(c *Config) { c.Auth.OIDCJWKS = "https://issuer.invalid/jwks" }, ""},
		{"checkpoint key inside", all, func(c *Config) { c.Orchestrator.Checkpoint.KeyFile = filepath.Join(ws, "cp.key") }, "--checkpoint-key-file"},
		{"redaction rules inside", all, func(c *Config) { c.Redact.File = filepath.Join(ws, "redact.yaml") }, "--redact-config"},
		{"a name inside that starts with two dots", all, func(c *Config) { c.Validator.PolicyFile = filepath.Join(ws, "..policy.yaml") }, "--policy"},
		{"everything beside it", all, func(c *Config) {
			c.Validator.PolicyFile, c.Orchestrator.ScriptsDir, c.Tracer.DataDir = filepath.Join(base, "p.yaml"), filepath.Join(base, "scripts"), base+"-ws"
		}, ""},
		{"a name that only starts like it", all, func(c *Config) { c.Validator.PolicyFile = ws + "2/p.yaml" }, ""},
		{"no executor here", []string{TargetValidator}, func(c *Config) { c.Validator.PolicyFile = filepath.Join(ws, "p.yaml") }, ""},
	} {
		c := &Config{}
		c.Executor.Workspace = ws
		tc.set(c)
		err := c.checkOutsideWorkspace(tc.targets)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "inside the executor's workspace")):
			t.Errorf("%s: %v, want a refusal of %s", tc.name, err, tc.want)
		}
	}
}
