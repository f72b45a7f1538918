package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// This file is a crew run's part of the loop (docs/crews.md, "The loop"):
// the crew's session says which agent is in control, on which model, with
// which tools and context; the loop proposes, validates and records as
// for any run, and carries out the crew's system tools (facts.*,
// xct.handoff) itself once they are allowed. Everything the session knows
// comes from the chain, so a run resumed elsewhere continues the same.

// crewRun is what a run of a crew adds to the loop.
type crewRun struct {
	sess *crew.Session
	// proposers are the models the crew's agents were served by, one per
	// model reference (closed with the run).
	proposers map[string]Proposer
	// carried is, for a run resumed with a step open, what that step's
	// system tool had recorded of its carry before the takeover (nil when
	// nothing): see carryOf.
	carried *carriedStep
}

// carriedStep is the part of a system tool's carry that is on the chain
// of a step left open: the events its carry recorded (a handoff's
// contract validations and the handoff, a fact_added, a fact_modified)
// without the step's tool_call or error, and the session as it stood
// before the first of them, from which the carry is made again.
type carriedStep struct {
	stepID  string
	onChain []lctl.Event
	before  *crew.Session
}

// carryEvent reports whether an event of type typ is one a system tool's
// carry records (crew.Session.Carry's events).
func carryEvent(typ string) bool {
	switch typ {
	case lctl.TypeHandoff, lctl.TypeFactAdded, lctl.TypeFactModified, lctl.TypeContractValidation:
		return true
	}
	return false
}

// carriedOf finds, in a run's chain, the carry events of the step left
// open (the last step_start without its step_end): nil when the chain
// holds none, else those events and the session rebuilt from the events
// before the first of them.
func carriedOf(c *crew.Crew, id string, events []lctl.Event, opts crew.SessionOptions) (*carriedStep, error) {
	start := -1
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type == lctl.TypeStepEnd {
			return nil, nil
		}
		if events[i].Type == lctl.TypeStepStart {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, nil
	}
	first := -1
	var onChain []lctl.Event
	for i := start + 1; i < len(events); i++ {
		if carryEvent(events[i].Type) {
			if first < 0 {
				first = i
			}
			onChain = append(onChain, events[i])
		}
	}
	if first < 0 {
		return nil, nil
	}
	before, err := crew.NewSession(c, id, events[:first], opts)
	if err != nil {
		return nil, err
	}
	stepID, _ := events[start].Data["step_id"].(string)
	return &carriedStep{stepID: stepID, onChain: onChain, before: before}, nil
}

// crewModelPrefix starts the model a crew run records on run_started
// ("crew:NAME"): the crew chooses the model per step.
const crewModelPrefix = "crew:"

// MaxCrewFileBytes bounds a crew file given to StartRun: it goes on the
// chain inside run_started, one JetStream message (1 MB by default).
const MaxCrewFileBytes = 256 << 10

// loadCrew reads a crew file given to StartRun: a problem in it is
// InvalidArgument with every FILE:LINE problem.
func loadCrew(name string, src []byte) (*crew.Crew, error) {
	if name == "" {
		name = "crew.yaml"
	}
	if len(src) > MaxCrewFileBytes {
		return nil, status.Errorf(codes.InvalidArgument, "crew file %s: %d bytes, more than the %d a run can record", name, len(src), MaxCrewFileBytes)
	}
	c, err := crew.Load(name, src)
	var le *crew.LoadError
	switch {
	case errors.As(err, &le):
		return nil, status.Errorf(codes.InvalidArgument, "crew file %s:\n%s", name, le.Error())
	case err != nil:
		return nil, status.Errorf(codes.InvalidArgument, "crew file %s: %v", name, err)
	}
	if dead := c.DeadEnds(); len(dead) > 0 {
		// A new run only: a chain already written under such a file
		// resumes (crewOfChain), its dead end's done refused.
		return nil, status.Errorf(codes.InvalidArgument, "crew file %s:\n%s", name, strings.Join(dead, "\n"))
	}
	return c, nil
}

// crewStarted is run_started for a run of crew c read from src: the
// crew's fields (name, sha256, entry, agents) and the file itself, so any
// orchestrator can resume the run from its chain.
func crewStarted(started xctevent.RunStarted, c *crew.Crew, src []byte) xctevent.Event {
	fields := crew.RunStartedFields(c)
	if m, ok := fields["crew"].(map[string]any); ok {
		m = maps.Clone(m)
		m["source"] = string(src)
		fields["crew"] = m
	}
	return crew.Merge(started, fields)
}

// crewOfChain rebuilds the crew session of a run from its chain: the
// crew file is on run_started, checked against its hash.
func (s *Service) crewOfChain(id string, events []lctl.Event) (*crewRun, error) {
	if len(events) == 0 {
		return nil, nil
	}
	m, ok := events[0].Data["crew"].(map[string]any)
	if !ok {
		return nil, nil // not a crew run
	}
	src, _ := m["source"].(string)
	name, _ := m["name"].(string)
	sum := sha256.Sum256([]byte(src))
	if want, _ := m["sha256"].(string); src == "" || want != hex.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("run %s: the crew file on its run_started is missing or does not match its sha256: the run cannot be resumed", id)
	}
	c, err := crew.Load(name+".yaml", []byte(src))
	if err != nil {
		return nil, fmt.Errorf("run %s: crew file on the chain: %w", id, err)
	}
	opts := crew.SessionOptions{CheckpointEvery: s.cfg.CrewCheckpointEvery}
	sess, err := crew.NewSession(c, id, events, opts)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	carried, err := carriedOf(c, id, events, opts)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return &crewRun{sess: sess, proposers: map[string]Proposer{}, carried: carried}, nil
}

// proposer is the proposer of model reference ref, made once per run.
func (c *crewRun) proposer(s *Service, ref string) (Proposer, error) {
	if p, ok := c.proposers[ref]; ok {
		return p, nil
	}
	p, err := s.newProposer(ref)
	if err != nil {
		return nil, err
	}
	c.proposers[ref] = p
	return p, nil
}

// closeProposer closes p unless it is nil.
func closeProposer(p Proposer) {
	if p != nil {
		_ = p.Close()
	}
}

// close closes the proposers the run made.
func (c *crewRun) close() {
	for _, p := range c.proposers {
		_ = p.Close()
	}
}

// crewPropose is iterate's model call for a crew run: the session's plan
// for the agent in control (its routing recorded first), the agent's
// catalog and brief, and on a failed call the crew's fallback model for
// the same step, each fallback recorded as a model_routing. It returns
// the response, the agent in control and the model reference that served
// it. A run that must end (no model left, a failure the crew does not
// route around) has its error recorded and returns an error.
func (r *run) crewPropose(step int) (*xctv1.ProposeResponse, string, string, error) {
	plan := r.crew.sess.Plan()
	agent := plan.Agent.Name
	if err := r.doneRefusedTooOften(agent); err != nil {
		return nil, agent, "", err
	}
	history, err := r.crew.history(&r.transcript, agent)
	if err != nil {
		return nil, agent, "", err
	}
	req := &xctv1.ProposeRequest{
		RunId: r.id, Goal: r.goal, Tools: r.crew.sess.Catalog(r.tools),
		History: history, Instructions: instructions + "\n\n" + plan.Brief,
	}
	var lastErr error
	// failed is what the step's last failed call used: the model read its
	// prompt before it failed. It goes on the model_routing that sends
	// the step to the next model (the fold counts it from there, so a run
	// resumed from its chain before the step's step_start counts it too),
	// or on the error that ends the run when no model is left.
	// An endpoint that did not say what the call used is charged an
	// estimate (failedCallTokens), marked so.
	var failed *xctevent.Tokens
	for {
		if plan.Signal != nil {
			in, out := tokensOf(failed)
			r.tokensIn += in
			r.tokensOut += out
			e := plan.Signal.Proto()
			if lastErr != nil {
				e = wire.Errorf(wire.Code(FailureCode(lastErr)), "%s did not answer (%v), and the crew has no model to fall back on: %s",
					agent, lastErr, plan.Signal.Message)
			}
			ev := errorEvent(step, "", e)
			if in > 0 || out > 0 {
				ev.Tokens = failed // (a takeover before run_finished counts them)
			}
			ev.Unrecorded = r.chargeUnrecorded(in, out)
			if err := r.record(agent, ev); err != nil {
				return nil, agent, "", err
			}
			return nil, agent, "", errors.New(e.GetMessage())
		}
		if plan.Routing != nil {
			routing := *plan.Routing
			in, out := tokensOf(failed)
			if mr, ok := routing.Payload.(crew.ModelRouting); ok && (in > 0 || out > 0) {
				mr.FailedTokens = &crew.RoutingTokens{Input: in, Output: out, Estimated: failed.Estimated}
				routing.Payload = mr
			}
			if err := r.record(routing.Agent, routing); err != nil {
				return nil, agent, "", err
			}
			r.tokensIn += in
			r.tokensOut += out
			failed = nil
		}
		proposer, err := r.crew.proposer(r.svc, plan.Model)
		var resp *xctv1.ProposeResponse
		if err == nil {
			resp, err = r.callModel(proposer, plan.Model, agent, req)
		} else {
			err = &ModelError{Model: plan.Model, Code: wire.CodeGenerationFailed, Msg: err.Error(), Err: err, NotSent: true}
		}
		if err == nil {
			refused, rerr := r.refuseDone(step, agent, resp)
			if rerr != nil {
				return nil, agent, "", rerr
			}
			if !refused {
				return resp, agent, plan.Model, nil
			}
			// Asked again, with the refusal in the agent's brief.
			plan, lastErr = r.crew.sess.Plan(), nil
			req.Instructions = instructions + "\n\n" + plan.Brief
			continue
		}
		failed = r.failedCallTokens(err, req)
		if cause := context.Cause(r.ctx); cause != nil {
			in, out := tokensOf(failed)
			r.tokensIn += in
			r.tokensOut += out
			return nil, agent, "", cause
		}
		r.log.Info("crew model call failed", "run", r.id, "agent", agent, "model", plan.Model, "code", FailureCode(err))
		lastErr = err
		plan = r.crew.sess.Fallback(plan.Model, FailureCode(err))
	}
}

// refuseDone refuses the answer done of agent when the crew does not let
// it end the run (authority.end_run): a subordinate member, or one
// steered by what it read, cannot end the run before the lead's check.
// The refusal is the DONE_NOT_ALLOWED signal, recorded as the agent's
// error outside any step (a done proposes nothing to act, so it is no
// numbered step: the model is asked again for the same step, as after a
// model call the crew routes around), with what the call used, which the
// run is charged. The session folds it, and the agent's brief says it was
// refused. It reports whether it refused; an error ends the run (the log
// lost, or the model answering done past the repair budget).
func (r *run) refuseDone(step int, agent string, resp *xctv1.ProposeResponse) (bool, error) {
	decision, _, perr := wire.ParseDecisionArgs([]byte(resp.GetOutput()))
	if perr != nil {
		return false, nil //nolint:nilerr // invalid output is iterate's to record (recordInvalid), not a crew refusal
	}
	if decision.GetDone() == nil {
		return false, nil
	}
	sig := r.crew.sess.CheckDone(agent)
	if sig == nil {
		return false, nil
	}
	tokens := xctevent.Tokens{Input: resp.GetUsage().GetInputTokens(), Output: resp.GetUsage().GetOutputTokens()}
	r.tokensIn += tokens.Input
	r.tokensOut += tokens.Output
	r.noteCall(tokens)
	ev := errorEvent(step, "", sig.Proto())
	if tokens.Input > 0 || tokens.Output > 0 {
		ev.Tokens = &tokens // counted by the fold, as a failed call's are
	}
	ev.Unrecorded = r.chargeUnrecorded(tokens.Input, tokens.Output)
	if err := r.record(agent, ev); err != nil {
		return false, err
	}
	r.log.Info("crew member's done refused", "run", r.id, "agent", agent, "step", step, "refusals", r.crew.sess.DoneRefusals())
	return true, r.doneRefusedTooOften(agent)
}

// doneRefusedTooOften ends the run when the agent in control was refused
// done the repair budget's times in a row (as the chain says, so a run
// resumed after the last refusal ends too): its model does not do
// anything else.
func (r *run) doneRefusedTooOften(agent string) error {
	if n := r.crew.sess.DoneRefusals(); n >= r.svc.cfg.RepairBudget {
		return fmt.Errorf("%s answered done %d times in a row and may not end the run (%s; repair budget %d)",
			agent, n, crew.CodeDoneNotAllowed, r.svc.cfg.RepairBudget)
	}
	return nil
}

// history is what agent's model is shown of the run's steps (the
// crew file's history:): under crew.HistoryOwn, the default, the turns
// of its own steps only, so another member's tool results (a file only
// that member may read) never reach it; what the others did comes to it
// as the crew hands it on (the hand-over summary and the facts in its
// brief). Under crew.HistoryShared, the run's transcript. Both the
// transcript and the session are folds of the same chain (every event the
// run records or resumes from goes into both), so the turns line up, and a
// resumed run shows each member what the live one did. Should they not
// line up, nothing is shown rather than another member's turns: the run
// fails, saying so.
func (c *crewRun) history(t *transcript, agent string) ([]*xctv1.Turn, error) {
	all := t.history()
	if c.sess.Turns() != len(all) {
		return nil, fmt.Errorf("the crew session holds %d turns and the transcript %d: %s is not shown a history that may hold another member's steps",
			c.sess.Turns(), len(all), agent)
	}
	idx := c.sess.HistoryOf(agent)
	if len(idx) == len(all) {
		return all, nil
	}
	own := make([]*xctv1.Turn, len(idx))
	for i, n := range idx {
		own[i] = all[n]
	}
	return own, nil
}

// carry is the session's carry of a system tool for step stepID, and how
// many of its events the chain already holds (recorded before a takeover;
// -1: the chain holds carry events of the step that the carry does not
// make).
func (c *crewRun) carry(agent, stepID, tool string, args map[string]any) (crew.Outcome, int) {
	cs := c.carried
	if cs == nil || cs.stepID != stepID {
		return c.sess.Carry(agent, tool, args), 0
	}
	c.carried = nil
	out := cs.before.Carry(agent, tool, args)
	if len(cs.onChain) > len(out.Events) {
		return out, -1
	}
	for i, e := range cs.onChain {
		if want := out.Events[i]; e.Type != want.Payload.EventType() || e.Agent != want.Agent {
			return out, -1
		}
	}
	return out, len(cs.onChain)
}

// crewContext is what the validator is told of a crew run's proposal: the
// agent, its tools and the facts the proposal relies on; nil outside a
// crew run.
func (r *run) crewContext(ns *xctv1.NextStep) *xctv1.CrewContext {
	if r.crew == nil {
		return nil
	}
	return r.crew.sess.CrewContext(ns.GetTool(), ns.GetArguments().AsMap(), ns.GetGoal())
}

// carrySystemTool carries out an allowed proposal of one of the crew's
// system tools (facts.*, xct.handoff): the session's events are recorded,
// then the result is staged as the step's tool_call, or the signal as its
// error. The executor never sees these tools.
//
// A system tool acts by its events: once a handoff or a fact_added is on
// the chain, it happened. So a step resumed after a takeover whose chain
// already holds some of its carry's events is not carried out again by the
// session that applied them (the handoff would be refused NOT_IN_CONTROL,
// the fact refused as existing: a step that acted recorded as failed, and
// the model told to do it again): the carry is made again from the session
// as it stood before them, and only what the chain lacks is recorded.
func (r *run) carrySystemTool(st *openStep) (stepOutcome, error) {
	out, done := r.crew.carry(st.agent, st.stepID, st.ns.GetTool(), st.args)
	if done < 0 {
		return r.settleCarry(st)
	}
	return r.recordCarry(st, out, done)
}

// recordCarry records the events of a system tool's carry the chain does
// not hold yet (from the done-th on), then its result as the step's
// tool_call, or its signal as the step's error.
func (r *run) recordCarry(st *openStep, out crew.Outcome, done int) (stepOutcome, error) {
	for _, e := range out.Events[done:] {
		if err := r.record(e.Agent, e); err != nil {
			return stepOutcome{}, err
		}
	}
	if out.Signal != nil {
		e := out.Signal.Proto()
		if err := r.record(st.agent, errorEvent(st.step, st.stepID, e)); err != nil {
			return stepOutcome{}, err
		}
		return stepOutcome{outcome: xctevent.OutcomeError, summary: e.GetCode() + ": " + e.GetMessage()}, nil
	}
	tc := xctevent.ToolCall{
		Step: st.step, StepID: st.stepID, Tool: st.ns.GetTool(), Input: st.args, Output: out.Result,
		Status: xctevent.ToolCallSuccess,
	}
	if tc.Input == nil {
		tc.Input = map[string]any{}
	}
	return stepOutcome{outcome: xctevent.OutcomeSuccess, summary: "ok"}, r.record(st.agent, tc)
}

// settleCarry settles a system tool's step whose chain holds carry events
// the crew's session does not make again (written by another version of
// the carry, say): what the step did is on the chain, and whether it
// counts as done is a human's call, made as for any step in doubt. The
// run is IN_DOUBT (step_in_doubt, with the xct resolve command) until the
// step has a record at the executor: xct resolve writes the decision as
// the record of a step the executor never saw. Succeeded records the
// human's result as the step's tool_call, failed the human's error; the
// crew's state is its chain's either way (the carry events on it were
// folded into the session as they were read, and stay). Retry is refused
// as a failure: a system tool is not carried out again in place (its
// events would be on the chain twice); the model may propose it again.
func (r *run) settleCarry(st *openStep) (stepOutcome, error) {
	tool := st.ns.GetTool()
	if !st.doubtRecorded {
		data := xctevent.StepInDoubt{
			Step: st.step, StepID: st.stepID, Tool: tool,
			Reason:      fmt.Sprintf("the chain holds events of this %s that the crew's session does not make again: what the step did is on the chain (read it with lctl); decide whether it counts as done", tool),
			RecordState: "none (a crew's system tool never reaches the executor; the decision becomes its record)",
			Resolve:     fmt.Sprintf("xct resolve %s %d --outcome succeeded|failed", r.id, st.step),
		}
		if err := r.record(agentOrchestrator, data); err != nil {
			return stepOutcome{}, err
		}
		st.doubtRecorded = true
		r.log.Error("crew system tool in doubt: the run waits for a human", "run", r.id, "step", st.step, "step_id", st.stepID, "tool", tool, "resolve", data.Resolve)
	}
	wait := 50 * time.Millisecond
	for {
		state, resp, err := r.readRecord(st.stepID, false)
		switch state {
		case outcomeFinal:
			res := replay(resp.GetStep())
			r.log.Info("crew system tool in doubt settled by a human", "run", r.id, "step", st.step, "state", resp.GetStep().GetState().String())
			if e := res.GetResponse().GetError(); e != nil {
				return stepOutcome{outcome: xctevent.OutcomeError, summary: e.GetCode() + ": " + e.GetMessage()},
					r.record(st.agent, errorEvent(st.step, st.stepID, e))
			}
			return stepOutcome{outcome: xctevent.OutcomeSuccess, summary: "ok"},
				r.record(st.agent, toolCallEvent(st.step, st.stepID, tool, st.args, res))
		case outcomeRetry:
			by := resp.GetStep().GetResolution().GetResolvedBy()
			e := wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "%s asked to run step %d (%s) again; a crew's system tool is not carried out again in place (its events are on the chain): recorded as not done, propose it again",
				by, st.step, tool), map[string]any{"step_id": st.stepID, "resolved_by": by})
			return stepOutcome{outcome: xctevent.OutcomeError, summary: e.GetCode() + ": " + e.GetMessage()},
				r.record(st.agent, errorEvent(st.step, st.stepID, e))
		case outcomeUnknown:
			if err != nil && status.Code(err) != codes.NotFound {
				r.log.Warn("cannot read the record of a crew step in doubt; asking again", "run", r.id, "step", st.step, "err", err)
			}
		}
		if err := r.pause(wait); err != nil {
			return stepOutcome{}, err
		}
		wait = min(wait*2, r.svc.cfg.SettlePoll)
	}
}

// crewCheckpoint records the crew's checkpoint when one is due: after a
// handoff's step and every CrewCheckpointEvery events.
func (r *run) crewCheckpoint() error {
	if r.crew == nil {
		return nil
	}
	cp, err := r.crew.sess.Checkpoint()
	if err != nil || cp == nil {
		return err
	}
	return r.record(cp.Agent, *cp)
}

// tokensOf is t's counts, 0 for nil.
func tokensOf(t *xctevent.Tokens) (in, out int64) {
	if t == nil {
		return 0, 0
	}
	return t.Input, t.Output
}
