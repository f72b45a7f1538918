package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/wire"
)

// handler serves xct.v1.ExecutorService for a Service.
type handler struct {
	xctv1.UnimplementedExecutorServiceServer
	s *Service
}

// ListTools returns the catalog sorted by name.
func (h *handler) ListTools(context.Context, *xctv1.ListToolsRequest) (*xctv1.ListToolsResponse, error) {
	return &xctv1.ListToolsResponse{Tools: h.s.Tools()}, nil
}

// Execute runs one step. Everything a tool does, including failing, is a
// Response. A gRPC error is a malformed request (InvalidArgument: refused
// before any claim, nothing was executed), a stopping executor, or a
// record store that could not be used, including a tool that acted but
// whose outcome is not recorded yet (Unavailable): then the step's outcome
// is whatever its record says once it can be read (GetStep).
func (h *handler) Execute(ctx context.Context, req *xctv1.ExecuteRequest) (*xctv1.ExecuteResponse, error) {
	switch {
	case req.GetStepId() == "":
		return nil, status.Error(codes.InvalidArgument, "step_id is required")
	case !validStepID(req.GetStepId()):
		return nil, status.Errorf(codes.InvalidArgument, "step_id must be 1-%d of A-Z a-z 0-9 _ -", maxStepIDBytes)
	case req.GetTool() == "":
		return nil, status.Error(codes.InvalidArgument, "tool is required")
	}
	if err := h.s.stepCaller(ctx); err != nil {
		return nil, err
	}
	c := callOf(req)
	ctx, err := h.s.checkVerdict(ctx, req, c)
	if err != nil {
		return nil, err
	}
	return h.s.executeCall(ctx, req, c)
}

// GetStep returns a step's record; with fence, a step without one is
// recorded as not executed first (Service.Fence). Reading is open to the
// roles the table names (operators, auditors); the fence writes a record
// that makes the step's Execute replay "not executed", so only XCT's own
// services (the orchestrator settling its step) may ask for it: step ids
// can be computed from what a reader sees of a run, and a reader must not
// be able to stop an allowed step.
func (h *handler) GetStep(ctx context.Context, req *xctv1.GetStepRequest) (*xctv1.GetStepResponse, error) {
	step := h.s.Step
	if p, ok := auth.FromContext(ctx); ok && p.Has(auth.RoleService) && h.s.stepCaller(ctx) == nil {
		// The orchestrator settling its step: a step that provably did
		// not act is recorded so (SettledStep; a reader only reads).
		step = h.s.SettledStep
	}
	if req.GetFence() {
		if p, ok := auth.FromContext(ctx); !ok || !p.Has(auth.RoleService) {
			return nil, status.Error(codes.PermissionDenied,
				"only XCT's services may fence a step (GetStep with fence records it as not executed); read it without fence, or decide it with ResolveStep")
		}
		// A fence writes a step's record: it is the orchestrator's, as
		// Execute is. Another service (a taken-over tracer, which reads
		// every step id on the chains) fenced each step before its
		// Execute, and no approved or allowed step ever ran.
		if err := h.s.stepCaller(ctx); err != nil {
			return nil, err
		}
		step = h.s.Fence
	}
	rec, doubt, err := step(ctx, req.GetStepId())
	if err != nil {
		return nil, stepStatus(err)
	}
	return &xctv1.GetStepResponse{Step: rec, InDoubt: doubt}, nil
}

// ResolveStep records a human decision about a step in doubt.
func (h *handler) ResolveStep(ctx context.Context, req *xctv1.ResolveStepRequest) (*xctv1.ResolveStepResponse, error) {
	// Who resolved the step is the authenticated caller.
	by, err := auth.ActingAs(ctx, req.GetResolvedBy())
	if err != nil {
		return nil, err
	}
	if r := req.GetResult(); r != nil && wire.ValueDepthExceeds(r.AsInterface(), wire.MaxDepth) {
		return nil, status.Errorf(codes.InvalidArgument, "result is %v", wire.ErrTooDeep{Limit: wire.MaxDepth})
	}
	if req.GetInDoubtSeq() == 0 && h.s.nc != nil {
		// A decision names the doubt it settles, so that sent again it
		// cannot settle a later attempt's.
		return nil, status.Errorf(codes.InvalidArgument, "in_doubt_seq is required: the seq of the step_in_doubt event on the run's chain this decision settles "+
			"(GetRun shows it as the step's in_doubt_seq; xct resolve RUN STEP sends it)")
	}
	rec, err := h.s.ResolveStep(ctx, req.GetStepId(), Resolution{
		Decision:   req.GetDecision(),
		ResolvedBy: by.Name,
		Reason:     req.GetReason(),
		Result:     resultValue(req.GetResult()),
		RunID:      req.GetRunId(),
		InDoubtSeq: req.GetInDoubtSeq(),
	})
	if err != nil {
		return nil, stepStatus(err)
	}
	return &xctv1.ResolveStepResponse{Step: rec}, nil
}

// stepStatus turns a step record error into a gRPC status: the table's
// code, or, for an error of the store itself, Unavailable: the store did
// not answer, so the step's outcome is unknown, which is not "no record"
// (NotFound).
func stepStatus(err error) error {
	if stepCodes.Code(err) == codes.Unknown && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		if _, ok := status.FromError(err); !ok {
			err = fmt.Errorf("%w: %w", errOutcomeUnknown, err)
		}
	}
	return stepCodes.Status(err)
}

// outcome is what one invocation returned.
type outcome struct {
	result any
	err    *xctv1.Error
}

// execute runs one step whose verdict was checked (or that needs none).
func (s *Service) execute(ctx context.Context, req *xctv1.ExecuteRequest) (*xctv1.ExecuteResponse, error) {
	return s.executeCall(ctx, req, callOf(req))
}

// executeCall is execute with the request's arguments already read.
func (s *Service) executeCall(ctx context.Context, req *xctv1.ExecuteRequest, call call) (*xctv1.ExecuteResponse, error) {
	start := time.Now()
	st, ok := s.tool(req.GetTool())
	if !ok {
		tools := s.Tools()
		names := make([]any, len(tools))
		for i, d := range tools {
			names[i] = d.GetName()
		}
		resp := wire.ErrorResponse(wire.WithDetails(
			wire.Errorf(wire.CodeUnknownTool, "unknown tool %q", req.GetTool()),
			map[string]any{"tool": req.GetTool(), "tools": names}))
		s.logStep(ctx, req, resp, time.Since(start))
		return &xctv1.ExecuteResponse{Response: resp, Duration: durationpb.New(time.Since(start))}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err() // the caller is gone: do not start
	}
	if s.isStopping() {
		return nil, status.Error(codes.Unavailable, ErrStopped.Error())
	}
	args := call.args
	c, answer, err := s.claim(ctx, req, st, call)
	if err != nil {
		s.log.WarnContext(ctx, "step not executed", "run_id", req.GetRunId(), "step_id", req.GetStepId(), "tool", req.GetTool(), "error", err)
		return nil, err
	}
	if answer != nil {
		s.logStep(ctx, req, answer.GetResponse(), time.Since(start), "replayed", answer.GetReplayed(), "attempt", answer.GetAttempt())
		return answer, nil
	}
	if !s.begin() {
		s.release(c)
		return nil, status.Error(codes.Unavailable, ErrStopped.Error())
	}
	ran := time.Now()
	resp, err := s.run(ctx, st, args, c)
	d := time.Since(ran) // the tool's own time, without the record's
	if err != nil {
		s.release(c)
		s.log.WarnContext(ctx, "step abandoned", "run_id", req.GetRunId(), "step_id", req.GetStepId(), "tool", req.GetTool(), "error", err, "duration", d)
		return nil, err
	}
	resp = settleUnsure(resp, c.rec)
	if err := s.finish(c, s.redactResponse(args, resp), d); err != nil {
		// The tool acted but its record still says pending: an outcome
		// told now would not be the record's. The caller reads the step
		// (GetStep) until the outcome is recorded, or it is in doubt.
		return nil, status.Errorf(codes.Unavailable, "step %s acted, but %s (%v): its outcome is recorded when the store answers again; read it with GetStep",
			req.GetStepId(), "its outcome could not be recorded yet", err)
	}
	s.logStep(ctx, req, resp, time.Since(start), "attempt", c.rec.GetAttempt(), "tool_duration", d)
	return &xctv1.ExecuteResponse{Response: resp, Duration: durationpb.New(d), Attempt: c.rec.GetAttempt()}, nil
}

// isStopping reports whether Stop was called.
func (s *Service) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// run invokes st once within its deadline, for the claimed step c (nil when
// the call is not recorded). The caller has counted the invocation in
// s.running. It returns a gRPC error only when the caller's own context
// ended before the tool committed: then nothing was changed.
func (s *Service) run(ctx context.Context, st *servedTool, args map[string]any, c *stepClaim) (*xctv1.Response, error) {
	g := &gate{}
	if c != nil {
		g.stepID, g.runID, g.compensate = c.rec.GetStepId(), c.rec.GetRunId(), c.compensator()
	}
	// The tool's context is bounded by the tool's own deadline, not by the
	// caller: a caller that goes away (an orchestrator killed mid-step)
	// stops a tool that has not committed its effect, but a committed tool
	// runs to its own outcome, so the step's record holds what really
	// happened and a replica that takes the run over reads it instead of an
	// outcome cut short.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if g.abandon() {
			cancel()
		}
	})
	defer stop()
	tctx = context.WithValue(tctx, gateKey{}, g)
	done := make(chan outcome, 1)
	go func() {
		defer s.running.Done()
		done <- s.call(tctx, st, args)
	}()
	var o outcome
	returned := false
	select {
	case o = <-done:
		returned = true
	case <-tctx.Done():
	}
	// Past the deadline the tool's outcome counts only if it committed its
	// effect in time; otherwise the step timed out, even if a result has
	// arrived meanwhile. So the reported outcome never depends on which
	// channel the select happened to pick.
	if tctx.Err() != nil && g.abandon() {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		return wire.ErrorResponse(wire.WithDetails(
			wire.Errorf(wire.CodeTimeout, "tool %s did not finish within %v", st.desc.GetName(), st.timeout),
			map[string]any{"timeout_ms": st.timeout.Milliseconds()})), nil
	}
	if !returned {
		// The tool committed its effect before the deadline: its own
		// outcome is the truth, so wait for it.
		o = <-done
	}
	return s.respond(st, o), nil
}

// call invokes the tool, turning a panic into TOOL_FAILURE.
func (s *Service) call(ctx context.Context, st *servedTool, args map[string]any) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "tool panicked", "tool", st.desc.GetName(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			o = outcome{err: wire.Errorf(wire.CodeToolFailure, "tool %s failed unexpectedly", st.desc.GetName())}
		}
	}()
	o.result, o.err = st.tool.Invoke(ctx, args)
	return o
}

// respond turns an outcome into a Response, enforcing the output cap on the
// result's JSON encoding.
//
// A tool that returned a result, not an error, succeeded: it may have
// acted. A result the executor cannot keep (over the tool's output cap,
// not JSON, nested deeper than wire.MaxDepth) is therefore not turned into
// a failure, which a model would answer by proposing the step again: the
// step succeeds with a result that says the tool's own was not kept (see
// notKept).
func (s *Service) respond(st *servedTool, o outcome) *xctv1.Response {
	name := st.desc.GetName()
	if o.err != nil {
		return wire.ErrorResponse(complete(o.err))
	}
	raw, err := json.Marshal(o.result)
	if err != nil {
		return notKept(name, NotKeptNotJSON, fmt.Sprintf("tool %s succeeded, but its result is not JSON (%v): it was not kept", name, err), nil)
	}
	if int64(len(raw)) > st.maxBytes {
		return notKept(name, NotKeptTooLarge,
			fmt.Sprintf("tool %s succeeded, but its result is %d bytes, over the tool's limit of %d: it was not kept", name, len(raw), st.maxBytes),
			map[string]any{"bytes": len(raw), "limit": st.maxBytes})
	}
	if d := wire.Depth(raw); d > wire.MaxDepth {
		return notKept(name, NotKeptTooDeep,
			fmt.Sprintf("tool %s succeeded, but its result nests %d levels, over the limit of %d: it was not kept", name, d, wire.MaxDepth),
			map[string]any{"bytes": len(raw), "depth": d, "limit": wire.MaxDepth})
	}
	// A result made of JSON's own values (what most tools return) is
	// what reading its encoding back would give: it is converted as it
	// is. Anything else (structs, integers, invalid UTF-8, which the
	// encoding replaces) is read back from its encoding.
	v := o.result
	if !plainJSON(v) {
		var dec any // not v: a pointer in v would be decoded into
		if err := json.Unmarshal(raw, &dec); err != nil {
			return notKept(name, NotKeptNotJSON, fmt.Sprintf("tool %s succeeded, but its result is not JSON (%v): it was not kept", name, err), nil)
		}
		v = dec
	}
	resp, err := wire.SuccessResponse(v)
	if err != nil {
		return notKept(name, NotKeptNotJSON, fmt.Sprintf("tool %s succeeded, but its result cannot be kept (%v)", name, err), nil)
	}
	return resp
}

// Why a tool's result was not kept (notKept's reason).
const (
	NotKeptTooLarge = "OUTPUT_TOO_LARGE" // its JSON encoding is over the tool's max_output_bytes
	NotKeptNotJSON  = "NOT_JSON"         // it has no JSON encoding (NaN, a channel, a failing MarshalJSON)
	NotKeptTooDeep  = "TOO_DEEP"         // it nests deeper than wire.MaxDepth
)

// notKept is the success of a tool whose result the executor cannot keep:
// {"result_not_kept": true, "reason", "message", "tool", and what is known
// of the result (bytes, limit, depth)}. Nothing of the result itself is
// kept: a prefix could cut a secret in half, past redaction.
func notKept(tool, reason, message string, known map[string]any) *xctv1.Response {
	r := map[string]any{"result_not_kept": true, "reason": reason, "message": message, "tool": tool}
	for k, v := range known {
		r[k] = v
	}
	resp, err := wire.SuccessResponse(r)
	if err != nil {
		// Made of strings and integers: it always converts. Were it not
		// to, the tool still acted: its outcome is not known here.
		return wire.ErrorResponse(wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "%s", message),
			map[string]any{"outcome_unknown": true, "result_not_kept": true, "reason": reason}))
	}
	return resp
}

// plainJSON reports whether v is made only of the values json.Unmarshal
// makes (nil, bool, float64, string, []any, map[string]any) with valid
// UTF-8 strings and keys: then decoding v's JSON encoding gives v again.
// The caller has checked that v encodes, so its depth is bounded.
func plainJSON(v any) bool {
	switch v := v.(type) {
	case nil, bool:
		return true
	case float64:
		return !math.IsNaN(v) && !math.IsInf(v, 0)
	case string:
		return utf8.ValidString(v)
	case []any:
		for _, e := range v {
			if !plainJSON(e) {
				return false
			}
		}
		return true
	case map[string]any:
		for k, e := range v {
			if !utf8.ValidString(k) || !plainJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

func (s *Service) logStep(ctx context.Context, req *xctv1.ExecuteRequest, resp *xctv1.Response, d time.Duration, attrs ...any) {
	// Every step is on the chain already (tool_call or error, step_end):
	// a step that went as expected is logged at DEBUG only, so the hot
	// path formats no log line; a tool that crashed or hung, or a step in
	// doubt, is worth an operator's attention.
	result := "success"
	level := slog.LevelDebug
	if e := resp.GetError(); e != nil {
		result = e.GetCode()
		switch wire.Code(e.GetCode()) {
		case wire.CodeToolFailure, wire.CodeTimeout:
			level = slog.LevelWarn
		case wire.CodeInDoubt:
			level = slog.LevelError
		}
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	s.log.Log(ctx, level, "step executed", append([]any{"run_id", req.GetRunId(), "step_id", req.GetStepId(), "tool", req.GetTool(), "outcome", result, "duration", d}, attrs...)...)
}

// complete gives a tool's error signal the code and taxonomy it left out.
func complete(e *xctv1.Error) *xctv1.Error {
	if e.GetCode() != "" && e.GetCategory() != "" {
		return e
	}
	code := wire.Code(e.GetCode())
	if code == "" {
		code = wire.CodeToolFailure
	}
	msg := e.GetMessage()
	if msg == "" {
		msg = "the tool failed without a message"
	}
	out := wire.Errorf(code, "%s", msg)
	out.Details = e.GetDetails()
	return out
}

// stepCaller refuses a caller not among --step-callers (when there are
// any) that asks to execute, preview or fence a step: a preview reads
// workspace files (an fs.write's diff shows the file it would replace),
// and a fence records a step as not executed, so a taken-over tracer,
// which may call the executor as a service, must not be a way to read
// them or to stop steps. Calls without a principal are in-process.
func (s *Service) stepCaller(ctx context.Context) error {
	p, ok := auth.FromContext(ctx)
	if !ok || len(s.cfg.StepCallers) == 0 || slices.ContainsFunc(s.cfg.StepCallers, p.Is) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "only %s may execute, preview or fence steps here, not %s (--step-callers)", strings.Join(s.cfg.StepCallers, ", "), p.Name)
}

// PreviewStep implements ExecutorService: a dry run for tools that offer
// one; nothing is executed and nothing is recorded.
func (h *handler) PreviewStep(ctx context.Context, req *xctv1.PreviewStepRequest) (*xctv1.PreviewStepResponse, error) {
	if req.GetTool() == "" {
		return nil, status.Error(codes.InvalidArgument, "tool is required")
	}
	if err := h.s.stepCaller(ctx); err != nil {
		return nil, err
	}
	st, ok := h.s.tool(req.GetTool())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "tool %q is not in the catalog", req.GetTool())
	}
	pv, ok := st.tool.(Previewer)
	if !ok {
		return &xctv1.PreviewStepResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	p, e := pv.Preview(ctx, req.GetArguments().AsMap())
	if e != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %s", e.GetCode(), e.GetMessage())
	}
	return &xctv1.PreviewStepResponse{Preview: p}, nil
}
