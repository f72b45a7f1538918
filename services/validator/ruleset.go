package validator

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/wire"
)

// maxCandidateEntries bounds the per-tool cache of rules whose selectors
// take in a tool. Tools come from the catalog, so the bound is only there
// for callers that evaluate arbitrary names.
const maxCandidateEntries = 4096

// ruleSet is what a policy evaluates: rules in order and the settings
// around them. One file has one; several enforced files are merged into
// one.
type ruleSet struct {
	rules    []rule
	settings settings

	mu    sync.RWMutex
	cands map[candidateKey][]int
}

// candidateKey is a tool as rules select it.
type candidateKey struct {
	tool   string
	effect xctv1.Effect
}

// candidates lists, in order, the rules whose selectors take in the tool.
// Selectors only look at the tool, so the list is computed once per tool.
func (rs *ruleSet) candidates(tool string, effect xctv1.Effect) []int {
	key := candidateKey{tool, effect}
	rs.mu.RLock()
	list, ok := rs.cands[key]
	rs.mu.RUnlock()
	if ok {
		return list
	}
	list = make([]int, 0, len(rs.rules))
	for i := range rs.rules {
		if rs.rules[i].selects(tool, effect) {
			list = append(list, i)
		}
	}
	rs.mu.Lock()
	if rs.cands == nil {
		rs.cands = map[candidateKey][]int{}
	}
	if len(rs.cands) < maxCandidateEntries {
		rs.cands[key] = list
	}
	rs.mu.Unlock()
	return list
}

// evaluate judges one proposal: budgets, then rules, then the confidence
// gate. See RulesPolicy.Evaluate.
func (rs *ruleSet) evaluate(in *Input) (Outcome, error) {
	if in == nil || in.Tool == nil {
		return Outcome{}, ErrNoToolDescriptor
	}
	name := in.Tool.GetName()
	effect := classOf(in.Tool.GetEffect())
	if br := rs.settings.budgets.check(in.Run, rs.settings.prices); br != nil {
		return br.outcome(), nil
	}
	if out, refused := rs.argSpelling(in, name, effect); refused {
		return out, nil
	}
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	act := activation{in: in, prices: rs.settings.prices, now: now}
	var (
		out                        Outcome
		deny, approve, allows      bool
		denyMsgs, approvalMsgs     []string
		failed                     []any
		confidenceReason, gateNote *xctv1.Reason
	)
	for _, i := range rs.candidates(name, effect) {
		r := &rs.rules[i]
		if r.when != nil {
			ok, err := r.when.eval(&act)
			if err != nil {
				msg := "its condition could not be evaluated (" + truncate(err.Error(), maxReasonMsgBytes/2) + "), so the rule denies"
				out.Reasons = append(out.Reasons, &xctv1.Reason{RuleId: r.id, Message: msg})
				deny = true
				denyMsgs = append(denyMsgs, "rule "+r.id+" "+msg)
				failed = append(failed, r.id)
				continue
			}
			if !ok {
				continue
			}
		}
		out.Reasons = append(out.Reasons, &xctv1.Reason{RuleId: r.id, Message: r.message})
		switch r.action {
		case actionDeny:
			deny = true
			denyMsgs = append(denyMsgs, r.message)
		case actionApproval:
			approve = true
			approvalMsgs = append(approvalMsgs, r.message)
		case actionAllow:
			allows = true
		}
	}
	// A crew run's confidence is the crew's gate (crew.go), applied after
	// the policy: block is an approval there, not a deny.
	if p := in.Proposal; p != nil && p.Confidence != nil && in.Crew == nil {
		switch gate, msg := rs.settings.confidence.judge(p.GetConfidence()); gate {
		case gateDeny:
			deny = true
			denyMsgs = append(denyMsgs, msg)
			confidenceReason = &xctv1.Reason{RuleId: reasonConfidence, Message: msg}
		case gateApproval:
			approve = true
			approvalMsgs = append(approvalMsgs, msg)
			confidenceReason = &xctv1.Reason{RuleId: reasonConfidence, Message: msg}
		case gateWarn:
			gateNote = &xctv1.Reason{RuleId: reasonConfidence, Message: msg}
		}
	}
	if in.Crew != nil {
		c := rs.settings.confidence
		out.ConfidenceFloor = &crew.Thresholds{Proceed: c.proceed, Warn: c.warn, Verify: c.verify}
	}
	if confidenceReason != nil {
		out.Reasons = append(out.Reasons, confidenceReason)
	}
	if gateNote != nil {
		out.Reasons = append(out.Reasons, gateNote)
	}
	switch {
	case deny:
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
		out.Message = fmt.Sprintf("the policy denies tool %s: %s", quoteName(name), strings.Join(denyMsgs, "; "))
		if len(failed) > 0 {
			out.Details = map[string]any{"failed_rules": failed}
		}
	case approve:
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL
		out.Message = fmt.Sprintf("tool %s needs a human's approval: %s", quoteName(name), strings.Join(approvalMsgs, "; "))
		out.ApprovalTTL = rs.settings.approvalTTL
	case allows:
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
	default:
		msg := fmt.Sprintf("no policy rule allows tool %s", quoteName(name))
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
		out.Reasons = append(out.Reasons, &xctv1.Reason{RuleId: reasonDefaultDeny, Message: msg})
		out.Message = msg
	}
	return out, nil
}

// argSpelling refuses a proposal naming an argument that a rule of the
// tool reads in another spelling than the rule's, or giving an argument a
// rule compares with constants a value of another type (argreads.go):
// the rule would judge it absent or unequal, the tool's server may act
// on it.
func (rs *ruleSet) argSpelling(in *Input, name string, effect xctv1.Effect) (Outcome, bool) {
	for _, i := range rs.candidates(name, effect) {
		r := &rs.rules[i]
		if r.when == nil {
			continue
		}
		if at, kinds, found := otherType(r.when.compares, in.Args); found {
			msg := fmt.Sprintf("argument %q of tool %s is not %s, which the policy compares it with (rule %s): a tool may read it otherwise than the policy does; give %s",
				truncate(at, maxToolNameInMsg), quoteName(name), kinds, r.id, kinds)
			return Outcome{
				Decision: xctv1.VerdictDecision_VERDICT_DECISION_DENY,
				Reasons:  []*xctv1.Reason{{RuleId: reasonSchema, Message: msg}},
				Message:  msg,
				Code:     wire.CodeSchemaInvalid,
				Details:  map[string]any{"tool": truncate(name, maxToolNameInMsg), "argument": truncate(at, maxToolNameInMsg), "rule": r.id},
			}, true
		}
		if a, b, ka, kb, found := unlikePair(r.when.pairs, in.Args); found {
			msg := fmt.Sprintf("arguments %q and %q of tool %s are %s and %s, which the policy compares with each other (rule %s): a tool may take them as equal where the policy does not; give both one type",
				truncate(a, maxToolNameInMsg), truncate(b, maxToolNameInMsg), quoteName(name), ka, kb, r.id)
			return Outcome{
				Decision: xctv1.VerdictDecision_VERDICT_DECISION_DENY,
				Reasons:  []*xctv1.Reason{{RuleId: reasonSchema, Message: msg}},
				Message:  msg,
				Code:     wire.CodeSchemaInvalid,
				Details:  map[string]any{"tool": truncate(name, maxToolNameInMsg), "argument": truncate(a, maxToolNameInMsg), "rule": r.id},
			}, true
		}
		given, read, found := r.when.reads.spelledOtherwise(in.Args)
		if !found {
			continue
		}
		msg := fmt.Sprintf("the arguments of tool %s name %q where the policy reads %q (rule %s): a tool may read it as that argument; name it as the policy does",
			quoteName(name), truncate(given, maxToolNameInMsg), truncate(read, maxToolNameInMsg), r.id)
		return Outcome{
			Decision: xctv1.VerdictDecision_VERDICT_DECISION_DENY,
			Reasons:  []*xctv1.Reason{{RuleId: reasonSchema, Message: msg}},
			Message:  msg,
			Code:     wire.CodeSchemaInvalid,
			Details: map[string]any{"tool": truncate(name, maxToolNameInMsg), "argument": truncate(given, maxToolNameInMsg),
				"policy_reads": truncate(read, maxToolNameInMsg), "rule": r.id},
		}, true
	}
	return Outcome{}, false
}

// gate is what the confidence thresholds make of a proposal.
type gate uint8

const (
	gateProceed gate = iota
	gateWarn
	gateApproval
	gateDeny
)

// judge applies the LCTL thresholds (spec part 3) to a confidence: at or
// above proceed the step proceeds; at or above warn it proceeds with a
// warning; at or above verify a human must verify it (require approval);
// below verify it is blocked (deny). A value that is not a number between
// 0 and 1 is blocked too.
func (t thresholds) judge(c float64) (gate, string) {
	shown := formatNumber(c)
	switch {
	case math.IsNaN(c) || c < 0 || c > 1:
		return gateDeny, fmt.Sprintf("confidence %s is not a number between 0 and 1: blocked", shown)
	case c >= t.proceed:
		return gateProceed, ""
	case c >= t.warn:
		return gateWarn, fmt.Sprintf("warn: confidence %s is below %s; proceeding with a warning", shown, formatNumber(t.proceed))
	case c >= t.verify:
		return gateApproval, fmt.Sprintf("confidence %s is below %s: a human must verify this step", shown, formatNumber(t.warn))
	}
	return gateDeny, fmt.Sprintf("confidence %s is below %s: blocked", shown, formatNumber(t.verify))
}

// defaultCode is the error code of an outcome that does not name one.
func defaultCode(d xctv1.VerdictDecision) wire.Code {
	if d == xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
		return wire.CodeApprovalRequired
	}
	return wire.CodePolicyDenied
}
