package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xct-dev/xct/internal/sandboxenter"
)

// hostAbstractSocket listens on an abstract Unix socket of the host (as
// an X server's @/tmp/.X11-unix/X0 or a session bus does) and returns its
// name ("@...").
func hostAbstractSocket(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("@xct-test-host-%d-%d", os.Getpid(), time.Now().UnixNano())
	l, err := net.Listen("unix", name)
	must(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	// The control: the host reaches it.
	c, err := net.Dial("unix", name)
	must(t, err)
	_ = c.Close()
	return name
}

// TestSandboxNetworkScopesAbstractUnixSockets: a program of a sandbox
// with network: true shares the host's network namespace, and with it
// its abstract Unix sockets; on a kernel whose Landlock has the scope of
// abstract sockets (ABI 6, Linux 6.12) it cannot connect to the host's
// (on main it did), and still can to one of its own. On an older kernel
// it can, as documented, and the sandbox says so at setup. Without the
// network the sandbox has its own namespace (the control).
func TestSandboxNetworkScopesAbstractUnixSockets(t *testing.T) {
	requireSandbox(t)
	host := hostAbstractSocket(t)
	scoped := sandboxenter.LandlockABI() >= sandboxenter.LandlockScopeABI
	t.Logf("Landlock ABI %d: scoped %v", sandboxenter.LandlockABI(), scoped)
	for _, tc := range []struct {
		name, yaml string
		cwd        string
		reach      bool
	}{
		{"network", `  sandbox: {network: true, max_memory_bytes: -1}`, ".", !scoped},
		{"network in a directory", `  sandbox: {network: true, max_memory_bytes: -1}`, "sub", !scoped},
		{"no network", `  sandbox: {max_memory_bytes: -1}`, ".", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t)
			must(t, os.Mkdir(sb.ws+"/sub", 0o755))
			s := permissiveShell(t, sb, 20*time.Second, tc.yaml)
			res := resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"probe", sandboxProbeArg, "dialunix", host}, "cwd": tc.cwd}))
			if got := res.Stdout == "connected\n"; got != tc.reach {
				t.Fatalf("the host's abstract socket reached: %v, want %v: %+v", got, tc.reach, res)
			}
			if !tc.reach && tc.name != "no network" && !strings.Contains(res.Stdout, "operation not permitted") {
				t.Fatalf("refused otherwise than by the scope: %+v", res)
			}
			// Its own abstract socket still works.
			res = resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"probe", sandboxProbeArg, "dialunix", "self"}, "cwd": tc.cwd}))
			if res.Stdout != "connected\n" {
				t.Fatalf("its own abstract socket: %+v", res)
			}
		})
	}
	t.Run("logged where it cannot be scoped", func(t *testing.T) {
		sb := newSandbox(t)
		var logged strings.Builder
		sbx := newOSSandbox(&SandboxConfig{Network: true}, sb.ws, 0)
		sbx.logScope(slog.New(slog.NewTextHandler(&logged, nil)), "the test's sandbox")
		if got := strings.Contains(logged.String(), "cannot scope abstract Unix sockets"); got == scoped {
			t.Fatalf("Landlock ABI %d, logged: %q", sbx.landlockABI, logged.String())
		}
		if sbx.scopeAbstract != scoped || sbx.needsEnter() != (scoped || sbx.refuseBind) {
			t.Fatalf("scopeAbstract %v, want %v", sbx.scopeAbstract, scoped)
		}
	})
}

// TestMCPNetworkScopesAbstractUnixSockets: the same for a stdio MCP
// server with network: true, in a write call's instance of its own (the
// read-only instance, which lists the tools, can make no Unix socket at
// all, and starts through the scope too).
func TestMCPNetworkScopesAbstractUnixSockets(t *testing.T) {
	requireSandbox(t)
	self, err := os.Executable()
	must(t, err)
	host := hostAbstractSocket(t)
	scoped := sandboxenter.LandlockABI() >= sandboxenter.LandlockScopeABI
	s := mcpServiceIn(t, t.TempDir(), "name: net\ncommand: "+self+"\nargs: ['-test.run=^$']\n"+
		"set_env: {"+mcpStdioEnv+": \"1\", "+mcpUnixEnv+": \"1\"}\n"+
		"sandbox: {network: true, read_only: ["+self+"]}\n"+
		"timeout: 10s\nignore_annotations: true\n"+
		"tools: {dialunix: {effect: irreversible}}")
	r := exec(t, s, "mcp.net.dialunix", map[string]any{"text": host})
	if r.GetError() != nil {
		t.Fatalf("dialunix: %v", r)
	}
	if got := strings.Contains(r.String(), "connected"); got == scoped {
		t.Fatalf("Landlock ABI %d: the host's abstract socket reached: %v: %v", sandboxenter.LandlockABI(), got, r)
	}
	if scoped && !strings.Contains(r.String(), "operation not permitted") {
		t.Fatalf("refused otherwise than by the scope: %v", r)
	}
}

// mcpUnixEnv adds the tool "dialunix" to the test MCP server: it
// connects to the abstract Unix socket its text names.
const mcpUnixEnv = "XCT_TEST_MCP_UNIX"

func addUnixTools(srv *mcp.Server) {
	srv.AddTool(&mcp.Tool{Name: "listentcp", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			out := "listening"
			if l, err := net.Listen("tcp", in.Text); err != nil {
				out = "listen failed: " + err.Error()
			} else {
				_ = l.Close()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "dialunix", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			out := "connected"
			if c, err := net.DialTimeout("unix", in.Text, 2*time.Second); err != nil {
				out = "dial failed: " + err.Error()
			} else {
				_ = c.Close()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}, nil
		})
}

// freeLoopbackPort is a loopback TCP address nothing listens on now: the
// port of a service that is restarting, which its clients dial again.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	return addr
}

// TestSandboxNetworkCannotListenOnAPort: a program of a sandbox with
// network: true shares the host's network namespace; on main it bound a
// loopback port (a restarting service's, the port of a tool server the
// executor dials, where a client sends its password or its call) and
// would have answered whoever connected. On a kernel whose Landlock
// handles TCP binds (ABI 4, Linux 6.7) it cannot bind a named port; a
// port the kernel picks (0) still works, and so do its connections out.
// Without the network the sandbox has its own namespace (the control:
// binding there reaches no one).
func TestSandboxNetworkCannotListenOnAPort(t *testing.T) {
	requireSandbox(t)
	refused := sandboxenter.LandlockABI() >= sandboxenter.LandlockNetABI
	t.Logf("Landlock ABI %d: binds refused %v", sandboxenter.LandlockABI(), refused)
	for _, tc := range []struct {
		name, yaml string
		cwd        string
		bind       bool
	}{
		{"network", `  sandbox: {network: true, max_memory_bytes: -1}`, ".", !refused},
		{"network in a directory", `  sandbox: {network: true, max_memory_bytes: -1}`, "sub", !refused},
		{"no network", `  sandbox: {max_memory_bytes: -1}`, ".", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t)
			must(t, os.Mkdir(sb.ws+"/sub", 0o755))
			s := permissiveShell(t, sb, 20*time.Second, tc.yaml)
			for _, addr := range []string{freeLoopbackPort(t), "[::1]:" + strings.Split(freeLoopbackPort(t), ":")[1], "0.0.0.0:" + strings.Split(freeLoopbackPort(t), ":")[1]} {
				res := resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"probe", sandboxProbeArg, "listen", addr}, "cwd": tc.cwd}))
				if strings.Contains(res.Stdout, "address family not supported") || strings.Contains(res.Stdout, "cannot assign requested address") {
					continue // no IPv6 here
				}
				if got := res.Stdout == "listening\n"; got != tc.bind {
					t.Fatalf("%s bound: %v, want %v: %+v", addr, got, tc.bind, res)
				}
				if !tc.bind && !strings.Contains(res.Stdout, "permission denied") {
					t.Fatalf("%s refused otherwise than by Landlock: %+v", addr, res)
				}
			}
			// Nor through an MPTCP socket, which Landlock's TCP rules
			// do not cover: refused as a kernel without MPTCP refuses it.
			res := resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"probe", sandboxProbeArg, "listenmptcp", freeLoopbackPort(t)}, "cwd": tc.cwd}))
			if !strings.Contains(res.Stdout, "protocol not supported") {
				t.Fatalf("an MPTCP listener: %+v", res)
			}
			// A port the kernel picks is not one anybody waits on.
			res = resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"probe", sandboxProbeArg, "listen", "127.0.0.1:0"}, "cwd": tc.cwd}))
			if res.Stdout != "listening\n" {
				t.Fatalf("port 0: %+v", res)
			}
		})
	}
	t.Run("connections out still work", func(t *testing.T) {
		ln := listenClosing(t)
		sb := newSandbox(t)
		s := permissiveShell(t, sb, 20*time.Second, `  sandbox: {network: true, max_memory_bytes: -1}`)
		res := resultAs[ShellResult](t, shell(t, s, "probe", sandboxProbeArg, "dial", ln.Addr().String()))
		if res.Stdout != "connected\n" {
			t.Fatalf("dial out: %+v", res)
		}
	})
}

// TestMCPNetworkCannotListenOnAPort: the same for a stdio MCP server
// with network: true, in a write call's instance of its own.
func TestMCPNetworkCannotListenOnAPort(t *testing.T) {
	requireSandbox(t)
	self, err := os.Executable()
	must(t, err)
	refused := sandboxenter.LandlockABI() >= sandboxenter.LandlockNetABI
	s := mcpServiceIn(t, t.TempDir(), "name: net\ncommand: "+self+"\nargs: ['-test.run=^$']\n"+
		"set_env: {"+mcpStdioEnv+": \"1\", "+mcpUnixEnv+": \"1\"}\n"+
		"sandbox: {network: true, read_only: ["+self+"]}\n"+
		"timeout: 10s\nignore_annotations: true\n"+
		"tools: {listentcp: {effect: irreversible}}")
	r := exec(t, s, "mcp.net.listentcp", map[string]any{"text": freeLoopbackPort(t)})
	if r.GetError() != nil {
		t.Fatalf("listentcp: %v", r)
	}
	if got := strings.Contains(r.String(), "listening"); got == refused {
		t.Fatalf("Landlock ABI %d: bound a loopback port: %v: %v", sandboxenter.LandlockABI(), got, r)
	}
	if refused && !strings.Contains(r.String(), "permission denied") {
		t.Fatalf("refused otherwise than by Landlock: %v", r)
	}
}
