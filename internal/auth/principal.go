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

	"github.com/xct-dev/xct/internal/namefold"
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

// Is reports whether the principal is the one named (SamePrincipal): what
// a name grants (a submitter cancelling its own run) holds for that very
// name only.
func (p Principal) Is(name string) bool {
	return SamePrincipal(p.Name, name)
}

// SamePrincipal reports whether two names are one principal: the same
// string once surrounding space is trimmed. Names are the identity
// provider's, and a provider may hold "sam", "SAM" and "ſam" (long s) as
// three users, so a name that only looks like another grants nothing of
// the other's. Where a likeness must refuse instead (the two-person rule:
// no approving a run of one's own under a look-alike name), use LookAlike.
func SamePrincipal(a, b string) bool {
	return strings.TrimSpace(a) == strings.TrimSpace(b)
}

// LookAlike reports whether two names may be read as the same person's:
// equal once each is NameKey'd ("Alice", "alice", "ａｌｉｃｅ" in full-width
// letters, "alice." with a trailing dot, "al\u200bice" with a zero-width
// space). It refuses (an approver deciding a step of a run its
// look-alike started; a tokens file naming two such principals); it never
// grants.
func LookAlike(a, b string) bool {
	return NameKey(a) == NameKey(b)
}

// NameKey is the form LookAlike compares: compatibility-normalized (NFKC:
// full-width and other compatibility letters become plain ones), case
// folded (the Kelvin sign is k, ſ is s), without format characters
// (zero-width spaces and joiners, soft hyphens, bidi marks) or variation
// selectors, normalized again, and without surrounding space or trailing
// dots.
func NameKey(s string) string {
	return strings.TrimRight(strings.TrimSpace(namefold.Fold(s)), ". \t")
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
	// A name that looks like the caller's acts as the caller (as written
	// by its token): it grants nothing, as anything else but a service's
	// request is refused.
	requested = strings.TrimSpace(requested)
	if requested == "" || LookAlike(caller.Name, requested) {
		return caller, nil
	}
	if caller.Service {
		return Principal{Name: requested}, nil
	}
	return Principal{}, status.Errorf(codes.PermissionDenied, "%s may not act as %s: requests act as the authenticated caller", caller.Name, requested)
}
