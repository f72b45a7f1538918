package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/verdict"
)

// Service is the executor: a catalog of tools, the record of the steps it
// ran, and the gRPC service that runs them.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	log      *slog.Logger
	ws       *workspace
	wsDir    string
	toolsCfg *ToolsConfig
	// instance identifies this executor process in step records.
	instance string

	// state guards the catalog (extended at Start by external servers)
	// and the step store (opened at Start when there is NATS).
	state   sync.RWMutex
	tools   map[string]*servedTool
	catalog []*xctv1.ToolDescriptor // sorted by name
	steps   StepStore
	// opened: Start opened what it needs of NATS (redaction key, step
	// store, epochs) and restored the workspace's protected entries;
	// connected: it connected the tool and MCP servers. A Start that
	// failed on NATS (app.startWhenReady calls it again) does again only
	// what it did not finish.
	opened, connected bool
	// redactor replaces secrets in what step records keep; set by Start.
	redactor *redact.Redactor
	// verifier checks the signed verdict of every Execute (binding.go).
	verifier *verdict.Verifier
	// epochKV is the validators' policy epochs bucket (nil until Start
	// with NATS), epochs the newest epoch seen per key (epoch.go),
	// epochDirect its reader for the step path (nil: the generic
	// client reads; epochget.go).
	epochKV     atomic.Pointer[jetstream.KeyValue]
	epochDirect atomic.Pointer[epochGet]
	epochs      verdict.Epochs
	// chains reads runs' chains: a decision about a step needs its chain
	// to show the step in doubt (doubt.go).
	chains  chains
	remotes []*remoteServer
	mcps    []*mcpServer

	mu       sync.Mutex
	stopping bool
	running  sync.WaitGroup // tool invocations, including abandoned ones
	// fixing counts outcomes being recorded after a failed first write
	// (records.go fixRecord); quit is closed when Stop gives up on them.
	fixing sync.WaitGroup
	quit   chan struct{}
}

// servedTool is a tool with its effective descriptor: defaults applied.
type servedTool struct {
	tool     Tool
	desc     *xctv1.ToolDescriptor
	timeout  time.Duration
	maxBytes int64
	// digest is verdict.ToolDigest(desc): a verdict acts on this tool
	// only if the validator judged a descriptor with this digest.
	digest string
}

// classify returns the effect class and idempotency of one call.
func (st *servedTool) classify(args map[string]any) (xctv1.Effect, bool) {
	if c, ok := st.tool.(callClassifier); ok {
		return c.classify(args)
	}
	return st.desc.GetEffect(), st.desc.GetIdempotent()
}

// New builds an executor serving the built-in fs tools over cfg.Workspace
// (created if missing), the tools of the tools configuration that need no
// connection (http.request, shell.exec), and the extra tools. External
// and MCP servers are connected by Start. nc is used by Start to publish
// the catalog and keep step records; without it (unit tests) step records
// are kept in memory.
func New(cfg Config, nc *nats.Conn, log *slog.Logger, extra ...Tool) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	toolsCfg := cfg.Tools
	if toolsCfg == nil && cfg.ToolsConfigFile != "" {
		c, err := LoadToolsConfig(cfg.ToolsConfigFile)
		if err != nil {
			return nil, err
		}
		toolsCfg = c
	}
	switch {
	case toolsCfg == nil:
		toolsCfg = &ToolsConfig{checked: true}
	case !toolsCfg.checked:
		return nil, fmt.Errorf("%w: build it with LoadToolsConfig or ParseToolsConfig", ErrToolsConfig)
	}
	if err := checkUnsandboxed(cfg, toolsCfg, log); err != nil {
		return nil, err
	}
	if err := checkSandboxMounts(cfg, toolsCfg); err != nil {
		return nil, err
	}
	wsDir, err := filepath.Abs(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWorkspace, err)
	}
	if err := programsOutside(toolsCfg, wsDir); err != nil {
		return nil, err
	}
	ws, err := openWorkspace(cfg.Workspace)
	if err != nil {
		return nil, err
	}
	if toolsCfg.FS != nil {
		ws.protected = newProtectedPaths(toolsCfg.FS.ProtectedPaths)
		ws.protected.scanEntries = toolsCfg.FS.ProtectedScanEntries
	}
	s := &Service{cfg: cfg, nc: nc, log: log, ws: ws, wsDir: wsDir, toolsCfg: toolsCfg, instance: instanceID(), tools: map[string]*servedTool{}, quit: make(chan struct{})}
	if s.verifier, err = cfg.verifier(); err != nil {
		_ = ws.close()
		return nil, err
	}
	if nc == nil {
		m := newMemStepStore()
		m.asJSON = cfg.RecordFormat == FormatJSON
		s.steps = m
	}
	all := append(builtinTools(ws, cfg.MaxOutputBytes, cfg.MaxUndoBytes), &undoTool{s: s})
	if toolsCfg.HTTP != nil {
		all = append(all, newHTTPTool(toolsCfg.HTTP, cfg.DefaultTimeout, cfg.MaxOutputBytes))
	}
	if toolsCfg.Shell != nil {
		all = append(all, newShellTool(toolsCfg.Shell, ws, wsDir, cfg.DefaultTimeout, log))
	}
	for _, t := range append(all, extra...) {
		if err := s.add(t); err != nil {
			_ = ws.close()
			return nil, err
		}
	}
	return s, nil
}

// instanceID names this executor process: host, pid and a random suffix.
func instanceID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// add serves t; the caller holds s.state or has not shared s yet.
func (s *Service) add(t Tool) error {
	st, err := serve(t, s.cfg)
	if err != nil {
		return err
	}
	withOrigin(st.desc)
	st.digest = verdict.ToolDigest(st.desc)
	name := st.desc.GetName()
	if _, dup := s.tools[name]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateTool, name)
	}
	s.tools[name] = st
	i, _ := slices.BinarySearchFunc(s.catalog, name, func(d *xctv1.ToolDescriptor, n string) int { return strings.Compare(d.GetName(), n) })
	s.catalog = slices.Insert(s.catalog, i, st.desc)
	return nil
}

// serve checks t's descriptor and applies the defaults to a copy of it.
func serve(t Tool, cfg Config) (*servedTool, error) {
	if t == nil || t.Descriptor() == nil {
		return nil, fmt.Errorf("%w: no descriptor", ErrInvalidTool)
	}
	d := proto.CloneOf(t.Descriptor())
	if !validToolName(d.GetName()) {
		return nil, fmt.Errorf("%w: name %q must be dot-separated words of letters, digits, '_' and '-'", ErrInvalidTool, d.GetName())
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(d.GetInputSchema()), &schema); err != nil {
		return nil, fmt.Errorf("%w: %s: input schema is not a JSON object: %w", ErrInvalidTool, d.GetName(), err)
	}
	if d.GetTimeout().AsDuration() <= 0 {
		d.Timeout = durationpb.New(cfg.DefaultTimeout)
	}
	if d.GetMaxOutputBytes() <= 0 {
		d.MaxOutputBytes = cfg.MaxOutputBytes
	}
	return &servedTool{tool: t, desc: d, timeout: d.GetTimeout().AsDuration(), maxBytes: d.GetMaxOutputBytes()}, nil
}

// validToolName accepts names that are also valid KV keys and subject
// tokens: "fs.read", "http_get", "x-y.z".
func validToolName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for word := range strings.SplitSeq(name, ".") {
		if word == "" {
			return false
		}
		for _, r := range word {
			if !wordRune(r) {
				return false
			}
		}
	}
	return true
}

// Register registers the ExecutorService on g.
func (s *Service) Register(g *grpc.Server) {
	xctv1.RegisterExecutorServiceServer(g, &handler{s: s})
}

// Start opens the step store (with NATS), connects the external tool
// servers and MCP servers of the tools configuration and adds their tools,
// then publishes the catalog to the XCT_TOOLS bucket. A server that cannot
// be reached, or whose catalog is unusable, is logged and its tools are not
// served: the executor starts without them (a restart picks them up).
// Without a NATS connection nothing is published.
func (s *Service) Start(ctx context.Context) error {
	s.state.RLock()
	opened := s.opened
	s.state.RUnlock()
	if !opened {
		if err := s.open(ctx); err != nil {
			return err
		}
		s.state.Lock()
		s.opened = true
		s.state.Unlock()
	}
	s.state.Lock()
	connect := !s.connected
	s.connected = true
	s.state.Unlock()
	if connect {
		s.connectServers(ctx)
	}
	if s.nc == nil {
		s.log.WarnContext(ctx, "executor has no NATS connection: tool catalog not published, step records kept in memory")
		return nil
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("executor: jetstream: %w", err)
	}
	tools := s.Tools()
	if err := catalog.Publish(ctx, js, tools); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	s.log.InfoContext(ctx, "tool catalog published", "tools", len(tools), "workspace", s.cfg.Workspace)
	return nil
}

// open builds the redactor and, with NATS, opens the step store, binds
// the policy epochs and restores the protected entries a former executor
// could not move aside. Each part replaces what an earlier, failed open
// left, so open may be called again.
func (s *Service) open(ctx context.Context) error {
	var js jetstream.JetStream
	if s.nc != nil {
		var err error
		if js, err = jetstream.New(s.nc); err != nil {
			return fmt.Errorf("executor: jetstream: %w", err)
		}
	}
	red, err := s.cfg.Redact.Build(ctx, js)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	s.state.Lock()
	s.redactor = red
	s.state.Unlock()
	if s.ws != nil {
		s.ws.setRedactor(red)
	}
	if s.nc == nil {
		return nil
	}
	steps, err := OpenStepStore(ctx, s.nc, StepStoreConfig{Retention: s.cfg.StepRetention, JSONRecords: s.cfg.RecordFormat == FormatJSON, Health: s.cfg.StoreHealth})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	s.state.Lock()
	s.steps = steps
	s.state.Unlock()
	if err := s.bindEpochs(ctx, js); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(s.ws.fd(), &st); err != nil {
		return fmt.Errorf("executor: workspace: %w", err)
	}
	if err := s.ws.unmoved.restore(ctx, steps, uint64(st.Dev), st.Ino, s.log); err != nil { //nolint:unconvert // Dev is not uint64 everywhere
		return fmt.Errorf("executor: %w", err)
	}
	return nil
}

// connectServers adds the tools of the external and MCP servers.
func (s *Service) connectServers(ctx context.Context) {
	addAll := func(kind, name string, tools []Tool) {
		s.state.Lock()
		defer s.state.Unlock()
		n := 0
		for _, t := range tools {
			if err := s.add(t); err != nil {
				s.log.WarnContext(ctx, "tool not served", "server", name, "error", err)
				continue
			}
			n++
		}
		s.log.InfoContext(ctx, kind+" connected", "server", name, "tools", n)
	}
	for _, sc := range s.toolsCfg.Servers {
		srv, tools, err := describeServer(ctx, sc, s.cfg.DefaultTimeout, s.cfg.MaxOutputBytes, s.log)
		if err != nil {
			s.log.ErrorContext(ctx, "tool server unavailable at start: its tools are not served", "server", sc.Name, "address", sc.Address, "error", err)
			continue
		}
		s.state.Lock()
		s.remotes = append(s.remotes, srv)
		s.state.Unlock()
		addAll("tool server", sc.Name, tools)
	}
	for _, mc := range s.toolsCfg.MCP {
		m := newMCPServer(mc, s.wsDir, s.ws.protected, s.redactorOrNil(), s.log.With("mcp_server", mc.Name))
		m.ws = s.ws
		tools, err := m.listTools(ctx, s.cfg.DefaultTimeout, s.cfg.MaxOutputBytes)
		if err != nil {
			_ = m.close()
			s.log.ErrorContext(ctx, "MCP server unavailable at start: its tools are not served", "server", mc.Name, "error", err)
			continue
		}
		s.state.Lock()
		s.mcps = append(s.mcps, m)
		s.state.Unlock()
		addAll("MCP server", mc.Name, tools)
	}
}

// Stop refuses new steps, waits until running tools return or ctx ends,
// closes the connections to tool and MCP servers, and closes the
// workspace. Stop the gRPC server first, so that no call is refused
// halfway.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	already := s.stopping
	s.stopping = true
	s.mu.Unlock()
	if already {
		return nil
	}
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		s.fixing.Wait() // outcomes that acted but are not recorded yet
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("executor: tools still running (or outcomes not yet recorded) at shutdown: %w", ctx.Err())
	}
	close(s.quit)
	s.state.Lock()
	remotes, mcps := s.remotes, s.mcps
	s.remotes, s.mcps = nil, nil
	s.state.Unlock()
	for _, r := range remotes {
		_ = r.conn.Close()
	}
	for _, m := range mcps {
		if cerr := m.close(); cerr != nil {
			s.log.Debug("MCP server close", "server", m.cfg.Name, "error", cerr)
		}
	}
	if cerr := s.ws.close(); cerr != nil && err == nil {
		err = fmt.Errorf("executor: close workspace: %w", cerr)
	}
	return err
}

// Tools returns the catalog, sorted by name, with the defaults applied to
// each descriptor (timeout, max_output_bytes). The caller owns the copies.
func (s *Service) Tools() []*xctv1.ToolDescriptor {
	s.state.RLock()
	defer s.state.RUnlock()
	out := make([]*xctv1.ToolDescriptor, len(s.catalog))
	for i, d := range s.catalog {
		out[i] = proto.CloneOf(d)
	}
	return out
}

// tool returns a served tool by name.
func (s *Service) tool(name string) (*servedTool, bool) {
	s.state.RLock()
	defer s.state.RUnlock()
	st, ok := s.tools[name]
	return st, ok
}

// store returns the step store, or ErrNoStepStore before Start.
func (s *Service) store() (StepStore, error) {
	s.state.RLock()
	defer s.state.RUnlock()
	if s.steps == nil {
		return nil, ErrNoStepStore
	}
	return s.steps, nil
}

// begin counts one more running tool, unless the service is stopping.
func (s *Service) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.running.Add(1)
	return true
}

// wordRune reports whether r may appear in a tool name's word or a step
// id: A-Z a-z 0-9 _ -.
func wordRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// programsOutside refuses a shell program or a stdio MCP server whose
// file (resolved at load, links followed) lies inside the workspace: the
// model rewrites workspace files with fs.write, which keeps their mode,
// and the allowed program's next call would run the model's code.
func programsOutside(cfg *ToolsConfig, wsDir string) error {
	root := wsDir
	if real, err := filepath.EvalSymlinks(wsDir); err == nil {
		root = real
	}
	inside := func(p string) bool {
		rel, err := filepath.Rel(root, p)
		return p != "" && err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	var errs []error
	if cfg.Shell != nil {
		for _, b := range cfg.Shell.Binaries {
			if inside(b.resolved) {
				errs = append(errs, fmt.Errorf("%w: shell program %s is %s, inside the workspace %s: the model could rewrite it; install it outside",
					ErrToolsConfig, b.Name, b.resolved, wsDir))
			}
		}
	}
	for _, m := range cfg.MCP {
		if inside(m.resolved) {
			errs = append(errs, fmt.Errorf("%w: MCP server %s's command is %s, inside the workspace %s: the model could rewrite it; install it outside",
				ErrToolsConfig, m.Name, m.resolved, wsDir))
		}
	}
	// The directories programs take configuration, caches and code from
	// (HOME's dotfiles, git's global config, Python's user site, Go's
	// build cache): in the workspace they are the model's to write with
	// fs.write, and only some of their names are protected.
	homes := func(what string, names []string, set map[string]string) {
		for _, kv := range scrubbedEnv(names, set) {
			k, v, _ := strings.Cut(kv, "=")
			if !slices.Contains(configHomeVars, k) {
				continue
			}
			for p := range strings.SplitSeq(v, ":") {
				if p == "" {
					continue
				}
				// A relative one is the working directory's: the workspace.
				if !filepath.IsAbs(p) || inside(realOrSelf(p)) || under(wsDir, filepath.Clean(p)) {
					errs = append(errs, fmt.Errorf("%w: %s's %s is %s, in the workspace %s: programs read configuration and code from it, which the model could write; name a directory outside (HOME is the sandbox's private /tmp when unset)",
						ErrToolsConfig, what, k, p, wsDir))
					break
				}
			}
		}
	}
	if cfg.Shell != nil {
		names := cfg.Shell.Env
		if names == nil {
			names = []string{"PATH"}
		}
		homes("shell.exec", names, cfg.Shell.SetEnv)
	}
	for _, m := range cfg.MCP {
		if m.Command != "" {
			homes("MCP server "+m.Name, m.Env, m.SetEnv)
		}
	}
	return errors.Join(errs...)
}

// configHomeVars name the directories (or lists of them) where programs
// look for their configuration, caches and code: HOME (dotfiles, git's
// and Python's user directories), the XDG base directories, git's config
// files, and the toolchains' homes and caches.
var configHomeVars = []string{
	"HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_HOME", "XDG_DATA_DIRS", "XDG_CACHE_HOME", "XDG_STATE_HOME",
	"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GNUPGHOME",
	"PYTHONUSERBASE", "PYTHONPYCACHEPREFIX", "PIP_CONFIG_FILE",
	"CARGO_HOME", "RUSTUP_HOME", "GOPATH", "GOMODCACHE", "GOCACHE", "GOENV",
	"NPM_CONFIG_USERCONFIG", "npm_config_userconfig", "NPM_CONFIG_CACHE", "npm_config_cache",
}

// under reports whether p is dir or below it (both clean).
func under(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// realOrSelf is p with its symbolic links resolved, or p.
func realOrSelf(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}
