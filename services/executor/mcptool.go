package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"os"
	osexec "os/exec"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/sandboxenter"
	"github.com/xct-dev/xct/internal/wire"
)

// mcpMaxPages bounds the pages of tools/list read from one server.
const mcpMaxPages = 100

// mcpServer is a client of one MCP server. A session that ended (the
// server crashed or closed) is replaced by a new one on the next call:
// connecting is not acting, so this is not a retry of any step.
type mcpServer struct {
	cfg    MCPServerConfig
	wsDir  string
	log    *slog.Logger
	client *mcp.Client
	// sb is the OS sandbox of a stdio server (nil: a URL, or sandbox:
	// none); protected are mounted read-only in an instance that may
	// write.
	sb        *osSandbox
	protected *protectedPaths
	// ws is the workspace, where a stdio server runs (nil in tests that
	// make a server alone).
	ws *workspace
	// red redacts what the server writes on stderr before it is logged.
	red *redact.Redactor
	// dir is where a stdio server starts: an empty directory of its own,
	// made read-only by newMCPServer outside the workspace and removed by
	// close (ownDir), or the workspace when its configuration says cwd:
	// workspace. Launchers resolve what they run from their working
	// directory (npx runs a node_modules/.bin/<name> found there, deno
	// reads deno.json, python -m imports from it): in the workspace,
	// that was the model's code, run with the server's network and
	// writable directories (session 14, attack14).
	dir    string
	ownDir bool
	dirErr error
	// cut is the bound an answer of this (HTTP) server went past last
	// (errMCPResponseTooLarge, errMCPStreamTooLarge): the SDK reports
	// such a read only as the request ending without an answer.
	cut atomic.Pointer[error]

	mu      sync.Mutex
	session *mcp.ClientSession
	// proc is the sandbox the session's server runs in (nil: a URL, or
	// sandbox: none). A sandboxed server's session, the instance that
	// lives between calls, always sees the workspace read-only and
	// serves the read tools (a server without one has none once its
	// tools are listed); each call of a tool that may write runs in an
	// instance of the server of its own, started for the call with the
	// workspace writable and killed with its whole PID namespace before
	// the call's result is returned (mcpTool.callAlone).
	proc   *sandboxProc
	closed bool
	// calls are the per-call instances running (close kills them).
	calls map[*sandboxProc]struct{}
	// watchers are the goroutines that notice sessions ending; close
	// waits for them, so none outlives the executor.
	watchers sync.WaitGroup
}

// mcpTool is one tool of an MCP server, served as "mcp.<server>.<tool>".
type mcpTool struct {
	srv  *mcpServer
	name string // the server's name for it
	desc *xctv1.ToolDescriptor
}

func newMCPServer(cfg MCPServerConfig, wsDir string, protected *protectedPaths, red *redact.Redactor, log *slog.Logger) *mcpServer {
	m := &mcpServer{
		cfg:       cfg,
		wsDir:     wsDir,
		log:       log,
		protected: protected,
		red:       red,
		client:    mcp.NewClient(&mcp.Implementation{Name: "xct-executor", Version: "v1"}, &mcp.ClientOptions{Logger: log}),
	}
	if cfg.Command != "" {
		m.dir = wsDir
		if cfg.Cwd != MCPCwdWorkspace {
			m.dir, m.dirErr = emptyDir(wsDir)
			m.ownDir = m.dirErr == nil
			if m.dirErr != nil {
				log.Error("MCP server not started: its working directory cannot be made", "server", cfg.Name, "error", m.dirErr)
			}
		}
		if cfg.Sandbox.disabled() {
			log.Error("SECURITY: MCP server runs WITHOUT a sandbox (sandbox: none in the tools configuration): "+
				"it can read and change everything the executor's user can, and reach the network", "server", cfg.Name)
		} else {
			// No address space limit unless configured: servers are
			// often runtimes that reserve much more than they use.
			m.sb = newOSSandbox(cfg.Sandbox, wsDir, 0)
			if m.ownDir {
				m.sb.ownDir = m.dir
			}
			if m.sb.err != nil {
				log.Error("MCP server not started: its sandbox cannot be set up", "server", cfg.Name, "error", m.sb.err)
			}
			m.sb.logScope(log.With("server", cfg.Name), "MCP server "+cfg.Name+"'s sandbox")
		}
	}
	return m
}

// emptyDir makes an empty directory for a stdio MCP server to start in,
// read-only, in the executor's temporary directory (not in the workspace
// wsDir).
func emptyDir(wsDir string) (string, error) {
	d, err := os.MkdirTemp("", "xct-mcp-")
	if err != nil {
		return "", err
	}
	if d == wsDir || strings.HasPrefix(d, wsDir+string(os.PathSeparator)) {
		_ = os.Remove(d)
		return "", fmt.Errorf("the temporary directory %s is in the workspace", d)
	}
	if err := os.Chmod(d, 0o500); err != nil { //nolint:gosec // a directory: its owner may enter it, nobody may write in it
		_ = os.Remove(d)
		return "", err
	}
	return d, nil
}

// transport is a fresh transport to the server. A stdio server's process
// outlives ctx: it is stopped by closing the session (sandboxed: by
// killing its sandbox, proc). A sandboxed server runs in sbx (made by
// withProtected; proc closes its descriptors once started).
func (m *mcpServer) transport(ctx context.Context, sbx *osSandbox) (mcp.Transport, *sandboxProc, error) {
	if m.cfg.URL != "" {
		return &mcp.StreamableClientTransport{
			Endpoint: m.cfg.URL,
			// The operator chose this URL: no proxy from the environment,
			// no redirects elsewhere.
			HTTPClient: &http.Client{
				Transport: boundedBodies{RoundTripper: &http.Transport{Proxy: nil, MaxResponseHeaderBytes: 64 << 10}, cut: &m.cut,
					maxStream: m.maxStream(), streamErr: errMCPStreamTooLarge(m.maxStream())},
				CheckRedirect: func(*http.Request, []*http.Request) error {
					return http.ErrUseLastResponse
				},
			},
			MaxRetries:           -1, // a lost stream fails the call; nothing is resent
			DisableStandaloneSSE: true,
		}, nil, nil
	}
	env := scrubbedEnv(m.cfg.Env, m.cfg.SetEnv)
	if m.dirErr != nil {
		return nil, nil, fmt.Errorf("its working directory cannot be made: %w", m.dirErr)
	}
	searchLists(env, m.wsDir) // the workspace is the model's, wherever the server starts
	var cmd *osexec.Cmd
	var proc *sandboxProc
	if sbx != nil {
		argv := sbx.argv(m.cfg.resolved, path.Base(m.cfg.Command), m.cfg.Args, m.dir, env)
		cmd = osexec.CommandContext(context.WithoutCancel(ctx), argv[0], argv[1:]...) //nolint:gosec // prlimit and bwrap, resolved; the operator's command
		cmd.Env = []string{}
		var err error
		if proc, err = startableSandboxProc(cmd, sbx); err != nil {
			sbx.closeExtra()
			return nil, nil, err
		}
	} else {
		cmd = osexec.CommandContext(context.WithoutCancel(ctx), m.cfg.resolved, m.cfg.Args...) //nolint:gosec // the operator's configured command, resolved at load
		cmd.Args[0] = m.cfg.Command
		cmd.Env = env
	}
	cmd.Dir = m.dir
	cmd.Stderr = &logWriter{log: m.log, server: m.cfg.Name, red: m.red}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, proc, nil
}

// mcpMaxResponseBytes bounds an HTTP MCP server's answer that is not a
// stream of events: the SDK reads a JSON-RPC response, or the body of an
// error status, whole (io.ReadAll) before it decodes it, and bounds only
// a stream's events (mcp.DefaultMaxEventSize each) and a stdio server's
// lines (mcp.DefaultMaxLineLength). A server answering a call with
// gigabytes of JSON (a fetch relaying what the model asked for) took the
// executor's memory with it before any max_output_bytes was looked at
// (session 16, attack16c). The same bound as an event's.
const mcpMaxResponseBytes = mcp.DefaultMaxEventSize

// errMCPResponseTooLarge ends the read of an answer past mcpMaxResponseBytes.
var errMCPResponseTooLarge = fmt.Errorf("the MCP server's answer is over %d bytes", mcpMaxResponseBytes)

// DefaultMCPMaxStreamBytes bounds an HTTP MCP server's event stream, all
// its events together, unless its configuration says otherwise
// (MCPServerConfig.MaxStreamBytes, between MinMCPMaxStreamBytes and
// MaxMCPMaxStreamBytes): the SDK bounds each event
// (mcp.DefaultMaxEventSize) and reads events until the answer comes, so a
// server sending notifications without end was read (and decoded) until
// the call's timeout. Room for the answer's largest event and as much
// again of notifications before it.
const (
	DefaultMCPMaxStreamBytes = 4 * mcp.DefaultMaxEventSize
	MinMCPMaxStreamBytes     = 64 << 10
	MaxMCPMaxStreamBytes     = 1 << 30
)

// errMCPStreamTooLarge is the error that ends the read of an event stream
// past limit bytes.
func errMCPStreamTooLarge(limit int64) error {
	return fmt.Errorf("the MCP server's event stream is over %d bytes (max_stream_bytes)", limit)
}

// boundedBodies gives every answer a body that fails past its bound (the
// connection is then closed, not read to its end): mcpMaxResponseBytes
// for an answer, maxStream for an event stream.
type boundedBodies struct {
	http.RoundTripper
	cut       *atomic.Pointer[error] // set to the bound a body went past
	maxStream int64
	streamErr error // errMCPStreamTooLarge(maxStream)
}

func (b boundedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.RoundTripper.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	body := &boundedBody{ReadCloser: resp.Body, max: mcpMaxResponseBytes, err: errMCPResponseTooLarge, cut: b.cut}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "text/event-stream" {
		body.max, body.err = b.maxStream, b.streamErr
	}
	resp.Body = body
	return resp, nil
}

// boundedBody is a body read up to max bytes; past them, reads fail
// with err.
type boundedBody struct {
	io.ReadCloser
	n   int64 // bytes read so far
	max int64
	err error
	cut *atomic.Pointer[error] // told err once the bound is passed
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.n > b.max {
		return 0, b.err
	}
	if room := b.max + 1 - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		if b.cut != nil {
			b.cut.Store(&b.err)
		}
		return n - int(b.n-b.max), b.err
	}
	return n, err
}

// maxStream is the bound of the server's event streams.
func (m *mcpServer) maxStream() int64 {
	if m.cfg.MaxStreamBytes > 0 {
		return m.cfg.MaxStreamBytes
	}
	return DefaultMCPMaxStreamBytes
}

// readOnlySandbox is the sandbox of the instance that lives between
// calls: the workspace read-only, no protected paths to look for, and no
// Unix socket, so no descriptor can be handed to it (seccompProgram).
func (m *mcpServer) readOnlySandbox() *osSandbox {
	ro := *m.sb
	ro.readOnlyWorkspace = true
	ro.noUnixSockets = true
	sbx, _, _ := ro.withProtected(nil, 4) // fd 3 is the status pipe
	return sbx
}

// start starts an instance of the server (in sbx when sandboxed) and
// connects to it; with a sandbox, its init is held from the moment bwrap
// made it (heldTransport): proc.kill stops the instance for good, also
// when start failed.
func (m *mcpServer) start(ctx context.Context, sbx *osSandbox) (*mcp.ClientSession, *sandboxProc, error) {
	if m.cfg.Command != "" {
		closeOnExecInherited()
	}
	tr, proc, err := m.transport(ctx, sbx)
	if err != nil {
		return nil, nil, err
	}
	if proc != nil {
		tr = &heldTransport{Transport: tr, proc: proc}
	}
	s, err := m.client.Connect(ctx, tr, nil)
	if err != nil && proc != nil {
		if !proc.kill() && proc.ran() {
			m.log.ErrorContext(ctx, "SECURITY: an MCP server that failed to start could not be confirmed gone", "server", m.cfg.Name, "error", err)
		}
	}
	return s, proc, err
}

// heldTransport is the transport of a sandboxed server: once bwrap
// started, before a byte is sent, it holds the sandbox's init by a pidfd
// (sandboxProc.hold), so that no later failure leaves a process of the
// sandbox unaccounted for.
type heldTransport struct {
	mcp.Transport
	proc *sandboxProc
}

func (t *heldTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	t.proc.started()
	if err != nil {
		return nil, err // bwrap did not start
	}
	// bwrap names its init right after making it: a bounded wait, even
	// past the call's deadline, so the init is held whatever happens.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandboxKillWait)
	defer cancel()
	if err := t.proc.hold(hctx); err != nil {
		t.proc.kill()
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// scrubbedEnv is the environment of a child process: the named variables
// of the executor's environment and the fixed ones, nothing else.
func scrubbedEnv(names []string, set map[string]string) []string {
	env := []string{}
	for _, n := range names {
		if _, fixed := set[n]; fixed {
			continue
		}
		if v, ok := os.LookupEnv(n); ok {
			env = append(env, n+"="+v)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return withInterpreterDefaults(env)
}

// interpreterDefaults are variables every child process gets unless its
// configuration names them: the settings that keep an interpreter from
// loading code from its working directory, which for a stdio MCP server
// and a shell.exec program is the workspace (the model's to write).
// PYTHONSAFEPATH: `python -m pkg` (how Python MCP servers are documented
// to run) and `python -c` put the working directory first on sys.path, so
// a pkg.py the model wrote there ran instead of the server (Python 3.11
// and later honor it; older ones do not: docs/security.md).
var interpreterDefaults = []string{"PYTHONSAFEPATH=1"}

// withInterpreterDefaults is env ("K=V") with each of interpreterDefaults
// it does not set.
func withInterpreterDefaults(env []string) []string {
	for _, kv := range interpreterDefaults {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			env = append(env, kv)
		}
	}
	return env
}

// codeRejectedByTransport is the JSON-RPC code the SDK gives a message its
// transport could not deliver (a dropped stream): that is a transport
// failure, not an answer from the server, so the session is dropped.
const codeRejectedByTransport = -32005

// connect returns the live session, starting one if needed: for a
// sandboxed server, in the read-only sandbox.
func (m *mcpServer) connect(ctx context.Context) (*mcp.ClientSession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrStopped
	}
	if m.session != nil {
		return m.session, nil
	}
	if m.sb != nil && m.sb.err != nil {
		return nil, fmt.Errorf("its sandbox cannot be set up: %w", m.sb.err)
	}
	var sbx *osSandbox
	if m.sb != nil {
		sbx = m.readOnlySandbox()
		if sbx.needsEnter() {
			// The host's network: the instance starts through the
			// Landlock scope of abstract Unix sockets (in its own
			// directory, which is not the model's to swap).
			top, err := openScanTop(m.dir)
			var enter *enterReport
			if err == nil {
				sbx.enter, enter, err = newSandboxEnter(top)
				_ = top.Close()
			}
			if err != nil {
				sbx.closeExtra()
				return nil, fmt.Errorf("its sandbox could not be prepared: %w", err)
			}
			go func() {
				// The report ends when the program starts (or the
				// sandbox ends): only a refusal writes one.
				if rep := enter.wait(sandboxKillWait); rep != "" {
					m.log.Error("MCP server's read-only instance not started in its sandbox", "server", m.cfg.Name, "report", head(rep, 512))
				}
				_ = enter.r.Close()
			}()
		}
	}
	s, proc, err := m.start(ctx, sbx)
	if err != nil {
		return nil, err
	}
	m.session, m.proc = s, proc
	m.watchers.Add(1)
	go func() {
		defer m.watchers.Done()
		// The session ends when the server goes away; the next call
		// starts a new one.
		_ = s.Wait()
		m.mu.Lock()
		if m.session == s {
			m.session, m.proc = nil, nil
		}
		closed := m.closed
		m.mu.Unlock()
		if proc != nil {
			proc.kill() // whatever it left behind
		}
		if !closed {
			m.log.Warn("MCP server session ended", "server", m.cfg.Name)
		}
	}()
	return s, nil
}

// drop forgets a session that failed, and stops it.
func (m *mcpServer) drop(s *mcp.ClientSession) {
	m.mu.Lock()
	var proc *sandboxProc
	if m.session == s {
		m.session, proc = nil, m.proc
		m.proc = nil
	}
	m.mu.Unlock()
	go func() {
		if proc != nil {
			proc.kill()
		}
		_ = s.Close()
	}()
}

// close ends the session for good, and the per-call instances running.
func (m *mcpServer) close() error {
	m.mu.Lock()
	s, proc := m.session, m.proc
	m.session, m.proc, m.closed = nil, nil, true
	calls := m.calls
	m.calls = nil
	m.mu.Unlock()
	for c := range calls {
		c.kill()
	}
	var err error
	if proc != nil {
		proc.kill()
	}
	if s != nil {
		err = s.Close()
	}
	m.watchers.Wait()
	if m.ownDir {
		// Empty and read-only: made writable again to be removed.
		_ = os.Chmod(m.dir, 0o700) //nolint:gosec // a directory, its owner's alone
		_ = os.Remove(m.dir)
	}
	return err
}

// listMCPTools connects to an MCP server and returns its tools as XCT
// tools. The configuration says each tool's effect class and
// idempotency; a tool it does not name is irreversible and not idempotent.
// MCP annotations are untrusted hints: they can only narrow that
// (destructiveHint), never widen it (readOnlyHint, idempotentHint).
func (m *mcpServer) listTools(ctx context.Context, defTimeout time.Duration, defMax int64) ([]Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	s, err := m.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("MCP server %s: connect: %w", m.cfg.Name, err)
	}
	timeout := m.cfg.Timeout
	if timeout == 0 {
		timeout = defTimeout
	}
	maxBytes := m.cfg.MaxOutputBytes
	if maxBytes == 0 {
		maxBytes = defMax
	}
	var tools []Tool
	seen := map[string]bool{}
	params := &mcp.ListToolsParams{}
	for page := 0; page < mcpMaxPages; page++ {
		res, err := s.ListTools(ctx, params)
		if err != nil {
			m.drop(s)
			return nil, fmt.Errorf("MCP server %s: tools/list: %w", m.cfg.Name, err)
		}
		for _, t := range res.Tools {
			if t == nil {
				continue
			}
			full := "mcp." + m.cfg.Name + "." + t.Name
			if !validToolName(full) || seen[t.Name] {
				m.log.WarnContext(ctx, "MCP tool skipped: invalid or duplicate name", "server", m.cfg.Name, "tool", t.Name)
				continue
			}
			schema, err := json.Marshal(t.InputSchema)
			var obj map[string]any
			if err == nil {
				err = json.Unmarshal(schema, &obj)
			}
			if err != nil || obj == nil {
				m.log.WarnContext(ctx, "MCP tool skipped: input schema is not a JSON object", "server", m.cfg.Name, "tool", t.Name)
				continue
			}
			seen[t.Name] = true
			// The effect class and idempotency come from the
			// configuration: a tool it does not name is irreversible and
			// not idempotent. A server is untrusted code, so its hints
			// never widen that (readOnlyHint does not make a tool "read");
			// they only narrow it (destructiveHint makes it irreversible)
			// and are shown in the description.
			o := m.cfg.Tools[t.Name]
			effect := o.Effect.proto(xctv1.Effect_EFFECT_IRREVERSIBLE)
			idem := o.Idempotent != nil && *o.Idempotent
			var hints []string
			narrowed := false
			if a := t.Annotations; a != nil && !m.cfg.IgnoreAnnotations {
				if a.ReadOnlyHint {
					hints = append(hints, "readOnly")
				}
				if a.IdempotentHint {
					hints = append(hints, "idempotent")
				}
				if a.DestructiveHint != nil && *a.DestructiveHint && !a.ReadOnlyHint {
					hints = append(hints, "destructive")
					narrowed = effect != xctv1.Effect_EFFECT_IRREVERSIBLE
					effect = xctv1.Effect_EFFECT_IRREVERSIBLE
				}
			}
			to := timeout
			if o.Timeout > 0 && o.Timeout < to {
				to = o.Timeout
			}
			origin := "MCP server " + m.cfg.Name
			if len(hints) > 0 {
				origin += "; its unverified hints: " + strings.Join(hints, ", ")
			}
			desc := strings.TrimSpace(t.Description + " (" + origin + ")")
			tools = append(tools, &mcpTool{srv: m, name: t.Name, desc: &xctv1.ToolDescriptor{
				Name:           full,
				Description:    desc,
				InputSchema:    string(schema),
				Effect:         effect,
				Idempotent:     idem,
				Timeout:        durationpb.New(to),
				MaxOutputBytes: maxBytes,
				Source:         "mcp:" + m.cfg.Name,
				EffectFrom:     mcpEffectFrom(o, narrowed),
			}})
		}
		if res.NextCursor == "" {
			break
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
	for name := range m.cfg.Tools {
		if !seen[name] {
			m.log.WarnContext(ctx, "tools config names a tool the MCP server does not offer", "server", m.cfg.Name, "tool", name)
		}
	}
	if m.sb != nil && slices.ContainsFunc(tools, func(t Tool) bool { return t.Descriptor().GetEffect() != xctv1.Effect_EFFECT_READ }) {
		// A tool may write: each of its calls runs in an instance of its
		// own (mcpTool.callAlone). The read-only instance stays for the
		// read tools, if there are any.
		if !slices.ContainsFunc(tools, func(t Tool) bool { return t.Descriptor().GetEffect() == xctv1.Effect_EFFECT_READ }) {
			m.drop(s)
		}
	}
	return tools, nil
}

func (t *mcpTool) Descriptor() *xctv1.ToolDescriptor { return t.desc }

// Invoke calls the tool. A sandboxed stdio server runs in the workspace:
// a call of a tool that may write gets an instance of the server of its
// own (callAlone), the others go to the instance that lives between calls,
// which sees the workspace read-only. Without a sandbox (sandbox: none)
// every call goes to the one instance, which can change anything at any
// time (logged loudly); protected entries it makes are moved aside after
// a call of a tool that may write.
func (t *mcpTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	m := t.srv
	if m.cfg.Command == "" || m.ws == nil || t.desc.GetEffect() == xctv1.Effect_EFFECT_READ {
		return t.invoke(ctx, args)
	}
	if why := m.ws.retryUnmoved(ctx, m.log); why != "" {
		return nil, unmovedRefused("MCP tool "+t.desc.GetName(), why)
	}
	if m.sb != nil {
		return t.callAlone(ctx, args)
	}
	budget := m.ws.protected.scanBudget()
	before, cut := m.ws.protectedNames(budget)
	if cut != "" {
		return nil, scanRefused("MCP tool "+t.desc.GetName(), cut, budget)
	}
	res, e := t.invoke(ctx, args)
	return t.afterWrite(ctx, before, res, e)
}

// afterWrite moves aside the protected entries new since before (a
// .husky/pre-commit the call made: code for whoever commits next), and
// names them in the result (protected_moved).
func (t *mcpTool) afterWrite(ctx context.Context, before protectedSet, res any, e *xctv1.Error) (any, *xctv1.Error) {
	m := t.srv
	moved, cut := m.ws.moveNewProtected(context.WithoutCancel(ctx), m.log, before, "MCP tool "+t.desc.GetName())
	if len(moved) > 0 || cut != "" {
		add := map[string]any{}
		if len(moved) > 0 {
			list := map[string]any{}
			for k, v := range moved {
				list[k] = v
			}
			add["protected_moved"] = list
		}
		if cut != "" {
			add["protected_unchecked"] = cut
		}
		if e != nil {
			d := e.GetDetails().AsMap()
			maps.Copy(d, add)
			e = wire.WithDetails(e, d)
		} else if out, isMap := res.(map[string]any); isMap {
			maps.Copy(out, add)
		}
	}
	return res, e
}

// sandboxStartHook, set by tests only, runs in callAlone between the scan
// for protected entries and the start of the instance (another program
// renaming a directory then).
var sandboxStartHook func()

// callAlone calls a tool that may write of a sandboxed stdio server in an
// instance of the server of its own: started for the call (after it is
// committed: the server's own start-up may write too), in a sandbox
// that mounts read-only every protected entry the workspace holds then,
// and killed with its whole PID namespace once the server answered (or
// failed, or the deadline passed), before anything is checked or
// returned. A server is untrusted code: it may leave a daemon behind
// (setsid, a double fork, signals ignored) or hold a descriptor of the
// workspace to write through later; none of that outlives the call, so
// every change it makes is this call's effect.
func (t *mcpTool) callAlone(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	m := t.srv
	name := m.cfg.Name
	if m.sb.err != nil {
		return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s is unavailable: its sandbox cannot be set up: %v; nothing was sent", name, m.sb.err),
			map[string]any{"server": name, "outcome_unknown": false})
	}
	sbx, before, cut := m.sb.withProtected(m.protected, 4) // fd 3 is the status pipe
	if cut != "" {
		sbx.closeExtra()
		return nil, scanRefused("MCP tool "+t.desc.GetName(), cut, m.protected.scanBudget())
	}
	var enter *enterReport
	if len(sbx.extra) > 0 || sbx.needsEnter() {
		// bubblewrap mounts the protected entries by their paths: the
		// server starts through the check that each is the entry found,
		// read-only, where it was found (a directory renamed meanwhile
		// by another run's program left the real one writable: session
		// 13, attack13), in the server's own directory (or the
		// workspace's top, with cwd: workspace: not the model's to swap).
		// A sandbox with the host's network starts through it for the
		// Landlock scope of abstract Unix sockets.
		top, err := openScanTop(m.dir)
		if err == nil {
			sbx.enter, enter, err = newSandboxEnter(top)
			_ = top.Close()
		}
		if err != nil {
			sbx.closeExtra()
			return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s: the sandbox of the call could not be prepared: %v; nothing was sent", name, err),
				map[string]any{"server": name, "outcome_unknown": false})
		}
		defer func() { _ = enter.r.Close() }()
	}
	if sandboxStartHook != nil {
		sandboxStartHook()
	}
	if e := Commit(ctx); e != nil {
		sbx.closeExtra()
		return nil, e
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		sbx.closeExtra()
		return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s is stopping; nothing was sent", name),
			map[string]any{"server": name, "outcome_unknown": false})
	}
	m.mu.Unlock()
	s, proc, err := m.start(ctx, sbx)
	if err != nil && enter != nil {
		if rep := enter.wait(shellWaitDelay); strings.HasPrefix(rep, sandboxenter.Unprotected) {
			// The check refused: the server was not started. What
			// bwrap made for its mounts (an empty .git where the
			// directory was) is moved aside.
			return t.afterWrite(ctx, before, nil, wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
				"MCP server %s: a protected entry was not where it was found when the call's sandbox was set up (%s: another program renamed it or its directory meanwhile); nothing was sent", name, head(strings.TrimPrefix(rep, sandboxenter.Unprotected+": "), 512)),
				map[string]any{"server": name, "sandbox": SandboxBwrap, "outcome_unknown": false}))
		}
	}
	if err != nil {
		// It may have run, with the workspace writable, before it
		// failed: unless bwrap ended before making the sandbox.
		ran := proc != nil && proc.ran()
		details := map[string]any{"server": name, "outcome_unknown": ran}
		if ctx.Err() != nil {
			// The step's deadline passed while the server started: the
			// step timed out, as it does when the deadline passes during
			// the call itself.
			res, e := t.afterWrite(ctx, before, nil, wire.WithDetails(
				wire.Errorf(wire.CodeTimeout, "MCP server %s did not start for the call within the step's deadline", name), details))
			return res, e
		}
		res, e := t.afterWrite(ctx, before, nil, wire.WithDetails(
			wire.Errorf(wire.CodeToolFailure, "MCP server %s could not be started for the call: %v", name, err), details))
		return res, e
	}
	m.mu.Lock()
	if m.calls == nil {
		m.calls = map[*sandboxProc]struct{}{}
	}
	m.calls[proc] = struct{}{}
	m.mu.Unlock()
	res, e, _ := t.call(ctx, s, args)
	gone := proc.kill()
	m.mu.Lock()
	delete(m.calls, proc)
	m.mu.Unlock()
	_ = s.Close()
	if !gone {
		m.log.ErrorContext(ctx, "SECURITY: an MCP server's instance for a call did not end when killed; it may still change the workspace", "server", name, "tool", t.name)
		if e == nil {
			e = wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s: its instance for the call did not end when killed, and may still act", name),
				map[string]any{"server": name, "outcome_unknown": true})
		}
	}
	return t.afterWrite(ctx, before, res, e)
}

// invoke calls the tool on the instance that lives between calls.
func (t *mcpTool) invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	name := t.srv.cfg.Name
	if t.srv.cfg.Command != "" && t.srv.sb == nil {
		t.srv.log.WarnContext(ctx, "SECURITY: MCP server runs WITHOUT a sandbox (sandbox: none)", "server", name, "tool", t.name)
	}
	// A server that crashed earlier is started again before committing:
	// nothing was sent yet.
	s, err := t.srv.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errNotCommitted()
		}
		return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s is unavailable: %v; nothing was sent", name, err),
			map[string]any{"server": name, "outcome_unknown": false})
	}
	if e := Commit(ctx); e != nil {
		return nil, e
	}
	res, e, gone := t.call(ctx, s, args)
	if gone {
		// The transport failed (the server crashed, the connection
		// dropped): the next call starts a new session.
		t.srv.drop(s)
	}
	return res, e
}

// call sends the call on session s, committed, and maps the answer;
// gone says that the session failed (the server went away).
func (t *mcpTool) call(ctx context.Context, s *mcp.ClientSession, args map[string]any) (_ any, _ *xctv1.Error, gone bool) {
	name := t.srv.cfg.Name
	t.srv.cut.Store(nil)
	res, err := s.CallTool(ctx, &mcp.CallToolParams{
		Meta:      mcp.Meta{"io.xct/step_id": StepID(ctx)},
		Name:      t.name,
		Arguments: args,
	})
	if err != nil {
		details := map[string]any{"server": name, "outcome_unknown": true}
		var rpcErr *jsonrpc.Error
		switch {
		case ctx.Err() != nil:
			return nil, wire.WithDetails(wire.Errorf(wire.CodeTimeout, "MCP server %s did not answer within the step's deadline", name), details), false
		case errors.As(err, &rpcErr) && rpcErr.Code != codeRejectedByTransport:
			// The server answered with a JSON-RPC error: it is alive.
			return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s: %s", name, rpcErr.Message), details), false
		}
		if cut := t.srv.cut.Swap(nil); cut != nil {
			// The read was ended here, past a bound: say so.
			return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s: %v; the read was stopped there and the connection closed", name, *cut), details), true
		}
		return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "MCP server %s went away during the call: %v", name, err), details), true
	}
	content := make([]any, 0, len(res.Content))
	for _, c := range res.Content {
		raw, err := json.Marshal(c)
		if err != nil {
			continue
		}
		var v any
		if json.Unmarshal(raw, &v) == nil {
			content = append(content, v)
		}
	}
	if res.IsError {
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		msg := strings.Join(texts, "\n")
		if msg == "" {
			msg = "the tool reported an error without a message"
		}
		return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "%s", head(msg, 4096)),
			map[string]any{"server": name, "content": content}), false
	}
	out := map[string]any{"content": content}
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		var v any
		if err == nil && json.Unmarshal(raw, &v) == nil {
			out["structured_content"] = v
		}
	}
	return out, nil, false
}

// mcpEffectFrom says where an MCP tool's effect class comes from: the
// configuration, the server's destructiveHint when it narrowed it, or the
// default.
func mcpEffectFrom(o ToolOverride, narrowed bool) string {
	if narrowed {
		return effectFromServer
	}
	if o.Effect != "" || o.Idempotent != nil {
		return effectFromConfig
	}
	return effectFromDefault
}

// logWriter logs a child's stderr, a bounded line per write, with the
// secrets redaction's patterns find replaced: a server may log what it
// was given (a token in its arguments), and logs never hold a secret.
type logWriter struct {
	log    *slog.Logger
	server string
	red    *redact.Redactor // nil: no redaction configured yet
}

func (w *logWriter) Write(p []byte) (int, error) {
	if !w.log.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	text := w.red.Text(strings.ToValidUTF8(strings.TrimRight(string(p), "\n"), "\uFFFD"))
	w.log.Debug("MCP server stderr", "server", w.server, "text", head(text, 1024))
	return len(p), nil
}
