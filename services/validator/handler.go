package validator

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/wire"
)

// Limits on what a verdict repeats back.
const (
	maxSuggestions    = 3
	maxReasonMsgBytes = 512
)

// Validate judges one proposal. A request without a proposal or a tool name
// is an InvalidArgument status; every other outcome, refusals included, is
// a verdict. See the package doc for the order of the checks.
func (s *Service) Validate(ctx context.Context, req *xctv1.ValidateRequest) (*xctv1.ValidateResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &xctv1.ValidateResponse{Verdict: s.decide(ctx, req)}, nil
}

func checkRequest(req *xctv1.ValidateRequest) error {
	if req.GetProposal() == nil {
		return ErrNoProposal
	}
	if req.GetProposal().GetTool() == "" {
		return ErrNoTool
	}
	return nil
}

// decide runs the pipeline: catalog, schema, policy. The first check that
// fails decides, with its builtin reason.
func (s *Service) decide(ctx context.Context, req *xctv1.ValidateRequest) *xctv1.Verdict {
	installed := s.policy.Load()
	v := &xctv1.Verdict{PolicyVersion: installed.version}
	s.judge(ctx, req, installed.policy, v)
	v.EvaluatedAt = timestamppb.New(s.now())
	if v.Decision == xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED {
		// judge always sets a decision; this keeps the promise if it ever
		// does not.
		denyWith(v, reasonPolicy, wire.Errorf(wire.CodePolicyDenied, "the validator reached no decision"))
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.LogAttrs(ctx, slog.LevelDebug, "verdict",
			slog.String("run_id", req.GetRun().GetRunId()),
			slog.String("step_id", req.GetStepId()),
			slog.String("tool", truncate(req.GetProposal().GetTool(), maxToolNameInMsg)),
			slog.String("decision", v.Decision.String()),
			slog.Any("reasons", reasonIDs(v.Reasons)),
		)
	}
	return v
}

func (s *Service) judge(ctx context.Context, req *xctv1.ValidateRequest, policy Policy, v *xctv1.Verdict) {
	proposal := req.GetProposal()
	name := proposal.GetTool()

	cat := s.catalog.Load()
	if cat == nil {
		denyWith(v, reasonCatalog, wire.Errorf(wire.CodeValidatorUnavailable,
			"the validator has not loaded the tool catalog yet; try again later"))
		return
	}
	tool, ok := cat.Get(name)
	if !ok {
		denyWith(v, reasonCatalog, unknownTool(cat, name))
		return
	}

	compiled, fresh := s.schemas.get(name, tool.GetInputSchema())
	if compiled.err != nil {
		if fresh {
			s.log.Warn("tool input schema unusable; its proposals are denied", "tool", name, "err", compiled.err)
		}
		e := wire.Errorf(wire.CodePolicyDenied,
			"tool %s cannot be checked because its input schema is unusable, so the validator refuses it; propose a different action", quoteName(name))
		// The reason, for the log and the chain, says why; the model only
		// needs to know it should try something else.
		denyBecause(v, reasonSchema, truncate("input schema of tool "+quoteName(name)+" is unusable: "+compiled.err.Error(), maxReasonMsgBytes), e)
		return
	}
	args := proposal.GetArguments().AsMap()
	if err := compiled.schema.Validate(args); err != nil {
		denyWith(v, reasonSchema, s.schemaInvalid(name, err))
		return
	}

	out, err := policy.Evaluate(ctx, &Input{
		Run:      req.GetRun(),
		Step:     req.GetStep(),
		StepID:   req.GetStepId(),
		Proposal: proposal,
		Args:     args,
		Tool:     tool,
	})
	if err != nil {
		s.log.Warn("policy evaluation failed; proposal denied", "tool", name, "step_id", req.GetStepId(), "err", err)
		denyWith(v, reasonPolicy, wire.Errorf(wire.CodePolicyDenied, "the policy could not evaluate this proposal, so it is denied"))
		return
	}
	// Clipped, so appending a builtin reason never writes into an array the
	// policy may share.
	v.Reasons = slices.Clip(out.Reasons)
	switch out.Decision {
	case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		v.Decision = out.Decision
	case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
		msg := out.Message
		if msg == "" {
			msg = "tool " + quoteName(name) + " needs a human's approval"
		}
		v.Decision = out.Decision
		v.Error = wire.WithDetails(wire.Errorf(wire.CodeApprovalRequired, "%s", msg), ruleDetails(name, out.Reasons))
	case xctv1.VerdictDecision_VERDICT_DECISION_DENY:
		msg := out.Message
		if msg == "" {
			msg = "the policy denies tool " + quoteName(name)
		}
		e := wire.WithDetails(wire.Errorf(wire.CodePolicyDenied, "%s", msg), ruleDetails(name, out.Reasons))
		if len(v.Reasons) == 0 {
			denyWith(v, reasonPolicy, e)
		} else {
			v.Decision, v.Error = out.Decision, e
		}
	default:
		s.log.Warn("policy returned no valid decision; proposal denied", "tool", name, "decision", out.Decision.String())
		denyWith(v, reasonPolicy, wire.Errorf(wire.CodePolicyDenied, "the policy reached no valid decision, so the proposal is denied"))
	}
}

// denyWith makes v a deny carrying e, and adds a reason with e's message.
func denyWith(v *xctv1.Verdict, ruleID string, e *xctv1.Error) {
	denyBecause(v, ruleID, e.GetMessage(), e)
}

// denyBecause makes v a deny carrying e, and adds a reason with message.
func denyBecause(v *xctv1.Verdict, ruleID, message string, e *xctv1.Error) {
	v.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
	v.Reasons = append(v.Reasons, &xctv1.Reason{RuleId: ruleID, Message: message})
	v.Error = e
}

// unknownTool is the signal for a tool the catalog does not have. It may
// suggest close names from the catalog, which the model is allowed to know.
func unknownTool(cat *catalog.Catalog, name string) *xctv1.Error {
	suggestions := suggest(cat, name)
	msg := "tool " + quoteName(name) + " is not in the catalog"
	if len(suggestions) > 0 {
		msg += "; did you mean " + strings.Join(quoteAll(suggestions), " or ") + "?"
	}
	e := wire.Errorf(wire.CodeUnknownTool, "%s", msg)
	details := map[string]any{"tool": truncate(name, maxToolNameInMsg)}
	if len(suggestions) > 0 {
		list := make([]any, len(suggestions))
		for i, s := range suggestions {
			list[i] = s
		}
		details["did_you_mean"] = list
	}
	return wire.WithDetails(e, details)
}

// schemaInvalid is the signal for arguments that miss the tool's schema.
func (s *Service) schemaInvalid(name string, err error) *xctv1.Error {
	vs, more := s.schemas.violations(err, maxViolations)
	list := make([]any, len(vs))
	for i, v := range vs {
		list[i] = map[string]any{"location": v.location, "message": v.message}
	}
	var b strings.Builder
	b.WriteString("the arguments of tool ")
	b.WriteString(quoteName(name))
	b.WriteString(" do not match its input schema: ")
	for i, v := range vs {
		if i > 0 {
			b.WriteString("; ")
		}
		if v.location == "" {
			b.WriteString("at the top level: ")
		} else {
			b.WriteString("at ")
			b.WriteString(v.location)
			b.WriteString(": ")
		}
		b.WriteString(v.message)
	}
	details := map[string]any{"tool": truncate(name, maxToolNameInMsg), "violations": list}
	if more > 0 {
		details["more_violations"] = more
	}
	return wire.WithDetails(wire.Errorf(wire.CodeSchemaInvalid, "%s", truncate(b.String(), 2*maxReasonMsgBytes)), details)
}

// ruleDetails lists the rules behind a deny or an approval request.
func ruleDetails(tool string, reasons []*xctv1.Reason) map[string]any {
	ids := make([]any, len(reasons))
	for i, r := range reasons {
		ids[i] = r.GetRuleId()
	}
	return map[string]any{"tool": truncate(tool, maxToolNameInMsg), "rule_ids": ids}
}

func reasonIDs(reasons []*xctv1.Reason) []string {
	ids := make([]string, len(reasons))
	for i, r := range reasons {
		ids[i] = r.GetRuleId()
	}
	return ids
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = quoteName(n)
	}
	return out
}

// suggest returns up to maxSuggestions catalog names close to name: within
// a small edit distance, or in the same dot namespace when nothing is that
// close. Long names get no suggestions, which bounds the work.
func suggest(cat *catalog.Catalog, name string) []string {
	if len(name) > maxToolNameInMsg {
		return nil
	}
	type candidate struct {
		name string
		dist int
	}
	limit := max(2, len(name)/3)
	var near []candidate
	var sameNamespace []string
	ns, _, hasNS := strings.Cut(name, ".")
	for _, t := range cat.List() {
		tn := t.GetName()
		if len(tn) > maxToolNameInMsg {
			continue
		}
		if d := editDistance(name, tn); d <= limit {
			near = append(near, candidate{tn, d})
		} else if hasNS && strings.HasPrefix(tn, ns+".") {
			sameNamespace = append(sameNamespace, tn)
		}
	}
	// Stable by distance; List is sorted by name, so ties stay alphabetical.
	for i := 1; i < len(near); i++ {
		for j := i; j > 0 && near[j].dist < near[j-1].dist; j-- {
			near[j], near[j-1] = near[j-1], near[j]
		}
	}
	var out []string
	for _, c := range near {
		out = append(out, c.name)
	}
	if len(out) == 0 {
		out = sameNamespace
	}
	if len(out) > maxSuggestions {
		out = out[:maxSuggestions]
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
