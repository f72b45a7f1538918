package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
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

// Execute runs one step. Only a malformed request or a stopping executor is
// a gRPC error; everything a tool does, including failing, is a Response.
func (h *handler) Execute(ctx context.Context, req *xctv1.ExecuteRequest) (*xctv1.ExecuteResponse, error) {
	switch {
	case req.GetStepId() == "":
		return nil, status.Error(codes.InvalidArgument, "step_id is required")
	case req.GetTool() == "":
		return nil, status.Error(codes.InvalidArgument, "tool is required")
	}
	return h.s.execute(ctx, req)
}

// outcome is what one invocation returned.
type outcome struct {
	result any
	err    *xctv1.Error
}

func (s *Service) execute(ctx context.Context, req *xctv1.ExecuteRequest) (*xctv1.ExecuteResponse, error) {
	start := time.Now()
	st, ok := s.tools[req.GetTool()]
	if !ok {
		names := make([]any, len(s.catalog))
		for i, d := range s.catalog {
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
	if !s.begin() {
		return nil, status.Error(codes.Unavailable, ErrStopped.Error())
	}
	args := map[string]any{}
	if req.GetArguments() != nil {
		args = req.GetArguments().AsMap()
	}
	resp, err := s.run(ctx, st, args)
	d := time.Since(start)
	if err != nil {
		s.log.WarnContext(ctx, "step abandoned", "run_id", req.GetRunId(), "step_id", req.GetStepId(), "tool", req.GetTool(), "error", err, "duration", d)
		return nil, err
	}
	s.logStep(ctx, req, resp, d)
	return &xctv1.ExecuteResponse{Response: resp, Duration: durationpb.New(d)}, nil
}

// run invokes st once within its deadline. The caller has counted the
// invocation in s.running. It returns a gRPC error only when the caller's
// own context ended first.
func (s *Service) run(ctx context.Context, st *servedTool, args map[string]any) (*xctv1.Response, error) {
	tctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	g := &gate{}
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
func (s *Service) respond(st *servedTool, o outcome) *xctv1.Response {
	name := st.desc.GetName()
	if o.err != nil {
		return wire.ErrorResponse(complete(o.err))
	}
	raw, err := json.Marshal(o.result)
	if err != nil {
		return wire.ErrorResponse(wire.Errorf(wire.CodeToolFailure, "tool %s returned a result that is not JSON: %v", name, err))
	}
	if int64(len(raw)) > st.maxBytes {
		return wire.ErrorResponse(wire.WithDetails(
			wire.Errorf(wire.CodeOutputTooLarge, "tool %s returned %d bytes, the limit is %d", name, len(raw), st.maxBytes),
			map[string]any{"size": len(raw), "limit": st.maxBytes}))
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return wire.ErrorResponse(wire.Errorf(wire.CodeToolFailure, "tool %s returned a result that is not JSON: %v", name, err))
	}
	resp, err := wire.SuccessResponse(v)
	if err != nil {
		return wire.ErrorResponse(wire.Errorf(wire.CodeToolFailure, "tool %s: %v", name, err))
	}
	return resp
}

func (s *Service) logStep(ctx context.Context, req *xctv1.ExecuteRequest, resp *xctv1.Response, d time.Duration) {
	result := "success"
	level := slog.LevelInfo
	if e := resp.GetError(); e != nil {
		// A refused step is an expected outcome (errors are data); a tool
		// that crashed or hung is worth an operator's attention.
		result = e.GetCode()
		switch wire.Code(e.GetCode()) {
		case wire.CodeToolFailure, wire.CodeTimeout:
			level = slog.LevelWarn
		}
	}
	s.log.Log(ctx, level, "step executed", "run_id", req.GetRunId(), "step_id", req.GetStepId(), "tool", req.GetTool(), "outcome", result, "duration", d)
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
