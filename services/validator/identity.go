package validator

import (
	"context"
	"slices"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
)

// callerRun is the run context a request is judged with: the request's own
// when the caller is one of XCT's services (the orchestrator names the
// run's principal and roles, recorded when the run started), otherwise a
// copy naming the caller and its roles. An admin asking for a verdict is
// judged as itself, so no request can borrow another principal's identity
// for the policies (run.principal, run.roles) or for who may not approve.
// changed reports whether the caller's identity replaced the request's.
func callerRun(ctx context.Context, run *xctv1.RunContext) (_ *xctv1.RunContext, changed bool) {
	caller, ok := auth.FromContext(ctx)
	if !ok || caller.Service {
		return run, false
	}
	if run = proto.CloneOf(run); run == nil {
		run = &xctv1.RunContext{}
	}
	run.Principal = caller.Name
	run.PrincipalRoles = slices.Clone(caller.Roles)
	return run, true
}

// withCaller is the validate request as callerRun judges it.
func withCaller(ctx context.Context, req *xctv1.ValidateRequest) *xctv1.ValidateRequest {
	run, changed := callerRun(ctx, req.GetRun())
	if !changed {
		return req
	}
	req = proto.CloneOf(req)
	req.Run = run
	return req
}

// withCallerApproval is the approval request as callerRun judges it: the
// principal who may not approve the step is the run's, as the orchestrator
// names it, or the caller itself.
func withCallerApproval(ctx context.Context, req *xctv1.RequestApprovalRequest) *xctv1.RequestApprovalRequest {
	run, changed := callerRun(ctx, req.GetRun())
	if !changed {
		return req
	}
	req = proto.CloneOf(req)
	req.Run = run
	return req
}

// serviceCaller says whether the caller is one of XCT's services (or the
// call is in-process), which may name a system step.
func serviceCaller(ctx context.Context) bool {
	caller, ok := auth.FromContext(ctx)
	return !ok || caller.Service
}
