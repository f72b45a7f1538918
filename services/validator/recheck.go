package validator

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// StepRecheck is one step of a recorded run judged again by another
// policy: what the chain says was decided, and what the policy decides now.
type StepRecheck struct {
	// Seq is the seq of the step's step_start event.
	Seq uint64
	// Step is the step's number; StepID its identity.
	Step   int
	StepID string
	// Tool and Arguments are the proposal.
	Tool      string
	Arguments map[string]any
	// Was is the decision of the step's first verdict on the chain (the
	// policy's decision, before any approval); UNSPECIFIED when the chain
	// has none. WasFinal is its last verdict's (after an approval, say).
	Was      xctv1.VerdictDecision
	WasFinal xctv1.VerdictDecision
	// WasReasons and WasPolicyVersion are the first verdict's.
	WasReasons       []*xctv1.Reason
	WasPolicyVersion string
	// Now is the policy's verdict on the step. Approvals are not looked
	// up: it says what the policy itself decides (NEEDS_APPROVAL where it
	// wants a human).
	Now *xctv1.Verdict
}

// Changed reports whether the policy decides differently from the chain's
// first verdict.
func (r *StepRecheck) Changed() bool { return r.Was != r.Now.GetDecision() }

// Stricter reports whether the policy now refuses or wants a human where
// the chain allowed, or refuses where the chain wanted a human.
func (r *StepRecheck) Stricter() bool { return severity(r.Now.GetDecision()) > severity(r.Was) }

// Looser reports whether the policy now allows, or only wants a human,
// where the chain was stricter.
func (r *StepRecheck) Looser() bool {
	return r.Was != xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED && severity(r.Now.GetDecision()) < severity(r.Was)
}

// severity orders decisions from allow to deny.
func severity(d xctv1.VerdictDecision) int {
	switch d {
	case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		return 1
	case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
		return 2
	case xctv1.VerdictDecision_VERDICT_DECISION_DENY:
		return 3
	}
	return 0
}

// Recheck judges every proposed step of a recorded XCT chain (its
// step_start events with a tool; see docs/events.md) by policy, and
// reports each next to the decision the chain records, in chain order.
//
// Each step is judged as the validator would have judged it then: the run
// context (principal, labels, model, steps used, tokens used including the
// step's own model call, wall time elapsed at the proposal, consecutive
// errors before it) is rebuilt from the chain; "now" and the rate limit
// windows follow the events' timestamps (a global rate limit counts this
// chain's calls only). With a catalog, the tool must be in it and the
// arguments must satisfy its schema, as in Validate; without one (nil),
// those checks are skipped and every tool is judged as declaring no effect
// class (so as irreversible). Shadow files of policy give shadow verdicts.
//
// An event that cannot be read as what its type promises is an error
// wrapping ErrBadChain that names its seq.
func Recheck(policy *PolicySet, cat *catalog.Catalog, events []lctl.Event) ([]StepRecheck, error) {
	if policy == nil {
		return nil, ErrNoPolicy
	}
	chain, err := readChain(events)
	if err != nil {
		return nil, err
	}
	installed, err := installable(policy)
	if err != nil {
		return nil, err
	}
	var clock time.Time
	s := &Service{
		log: slog.New(slog.DiscardHandler), now: func() time.Time { return clock },
		schemas: newSchemaCache(), limits: newRateLimiter(), shadowLimits: newRateLimiter(),
	}
	if cat != nil {
		s.catalog.Store(cat)
	}
	ctx := context.Background()
	var (
		tokensIn, tokensOut int64
		errorsInARow        int32
		out                 []StepRecheck
	)
	for _, at := range chain.attempts {
		tokensIn += at.tokensIn
		tokensOut += at.tokensOut
		if at.tool != "" {
			if !at.at.IsZero() {
				clock = at.at
			}
			args, err := structpb.NewStruct(at.args)
			if err != nil {
				return nil, fmt.Errorf("%w: event %d: arguments: %w", ErrBadChain, at.seq, err)
			}
			ns := &xctv1.NextStep{Tool: at.tool, Arguments: args, Goal: at.goal}
			if at.confidence != nil {
				c := *at.confidence
				ns.Confidence = &c
			}
			run := &xctv1.RunContext{
				RunId:             chain.runID,
				Principal:         chain.principal,
				Labels:            chain.labels,
				PrincipalRoles:    chain.roles,
				StepsUsed:         int32(min(at.step, math.MaxInt32)),
				ConsecutiveErrors: errorsInARow,
				InputTokens:       tokensIn,
				OutputTokens:      tokensOut,
				Model:             chain.model,
			}
			if !chain.started.IsZero() && !clock.IsZero() {
				run.Elapsed = durationpb.New(max(clock.Sub(chain.started), 0))
			}
			req := &xctv1.ValidateRequest{Run: run, Step: int32(min(at.step, math.MaxInt32)), StepId: at.stepID, Proposal: ns}
			now := s.now()
			v := &xctv1.Verdict{PolicyVersion: installed.version}
			var in *Input
			if cat != nil {
				in = s.judge(ctx, req, installed, now, judging{count: true}, v)
			} else {
				in = &Input{Run: run, Step: req.GetStep(), StepID: at.stepID, Proposal: ns, Args: at.args,
					Tool: &xctv1.ToolDescriptor{Name: at.tool}, Now: now}
				s.enforce(ctx, installed, in, v, judging{count: true})
			}
			if len(installed.shadows) > 0 {
				v.Shadow = s.shadowVerdicts(ctx, installed, in, v, now)
			}
			v.EvaluatedAt = timestamppb.New(now)
			r := StepRecheck{Seq: at.seq, Step: at.step, StepID: at.stepID, Tool: at.tool, Arguments: at.args, Now: v}
			if len(at.verdicts) > 0 {
				first, last := at.verdicts[0], at.verdicts[len(at.verdicts)-1]
				r.Was, r.WasReasons, r.WasPolicyVersion, r.WasFinal = first.decision, first.reasons, first.policyVersion, last.decision
			}
			out = append(out, r)
		}
		// The orchestrator counts a step that did not succeed as an error;
		// a success resets the count.
		if at.outcome == xctevent.OutcomeSuccess {
			errorsInARow = 0
		} else if at.outcome != "" {
			errorsInARow++
		}
	}
	return out, nil
}

// recordedChain is what Recheck needs of a chain.
type recordedChain struct {
	runID, principal, model string
	labels                  map[string]string
	roles                   []string
	started                 time.Time
	attempts                []*attempt
}

// attempt is one step_start and the events of the same step after it.
type attempt struct {
	seq                 uint64
	step                int
	stepID, tool, goal  string
	args                map[string]any
	confidence          *float64
	at                  time.Time
	verdicts            []recordedVerdict
	tokensIn, tokensOut int64
	outcome             string
}

type recordedVerdict struct {
	decision      xctv1.VerdictDecision
	reasons       []*xctv1.Reason
	policyVersion string
}

// readChain folds the events Recheck reads.
func readChain(events []lctl.Event) (*recordedChain, error) {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(a, b lctl.Event) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	c := &recordedChain{}
	current := map[int]*attempt{}
	bad := func(e *lctl.Event, format string, args ...any) error {
		return fmt.Errorf("%w: event %d (%s): %s", ErrBadChain, e.Seq, e.Type, fmt.Sprintf(format, args...))
	}
	for i := range events {
		e := &events[i]
		d := e.Data
		if c.runID == "" {
			c.runID = e.ChainID
		}
		switch x := xctevent.Parse(e).(type) {
		case xctevent.RunStarted:
			if x.RunID != "" {
				c.runID = x.RunID
			}
			c.principal, c.model = x.Principal, x.Model
			c.started = e.Time()
			if labels, ok := d["labels"].(map[string]any); ok {
				c.labels = make(map[string]string, len(labels))
				for k, v := range labels {
					if s, ok := v.(string); ok {
						c.labels[k] = s
					}
				}
			}
			for _, key := range []string{"principal_roles", "roles"} {
				if roles, ok := d[key].([]any); ok {
					for _, r := range roles {
						if s, ok := r.(string); ok {
							c.roles = append(c.roles, s)
						}
					}
				}
			}
		case xctevent.StepStart:
			step, ok := intOf(d["step"])
			if !ok {
				continue // not an XCT step
			}
			at := &attempt{seq: e.Seq, step: step, at: e.Time(), stepID: x.StepID, tool: x.Tool, goal: x.Intent}
			if at.tool != "" {
				switch a := d["arguments"].(type) {
				case map[string]any:
					at.args = a
				case nil:
					at.args = map[string]any{}
				default:
					return nil, bad(e, "arguments are not an object")
				}
				if conf, ok := d["confidence"]; ok {
					f, ok := conf.(float64)
					if !ok {
						return nil, bad(e, "confidence is not a number")
					}
					at.confidence = &f
				}
			}
			if c.started.IsZero() {
				c.started = at.at
			}
			c.attempts = append(c.attempts, at)
			current[step] = at
		case xctevent.Verdict:
			at := current[intOr(d["step"], -1)]
			if at == nil {
				continue
			}
			rv := recordedVerdict{policyVersion: x.PolicyVersion}
			switch d["decision"] {
			case xctevent.DecisionAllow:
				rv.decision = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
			case xctevent.DecisionNeedsApproval:
				rv.decision = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL
			case xctevent.DecisionDeny:
				rv.decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
			default:
				return nil, bad(e, "decision %v is not allow, deny or needs_approval", d["decision"])
			}
			for _, r := range x.Reasons {
				rv.reasons = append(rv.reasons, &xctv1.Reason{RuleId: r.RuleID, Message: r.Message})
			}
			at.verdicts = append(at.verdicts, rv)
		case xctevent.StepEnd:
			at := current[intOr(d["step"], -1)]
			if at == nil {
				continue
			}
			at.outcome = x.Outcome
			if tokens, ok := d["tokens"].(map[string]any); ok {
				in, _ := intOf(tokens["input"])
				out, _ := intOf(tokens["output"])
				at.tokensIn, at.tokensOut = int64(in), int64(out)
			}
		}
	}
	return c, nil
}

// intOf reads a whole JSON number.
func intOf(v any) (int, bool) {
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || n < 0 || n > math.MaxInt32 {
			return 0, false
		}
		return int(n), true
	case int:
		return n, n >= 0
	case int64:
		return int(n), n >= 0 && n <= math.MaxInt32
	}
	return 0, false
}

func intOr(v any, def int) int {
	if n, ok := intOf(v); ok {
		return n
	}
	return def
}
