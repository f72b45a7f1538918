package validator

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl/text"
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
	req = withCaller(ctx, req)
	v, in, installed := s.decide(ctx, req)
	// A verdict of a policy is answered once that policy's epoch is
	// recorded (epoch.go): whoever sees the new policy's decision cannot
	// get an old verdict acted on before executors can know it replaced.
	installed.awaitEpoch(ctx)
	if s.signable(ctx) {
		var args map[string]any
		var tool *xctv1.ToolDescriptor
		var base string
		if in != nil {
			args = in.Args        // the proposal's arguments, read once
			tool = in.Tool        // the descriptor the policy judged
			base = in.previewBase // the file an approver saw the preview against
		}
		s.sign(req, args, tool, base, v, v.GetEvaluatedAt().AsTime())
	} else {
		v.Signed = nil
	}
	return &xctv1.ValidateResponse{Verdict: v}, nil
}

func checkRequest(req *xctv1.ValidateRequest) error {
	if req.GetProposal() == nil {
		return ErrNoProposal
	}
	if req.GetProposal().GetTool() == "" {
		return ErrNoTool
	}
	return checkCrew(req.GetCrew())
}

// decide runs the pipeline: catalog, schema, policy (with its rate limits
// and approvals), then the shadow policies. The first check that fails
// decides, with its builtin reason. It returns the policy's input too (nil
// when a builtin check decided).
func (s *Service) decide(ctx context.Context, req *xctv1.ValidateRequest) (*xctv1.Verdict, *Input, *installedPolicy) {
	installed := s.policy.Load()
	now := s.now()
	v := &xctv1.Verdict{PolicyVersion: installed.version}
	// Only a caller whose verdicts are signed (the orchestrator, with
	// --verdict-callers) takes a place under the rate limits: anyone
	// else's verdict runs nothing, and its calls would use up the calls
	// of every run the limits count (a taken-over tracer refusing the
	// orchestrator's steps RATE_LIMITED). They are still told whether
	// the call fits.
	in := s.judge(ctx, req, installed, now, judging{consult: true, count: s.signable(ctx)}, v)
	if v.Decision == xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED {
		// judge always sets a decision; this keeps the promise if it ever
		// does not.
		denyWith(v, reasonPolicy, wire.Errorf(wire.CodePolicyDenied, "the validator reached no decision"))
	}
	if len(installed.shadows) > 0 {
		v.Shadow = s.shadowVerdicts(ctx, installed, in, v, now)
	}
	v.EvaluatedAt = timestamppb.New(now)
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.LogAttrs(ctx, slog.LevelDebug, "verdict",
			slog.String("run_id", req.GetRun().GetRunId()),
			slog.String("step_id", req.GetStepId()),
			slog.String("tool", truncate(req.GetProposal().GetTool(), maxToolNameInMsg)),
			slog.String("decision", v.Decision.String()),
			slog.Any("reasons", reasonIDs(v.Reasons)),
		)
	}
	return v, in, installed
}

// judging says what a judgement may do besides deciding.
type judging struct {
	// consult reads the step's stored approval when it needs one.
	consult bool
	// count counts an allowed step against the rate limits.
	count bool
}

// judge checks the catalog and the schema, then lets the policy decide. It
// returns the policy's input, or nil when a builtin check decided.
func (s *Service) judge(ctx context.Context, req *xctv1.ValidateRequest, installed *installedPolicy, now time.Time, j judging, v *xctv1.Verdict) *Input {
	proposal := req.GetProposal()
	name := proposal.GetTool()

	cc := req.GetCrew()
	if cc != nil && !slices.Contains(cc.GetTools(), name) {
		denyWith(v, reasonCrewTools, toolNotAllowed(cc, name))
		return nil
	}
	var tool *xctv1.ToolDescriptor
	if cc != nil && crew.IsSystemTool(name) {
		// A crew's system tool (xct.handoff, facts.*), listed for this
		// agent: the orchestrator carries it out, never the executor.
		tool = crew.SystemToolDescriptor(name)
	} else {
		cat := s.catalog.Load()
		if cat == nil {
			denyWith(v, reasonCatalog, wire.Errorf(wire.CodeValidatorUnavailable,
				"the validator has not loaded the tool catalog yet; try again later"))
			return nil
		}
		var ok bool
		if tool, ok = cat.Get(name); !ok {
			denyWith(v, reasonCatalog, unknownTool(cat, name))
			return nil
		}
		if wire.IsSystemTool(name) && !req.GetSystemStep() {
			denyWith(v, reasonCatalog, systemTool(name))
			return nil
		}
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
		return nil
	}
	args := proposal.GetArguments().AsMap()
	if wire.ValueDepthExceeds(args, wire.MaxDepth) {
		denyWith(v, reasonSchema, wire.WithDetails(wire.Errorf(wire.CodeSchemaInvalid,
			"the arguments of tool %s are %v", quoteName(name), wire.ErrTooDeep{Limit: wire.MaxDepth}),
			map[string]any{"tool": truncate(name, maxToolNameInMsg), "max_depth": wire.MaxDepth}))
		return nil
	}
	if a, b, clash := wire.KeyClash(args); clash {
		// One action written two ways: the policy reads one member, a
		// tool's server may read the other (encoding/json into a struct).
		denyWith(v, reasonSchema, wire.WithDetails(wire.Errorf(wire.CodeSchemaInvalid,
			"the arguments of tool %s name %q and %q, which differ only in case, width or invisible characters: a tool may read either; give each argument once, named as the tool's schema names it",
			quoteName(name), truncate(a, maxToolNameInMsg), truncate(b, maxToolNameInMsg)),
			map[string]any{"tool": truncate(name, maxToolNameInMsg)}))
		return nil
	}
	if given, named, clash := schemaNameClash(compiled.schema, args); clash {
		// One argument, named so that the policy does not read it as the
		// schema's (has(args.path) is false) while a tool's server does.
		denyWith(v, reasonSchema, wire.WithDetails(wire.Errorf(wire.CodeSchemaInvalid,
			"the arguments of tool %s name %q where its schema names %q: a tool may read it as that argument; name it as the schema does",
			quoteName(name), truncate(given, maxToolNameInMsg), truncate(named, maxToolNameInMsg)),
			map[string]any{"tool": truncate(name, maxToolNameInMsg), "argument": truncate(given, maxToolNameInMsg), "schema_names": truncate(named, maxToolNameInMsg)}))
		return nil
	}
	if err := compiled.schema.Validate(args); err != nil {
		denyWith(v, reasonSchema, s.schemaInvalid(name, err))
		return nil
	}
	if tool.GetSource() != "" {
		if at, ok := nulArgument(args, ""); ok {
			// A server in C reads the string up to the NUL, the policy
			// reads it whole (nul.go).
			denyWith(v, reasonSchema, wire.WithDetails(wire.Errorf(wire.CodeSchemaInvalid,
				"argument %q of tool %s holds a NUL character, which a tool server may take for the end of the text: the policy would judge one value and the tool act on another; leave it out",
				truncate(at, maxToolNameInMsg), quoteName(name)),
				map[string]any{"tool": truncate(name, maxToolNameInMsg), "argument": truncate(at, maxToolNameInMsg)}))
			return nil
		}
	}

	in := &Input{
		Run:      req.GetRun(),
		Step:     req.GetStep(),
		StepID:   req.GetStepId(),
		Proposal: proposal,
		Args:     args,
		Tool:     tool,
		Now:      now,
		Crew:     cc,
	}
	s.enforce(ctx, installed, in, v, j)
	return in
}

// enforce applies the policy in force to a proposal that passed the
// builtin checks: its decision, then its rate limits, then (for a step
// that needs approval) the step's approval.
func (s *Service) enforce(ctx context.Context, installed *installedPolicy, in *Input, v *xctv1.Verdict, j judging) {
	name := in.Tool.GetName()
	out, err := installed.policy.Evaluate(ctx, in)
	if err != nil {
		s.log.Warn("policy evaluation failed; proposal denied", "tool", name, "step_id", in.StepID, "err", err)
		denyWith(v, reasonPolicy, wire.Errorf(wire.CodePolicyDenied, "the policy could not evaluate this proposal, so it is denied"))
		return
	}
	if isUndo(in) {
		out = s.judgeUndo(ctx, installed.policy, in, out) // undo.go
	}
	if in.Crew != nil {
		out = crewGate(in, out)
	}
	// Clipped, so appending a builtin reason never writes into an array the
	// policy may share.
	v.Reasons = slices.Clip(out.Reasons)
	switch out.Decision {
	case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		if s.rateRefused(ctx, s.limits, "", installed.limits, in, j.count, v) {
			return
		}
		v.Decision = out.Decision
	case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
		// A call the rate limit would refuse is refused now, before a human
		// is asked to look at it.
		if s.rateRefused(ctx, s.limits, "", installed.limits, in, false, v) {
			return
		}
		msg := out.Message
		if msg == "" {
			msg = "tool " + quoteName(name) + " needs a human's approval"
		}
		code := out.Code
		if code == "" {
			code = defaultCode(out.Decision)
		}
		ttl := out.ApprovalTTL
		if ttl <= 0 {
			ttl = DefaultApprovalTTL
		}
		v.Decision = out.Decision
		v.Error = wire.WithDetails(wire.Errorf(code, "%s", msg), outcomeDetails(name, out))
		v.ApprovalTtl = durationpb.New(ttl)
		if j.consult {
			s.consultApproval(ctx, installed, in, v, j)
		}
	case xctv1.VerdictDecision_VERDICT_DECISION_DENY:
		msg := out.Message
		if msg == "" {
			msg = "the policy denies tool " + quoteName(name)
		}
		code := out.Code
		if code == "" {
			code = defaultCode(out.Decision)
		}
		e := wire.WithDetails(wire.Errorf(code, "%s", msg), outcomeDetails(name, out))
		if len(v.Reasons) == 0 {
			denyWith(v, reasonPolicy, e)
		} else {
			v.Decision, v.Error = out.Decision, e
		}
		v.EndsRun = out.EndsRun
	default:
		s.log.Warn("policy returned no valid decision; proposal denied", "tool", name, "decision", out.Decision.String())
		denyWith(v, reasonPolicy, wire.Errorf(wire.CodePolicyDenied, "the policy reached no valid decision, so the proposal is denied"))
	}
}

// rateRefused applies rate limits to a proposal. When take is set the call
// is counted if it fits. A refusal turns v into a RATE_LIMITED deny; a
// count that cannot be read or kept, into a VALIDATOR_UNAVAILABLE deny
// (never a call allowed uncounted).
func (s *Service) rateRefused(ctx context.Context, l counter, prefix string, limits []rateLimit, in *Input, take bool, v *xctv1.Verdict) bool {
	if len(limits) == 0 {
		return false
	}
	name := in.Tool.GetName()
	checks := rateChecks(prefix, limits, name, in.Run.GetRunId(), in.Run.GetPrincipal())
	if len(checks) == 0 {
		return false
	}
	refused, retry, err := l.allow(ctx, in.Now, in.StepID, checks, take)
	if err != nil {
		s.log.Warn("rate limit could not be counted; proposal denied", "tool", truncate(name, maxToolNameInMsg), "step_id", in.StepID, "limit", refused.rl.pattern, "err", err)
		v.ApprovalTtl = nil
		denyBecause(v, reasonRateLimit, truncate(rateUncountedReason(refused, err), maxReasonMsgBytes), rateUncounted(name, refused))
		return true
	}
	if refused == nil {
		return false
	}
	e := rateLimited(name, refused, retry)
	v.ApprovalTtl = nil
	denyBecause(v, reasonRateLimit, rateReason(refused), e)
	return true
}

// shadowVerdicts evaluates the shadow policies: what each would have
// decided. A proposal the builtin checks refused is refused by every
// shadow policy the same way.
func (s *Service) shadowVerdicts(ctx context.Context, installed *installedPolicy, in *Input, v *xctv1.Verdict, now time.Time) []*xctv1.ShadowVerdict {
	out := make([]*xctv1.ShadowVerdict, 0, len(installed.shadows))
	for _, sh := range installed.shadows {
		sv := &xctv1.ShadowVerdict{PolicyVersion: sh.Version()}
		if in == nil {
			sv.Decision, sv.Reasons = v.Decision, v.Reasons
			out = append(out, sv)
			continue
		}
		shadowIn := *in
		shadowIn.Now = now
		var w xctv1.Verdict
		s.enforce(ctx, &installedPolicy{policy: sh, version: sh.Version()}, &shadowIn, &w, judging{})
		// The shadow's own rate limits, counted apart from the enforced ones.
		switch w.Decision {
		case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW, xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
			s.rateRefused(ctx, s.shadowLimits, sh.Version(), sh.rs.settings.rateLimits, &shadowIn,
				w.Decision == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW, &w)
		}
		sv.Decision, sv.Reasons = w.Decision, w.Reasons
		out = append(out, sv)
	}
	return out
}

// outcomeDetails are the details of a policy's refusal: the tool, the
// rules behind it and what the outcome adds.
func outcomeDetails(tool string, out Outcome) map[string]any {
	d := ruleDetails(tool, out.Reasons)
	for k, v := range out.Details {
		d[k] = v
	}
	return d
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
		if len(tn) > maxToolNameInMsg || wire.IsSystemTool(tn) {
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

// editDistance is the Levenshtein distance between a and b (text.EditDistance).
func editDistance(a, b string) int { return text.EditDistance(a, b) }
