package validator

import (
	"context"
	"log/slog"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/redact"
)

// approvalsFor returns what the caller may see of approvals: the raw
// proposal to a principal who may decide the approval (an approver, or
// admin, who did not start the run), the proposal with its secrets
// replaced (docs/security.md, Redaction) to everyone else: auditors,
// submitters, the run's own principal, services. A call with no
// authenticated principal (in-process, no gRPC server in front) sees it
// raw.
func (s *Service) approvalsFor(ctx context.Context, list []*xctv1.Approval) []*xctv1.Approval {
	caller, ok := auth.FromContext(ctx)
	if !ok {
		return list
	}
	red := s.redactor.Load()
	out := make([]*xctv1.Approval, len(list))
	for i, a := range list {
		if mayDecide(caller, a) {
			out[i] = redactedReason(red, keyedBase(red, a))
			continue
		}
		out[i] = redactedReason(red, redactApproval(red, a, s.log))
	}
	return out
}

// redactedReason is a with its decision's reason redacted, for every
// caller: the words of whoever decided or withdrew it (a cancel's reason,
// which a run's own agent writes), which the chain holds redacted too,
// and which no decider needs raw. a itself is not changed.
func redactedReason(red *redact.Redactor, a *xctv1.Approval) *xctv1.Approval {
	if red == nil || a.GetReason() == "" {
		return a
	}
	r := red.Text(a.GetReason())
	if r == a.GetReason() {
		return a
	}
	out := proto.CloneOf(a)
	out.Reason = r
	return out
}

// keyedBase is a with the base digest of a redacted preview (a secret
// replaced in it, or a file the run may not read) replaced by its
// redaction marker, the one the chain records: a plain digest of a file
// kept from the reader would let them confirm guesses of its content.
// Without a redactor it is left out.
func keyedBase(red *redact.Redactor, a *xctv1.Approval) *xctv1.Approval {
	pv := a.GetPreview()
	if !pv.GetRedacted() || pv.GetBaseDigest() == "" || redact.IsMarker(pv.GetBaseDigest()) {
		return a
	}
	out := proto.CloneOf(a)
	out.Preview.BaseDigest = ""
	if red != nil {
		out.Preview.BaseDigest = red.Marker(pv.GetBaseDigest())
	}
	return out
}

// mayDecide reports whether caller may decide a: DecideApproval's rule
// (role approver, not the principal who started the run).
func mayDecide(caller auth.Principal, a *xctv1.Approval) bool {
	return caller.Has(auth.RoleApprover) && !auth.LookAlike(caller.Name, a.GetRequestedBy())
}

// redactApproval is a with its proposal's arguments and goal, its
// reasons and its preview redacted (its decision's reason:
// redactedReason). Without a redactor (no NATS) the
// arguments are withheld entirely.
func redactApproval(red *redact.Redactor, a *xctv1.Approval, log *slog.Logger) *xctv1.Approval {
	out := proto.CloneOf(a)
	p := out.GetProposal()
	if p == nil {
		return out
	}
	if red == nil {
		p.Arguments, p.Goal = &structpb.Struct{}, ""
		return keyedBase(nil, out)
	}
	scope := red.Scope()
	if args := p.GetArguments(); args != nil {
		st, err := structpb.NewStruct(scope.Map(args.AsMap()))
		if err != nil {
			log.Warn("approval arguments could not be redacted: withheld", "run_id", a.GetRunId(), "step_id", a.GetStepId(), "err", err)
			st = &structpb.Struct{}
		}
		p.Arguments = st
	}
	p.Goal = scope.Text(p.GetGoal())
	for _, r := range out.GetReasons() {
		r.Message = scope.Text(r.GetMessage())
	}
	if pv := out.GetPreview(); pv != nil {
		if c := scope.Text(pv.GetContent()); c != pv.GetContent() {
			pv.Content, pv.Redacted = c, true
		}
	}
	return keyedBase(red, out)
}
