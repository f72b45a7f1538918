// Package executor is XCT's executor service: it runs one allowed step at a
// time with a tool from its catalog, and never decides whether a step should
// run (the validator does, the orchestrator asks).
//
// Every tool call is bounded in time (the tool's timeout, else
// Config.DefaultTimeout) and in output (the tool's max_output_bytes, else
// Config.MaxOutputBytes, measured on the result's JSON). Failures are
// structured error signals in the step's Response (PERMISSION_DENIED,
// NOT_FOUND, INVALID_ARGUMENT, TIMEOUT, OUTPUT_TOO_LARGE, TOOL_FAILURE,
// UNKNOWN_TOOL), never gRPC errors; a panicking tool is a TOOL_FAILURE and
// the executor keeps serving.
//
// The built-in tools fs.read, fs.write and fs.list are confined to
// Config.Workspace through an os.Root. At Start the catalog is published to
// the XCT_TOOLS KV bucket, where the validator reads schemas and effects.
package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
)

// Service is the executor: a catalog of tools and the gRPC service that
// runs them.
type Service struct {
	cfg     Config
	nc      *nats.Conn
	log     *slog.Logger
	ws      *workspace
	tools   map[string]*servedTool
	catalog []*xctv1.ToolDescriptor // sorted by name

	mu       sync.Mutex
	stopping bool
	running  sync.WaitGroup // tool invocations, including abandoned ones
}

// servedTool is a tool with its effective descriptor: defaults applied.
type servedTool struct {
	tool     Tool
	desc     *xctv1.ToolDescriptor
	timeout  time.Duration
	maxBytes int64
}

// New builds an executor serving the built-in fs tools over cfg.Workspace
// (created if missing) and the extra tools. nc is used by Start to publish
// the catalog; it may be nil when nothing is published (unit tests).
func New(cfg Config, nc *nats.Conn, log *slog.Logger, extra ...Tool) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ws, err := openWorkspace(cfg.Workspace)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, nc: nc, log: log, ws: ws, tools: map[string]*servedTool{}}
	for _, t := range append(builtinTools(ws, cfg.MaxOutputBytes), extra...) {
		st, err := serve(t, cfg)
		if err != nil {
			_ = ws.close()
			return nil, err
		}
		name := st.desc.GetName()
		if _, dup := s.tools[name]; dup {
			_ = ws.close()
			return nil, fmt.Errorf("%w: %q", ErrDuplicateTool, name)
		}
		s.tools[name] = st
		s.catalog = append(s.catalog, st.desc)
	}
	slices.SortFunc(s.catalog, func(a, b *xctv1.ToolDescriptor) int { return strings.Compare(a.GetName(), b.GetName()) })
	return s, nil
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
		return nil, fmt.Errorf("%w: %s: input schema is not a JSON object: %v", ErrInvalidTool, d.GetName(), err)
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
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
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

// Start publishes the tool catalog to the XCT_TOOLS bucket. Without a NATS
// connection it publishes nothing.
func (s *Service) Start(ctx context.Context) error {
	if s.nc == nil {
		s.log.WarnContext(ctx, "executor has no NATS connection: tool catalog not published")
		return nil
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("executor: jetstream: %w", err)
	}
	if err := catalog.Publish(ctx, js, s.cfg.Replicas, s.catalog); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	s.log.InfoContext(ctx, "tool catalog published", "tools", len(s.catalog), "workspace", s.cfg.Workspace)
	return nil
}

// Stop refuses new steps, waits until running tools return or ctx ends, and
// closes the workspace. Stop the gRPC server first, so that no call is
// refused halfway.
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
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("executor: tools still running at shutdown: %w", ctx.Err())
	}
	if cerr := s.ws.close(); cerr != nil && err == nil {
		err = fmt.Errorf("executor: close workspace: %w", cerr)
	}
	return err
}

// Tools returns the catalog, sorted by name, with the defaults applied to
// each descriptor (timeout, max_output_bytes). The caller owns the copies.
func (s *Service) Tools() []*xctv1.ToolDescriptor {
	out := make([]*xctv1.ToolDescriptor, len(s.catalog))
	for i, d := range s.catalog {
		out[i] = proto.CloneOf(d)
	}
	return out
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
