// Package auth is who may call XCT and what they may do: principals and
// their roles, the authenticators that turn a bearer token (from a tokens
// file or an OIDC provider) or a client certificate (a SPIFFE URI SAN) into
// a principal, and the table that says which roles may call which RPC,
// denying anything it does not name. internal/grpcx applies it to every
// service; docs/security.md is the guide.
package auth

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Roles.
const (
	// RoleSubmitter starts runs and cancels its own.
	RoleSubmitter = "submitter"
	// RoleApprover approves or denies steps, never of runs it started.
	RoleApprover = "approver"
	// RoleOperator rolls runs back, resolves steps in doubt and cancels
	// runs.
	RoleOperator = "operator"
	// RoleAuditor reads runs and chains and verifies them.
	RoleAuditor = "auditor"
	// RoleAdmin may call everything.
	RoleAdmin = "admin"
	// RoleService is XCT's own services calling each other; only they are
	// trusted to name another principal in a request (the orchestrator
	// passing a run's principal to the validator).
	RoleService = "service"
)

// KnownRoles lists every role, in a stable order.
var KnownRoles = []string{RoleSubmitter, RoleApprover, RoleOperator, RoleAuditor, RoleAdmin, RoleService}

// IsKnownRole reports whether r is one of KnownRoles.
func IsKnownRole(r string) bool { return slices.Contains(KnownRoles, r) }

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the caller: the tokens file's principal, the JWT's
	// principal claim, or "service:<name>" for a service certificate.
	Name string
	// Roles are the caller's roles (only known roles are kept).
	Roles []string
	// Service is true for XCT's own services (role service).
	Service bool
}

// Has reports whether the principal holds role r. Admin holds every role
// except service: an admin is a person, not one of XCT's services, so it
// cannot speak for another principal.
func (p Principal) Has(r string) bool {
	if slices.Contains(p.Roles, r) {
		return true
	}
	return r != RoleService && slices.Contains(p.Roles, RoleAdmin)
}

// Is reports whether the principal is the one named: names compare the
// way people type them (case and surrounding space ignored).
func (p Principal) Is(name string) bool {
	return SamePrincipal(p.Name, name)
}

// SamePrincipal compares two principal names the way people type them.
func SamePrincipal(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}

// String is the principal's name.
func (p Principal) String() string { return p.Name }

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal ctx carries (set by the server's auth
// interceptor).
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// knownOnly returns the known roles of rs, without duplicates, sorted.
func knownOnly(rs []string) []string {
	var out []string
	for _, r := range rs {
		r = strings.TrimSpace(r)
		if IsKnownRole(r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// ActingAs is who a request acts as: the authenticated caller of ctx. A
// request naming another principal (requested) is refused with
// PERMISSION_DENIED, except from one of XCT's services (role service),
// which may act for the principal it names; that principal's roles are then
// unknown (nil). Without a principal in ctx it is UNAUTHENTICATED.
func ActingAs(ctx context.Context, requested string) (Principal, error) {
	caller, ok := FromContext(ctx)
	if !ok {
		return Principal{}, status.Error(codes.Unauthenticated, "no authenticated caller")
	}
	requested = strings.TrimSpace(requested)
	if requested == "" || caller.Is(requested) {
		return caller, nil
	}
	if caller.Service {
		return Principal{Name: requested}, nil
	}
	return Principal{}, status.Errorf(codes.PermissionDenied, "%s may not act as %s: requests act as the authenticated caller", caller.Name, requested)
}
