package executor

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

const fullToolsConfig = `# every section
http:
  allow_hosts: [api.example.com, "*.example.org", "localhost:8080", "[::1]:9000"]
  allow_addresses: [127.0.0.1/32, "::1", "::ffff:10.0.0.0/104"]
  https_only: true
  max_redirects: 3
  max_request_bytes: 1000
  max_response_bytes: 2000
  timeout: 3s
shell:
  env: [PATH, LANG]
  set_env: {LC_ALL: C}
  timeout: 2s
  max_output_bytes: 100
  binaries:
    - name: echo
      effect: read
      idempotent: true
    - name: ls
      path: /usr/bin/ls
      allow_flags: [-l, "--color="]
      path_args: true
      max_args: 4
servers:
  - name: billing
    address: 127.0.0.1:9000
    timeout: 30s
    tools:
      refund: {effect: irreversible, idempotent: false}
mcp:
  - name: files
    command: cat
    args: [-u]
    env: [HOME]
    tools:
      write: {effect: reversible, idempotent: true, timeout: 1s}
  - name: remote
    url: http://127.0.0.1:8080/mcp
    ignore_annotations: true
`

func TestParseToolsConfig(t *testing.T) {
	cfg, err := ParseToolsConfig("tools.yaml", []byte(fullToolsConfig))
	must(t, err)
	h := cfg.HTTP
	if !h.HTTPSOnly || h.MaxRedirects != 3 || h.Timeout != 3*time.Second || len(h.hosts) != 4 || len(h.addrs) != 3 {
		t.Fatalf("http: %+v", h)
	}
	if h.addrs[1] != netip.MustParsePrefix("::1/128") || h.addrs[2] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Fatalf("addresses: %v", h.addrs)
	}
	if h.hosts[1] != (hostRule{host: "example.org", wildcard: true}) || h.hosts[2] != (hostRule{host: "localhost", port: "8080"}) || h.hosts[3] != (hostRule{host: "::1", port: "9000"}) {
		t.Fatalf("hosts: %+v", h.hosts)
	}
	sh := cfg.Shell
	if len(sh.Binaries) != 2 || !filepath.IsAbs(sh.Binaries[0].resolved) || sh.Binaries[0].Effect != EffectRead || sh.SetEnv["LC_ALL"] != "C" {
		t.Fatalf("shell: %+v", sh)
	}
	if sh.Binaries[1].MaxArgs != 4 || !sh.Binaries[1].PathArgs || !slices.Equal(sh.Binaries[1].AllowFlags, []string{"-l", "--color="}) {
		t.Fatalf("ls: %+v", sh.Binaries[1])
	}
	if s := cfg.Servers[0]; s.Name != "billing" || s.Timeout != 30*time.Second || s.Tools["refund"].Effect != EffectIrreversible || *s.Tools["refund"].Idempotent {
		t.Fatalf("servers: %+v", cfg.Servers)
	}
	if m := cfg.MCP[0]; m.resolved == "" || m.Tools["write"].Effect.proto(0) != xctv1.Effect_EFFECT_REVERSIBLE || m.Tools["write"].Timeout != time.Second {
		t.Fatalf("mcp: %+v", cfg.MCP[0])
	}
	if !cfg.MCP[1].IgnoreAnnotations || cfg.MCP[1].URL == "" {
		t.Fatalf("mcp: %+v", cfg.MCP[1])
	}

	// From a file, and through New.
	dir := t.TempDir()
	file := filepath.Join(dir, "tools.yaml")
	must(t, os.WriteFile(file, []byte("shell:\n  binaries: [{name: echo}]\n"), 0o600))
	s, err := New(Config{Workspace: t.TempDir(), ToolsConfigFile: file}, nil, nil)
	must(t, err)
	defer func() { _ = s.Stop(t.Context()) }()
	if _, ok := s.tool("shell.exec"); !ok {
		t.Fatal("shell.exec not registered")
	}
	if _, ok := s.tool("http.request"); ok {
		t.Fatal("http.request registered without an http section")
	}
	if _, err := New(Config{Workspace: t.TempDir(), ToolsConfigFile: filepath.Join(dir, "missing.yaml")}, nil, nil); !errors.Is(err, ErrToolsConfig) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestNoToolsConfig: without a configuration, only the fs tools exist.
func TestNoToolsConfig(t *testing.T) {
	for name, data := range map[string]string{"no file": "", "empty file": "\n", "empty sections": "servers: []\nmcp: []\n"} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Workspace: t.TempDir()}
			if data != "" {
				c, err := ParseToolsConfig("tools.yaml", []byte(data))
				must(t, err)
				cfg.Tools = c
			}
			s, err := New(cfg, nil, nil)
			must(t, err)
			defer func() { _ = s.Stop(t.Context()) }()
			for _, d := range s.Tools() {
				if !strings.HasPrefix(d.GetName(), "fs.") && d.GetName() != UndoToolName {
					t.Fatalf("%s is registered", d.GetName())
				}
			}
		})
	}
}

func TestParseToolsConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "http:\n  allow_hosts: [a.com]\n  allow_proxy: true\n", "tools.yaml:3: field allow_proxy not found"},
		{"unknown section", "ssh: {}\n", "tools.yaml:1: field ssh not found"},
		{"wrong type", "http:\n  allow_hosts: a.com\n", "tools.yaml:2: http.allow_hosts: want a list of strings, not the string `a.com`"},
		{"duplicate key", "http:\n  allow_hosts: [a.com]\n  allow_hosts: [b.com]\n", "tools.yaml:3: mapping key \"allow_hosts\" already defined at line 2"},
		{"bad effect", "shell:\n  binaries:\n    - name: echo\n      effect: undoable\n", `tools.yaml:4: effect "undoable"`},
		{"bad duration", "shell:\n  timeout: soon\n  binaries: [{name: echo}]\n", "tools.yaml:2: shell.timeout: want a duration with a unit (300ms, 5s, 2m), not the string `soon`"},
		{"duration without a unit", "servers:\n  - {name: a, address: \"h:1\", timeout: 30}\n", "tools.yaml:2: servers[0].timeout: want a duration with a unit (300ms, 5s, 2m), not the number `30`"},
		{"flag not a boolean", "shell:\n  binaries:\n    - name: echo\n      any_flags: sometimes\n", "tools.yaml:4: shell.binaries[0].any_flags: want true or false, not the string `sometimes`"},
		{"section not a mapping", "shell:\n  - echo\n", "tools.yaml:2: shell: want a mapping, not a list"},
		{"override's idempotent", "mcp:\n  - name: m\n    url: http://h/mcp\n    tools:\n      search: {idempotent: maybe}\n", "tools.yaml:5: mcp[0].tools.search.idempotent: want true or false, not the string `maybe`"},
		{"long value cut", "http:\n  allow_hosts: [a.com]\n  max_redirects: a-great-many\n", "tools.yaml:3: http.max_redirects: want a whole number, not the string `a-great-many`"},
		{"syntax", "http: [\n", "tools.yaml:"},
		{"two documents", "http:\n  allow_hosts: [a.com]\n---\nshell: {}\n", "more than one YAML document"},
		{"no hosts", "http: {}\n", "tools.yaml:1: http.allow_hosts: allow_hosts is empty"},
		{"bad host", "http:\n  allow_hosts: [a.com, \"http://b.com\"]\n", `tools.yaml:2: http.allow_hosts[1]: "http://b.com" is not a host name`},
		{"bad port", "http:\n  allow_hosts: [\"a.com:99999\"]\n", "bad port"},
		{"non-ASCII host", "http:\n  allow_hosts: [\"bücher.de\"]\n", "punycode"},
		{"bad address", "http:\n  allow_hosts: [a.com]\n  allow_addresses:\n    - 10.0.0.0/8\n    - localhost\n", `tools.yaml:5: http.allow_addresses[1]: "localhost" is not an IP prefix`},
		{"negative redirects", "http:\n  allow_hosts: [a.com]\n  max_redirects: -2\n", "tools.yaml:3: http.max_redirects"},
		{"no binaries", "shell: {}\n", "binaries is empty"},
		{"binary with a slash", "shell:\n  binaries:\n    - name: /bin/sh\n", `tools.yaml:3: shell.binaries[0].name: name "/bin/sh" must be a bare program name`},
		{"binary twice", "shell:\n  binaries:\n    - name: echo\n    - name: echo\n", "tools.yaml:4: shell.binaries[1].name: name \"echo\" is listed twice"},
		{"binary not found", "shell:\n  binaries:\n    - name: no-such-program-xct\n", `tools.yaml:3: shell.binaries[0].path: "no-such-program-xct" not found in PATH`},
		{"relative path", "shell:\n  binaries:\n    - name: echo\n      path: bin/echo\n", `tools.yaml:4: shell.binaries[0].path: path "bin/echo" must be absolute`},
		{"not executable", "shell:\n  binaries:\n    - name: passwd\n      path: /etc/passwd\n", "not an executable file"},
		{"flag without dash", "shell:\n  binaries:\n    - name: ls\n      allow_flags: [l]\n", `tools.yaml:4: shell.binaries[0].allow_flags[0]: "l" does not start with '-'`},
		{"bad env name", "shell:\n  env: [\"A=B\"]\n  binaries: [{name: echo}]\n", "is not an environment variable name"},
		{"nats credentials in env", "shell:\n  env: [XCT_NATS_PASSWORD]\n  binaries: [{name: echo}]\n", "never passed to a program"},
		{"server name reserved", "servers:\n  - name: fs\n    address: 127.0.0.1:1\n", `tools.yaml:2: servers[0].name: name "fs" is reserved`},
		// Its tools would be xct.undo (the system's) or facts.add (a crew's).
		{"server named xct", "servers:\n  - name: xct\n    address: 127.0.0.1:1\n", `servers[0].name: name "xct" is reserved`},
		{"server named facts", "servers:\n  - name: facts\n    address: 127.0.0.1:1\n", `servers[0].name: name "facts" is reserved`},
		{"server name with a dot", "servers:\n  - name: a.b\n    address: 127.0.0.1:1\n", "must be one word"},
		{"server twice", "servers:\n  - {name: a, address: \"h:1\"}\n  - {name: a, address: \"h:2\"}\n", "tools.yaml:3: servers[1].name: name \"a\" is used twice"},
		{"server address", "servers:\n  - name: a\n    address: nowhere\n", `tools.yaml:3: servers[0].address: address "nowhere" must be host:port`},
		{"server negative timeout", "servers:\n  - {name: a, address: \"h:1\", timeout: -1s}\n", "timeout -1s is negative"},
		{"mcp without transport", "mcp:\n  - name: m\n", "tools.yaml:2: mcp[0]: set exactly one of command"},
		{"mcp with both", "mcp:\n  - name: m\n    command: cat\n    url: http://h/mcp\n", "set exactly one of command"},
		{"mcp bad url", "mcp:\n  - name: m\n    url: ftp://h/mcp\n", `tools.yaml:3: mcp[0].url: url "ftp://h/mcp"`},
		{"mcp url with args", "mcp:\n  - name: m\n    url: http://h/mcp\n    args: [x]\n", "apply to a command"},
		{"mcp command missing", "mcp:\n  - name: m\n    command: no-such-program-xct\n", "not found in PATH"},
		{"mcp bad cwd", "mcp:\n  - name: m\n    command: cat\n    cwd: /srv\n", `mcp[0].cwd: cwd "/srv" must be empty`},
		{"mcp url with cwd", "mcp:\n  - name: m\n    url: http://h/mcp\n    cwd: workspace\n", "cwd applies to a command"},
		{"mcp command with a stream bound", "mcp:\n  - name: m\n    command: cat\n    max_stream_bytes: 1048576\n", "mcp[0].max_stream_bytes: max_stream_bytes bounds a url server's event stream"},
		{"mcp stream bound too small", "mcp:\n  - name: m\n    url: http://h/mcp\n    max_stream_bytes: 1024\n", "mcp[0].max_stream_bytes: max_stream_bytes 1024 must be between 65536 (64 KiB) and 1073741824 (1 GiB)"},
		{"mcp stream bound negative", "mcp:\n  - name: m\n    url: http://h/mcp\n    max_stream_bytes: -1\n", "max_stream_bytes -1 must be between"},
		{"mcp stream bound too large", "mcp:\n  - name: m\n    url: http://h/mcp\n    max_stream_bytes: 2147483648\n", "max_stream_bytes 2147483648 must be between"},
		{"mcp stream bound with a unit", "mcp:\n  - name: m\n    url: http://h/mcp\n    max_stream_bytes: 64MiB\n", "tools.yaml:4: mcp[0].max_stream_bytes: want a whole number, not the string `64MiB`"},
		{"mcp bad tool override", "mcp:\n  - name: m\n    command: cat\n    tools:\n      \"a b\": {effect: read}\n", `tool name "a b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseToolsConfig("tools.yaml", []byte(tt.yaml))
			if !errors.Is(err, ErrToolsConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// TestExampleToolsConfig keeps testdata/tools.example.yaml valid. The
// programs it names are given stand-ins where this machine lacks them.
func TestExampleToolsConfig(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"ls", "git", "uvx", "find"} {
		must(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755))
	}
	t.Setenv("PATH", os.Getenv("PATH")+string(os.PathListSeparator)+bin)
	cfg, err := LoadToolsConfig(filepath.Join("testdata", "tools.example.yaml"))
	must(t, err)
	if cfg.HTTP == nil || cfg.Shell == nil || len(cfg.Servers) != 1 || len(cfg.MCP) != 2 || len(cfg.HTTP.hosts) != 3 {
		t.Fatalf("example: %+v", cfg)
	}
}

// TestUncheckedToolsConfig: a configuration not made by the parser is
// refused rather than served half-checked.
func TestUncheckedToolsConfig(t *testing.T) {
	_, err := New(Config{Workspace: t.TempDir(), Tools: &ToolsConfig{Shell: &ShellConfig{Binaries: []BinaryConfig{{Name: "sh"}}}}}, nil, nil)
	if !errors.Is(err, ErrToolsConfig) {
		t.Fatalf("New = %v", err)
	}
}
