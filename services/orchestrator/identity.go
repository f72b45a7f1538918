package orchestrator

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
)

// WithDialOptions sets how the orchestrator dials the validator and the
// executor: the process's service identity (certificate or service token).
// External ProposerServices get the transport options without the token.
func WithDialOptions(opts ...grpcx.DialOption) Option {
	return func(s *Service) { s.dial = append(s.dial, opts...) }
}

// WithProposerDialOptions sets how external ProposerServices (grpc:ADDR)
// are dialled. No token is sent to them unless given here.
func WithProposerDialOptions(opts ...grpcx.DialOption) Option {
	return func(s *Service) { s.proposerDial = append(s.proposerDial, opts...) }
}

// actingPrincipal is who a request acts as (auth.ActingAs), with its
// roles.
func actingPrincipal(ctx context.Context, requested string) (string, []string, error) {
	p, err := auth.ActingAs(ctx, requested)
	if err != nil {
		return "", nil, err
	}
	return p.Name, slices.Clone(p.Roles), nil
}

// mayCancel reports whether the caller may cancel a run started by owner:
// its submitter, an operator or an admin.
func mayCancel(ctx context.Context, owner string) error {
	caller, ok := auth.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no authenticated caller")
	}
	if caller.Has(auth.RoleOperator) || caller.Is(owner) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s may not cancel a run of %s: a submitter cancels only its own runs", caller.Name, owner)
}
