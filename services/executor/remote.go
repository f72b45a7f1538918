package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/wire"
)

// describeTimeout bounds the Describe call (and an MCP server's start and
// tool listing) at Start.
const describeTimeout = 10 * time.Second

// remoteServer is a connection to an external ToolService server.
type remoteServer struct {
	cfg    ServerConfig
	conn   *grpc.ClientConn
	client xctv1.ToolServiceClient
}

// remoteTool is one tool of an external server, served as
// "<server>.<tool>". The executor treats it like a built-in: validated
// arguments, the step's deadline, at most once.
type remoteTool struct {
	srv   *remoteServer
	local string
	desc  *xctv1.ToolDescriptor
}

// dialToolServer opens the connection to a tool server: TLS when
// configured (the files re-read on rotation), plaintext otherwise. It never
// carries XCT's own credentials: a tool server is not one of our services.
func dialToolServer(cfg ServerConfig) (*grpc.ClientConn, error) {
	if t := cfg.TLS; t != nil {
		return grpcx.Dial(cfg.Address, grpcx.WithTLS(grpcx.TLSFiles{CA: t.CA, Cert: t.Cert, Key: t.Key}))
	}
	return grpc.NewClient(cfg.Address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)),
		// One attempt of a step is one invocation: no service config from
		// the server's DNS (a retry policy there re-invoked a tool that
		// acted and whose answer was UNAVAILABLE), no retry of a call that
		// reached the server. gRPC still retries, transparently, a call
		// that never reached the server's handlers.
		grpc.WithDisableServiceConfig(), grpc.WithDisableRetry(),
	)
}

// describeServer connects to a ToolService server and returns its tools.
// An unreachable server, or one whose catalog is unusable, is an error:
// the caller logs it and serves none of its tools.
func describeServer(ctx context.Context, cfg ServerConfig, defTimeout time.Duration, defMax int64, log *slog.Logger) (*remoteServer, []Tool, error) {
	conn, err := dialToolServer(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("server %s (%s): %w", cfg.Name, cfg.Address, err)
	}
	srv := &remoteServer{cfg: cfg, conn: conn, client: xctv1.NewToolServiceClient(conn)}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	resp, err := srv.client.Describe(ctx, &xctv1.DescribeRequest{})
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("server %s (%s): describe: %s", cfg.Name, cfg.Address, status.Convert(err).Message())
	}
	capTimeout := cfg.Timeout
	if capTimeout == 0 {
		capTimeout = defTimeout
	}
	capBytes := cfg.MaxOutputBytes
	if capBytes == 0 {
		capBytes = defMax
	}
	var tools []Tool
	seen := map[string]bool{}
	for _, d := range resp.GetTools() {
		local := d.GetName()
		full := cfg.Name + "." + local
		if !validToolName(full) || seen[local] {
			log.WarnContext(ctx, "external tool skipped: invalid or duplicate name", "server", cfg.Name, "tool", local)
			continue
		}
		var schema map[string]any
		if err := json.Unmarshal([]byte(d.GetInputSchema()), &schema); err != nil {
			log.WarnContext(ctx, "external tool skipped: input schema is not a JSON object", "server", cfg.Name, "tool", local, "error", err)
			continue
		}
		seen[local] = true
		desc := proto.CloneOf(d)
		desc.Name = full
		desc.Description = strings.TrimSpace(d.GetDescription() + " (tool server " + cfg.Name + ")")
		o := cfg.Tools[local]
		desc.Source = "grpc:" + cfg.Name
		desc.EffectFrom = effectFrom(o, d.GetEffect() != xctv1.Effect_EFFECT_UNSPECIFIED)
		desc.Effect = o.Effect.proto(desc.GetEffect())
		if o.Idempotent != nil {
			desc.Idempotent = *o.Idempotent
		}
		timeout := d.GetTimeout().AsDuration()
		if o.Timeout > 0 {
			timeout = o.Timeout
		}
		if timeout <= 0 || timeout > capTimeout {
			timeout = capTimeout
		}
		desc.Timeout = durationpb.New(timeout)
		if desc.GetMaxOutputBytes() <= 0 || desc.GetMaxOutputBytes() > capBytes {
			desc.MaxOutputBytes = capBytes
		}
		tools = append(tools, &remoteTool{srv: srv, local: local, desc: desc})
	}
	for name := range cfg.Tools {
		if !seen[name] {
			log.WarnContext(ctx, "tools config names a tool the server does not offer", "server", cfg.Name, "tool", name)
		}
	}
	return srv, tools, nil
}

func (t *remoteTool) Descriptor() *xctv1.ToolDescriptor { return t.desc }

func (t *remoteTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	st, err := structpb.NewStruct(args)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "arguments cannot be sent: %v", err)
	}
	if e := Commit(ctx); e != nil {
		return nil, e
	}
	// The step's deadline travels with the call (ctx); the step id is the
	// server's idempotency key.
	var p peer.Peer
	resp, err := t.srv.client.Invoke(ctx, &xctv1.InvokeRequest{Tool: t.local, Arguments: st, IdempotencyKey: StepID(ctx)},
		grpc.MaxCallRecvMsgSize(int(t.desc.GetMaxOutputBytes())+64<<10), grpc.Peer(&p))
	if err != nil {
		// gRPC fills the peer only once a transport stream existed for the
		// call: without one the request was never sent.
		return nil, t.callError(ctx, err, p.Addr == nil)
	}
	r := resp.GetResponse()
	switch {
	case r.GetError() != nil:
		return nil, remoteError(t.desc.GetName(), r.GetError())
	case r.GetSuccess() != nil:
		if r.GetSuccess().GetResult() == nil {
			return nil, nil
		}
		return r.GetSuccess().GetResult().AsInterface(), nil
	}
	return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
		"tool server %s returned an invalid response (neither success nor error)", t.srv.cfg.Name),
		map[string]any{"server": t.srv.cfg.Name, "outcome_unknown": true})
}

// notSentAction is what the model is told of a call to a tool server that
// could not be reached: the step did not act, and the server may be back
// soon (chaos runs saw every step of a 2 s restart given up otherwise).
const notSentAction = "retry_later"

// callError turns a failed Invoke into an error signal. The server may
// have acted: outcome_unknown says so, unless the request was never sent
// (no connection could be made), which is a definite failure.
func (t *remoteTool) callError(ctx context.Context, err error, notSent bool) *xctv1.Error {
	st := status.Convert(err)
	details := map[string]any{"server": t.srv.cfg.Name, "grpc_code": st.Code().String(), "outcome_unknown": true}
	switch {
	case notSent && st.Code() == codes.Unavailable:
		details["outcome_unknown"], details["not_sent"] = false, true
		// The tool did not fail: it was not reached (a server down or
		// restarting). Nothing acted, so the model may propose the step
		// again, later, rather than give the operation up.
		e := wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "tool server %s could not be reached, the call was not sent: %s", t.srv.cfg.Name, st.Message()), details)
		e.SuggestedAction = notSentAction
		return e
	case st.Code() == codes.DeadlineExceeded || ctx.Err() != nil:
		return wire.WithDetails(wire.Errorf(wire.CodeTimeout, "tool server %s did not answer within the step's deadline", t.srv.cfg.Name), details)
	case st.Code() == codes.ResourceExhausted:
		return wire.WithDetails(wire.Errorf(wire.CodeOutputTooLarge, "tool server %s: %s", t.srv.cfg.Name, st.Message()), details)
	case st.Code() == codes.Unavailable:
		return wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "tool server %s is unavailable: %s", t.srv.cfg.Name, st.Message()), details)
	}
	return wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "tool server %s failed: %s: %s", t.srv.cfg.Name, st.Code(), st.Message()), details)
}

// remoteError keeps what a tool server says about its failure, but not its
// word on the taxonomy: only codes a tool may report pass, and the
// category, type, recoverability and suggested action are the executor's.
func remoteError(tool string, e *xctv1.Error) *xctv1.Error {
	code := wire.Code(e.GetCode())
	switch code {
	case wire.CodePermissionDenied, wire.CodeNotFound, wire.CodeInvalidArgument, wire.CodeTimeout,
		wire.CodeOutputTooLarge, wire.CodeToolFailure:
	default:
		code = wire.CodeToolFailure
	}
	msg := e.GetMessage()
	if msg == "" {
		msg = "the tool failed without a message"
	}
	out := wire.Errorf(code, "%s", msg)
	out.Details = e.GetDetails()
	if code != wire.Code(e.GetCode()) {
		d := map[string]any{}
		if e.GetDetails() != nil {
			d = e.GetDetails().AsMap()
		}
		d["reported_code"] = e.GetCode()
		d["tool"] = tool
		out = wire.WithDetails(out, d)
	}
	return out
}
