package session

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/xct-dev/xct/lctl"
)

// MaxRecordedMessage bounds the JSON of a request or response recorded on
// an event; a larger one is recorded as {truncated: true, bytes: N}.
const MaxRecordedMessage = 16 << 10

// InterceptorOptions tune the gRPC interceptors.
type InterceptorOptions struct {
	// Agent names who makes (client) or serves (server) the calls; the
	// session's agent when empty.
	Agent string
	// OmitPayloads leaves requests and responses off the events (for
	// calls that carry secrets or large data).
	OmitPayloads bool
	// OnRecordError is told when an event could not be recorded; the call
	// itself is not affected. Nil ignores such errors (Session.Err keeps
	// the first).
	OnRecordError func(error)
}

// UnaryClientInterceptor records every unary call made through a client
// connection: a tool_call event {tool: the full method, input, output,
// duration_ms, status} when it succeeds, an error event in the spec's
// taxonomy when it fails.
//
//	conn, _ := grpc.NewClient(addr, grpc.WithUnaryInterceptor(s.UnaryClientInterceptor(session.InterceptorOptions{Agent: "planner"})))
func (s *Session) UnaryClientInterceptor(opts InterceptorOptions) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, callOpts...)
		s.recordCall(context.WithoutCancel(ctx), opts, method, req, reply, time.Since(start), err, 0, 0)
		return err
	}
}

// UnaryServerInterceptor records every unary call a server handles, the
// same way.
func (s *Session) UnaryServerInterceptor(opts InterceptorOptions) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		s.recordCall(context.WithoutCancel(ctx), opts, info.FullMethod, req, resp, time.Since(start), err, 0, 0)
		return resp, err
	}
}

// StreamClientInterceptor records each client stream once it ends: a
// tool_call with the number of messages each way, or an error event.
func (s *Session) StreamClientInterceptor(opts InterceptorOptions) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		start := time.Now()
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			s.recordCall(context.WithoutCancel(ctx), opts, method, nil, nil, time.Since(start), err, 0, 0)
			return nil, err
		}
		return &recordedClientStream{ClientStream: cs, s: s, opts: opts, method: method, start: start, ctx: context.WithoutCancel(ctx)}, nil
	}
}

// StreamServerInterceptor records each served stream when its handler
// returns.
func (s *Session) StreamServerInterceptor(opts InterceptorOptions) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		counted := &countingServerStream{ServerStream: ss}
		err := handler(srv, counted)
		s.recordCall(context.WithoutCancel(ss.Context()), opts, info.FullMethod, nil, nil, time.Since(start), err, counted.sent, counted.received)
		return err
	}
}

type recordedClientStream struct {
	grpc.ClientStream
	s              *Session
	opts           InterceptorOptions
	method         string
	start          time.Time
	ctx            context.Context
	once           sync.Once
	mu             sync.Mutex
	sent, received int
}

func (c *recordedClientStream) SendMsg(m any) error {
	err := c.ClientStream.SendMsg(m)
	if err == nil {
		c.mu.Lock()
		c.sent++
		c.mu.Unlock()
	} else if !errors.Is(err, io.EOF) {
		c.finish(err)
	}
	return err
}

func (c *recordedClientStream) RecvMsg(m any) error {
	err := c.ClientStream.RecvMsg(m)
	switch {
	case err == nil:
		c.mu.Lock()
		c.received++
		c.mu.Unlock()
	case errors.Is(err, io.EOF):
		c.finish(nil)
	default:
		c.finish(err)
	}
	return err
}

func (c *recordedClientStream) finish(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		sent, received := c.sent, c.received
		c.mu.Unlock()
		c.s.recordCall(c.ctx, c.opts, c.method, nil, nil, time.Since(c.start), err, sent, received)
	})
}

type countingServerStream struct {
	grpc.ServerStream
	sent, received int
}

func (c *countingServerStream) SendMsg(m any) error {
	err := c.ServerStream.SendMsg(m)
	if err == nil {
		c.sent++
	}
	return err
}

func (c *countingServerStream) RecvMsg(m any) error {
	err := c.ServerStream.RecvMsg(m)
	if err == nil {
		c.received++
	}
	return err
}

// recordCall records one finished call.
func (s *Session) recordCall(ctx context.Context, opts InterceptorOptions, method string, req, resp any, d time.Duration, callErr error, sent, received int) {
	agent := opts.Agent
	data := map[string]any{"tool": method, "duration_ms": durationMS(d)}
	if sent > 0 || received > 0 {
		data["messages_sent"], data["messages_received"] = sent, received
	}
	if !opts.OmitPayloads && req != nil {
		data["input"] = messageValue(req)
	}
	var err error
	if callErr == nil {
		if !opts.OmitPayloads && resp != nil {
			data["output"] = messageValue(resp)
		}
		data["status"] = "success"
		_, err = s.Record(ctx, lctl.TypeToolCall, agent, data)
	} else {
		st := status.Convert(callErr)
		category, typ, recoverable := classify(st.Code())
		data["category"], data["type"], data["recoverable"] = category, typ, recoverable
		data["code"] = strings.ToUpper(code(st.Code()))
		data["message"] = st.Message()
		_, err = s.Record(ctx, lctl.TypeError, agent, data)
	}
	if err != nil && opts.OnRecordError != nil {
		opts.OnRecordError(err)
	}
}

// code names a gRPC code the way the protocol spells it: DEADLINE_EXCEEDED.
func code(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// classify maps a gRPC status code onto the spec's error taxonomy.
func classify(c codes.Code) (category, typ string, recoverable bool) {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange:
		return "input_error", "invalid_format", false
	case codes.NotFound, codes.FailedPrecondition:
		return "input_error", "missing_context", false
	case codes.DeadlineExceeded:
		return "execution_error", "timeout", true
	case codes.ResourceExhausted:
		return "execution_error", "rate_limited", true
	case codes.Unavailable, codes.Aborted:
		return "execution_error", "tool_failure", true
	case codes.PermissionDenied, codes.Unauthenticated:
		return "orchestration_error", "delegation_rejected", false
	case codes.Canceled:
		return "execution_error", "tool_failure", false
	}
	return "execution_error", "tool_failure", false
}

// messageValue turns a request or response into JSON values: protobuf
// messages through protojson, anything else through encoding/json.
func messageValue(m any) any {
	var raw []byte
	var err error
	if pm, ok := m.(proto.Message); ok {
		raw, err = protojson.Marshal(pm)
	} else {
		raw, err = json.Marshal(m)
	}
	if err != nil {
		return map[string]any{"unrecordable": err.Error()}
	}
	if len(raw) > MaxRecordedMessage {
		return map[string]any{"truncated": true, "bytes": len(raw)}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return map[string]any{"unrecordable": err.Error()}
	}
	return v
}
