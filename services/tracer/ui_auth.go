package tracer

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl/debugger"
)

// DebuggerAuthorizer is the debugger's Authorize hook over an
// authenticator (set it as Config.UIAuthorize when authentication is on).
// Every API call must name its caller with "Authorization: Bearer"; every
// authenticated principal may read chains, approving needs the approver
// role (admin holds it too). The validator checks the decision again with
// the same token, which the debugger forwards: this check only turns a
// wrong caller away early.
func DebuggerAuthorizer(a *auth.Authenticator) func(*http.Request, string) error {
	return func(r *http.Request, action string) error {
		p, err := a.AuthenticateHTTP(r)
		if err != nil {
			return fmt.Errorf("%w: a valid bearer token is required", debugger.ErrUnauthenticated)
		}
		if action == debugger.ActionApprove && !p.Has(auth.RoleApprover) {
			return fmt.Errorf("%w: %s does not have the approver role", debugger.ErrPermissionDenied, p.Name)
		}
		if action == debugger.ActionCancel && !p.Has(auth.RoleOperator) && !p.Has(auth.RoleSubmitter) && !p.Has(auth.RoleAdmin) {
			return fmt.Errorf("%w: %s may not cancel runs (needs the operator role, or submitter for its own runs)", debugger.ErrPermissionDenied, p.Name)
		}
		return nil
	}
}

// DebuggerIdentifier names the principal of a request's bearer token ("" if
// it names none), for the debugger's sign-in page (Config.UIIdentify).
func DebuggerIdentifier(a *auth.Authenticator) func(*http.Request) string {
	return func(r *http.Request) string {
		p, err := a.AuthenticateHTTP(r)
		if err != nil {
			return ""
		}
		return p.Name
	}
}

// ErrOTLPForbidden means an OTLP exporter's principal may not write traces.
var ErrOTLPForbidden = errors.New("permission denied")

// OTLPAuthorizer is the OTLP/HTTP ingestion's check over an authenticator
// (set it as Config.OTLPAuthorize when authentication is on): an exporter
// names itself with "Authorization: Bearer" (OTEL_EXPORTER_OTLP_HEADERS)
// and needs the submitter role, the same rule as the OTLP gRPC Export. It
// returns the exporter's name: a trace's chain takes only its exporter's
// spans.
func OTLPAuthorizer(a *auth.Authenticator) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		p, err := a.AuthenticateHTTP(r)
		if err != nil {
			return "", fmt.Errorf("%w: a valid bearer token is required to export traces", auth.ErrUnauthenticated)
		}
		if !p.Has(auth.RoleSubmitter) && !p.Has(auth.RoleService) {
			return "", fmt.Errorf("%w: %s may not export traces (needs the submitter role)", ErrOTLPForbidden, p.Name)
		}
		return p.Name, nil
	}
}
