package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// ToolsConfig is the tools configuration file (-tools-config): everything
// the executor may reach beyond its workspace. Each section is opt-in:
// without the file, or without a section, http.request and shell.exec are
// not registered and no external tool is served (default deny).
//
//	fs:                            # the fs tools (always served)
//	  protected_paths: [secrets/]  # added to DefaultProtectedPaths
//	http:                          # http.request
//	  allow_hosts: [api.example.com, "*.example.org", "localhost:8080"]
//	  allow_addresses: []          # CIDRs reachable although private, loopback, ...
//	  https_only: false
//	  max_redirects: 5
//	  max_request_bytes: 1048576
//	  max_response_bytes: 1048576
//	  timeout: 10s
//	shell:                         # shell.exec
//	  env: [PATH, LANG]            # variables passed from the executor's environment
//	  set_env: {LC_ALL: C}
//	  timeout: 10s
//	  max_output_bytes: 65536      # per stream
//	  sandbox: {network: false}    # see SandboxConfig; "sandbox: none" runs unconfined
//	  binaries:
//	    - name: git                # argv[0], exactly
//	      path: /usr/bin/git       # optional: else looked up in PATH at load
//	      effect: irreversible     # read | reversible | irreversible (default)
//	      idempotent: false
//	      allow_flags: [--version, -n, "--format="]   # "x=" allows every "x=..."
//	      any_flags: false
//	      path_args: true          # operands must be paths inside the workspace
//	      subcommands: [status, log]   # the first operand must be one of them
//	servers:                       # external ToolService servers, tools "<name>.<tool>"
//	  - name: billing
//	    address: 127.0.0.1:9000
//	    timeout: 30s               # caps the timeouts the server declares
//	    tools: {refund: {effect: irreversible, idempotent: false}}
//	mcp:                           # MCP servers, tools "mcp.<name>.<tool>"
//	  - name: files
//	    command: /usr/local/bin/files-mcp   # stdio; or url: for streamable HTTP
//	    args: [--root, /srv]
//	    env: [HOME]
//	    sandbox: {network: false}  # stdio servers run in the sandbox too
//	    ignore_annotations: false  # hints are shown, never trusted to widen
//	    tools: {write_file: {effect: reversible, idempotent: true}}
//
// Build it with LoadToolsConfig or ParseToolsConfig: they check it and
// resolve what it names; New refuses a configuration they did not make.
type ToolsConfig struct {
	FS      *FSConfig         `yaml:"fs"`
	HTTP    *HTTPConfig       `yaml:"http"`
	Shell   *ShellConfig      `yaml:"shell"`
	Servers []ServerConfig    `yaml:"servers"`
	MCP     []MCPServerConfig `yaml:"mcp"`

	checked bool
}

// FSConfig configures the fs tools (always served).
type FSConfig struct {
	// ProtectedPaths are protected in addition to DefaultProtectedPaths
	// (which always apply): "name/" protects a directory of that name
	// anywhere in the workspace, "name" a file of that name anywhere.
	ProtectedPaths []string `yaml:"protected_paths"`
	// ProtectedScanEntries bounds the names the scan for protected paths
	// counts before a program (or MCP tool) that may write runs (default
	// 2,097,152): one that is not a read program is refused in a
	// workspace with more, since a protected entry the scan did not find
	// would be writable to it. A rescan reads again only the directories
	// that changed (scanCache); it stats every one, a few µs each, before
	// and after each such call.
	ProtectedScanEntries int `yaml:"protected_scan_entries"`
}

// HTTPConfig configures http.request.
type HTTPConfig struct {
	// AllowHosts are the hosts a request (and every redirect) may name:
	// "api.example.com", "*.example.com" (subdomains only), an IP literal,
	// each optionally with ":port". Without a port only the scheme's
	// default port (80, 443) is allowed.
	AllowHosts []string `yaml:"allow_hosts"`
	// AllowAddresses are IP prefixes ("127.0.0.1/32", "10.1.0.0/16") the
	// tool may connect to although they are in a denied range (private,
	// loopback, link-local, CGNAT, unique-local, ...). A cloud metadata
	// address is reachable only when listed as a single address.
	AllowAddresses []string `yaml:"allow_addresses"`
	// HostAddresses allow addresses of the denied ranges to connections
	// to one host only (a key as in AllowHosts): "status.internal:8443":
	// ["10.20.0.0/16"]. Prefer it to AllowAddresses, which lets every
	// allowed host reach them: a name under an allowed wildcard whose DNS
	// someone else controls (a dangling CNAME) would.
	HostAddresses map[string][]string `yaml:"host_addresses"`
	// HTTPSOnly refuses plain http URLs.
	HTTPSOnly bool `yaml:"https_only"`
	// CaseInsensitivePaths are hosts (as in AllowHosts) whose server reads
	// a URL's path without regard to case (IIS, ASP.NET, a static server
	// on a case-folding file system): a request to one with an upper-case
	// letter in its path is refused, naming the path in lower case, so a
	// rule on "/admin" also holds against "/ADMIN".
	CaseInsensitivePaths []string `yaml:"case_insensitive_paths"`
	// UnderscoreHeaders are the header names with a "_" the tool may send
	// ("Api_Key"), written plainly. Any other name with one is refused:
	// CGI, PHP and WSGI servers read "_" as "-", so X_Api_Key is their
	// X-Api-Key, past a rule that reads args.headers["X-Api-Key"].
	UnderscoreHeaders []string `yaml:"underscore_headers"`
	// MaxRedirects caps the redirects followed (default 5; more is an
	// error). -1 follows none: a 3xx response is the result.
	MaxRedirects int `yaml:"max_redirects"`
	// MaxRequestBytes caps the request body (default 1 MiB).
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// MaxResponseBytes caps the response body (default 1 MiB); a larger
	// body is not read: the request was sent and answered, so the step
	// succeeds with a result that says so (status, body_not_read,
	// result_not_kept; docs/events.md, "A result not kept").
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// Timeout bounds one request, redirects and body included (default:
	// the executor's tool timeout).
	Timeout time.Duration `yaml:"timeout"`
	// Resolver resolves host names (default net.DefaultResolver). Not in
	// the file: tests set it.
	Resolver Resolver `yaml:"-"`

	hosts       []hostRule
	foldedHosts []hostRule
	addrs       []netip.Prefix
	hostAddrs   []hostAddrs
}

// Resolver resolves a host name to IP addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ShellConfig configures shell.exec.
type ShellConfig struct {
	// Binaries are the only programs shell.exec runs.
	Binaries []BinaryConfig `yaml:"binaries"`
	// Env names the variables passed from the executor's environment
	// (default: PATH). Nothing else is passed.
	Env []string `yaml:"env"`
	// SetEnv sets variables to fixed values.
	SetEnv map[string]string `yaml:"set_env"`
	// Timeout bounds one command (default: the executor's tool timeout);
	// at the deadline its whole process group is killed.
	Timeout time.Duration `yaml:"timeout"`
	// MaxOutputBytes caps what is kept of stdout and of stderr (default
	// 64 KiB each); the rest is discarded and reported as truncated.
	MaxOutputBytes int64 `yaml:"max_output_bytes"`
	// MaxStdinBytes caps the stdin argument (default 1 MiB).
	MaxStdinBytes int64 `yaml:"max_stdin_bytes"`
	// Sandbox is the OS sandbox every program runs in (default: bwrap
	// with no network; see SandboxConfig). "sandbox: none" runs programs
	// unconfined, and is logged at startup and on every call.
	Sandbox *SandboxConfig `yaml:"sandbox"`
}

// BinaryConfig is one program shell.exec may run.
type BinaryConfig struct {
	// Name is what argv[0] must be, exactly: a bare name, no slash.
	Name string `yaml:"name"`
	// Path is the program's absolute path; empty: Name is looked up in
	// the executor's PATH when the file is loaded.
	Path string `yaml:"path"`
	// Effect is the effect class of running it (default irreversible).
	Effect Effect `yaml:"effect"`
	// Idempotent says whether a call in doubt may be run again.
	Idempotent bool `yaml:"idempotent"`
	// AllowFlags are the arguments starting with "-" that are allowed:
	// exact ("-n", "--"), or a prefix ending with "=" ("--format=").
	// Every other such argument is refused (argument injection).
	AllowFlags []string `yaml:"allow_flags"`
	// AnyFlags allows every argument starting with "-".
	AnyFlags bool `yaml:"any_flags"`
	// PathArgs requires every other argument to be a relative path that
	// stays inside the workspace (no "..", not absolute), in clean form
	// ("./" may begin it) and not through a symbolic link.
	PathArgs bool `yaml:"path_args"`
	// Subcommands, when set, are the only values the first argument that
	// is not an option may take ("git status", not "git config").
	Subcommands []string `yaml:"subcommands"`
	// MaxArgs caps the number of arguments after argv[0] (default 64).
	MaxArgs int `yaml:"max_args"`

	resolved string
}

// ServerConfig is an external ToolService server.
type ServerConfig struct {
	// Name prefixes the server's tools: "<name>.<tool>".
	Name string `yaml:"name"`
	// Address is the server's gRPC address, "host:port".
	Address string `yaml:"address"`
	// TLS, when set, dials the server over TLS, verified against CA, and
	// presents Cert/Key as the executor's client certificate when given
	// (mutual TLS). The files are re-read when they change. Without it
	// the connection is plaintext: keep such servers on loopback or a
	// network the executor's egress policy confines.
	TLS *RemoteTLS `yaml:"tls"`
	// Timeout caps the timeouts the server declares, and is the timeout of
	// tools that declare none (default: the executor's tool timeout).
	Timeout time.Duration `yaml:"timeout"`
	// MaxOutputBytes caps the results likewise (default: the executor's).
	MaxOutputBytes int64 `yaml:"max_output_bytes"`
	// Tools overrides what the server declares, per tool (local name).
	Tools map[string]ToolOverride `yaml:"tools"`
}

// RemoteTLS names the PEM files for a TLS connection to a tool server.
type RemoteTLS struct {
	// CA verifies the server's certificate (required).
	CA string `yaml:"ca"`
	// Cert and Key are the client certificate, both or neither.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// MCPServerConfig is an MCP server, over stdio (Command) or streamable
// HTTP (URL).
type MCPServerConfig struct {
	// Name prefixes the server's tools: "mcp.<name>.<tool>".
	Name string `yaml:"name"`
	// Command starts a stdio server: an absolute path, or a name looked up
	// in the executor's PATH when the file is loaded.
	Command string `yaml:"command"`
	// Args are the command's arguments.
	Args []string `yaml:"args"`
	// Env names the variables passed from the executor's environment;
	// nothing else is passed.
	Env []string `yaml:"env"`
	// SetEnv sets variables to fixed values.
	SetEnv map[string]string `yaml:"set_env"`
	// URL is a streamable HTTP endpoint (http or https).
	URL string `yaml:"url"`
	// Timeout bounds each call (default: the executor's tool timeout).
	Timeout time.Duration `yaml:"timeout"`
	// MaxOutputBytes caps each result (default: the executor's).
	MaxOutputBytes int64 `yaml:"max_output_bytes"`
	// MaxStreamBytes bounds an HTTP server's event stream, all its events
	// together (default DefaultMCPMaxStreamBytes, 64 MiB; between
	// MinMCPMaxStreamBytes and MaxMCPMaxStreamBytes): past it the read
	// stops, the connection is closed and the call fails. url only.
	MaxStreamBytes int64 `yaml:"max_stream_bytes"`
	// IgnoreAnnotations ignores the server's readOnlyHint and
	// idempotentHint: its tools are irreversible and not idempotent unless
	// Tools says otherwise.
	IgnoreAnnotations bool `yaml:"ignore_annotations"`
	// Tools sets the effect and idempotency per tool (MCP name). A tool
	// not listed is irreversible and not idempotent: the server's
	// annotations can only narrow this, never widen it.
	Tools map[string]ToolOverride `yaml:"tools"`
	// Sandbox is the OS sandbox of a stdio server (default: bwrap with no
	// network and no memory limit); "sandbox: none" runs it unconfined.
	Sandbox *SandboxConfig `yaml:"sandbox"`
	// Cwd is where a stdio server starts: empty (the default), an empty
	// read-only directory of its own; "workspace" (MCPCwdWorkspace), the
	// workspace, which the model writes: a launcher that resolves what it
	// runs from its working directory (npx, deno, python -m) then runs
	// the model's code. The workspace is at its path either way: give it
	// to the server in its args.
	Cwd string `yaml:"cwd"`

	resolved string
}

// MCPCwdWorkspace is the cwd of a stdio server that starts in the
// workspace (MCPServerConfig.Cwd).
const MCPCwdWorkspace = "workspace"

// ToolOverride replaces what a server says about one of its tools.
type ToolOverride struct {
	// Effect replaces the declared effect class.
	Effect Effect `yaml:"effect"`
	// Idempotent replaces the declared idempotency.
	Idempotent *bool `yaml:"idempotent"`
	// Timeout replaces the declared timeout (still capped by the server's).
	Timeout time.Duration `yaml:"timeout"`
}

// Effect is an effect class in the file: "read", "reversible" or
// "irreversible"; empty means unset.
type Effect string

// Effect classes of the file.
const (
	EffectRead         Effect = "read"
	EffectReversible   Effect = "reversible"
	EffectIrreversible Effect = "irreversible"
)

// UnmarshalYAML refuses unknown effect classes, with the line.
func (e *Effect) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	switch Effect(s) {
	case "", EffectRead, EffectReversible, EffectIrreversible:
		*e = Effect(s)
		return nil
	}
	return fmt.Errorf("line %d: effect %q: want read, reversible or irreversible", n.Line, s)
}

// proto is the effect class as the catalog has it; def when unset.
func (e Effect) proto(def xctv1.Effect) xctv1.Effect {
	switch e {
	case EffectRead:
		return xctv1.Effect_EFFECT_READ
	case EffectReversible:
		return xctv1.Effect_EFFECT_REVERSIBLE
	case EffectIrreversible:
		return xctv1.Effect_EFFECT_IRREVERSIBLE
	}
	return def
}

// LoadToolsConfig reads and checks a tools configuration file. Decoding
// is strict (unknown keys, duplicate keys and wrong types are errors) and
// every error names the file and line.
func LoadToolsConfig(path string) (*ToolsConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrToolsConfig, err)
	}
	return ParseToolsConfig(path, data)
}

// ParseToolsConfig parses and checks a tools configuration; name is the
// file name used in errors. Binaries and stdio commands are resolved to
// absolute paths here.
func ParseToolsConfig(name string, data []byte) (*ToolsConfig, error) {
	cfg := &ToolsConfig{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlErrors(name, data, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: more than one YAML document", ErrToolsConfig, name)
	}
	var doc yaml.Node
	_ = yaml.Unmarshal(data, &doc)
	v := &configCheck{file: name, doc: &doc}
	v.check(cfg)
	if len(v.errs) > 0 {
		return nil, fmt.Errorf("%w:\n%s", ErrToolsConfig, strings.Join(v.errs, "\n"))
	}
	cfg.checked = true
	return cfg, nil
}

// yamlErrors turns a decoding error into "file:line: message" lines; a
// value of the wrong kind is said with its setting and what it wants
// (typeErrorText).
func yamlErrors(file string, data []byte, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var doc yaml.Node
		_ = yaml.Unmarshal(data, &doc)
		msgs = make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = describeTypeError(&doc, m)
		}
	} else {
		msgs = []string{err.Error()}
	}
	// yaml reports "line N: message".
	yamlLine := regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	out := make([]string, len(msgs))
	for i, m := range msgs {
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			out[i] = file + ":" + g[1] + ": " + g[2]
		} else {
			out[i] = file + ": " + strings.TrimPrefix(m, "yaml: ")
		}
	}
	return fmt.Errorf("%w:\n%s", ErrToolsConfig, strings.Join(out, "\n"))
}

// configCheck collects the semantic errors of a configuration, each with
// the line of what it is about.
type configCheck struct {
	file string
	doc  *yaml.Node
	errs []string
}

// fail records an error about the node at path (map keys and list indexes).
func (v *configCheck) fail(path []any, format string, args ...any) {
	where := v.file
	if line := v.line(path); line > 0 {
		where += ":" + strconv.Itoa(line)
	}
	v.errs = append(v.errs, where+": "+pathString(path)+fmt.Sprintf(format, args...))
}

func pathString(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		case int:
			fmt.Fprintf(&b, "[%d]", p)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + ": "
}

// line finds the line of the node at path, or of its nearest ancestor.
func (v *configCheck) line(path []any) int {
	n := v.doc
	if n == nil || len(n.Content) == 0 {
		return 0
	}
	n = n.Content[0]
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						next = n.Content[i+1]
						line = n.Content[i].Line
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
			}
		}
		if next == nil {
			return line
		}
		n = next
		line = n.Line
	}
	return line
}

func (v *configCheck) check(cfg *ToolsConfig) {
	if f := cfg.FS; f != nil {
		for i, n := range f.ProtectedPaths {
			base := strings.TrimSuffix(n, "/")
			if base == "" || strings.ContainsAny(base, "/\\\x00") || base == "." || base == ".." {
				v.fail([]any{"fs", "protected_paths", i}, "%q must be a file name, or a directory name ending in /", n)
			}
		}
		if f.ProtectedScanEntries < 0 {
			v.fail([]any{"fs", "protected_scan_entries"}, "protected_scan_entries must not be negative (0: the default, %d)", protectScanEntries)
		}
	}
	if h := cfg.HTTP; h != nil {
		v.checkHTTP(h)
	}
	if s := cfg.Shell; s != nil {
		v.checkShell(s)
	}
	names := map[string]bool{}
	taken := func(path []any, name string) {
		switch {
		case !validToolName(name) || strings.Contains(name, "."):
			v.fail(path, "name %q must be one word of letters, digits, '_' and '-'", name)
		case slices.Contains([]string{"fs", "http", "shell", "mcp", "xct", "facts"}, name): // built-in prefixes, the system's and the crews' tools
			v.fail(path, "name %q is reserved for built-in tools", name)
		case names[name]:
			v.fail(path, "name %q is used twice", name)
		}
		names[name] = true
	}
	for i := range cfg.Servers {
		s := &cfg.Servers[i]
		p := []any{"servers", i}
		taken(append(p, "name"), s.Name)
		if host, port, err := net.SplitHostPort(s.Address); err != nil || host == "" || port == "" {
			v.fail(append(p, "address"), "address %q must be host:port", s.Address)
		}
		if t := s.TLS; t != nil {
			if t.CA == "" {
				v.fail(append(p, "tls", "ca"), "a CA file is required to verify the server")
			}
			if (t.Cert == "") != (t.Key == "") {
				v.fail(append(p, "tls"), "cert and key go together: name both or neither")
			}
		}
		v.checkLimits(p, s.Timeout, s.MaxOutputBytes)
		v.checkOverrides(append(p, "tools"), s.Tools)
	}
	mcpNames := map[string]bool{}
	for i := range cfg.MCP {
		m := &cfg.MCP[i]
		p := []any{"mcp", i}
		switch {
		case !validToolName(m.Name) || strings.Contains(m.Name, "."):
			v.fail(append(p, "name"), "name %q must be one word of letters, digits, '_' and '-'", m.Name)
		case mcpNames[m.Name]:
			v.fail(append(p, "name"), "name %q is used twice", m.Name)
		}
		mcpNames[m.Name] = true
		switch {
		case (m.Command == "") == (m.URL == ""):
			v.fail(p, "set exactly one of command (stdio) and url (streamable HTTP)")
		case m.Command != "":
			path, err := resolveProgram(m.Command)
			if err != nil {
				v.fail(append(p, "command"), "%v", err)
			}
			m.resolved = path
		default:
			if u, err := url.Parse(m.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.fail(append(p, "url"), "url %q must be an absolute http or https URL", m.URL)
			}
			if len(m.Args) > 0 || len(m.Env) > 0 || len(m.SetEnv) > 0 {
				v.fail(p, "args, env and set_env apply to a command, not to a url")
			}
		}
		v.checkEnv(append(p, "env"), m.Env)
		v.checkSandbox(append(p, "sandbox"), m.Sandbox)
		if m.Sandbox != nil && m.URL != "" {
			v.fail(append(p, "sandbox"), "a sandbox applies to a command, not to a url")
		}
		switch {
		case m.Cwd != "" && m.Cwd != MCPCwdWorkspace:
			v.fail(append(p, "cwd"), "cwd %q must be empty (a directory of the server's own) or %q", m.Cwd, MCPCwdWorkspace)
		case m.Cwd != "" && m.URL != "":
			v.fail(append(p, "cwd"), "cwd applies to a command, not to a url")
		}
		v.checkLimits(p, m.Timeout, m.MaxOutputBytes)
		switch {
		case m.MaxStreamBytes != 0 && m.URL == "":
			v.fail(append(p, "max_stream_bytes"), "max_stream_bytes bounds a url server's event stream; a command's output is bounded line by line")
		case m.MaxStreamBytes != 0 && (m.MaxStreamBytes < MinMCPMaxStreamBytes || m.MaxStreamBytes > MaxMCPMaxStreamBytes):
			v.fail(append(p, "max_stream_bytes"), "max_stream_bytes %d must be between %d (64 KiB) and %d (1 GiB); unset: %d (64 MiB)",
				m.MaxStreamBytes, MinMCPMaxStreamBytes, MaxMCPMaxStreamBytes, DefaultMCPMaxStreamBytes)
		}
		v.checkOverrides(append(p, "tools"), m.Tools)
		if m.Command != "" && m.Sandbox != nil && m.Sandbox.Network {
			for name, o := range m.Tools {
				v.checkNetworkEffect(append(p, "tools", name, "effect"), o.Effect)
			}
		}
	}
}

func (v *configCheck) checkLimits(p []any, timeout time.Duration, maxBytes int64) {
	if timeout < 0 {
		v.fail(append(p, "timeout"), "timeout %v is negative", timeout)
	}
	if maxBytes < 0 {
		v.fail(append(p, "max_output_bytes"), "max_output_bytes %d is negative", maxBytes)
	}
}

func (v *configCheck) checkOverrides(p []any, tools map[string]ToolOverride) {
	for name, o := range tools {
		if !validToolName(name) {
			v.fail(append(p, name), "tool name %q is not a valid tool name", name)
		}
		if o.Timeout < 0 {
			v.fail(append(p, name, "timeout"), "timeout %v is negative", o.Timeout)
		}
	}
}

// xctSecretVariables are the variables outside XCT_ that XCT's programs
// read secrets from: the model's key (orchestrator) and lctl's NATS
// credentials file.
var xctSecretVariables = []string{"OPENAI_API_KEY", "NATS_CREDENTIALS"}

func (v *configCheck) checkEnv(p []any, names []string) {
	for i, n := range names {
		if n == "" || strings.ContainsAny(n, "=\x00") {
			v.fail(append(p, i), "%q is not an environment variable name", n)
		}
		// The executor's own NATS credentials never reach a program
		// (docs/security.md, "NATS"), nor any of XCT's configuration
		// and secrets (XCT_SERVICE_TOKEN, a model's key).
		switch up := strings.ToUpper(n); {
		case strings.HasPrefix(up, "XCT_NATS_"):
			v.fail(append(p, i), "%s is the executor's NATS credentials: never passed to a program", n)
		case strings.HasPrefix(up, "XCT_") || slices.Contains(xctSecretVariables, up):
			v.fail(append(p, i), "%s is XCT's own configuration or secret: never passed to a program", n)
		}
	}
}

func (v *configCheck) checkHTTP(h *HTTPConfig) {
	p := []any{"http"}
	if len(h.AllowHosts) == 0 {
		v.fail(append(p, "allow_hosts"), "allow_hosts is empty: http.request could reach nothing")
	}
	for i, s := range h.AllowHosts {
		r, err := parseHostRule(s)
		if err != nil {
			v.fail(append(p, "allow_hosts", i), "%v", err)
			continue
		}
		h.hosts = append(h.hosts, r)
	}
	for i, n := range h.UnderscoreHeaders {
		if !strings.Contains(n, "_") || plainHeaderName(n) != n || forbiddenHeader(n) || strings.ContainsAny(n, " \t\r\n:\x00") {
			v.fail(append(p, "underscore_headers", i), "%q is not a header name with a \"_\" written plainly (%q) that may be sent", n, plainHeaderName(n))
		}
	}
	for i, s := range h.CaseInsensitivePaths {
		r, err := parseHostRule(s)
		if err != nil {
			v.fail(append(p, "case_insensitive_paths", i), "%v", err)
			continue
		}
		h.foldedHosts = append(h.foldedHosts, r)
	}
	for i, s := range h.AllowAddresses {
		pfx, ok := parseAddrPrefix(s)
		if !ok {
			v.fail(append(p, "allow_addresses", i), "%q is not an IP prefix or address", s)
			continue
		}
		h.addrs = append(h.addrs, pfx)
	}
	for _, host := range slices.Sorted(maps.Keys(h.HostAddresses)) {
		r, err := parseHostRule(host)
		if err != nil {
			v.fail(append(p, "host_addresses", host), "%v", err)
			continue
		}
		ha := hostAddrs{rule: r}
		for i, s := range h.HostAddresses[host] {
			pfx, ok := parseAddrPrefix(s)
			if !ok {
				v.fail(append(p, "host_addresses", host, i), "%q is not an IP prefix or address", s)
				continue
			}
			ha.prefixes = append(ha.prefixes, pfx)
		}
		h.hostAddrs = append(h.hostAddrs, ha)
	}
	if h.MaxRedirects < -1 {
		v.fail(append(p, "max_redirects"), "max_redirects %d: use -1 to follow none", h.MaxRedirects)
	}
	if h.MaxRequestBytes < 0 {
		v.fail(append(p, "max_request_bytes"), "max_request_bytes %d is negative", h.MaxRequestBytes)
	}
	if h.MaxResponseBytes < 0 {
		v.fail(append(p, "max_response_bytes"), "max_response_bytes %d is negative", h.MaxResponseBytes)
	}
	if h.Timeout < 0 {
		v.fail(append(p, "timeout"), "timeout %v is negative", h.Timeout)
	}
}

func (v *configCheck) checkShell(s *ShellConfig) {
	p := []any{"shell"}
	if len(s.Binaries) == 0 {
		v.fail(append(p, "binaries"), "binaries is empty: shell.exec could run nothing")
	}
	v.checkEnv(append(p, "env"), s.Env)
	for k := range s.SetEnv {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.fail(append(p, "set_env"), "%q is not an environment variable name", k)
		}
	}
	if s.Timeout < 0 {
		v.fail(append(p, "timeout"), "timeout %v is negative", s.Timeout)
	}
	if s.MaxOutputBytes < 0 || s.MaxStdinBytes < 0 {
		v.fail(p, "max_output_bytes and max_stdin_bytes must not be negative")
	}
	v.checkSandbox(append(slices.Clone(p), "sandbox"), s.Sandbox)
	seen := map[string]bool{}
	for i := range s.Binaries {
		b := &s.Binaries[i]
		bp := append(slices.Clone(p), "binaries", i)
		switch {
		case b.Name == "" || strings.ContainsAny(b.Name, "/\\\x00") || b.Name == "." || b.Name == "..":
			v.fail(append(bp, "name"), "name %q must be a bare program name", b.Name)
			continue
		case seen[b.Name]:
			v.fail(append(bp, "name"), "name %q is listed twice", b.Name)
			continue
		}
		seen[b.Name] = true
		prog := b.Path
		if prog == "" {
			prog = b.Name
		} else if !filepath.IsAbs(prog) {
			v.fail(append(bp, "path"), "path %q must be absolute", prog)
			continue
		}
		resolved, err := resolveProgram(prog)
		if err != nil {
			v.fail(append(bp, "path"), "%v", err)
			continue
		}
		b.resolved = resolved
		for j, f := range b.AllowFlags {
			if !strings.HasPrefix(f, "-") {
				v.fail(append(bp, "allow_flags", j), "%q does not start with '-'", f)
			}
		}
		for j, c := range b.Subcommands {
			if c == "" || strings.HasPrefix(c, "-") {
				v.fail(append(bp, "subcommands", j), "%q is not a subcommand", c)
			}
		}
		if b.MaxArgs < 0 {
			v.fail(append(bp, "max_args"), "max_args %d is negative", b.MaxArgs)
		}
		if s.Sandbox != nil && s.Sandbox.Network {
			v.checkNetworkEffect(append(bp, "effect"), b.Effect)
		}
	}
}

// checkNetworkEffect refuses a read or reversible effect for a tool whose
// sandbox has the network: it sends what the model chose (a URL's query,
// a request's body) to any host it can reach, past http.request's host
// allow-list and address checks, and what has left cannot be undone or
// called a read. Under the default policy a read or reversible tool runs
// with no human, so a model could read a secret and send it out in the
// next step.
func (v *configCheck) checkNetworkEffect(p []any, e Effect) {
	if e == EffectRead || e == EffectReversible {
		v.fail(p, "%s with the network (sandbox network: true) sends what the model chose to any host it reaches: "+
			"it cannot be %s; make it irreversible (a human approves each call under the default policy), or take the network away", e, e)
	}
}

// resolveProgram finds an executable file: an absolute path as is, a name
// in PATH. The result is absolute, with symbolic links resolved, so what
// runs is fixed when the configuration is loaded.
func resolveProgram(prog string) (string, error) {
	path := prog
	if !filepath.IsAbs(prog) {
		if strings.ContainsRune(prog, filepath.Separator) {
			return "", fmt.Errorf("%q must be a bare name or an absolute path", prog)
		}
		p, err := osexec.LookPath(prog)
		if err != nil {
			return "", fmt.Errorf("%q not found in PATH", prog)
		}
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%q: %w", prog, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%q: %w", prog, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%q is not an executable file", prog)
	}
	return real, nil
}

// parseAddrPrefix parses an IP prefix or a single address (an IPv4-mapped
// one as the IPv4 one), masked.
func parseAddrPrefix(s string) (netip.Prefix, bool) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		addr, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, false
		}
		pfx = netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen())
	}
	if pfx.Addr().Is4In6() {
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), max(pfx.Bits()-96, 0))
	}
	return pfx.Masked(), true
}
