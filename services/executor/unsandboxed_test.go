package executor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/testutil"
)

// TestUnsandboxedProgramsGetNoSecrets: a program run with "sandbox: none"
// gets none of the executor's secrets through its environment (the NATS
// password, the service token, a model key), and a tools configuration
// may not pass XCT's own variables or secrets on.
func TestUnsandboxedProgramsGetNoSecrets(t *testing.T) {
	secrets := map[string]string{
		"XCT_NATS_PASSWORD": "nats-secret-7f3a",
		"XCT_SERVICE_TOKEN": "service-secret-91bc",
		"OPENAI_API_KEY":    "sk-model-secret-44d0",
		"NATS_CREDENTIALS":  "/secret/path-5e21",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	sb := newSandbox(t)
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: none\n  binaries:\n    - {name: env, path: /usr/bin/env}\n"))
	must(t, err)
	s, err := New(Config{Workspace: sb.ws, Tools: cfg}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	out := resultAs[ShellResult](t, shell(t, s, "env"))
	for k, v := range secrets {
		if strings.Contains(out.Stdout, v) || strings.Contains(out.Stdout, k+"=") {
			t.Errorf("the unsandboxed program's environment has %s:\n%s", k, out.Stdout)
		}
	}
	for name := range secrets {
		for _, where := range []string{"shell:\n  sandbox: none\n  env: [PATH, %s]\n  binaries: [{name: env}]\n",
			"mcp:\n  - {name: m, command: /bin/cat, sandbox: none, env: [%s]}\n"} {
			text := strings.Replace(where, "%s", name, 1)
			if _, err := ParseToolsConfig("tools.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("a configuration passing %s to a program: %v", name, err)
			}
		}
	}
}

// TestUnsandboxedRefusedWhileSecretsReadable: a program run with
// "sandbox: none" runs as the executor's user and can read what it can:
// the executor refuses to start with such a tool (shell.exec or a stdio
// MCP server) while a file of its secrets (the NATS credentials) is
// readable, or while it runs as root with a secret in its environment
// (root reads any process's), unless the operator says so
// (--unsandboxed-reads-secrets), which is logged. Sandboxed tools, or a
// secrets file gone after start, are no reason.
func TestUnsandboxedRefusedWhileSecretsReadable(t *testing.T) {
	sb := newSandbox(t)
	creds := filepath.Join(t.TempDir(), "nats.yaml")
	must(t, os.WriteFile(creds, []byte("executor: pw\n"), 0o600))
	shellNone := "shell:\n  sandbox: none\n  binaries:\n    - {name: echo}\n"
	mcpNone := "mcp:\n  - {name: m, command: /bin/cat, sandbox: none}\n"
	sandboxed := "shell:\n  binaries:\n    - {name: echo}\n"
	start := func(t *testing.T, text string, cfg Config) (string, error) {
		t.Helper()
		tc, err := ParseToolsConfig("tools.yaml", []byte(text))
		must(t, err)
		cfg.Workspace, cfg.Tools = sb.ws, tc
		var logs testutil.Buffer
		s, err := New(cfg, nil, slog.New(slog.NewTextHandler(&logs, nil)))
		if err == nil {
			_ = s.Stop(context.Background())
		}
		return logs.String(), err
	}
	for _, text := range []string{shellNone, mcpNone} {
		_, err := start(t, text, Config{SecretFiles: []string{creds}})
		if !errors.Is(err, ErrToolsConfig) || !strings.Contains(err.Error(), creds) || !strings.Contains(err.Error(), "--unsandboxed-reads-secrets") {
			t.Errorf("sandbox none with %s readable: %v", creds, err)
		}
		logs, err := start(t, text, Config{SecretFiles: []string{creds}, UnsandboxedReadsSecrets: true})
		if err != nil || !strings.Contains(logs, "SECURITY") || !strings.Contains(logs, creds) {
			t.Errorf("sandbox none with %s readable, accepted by the operator: %v\n%s", creds, err, logs)
		}
	}
	if _, err := start(t, sandboxed, Config{SecretFiles: []string{creds}}); err != nil {
		t.Errorf("a sandboxed tool with a secrets file: %v", err)
	}
	if _, err := start(t, shellNone, Config{SecretFiles: []string{filepath.Join(t.TempDir(), "gone.yaml")}}); err != nil {
		t.Errorf("sandbox none with the secrets file gone: %v", err)
	}
	_, err := start(t, shellNone, Config{SecretsInEnv: true})
	if root := os.Geteuid() == 0; root != (err != nil) {
		t.Errorf("sandbox none with a secret in the environment (root: %v): %v", root, err)
	}
}

// TestSandboxMountsNoSecret (session 15, attack15a): a sandbox's
// read_only or writable host path that holds a file of the executor's
// secrets gives it to every program there. xct dev keeps the NATS
// passwords beside the workspace: read_only naming the workspace's
// parent (for a toolchain under it) brought them in, and a program with
// the network had what it needed to write the tool catalog. On main the
// executor started with such a mount; now it refuses to, for shell.exec
// and stdio MCP servers. A path beside the secret's is fine.
func TestSandboxMountsNoSecret(t *testing.T) {
	parent := t.TempDir()
	ws := filepath.Join(parent, "ws")
	must(t, os.MkdirAll(filepath.Join(parent, "dev"), 0o700))
	must(t, os.MkdirAll(filepath.Join(parent, "tools"), 0o755))
	must(t, os.Mkdir(ws, 0o755))
	creds := filepath.Join(parent, "dev", "nats.yaml")
	must(t, os.WriteFile(creds, []byte("executor: pw\n"), 0o600))
	start := func(text string) error {
		tc, err := ParseToolsConfig("tools.yaml", []byte(text))
		must(t, err)
		s, err := New(Config{Workspace: ws, Tools: tc, SecretFiles: []string{creds}}, nil, testLogger(t))
		if err == nil {
			_ = s.Stop(context.Background())
		}
		return err
	}
	for name, text := range map[string]string{
		"shell read_only parent": "shell:\n  sandbox: {read_only: [" + parent + "]}\n  binaries: [{name: echo}]\n",
		"shell writable dir":     "shell:\n  sandbox: {writable: [" + filepath.Join(parent, "dev") + "]}\n  binaries: [{name: echo}]\n",
		"mcp read_only parent":   "mcp:\n  - {name: m, command: /bin/cat, sandbox: {read_only: [" + parent + "]}}\n",
	} {
		if err := start(text); !errors.Is(err, ErrToolsConfig) || !strings.Contains(err.Error(), creds) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := start("shell:\n  sandbox: {read_only: [" + filepath.Join(parent, "tools") + "]}\n  binaries: [{name: echo}]\n"); err != nil {
		t.Errorf("a read_only path beside the secrets: %v", err)
	}
}
