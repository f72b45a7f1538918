package validator

import (
	"cmp"
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
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/wire"
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
		bareTools: cat == nil,
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
				Models:            chain.crewModels,
			}
			if at.model != "" {
				run.Model = at.model // as the orchestrator tells the validator (crew.Session.StepModel)
			}
			if !chain.started.IsZero() && !clock.IsZero() {
				run.Elapsed = durationpb.New(max(clock.Sub(chain.started), 0))
			}
			// A rollback's undo is a system step, asked for by whoever
			// rolled back: as RollbackRun has the validator judge it
			// (their roles are not on the chain: none).
			system := at.rollbackBy != "" && wire.IsSystemTool(at.tool)
			if system {
				run.Principal, run.PrincipalRoles, run.Models = at.rollbackBy, nil, nil
			}
			req := &xctv1.ValidateRequest{Run: run, Step: int32(min(at.step, math.MaxInt32)), StepId: at.stepID, Proposal: ns, Crew: at.crew,
				SystemStep: system}
			now := s.now()
			v := &xctv1.Verdict{PolicyVersion: installed.version}
			var in *Input
			if cat != nil {
				in = s.judge(ctx, req, installed, now, judging{count: true}, v)
			} else {
				tool := &xctv1.ToolDescriptor{Name: at.tool}
				if at.crew != nil && crew.IsSystemTool(at.tool) {
					tool = crew.SystemToolDescriptor(at.tool) // the crew's own: their effects are known
				}
				in = &Input{Run: run, Step: req.GetStep(), StepID: at.stepID, Proposal: ns, Args: at.args,
					Tool: tool, Now: now, Crew: at.crew}
				if at.crew != nil && !slices.Contains(at.crew.GetTools(), at.tool) {
					denyWith(v, reasonCrewTools, toolNotAllowed(at.crew, at.tool)) // as Validate does
				} else {
					s.enforce(ctx, installed, in, v, judging{count: true})
				}
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
	crewModels              []string // a crew run's: every model it may call (priced at the dearest)
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
	crew                *xctv1.CrewContext // a crew run's step: what the validator was told
	rollbackBy          string             // a step of a rollback: the principal who rolled back
	model               string             // a crew run's step: the model that proposed it
}

type recordedVerdict struct {
	decision      xctv1.VerdictDecision
	reasons       []*xctv1.Reason
	policyVersion string
}

// readChain reads what Recheck needs from the chain's run view
// (xctevent.Run, the one fold of XCT's events), after checking strictly
// what the view reads leniently: a proposal's arguments are an object, its
// confidence a number, a verdict's decision one XCT writes.
func readChain(events []lctl.Event) (*recordedChain, error) {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(a, b lctl.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	for i := range events {
		if err := checkEvent(&events[i]); err != nil {
			return nil, err
		}
	}
	v := xctevent.Fold(events)
	contexts, crewModels, err := crewContexts(events)
	if err != nil {
		return nil, err
	}
	rollbackBy := rollbackSteps(events)
	c := &recordedChain{runID: v.ChainID, started: v.StartedAt, crewModels: crewModels}
	if v.HasStarted {
		if v.Started.RunID != "" {
			c.runID = v.Started.RunID
		}
		c.principal, c.model, c.labels, c.roles = v.Started.Principal, v.Started.Model, v.Started.Labels, v.Started.Roles
	}
	for _, st := range v.Steps {
		at := &attempt{seq: st.Seq, step: st.Number(), at: st.At, stepID: st.Start.StepID, tool: st.Start.Tool, goal: st.Start.Intent,
			rollbackBy: rollbackBy[st.Seq]}
		if at.rollbackBy == "" { // a rollback's step is no crew agent's (RollbackRun asks with no crew)
			at.crew, at.model = contexts[st.Seq].ctx, contexts[st.Seq].model
		}
		if at.tool != "" {
			at.args = st.Start.Arguments
			if at.args == nil {
				at.args = map[string]any{}
			}
			at.confidence = st.Start.Confidence
		}
		for _, x := range st.Verdicts {
			rv := recordedVerdict{policyVersion: x.PolicyVersion, decision: decisions[x.Decision]}
			for _, r := range x.Reasons {
				rv.reasons = append(rv.reasons, &xctv1.Reason{RuleId: r.RuleID, Message: r.Message})
			}
			at.verdicts = append(at.verdicts, rv)
		}
		if st.End != nil {
			at.outcome = st.End.Outcome
			if t := st.End.Tokens; t != nil {
				at.tokensIn, at.tokensOut = max(t.Input, 0), max(t.Output, 0)
			}
		}
		c.attempts = append(c.attempts, at)
	}
	return c, nil
}

// rollbackSteps maps the seq of each step_start between a
// rollback_started and its rollback_finished (a rollback's undo steps) to
// the principal the rollback_started names. events are in seq order.
func rollbackSteps(events []lctl.Event) map[uint64]string {
	out := map[uint64]string{}
	by := ""
	for i := range events {
		switch e := &events[i]; e.Type {
		case xctevent.TypeRollbackStarted:
			if x, ok := xctevent.Parse(e).(xctevent.RollbackStarted); ok {
				by = x.Principal
			}
		case xctevent.TypeRollbackFinished:
			by = ""
		case xctevent.TypeStepStart:
			if by != "" {
				out[e.Seq] = by
			}
		}
	}
	return out
}

// decisions are the verdict decisions a chain may record.
var decisions = map[string]xctv1.VerdictDecision{
	xctevent.DecisionAllow:         xctv1.VerdictDecision_VERDICT_DECISION_ALLOW,
	xctevent.DecisionNeedsApproval: xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL,
	xctevent.DecisionDeny:          xctv1.VerdictDecision_VERDICT_DECISION_DENY,
}

// checkEvent is the strict part of reading a chain for a recheck: what a
// run view would read as a zero value is an error wrapping ErrBadChain.
func checkEvent(e *lctl.Event) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: event %d (%s): %s", ErrBadChain, e.Seq, e.Type, fmt.Sprintf(format, args...))
	}
	d := e.Data
	switch e.Type {
	case xctevent.TypeStepStart:
		if _, ok := d["step"]; !ok || d["tool"] == nil || d["tool"] == "" {
			return nil // not an XCT step, or output that was not a decision
		}
		switch d["arguments"].(type) {
		case map[string]any, nil:
		default:
			return bad("arguments are not an object")
		}
		if conf, ok := d["confidence"]; ok {
			if _, ok := conf.(float64); !ok {
				return bad("confidence is not a number")
			}
		}
	case xctevent.TypeVerdict:
		if dec, _ := d["decision"].(string); decisions[dec] == xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED {
			return bad("decision %v is not allow, deny or needs_approval", d["decision"])
		}
	}
	return nil
}

// crewStep is what the validator was told of a crew run's step: its crew
// context, and the model that proposed it (run.model).
type crewStep struct {
	ctx   *xctv1.CrewContext
	model string
}

// crewContexts rebuilds, for a crew run's chain, the crew context each
// proposal was validated with (by step_start seq): the crew file is on
// run_started, and the session after each step_start is what the
// orchestrator asked the validator with. A chain that is no crew run has
// none; a crew the chain's own events contradict is ErrBadChain.
func crewContexts(events []lctl.Event) (map[uint64]crewStep, []string, error) {
	if len(events) == 0 || events[0].Type != xctevent.TypeRunStarted {
		return nil, nil, nil
	}
	m, ok := events[0].DataMap()["crew"].(map[string]any)
	if !ok {
		return nil, nil, nil
	}
	src, _ := m["source"].(string)
	name, _ := m["name"].(string)
	c, err := crew.Load(name+".yaml", []byte(src))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: event %d: the crew file on run_started: %w", ErrBadChain, events[0].Seq, err)
	}
	sess, err := crew.NewSession(c, events[0].ChainID, nil, crew.SessionOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadChain, err)
	}
	out := map[uint64]crewStep{}
	for i := range events {
		e := &events[i]
		if err := sess.Observe(e); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadChain, err)
		}
		if e.Type != xctevent.TypeStepStart {
			continue
		}
		if x, ok := xctevent.Parse(e).(xctevent.StepStart); ok && x.Tool != "" && !x.Invalid() {
			out[e.Seq] = crewStep{ctx: sess.CrewContext(x.Tool, x.Arguments, x.Intent), model: sess.StepModel()}
		}
	}
	return out, c.ModelRefs(), nil
}
