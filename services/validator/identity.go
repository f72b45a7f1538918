package validator

import (
	"context"
	"slices"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
)

// withCaller makes the run's principal and roles the caller's own unless
// the caller is one of XCT's services (the orchestrator names the run's
// principal and roles, recorded when the run started). An admin asking
// for a verdict is judged as itself, so no request can borrow another
// principal's identity for the policies (run.principal, run.roles).
func withCaller(ctx context.Context, req *xctv1.ValidateRequest) *xctv1.ValidateRequest {
	caller, ok := auth.FromContext(ctx)
	if !ok || caller.Service {
		return req
	}
	req = proto.CloneOf(req)
	if req.Run == nil {
		req.Run = &xctv1.RunContext{}
	}
	req.Run.Principal = caller.Name
	req.Run.PrincipalRoles = slices.Clone(caller.Roles)
	return req
}

// withCallerApproval is withCaller for an approval request: the principal
// who may not approve the step is the run's, as the orchestrator names it,
// or the caller itself.
func withCallerApproval(ctx context.Context, req *xctv1.RequestApprovalRequest) *xctv1.RequestApprovalRequest {
	caller, ok := auth.FromContext(ctx)
	if !ok || caller.Service {
		return req
	}
	req = proto.CloneOf(req)
	if req.Run == nil {
		req.Run = &xctv1.RunContext{}
	}
	req.Run.Principal = caller.Name
	req.Run.PrincipalRoles = slices.Clone(caller.Roles)
	return req
}
