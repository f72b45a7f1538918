package orchestrator

import (
	"context"
	"errors"
	"fmt"
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

// This file continues a run whose chain another orchestrator (or this one
// before a restart) wrote: everything the loop needs is rebuilt from the
// chain, which is what ARCHITECTURE.md promises.

// resumeState is where a run's chain stops, folded from its events.
type resumeState struct {
	next              int       // the next step to propose when none is open
	open              *openStep // a step started and not ended
	invalidInARow     int
	consecutiveErrors int
	tokensIn          int64
	tokensOut         int64
	// endMessage is set when the chain's last step or error already ended
	// the run (a budget, a step in doubt, a model that did not answer) and
	// only run_finished is missing.
	endMessage string
}

// foldResume reads a run's chain into the point where its loop continues.
// Like the other views it is a pure function of the events.
func foldResume(runID string, events []lctl.Event) *resumeState {
	return resumeFrom(runID, xctevent.Fold(events))
}

// resumeFrom is where the run whose view is v continues: the counters the
// loop keeps, the step left open, and whether the run already ended but
// for its run_finished.
func resumeFrom(runID string, v *xctevent.Run) *resumeState {
	rs := &resumeState{
		next: 1, invalidInARow: v.InvalidInARow, consecutiveErrors: v.ConsecutiveErrors,
		tokensIn: v.Tokens.Input, tokensOut: v.Tokens.Output,
	}
	for i := len(v.Steps) - 1; i >= 0; i-- {
		if v.Steps[i].Ended() {
			rs.next = v.Steps[i].Number() + 1
			break
		}
	}
	if open := v.Open(); open != nil {
		rs.open = openStepOf(runID, open)
		// The fold counts a step's tokens from its step_end: the open
		// step's model call is counted from its step_start (none on a
		// chain written before step_start carried them).
		rs.tokensIn += rs.open.tokens.Input
		rs.tokensOut += rs.open.tokens.Output
		return rs
	}
	switch last := v.Last(); {
	case v.After != nil && v.After.Code == crew.CodeDoneNotAllowed:
		// A crew member's done refused: the run goes on (crewPropose ends
		// it when the refusals reach the repair budget).
	case v.After != nil:
		rs.endMessage = v.After.Message // a budget or the model's endpoint ended the run
	case last == nil:
	case last.Attempted() && last.Error != nil && unknownOutcome(errorSignal(*last.Error)):
		rs.endMessage = inDoubtMessage(runID, last.Number(), last.Start.StepID, errorSignal(*last.Error))
	case !last.Attempted() && last.Verdict() != nil && last.Verdict().EndsRun:
		// (a budget's refusal of a new attempt, after an allowed one, is
		// not the step's verdict: the attempt's outcome is)
		rs.endMessage = refusal(last).GetError().GetMessage()
	}
	return rs
}

// openStepOf is a step the chain leaves open, as the loop continues it.
func openStepOf(runID string, s *xctevent.Step) *openStep {
	st := &openStep{step: s.Number(), stepID: s.Start.StepID, agent: s.Agent, started: time.Now(), at: s.At, resumed: true, attempted: s.Attempted()}
	if s.Start.Tokens != nil {
		st.tokens = *s.Start.Tokens // its step_end records them, as the proposing orchestrator's would have
	}
	if u := s.Start.Unrecorded; u != nil {
		st.tokens.Input += u.Tokens.Input // and the unrecorded calls the step charged
		st.tokens.Output += u.Tokens.Output
	}
	if s.Start.Invalid() {
		st.invalid = true
		st.errorRecorded = s.Error != nil
		return st
	}
	st.ns = proposalOf(s.Start)
	st.args = st.ns.GetArguments().AsMap()
	st.argsRedacted = wire.StepID(runID, st.step, st.ns.GetTool(), st.ns.GetArguments()) != st.stepID
	if s.Verdict() != nil {
		st.verdict, st.verdictAgent = refusal(s), s.VerdictAgent
		if allow := s.LastAllow(); allow != nil && !s.Allowed() {
			// A verdict after the allow refused a new attempt (a re-run,
			// or a takeover's): the allowed attempt may have acted, so
			// the step goes on from that allow, and the executor's record
			// says what became of it (binding.go asks for a fresh verdict
			// again before any new attempt). Ending it with the refusal
			// would say "not executed" of a step that may have executed.
			st.verdict, st.verdictAgent = recordedVerdict(*allow), agentValidator
		}
	}
	if s.Requested != nil {
		st.approvalRequested = true
		st.approvalExpires, _ = time.Parse(time.RFC3339Nano, s.Requested.ExpiresAt)
	}
	if s.Decided != nil {
		st.decided = s.Decided.Decision
	}
	// A step_in_doubt followed by another attempt's verdict is not the
	// step's doubt any more: that attempt's doubt is recorded anew.
	st.doubtRecorded = s.DoubtSeq != 0
	switch {
	case s.Result != nil:
		out, _ := s.Result.Output.(map[string]any)
		notKept, _ := out["result_not_kept"].(bool)
		reason, _ := out["reason"].(string)
		st.outcome, st.summary = xctevent.OutcomeSuccess, successSummary(notKept, reason)
	case s.Error != nil:
		ee := errorSignal(*s.Error)
		if s.Attempted() {
			st.outcome, st.summary = xctevent.OutcomeError, ee.GetCode()+": "+ee.GetMessage()
			if unknownOutcome(ee) {
				st.inDoubt = ee
			}
		} else {
			st.outcome, st.summary = xctevent.OutcomeDenied, ee.GetCode()+": "+ee.GetMessage()
		}
	}
	return st
}

// refusal is a step's last verdict as the loop acts on it: with ends_run,
// and for a refusal the error signal the model was sent (the step's error
// event when it is on the chain).
func refusal(s *xctevent.Step) *xctv1.Verdict {
	v := recordedVerdict(*s.Verdict())
	if s.Error != nil && !s.Attempted() {
		v.Error = errorSignal(*s.Error)
	}
	return v
}

// recordedVerdict reads a verdict event back, with what the loop acts on:
// ends_run, and an error signal for a refusal (its message is replaced by
// the error event's when that is on the chain too).
func recordedVerdict(x xctevent.Verdict) *xctv1.Verdict {
	v := verdictOf(x)
	v.EndsRun = x.EndsRun
	if code := x.Code; code != "" && v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		msgs := make([]string, 0, len(v.GetReasons()))
		for _, r := range v.GetReasons() {
			msgs = append(msgs, r.GetMessage())
		}
		v.Error = wire.Errorf(wire.Code(code), "%s", strings.Join(msgs, "; "))
	}
	return v
}

// resume continues a run this process has just claimed (at revision rev of
// its owner key). A chain that does not exist, is not a run, or has ended
// needs nothing more: the key is deleted. A run whose key holds a cancel
// (cancelled) is not continued: its loop starts cancelled, closes the
// step its chain leaves open without starting anything (closeOpen) and
// records the end.
func (s *Service) resume(parent context.Context, id string, rev uint64, reason, previous string, cancelled *cancelRequest) error {
	// Bounded by the short takeover deadline, not a whole call timeout: a
	// takeover that cannot proceed fails fast and is tried again.
	ctx, cancel := context.WithTimeout(parent, s.cfg.TakeoverTimeout)
	defer cancel()
	writer, err := s.events.ResumeChainWriter(ctx, id)
	if err != nil {
		return err
	}
	if writer.Seq() == 0 {
		// Claimed, then its owner stopped before run_started, which may
		// still land: once the key is gone only the live index
		// (orphans.go) can find the run then. Written here too, not only
		// by StartRun, so a start that wrote none is covered.
		if err := s.list(ctx, id); err != nil {
			return err
		}
		return s.disown(id, rev)
	}
	events, err := s.events.ReadChain(ctx, id)
	if err != nil {
		return err
	}
	if uint64(len(events)) != writer.Seq() {
		return fmt.Errorf("chain %s grew while it was read: %d events, last seq %d", id, len(events), writer.Seq())
	}
	if events[0].Type != lctl.TypeRunStarted {
		return s.disown(id, rev)
	}
	for i := range events {
		if events[i].Type == lctl.TypeRunFinished {
			s.unlist(id) // a stale index entry, if its writer left one
			return s.disown(id, rev)
		}
	}
	started, _ := xctevent.Parse(&events[0]).(xctevent.RunStarted)
	model := started.Model
	var (
		cr       *crewRun
		proposer Proposer
	)
	if strings.HasPrefix(model, crewModelPrefix) {
		// A crew run: its session is rebuilt from the chain (crew.go).
		if cr, err = s.crewOfChain(id, events); err != nil {
			return err
		}
	} else if proposer, err = s.newProposer(model); err != nil {
		return err
	}
	tools, err := s.toolCatalog(ctx)
	if err != nil {
		closeProposer(proposer)
		return err
	}
	maxSteps := started.MaxSteps
	if maxSteps <= 0 {
		maxSteps = s.cfg.MaxSteps
	}
	rctx, rcancel := context.WithCancelCause(context.Background())
	r := &run{
		runSpec: runSpec{
			id: id, tools: modelCatalog(tools), goal: started.Goal, principal: started.Principal, labels: started.Labels,
			maxSteps: maxSteps, roles: started.Roles, model: model, started: events[0].Time(),
		},
		svc: s, log: s.log, writer: writer, proposer: proposer, crew: cr,
		ctx: rctx, cancel: rcancel, done: make(chan struct{}), left: make(chan struct{}), release: make(chan struct{}),
	}
	r.lease.set(rev)
	if cancelled != nil {
		r.lease.cancel = cancelled
		rcancel(cancelled.cause()) // before the loop starts: it takes no step
	}
	view := xctevent.Fold(events)
	for i := range events {
		r.transcript.apply(&events[i])
	}
	rs := resumeFrom(id, view)
	r.resumed = rs
	r.tokensIn, r.tokensOut, r.consecutiveErrors = rs.tokensIn, rs.tokensOut, rs.consecutiveErrors
	at := rs.next
	if rs.open != nil {
		at = rs.open.step
	}
	r.unrecorded = unrecordedCalls(events, rs, maxSteps)
	for i := len(events) - 1; i >= 0 && r.unrecorded > 0; i-- {
		// What the last call recorded used: what an unrecorded one is
		// charged if the run ends without another (finishErr).
		if x, ok := xctevent.Parse(&events[i]).(xctevent.StepStart); ok && x.Tokens != nil {
			r.noteCall(*x.Tokens)
			break
		}
	}

	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		rcancel(nil)
		r.closeProposers()
		return ErrStopping
	}
	s.active[id] = r
	s.mu.Unlock()
	s.runs.put(view)
	err = r.record(agentOrchestrator, xctevent.RunResumed{Instance: s.instance, PreviousOwner: previous, Reason: reason, Step: at, UnrecordedCalls: r.unrecorded})
	if err != nil {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		rcancel(nil)
		r.closeProposers()
		s.runs.drop(id)
		return err
	}
	s.log.Info("run taken over", "run", id, "reason", reason, "previous_owner", previous, "step", at)
	r.startRunSpan(context.Background())
	s.launch(r)
	return nil
}

// unrecordedCalls counts the model calls that the owners of a run before
// this takeover may have made and that no event of its chain holds, to be
// charged on the next call recorded (run.chargeUnrecorded): the chain's
// token budgets would otherwise miss them, one call per lost owner. A
// loop calls its model as soon as the chain stops at a step boundary, so
// an owner that left the chain there without handing it over (killed,
// paused past its lease, cut off from NATS, its append failed) may have
// been waiting for an answer that the endpoint charged; one that handed
// it over did not, unless its stop cut the call short (call_cut).
// Earlier takeovers' counts carry over (run_resumed records them) until a
// call is recorded. A chain that stops inside a step, or where the loop
// would not call its model next (the run ended, or its step budget is
// used up), owes nothing more.
func unrecordedCalls(events []lctl.Event, rs *resumeState, maxSteps int) int {
	if rs.open != nil || rs.endMessage != "" || rs.next > maxSteps || len(events) == 0 {
		return 0
	}
	owed := 0
	for i := range events {
		switch e := &events[i]; e.Type {
		case lctl.TypeStepStart:
			owed = 0 // a call recorded: it charged what was owed before it
		case TypeRunResumed:
			if x, ok := xctevent.Parse(e).(xctevent.RunResumed); ok {
				owed = x.UnrecordedCalls
			}
		case TypeRunReleased:
			if x, ok := xctevent.Parse(e).(xctevent.RunReleased); ok && x.CallCut {
				owed++
			}
		}
	}
	last := len(events) - 1
	for last > 0 && events[last].Type == lctl.TypeSignedCheckpoint {
		last-- // (a hand-over is checkpointed after its run_released)
	}
	if events[last].Type != TypeRunReleased {
		owed++ // its owner left it without a hand-over: it may have been in a call
	}
	return owed
}

// handOver ends this process's part in a run it is stopping for: the
// hand-over is recorded on the chain, then the owner key is released for
// another replica. If the event cannot be recorded the key is left to
// expire, which hands the run over too, later.
func (r *run) handOver(why string) {
	data := xctevent.RunReleased{Instance: r.svc.instance, Reason: "the orchestrator is stopping", Step: r.at, CallCut: r.callCut}
	if why != "" {
		data.Reason = why
	}
	if err := r.record(agentOrchestrator, data); err != nil {
		r.log.Error("could not record the hand-over; the run's claim will expire instead", "run", r.id, "err", err)
		return
	}
	if err := r.svc.handOver(r); err != nil {
		r.log.Error("hand-over recorded but the claim could not be released; it will expire", "run", r.id, "err", err)
		return
	}
	r.log.Info("run handed over", "run", r.id, "step", r.at)
}

// recoverStep is execute for a resumed step whose arguments on the chain
// are redacted: it cannot be run from them, so the executor is only asked
// what it recorded under the step id. A step it never saw was not executed
// and is not now; a step without an outcome is in doubt.
func (r *run) recoverStep(st *openStep) (*xctv1.ExecuteResponse, *xctv1.Error) {
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	defer cancel()
	fence := r.fenceable(st)
	resp, err := r.svc.executor.GetStep(ctx, &xctv1.GetStepRequest{StepId: st.stepID, Fence: fence})
	switch {
	case !fence && status.Code(err) == codes.NotFound:
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInDoubt, "step %d (%s) has no record and is older than the records are kept: it may have acted, and its arguments are redacted on the chain", st.step, st.stepID),
			map[string]any{"step_id": st.stepID, "outcome_unknown": true, "resolve": "xct resolve " + r.id + " " + st.stepID + " --outcome succeeded|failed|retry"})
	case status.Code(err) == codes.NotFound:
		return nil, wire.Errorf(wire.CodeToolFailure, "step %d was not executed: its arguments are redacted on the chain, so the orchestrator that took the run over cannot run it; propose it again", st.step)
	case err != nil:
		return nil, wire.WithDetails(wire.Errorf(wire.CodeExecutorUnavailable, "the executor could not say what became of step %d: %s", st.step, status.Convert(err).Message()),
			map[string]any{"outcome_unknown": true})
	}
	rec := resp.GetStep()
	switch rec.GetState() {
	case xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED, xctv1.StepRecordState_STEP_RECORD_STATE_FAILED:
		return &xctv1.ExecuteResponse{Response: rec.GetResponse(), Duration: rec.GetDuration(), Replayed: true, Attempt: rec.GetAttempt()}, nil
	}
	return nil, wire.WithDetails(wire.Errorf(wire.CodeInDoubt, "step %d (%s) has no recorded outcome (%s) and its arguments are redacted on the chain", st.step, st.stepID, rec.GetState()),
		map[string]any{"step_id": st.stepID, "resolve": "xct resolve " + r.id + " " + st.stepID + " --outcome succeeded|failed|retry"})
}

// errIsStopping reports whether err means this process is stopping.
func errIsStopping(err error) bool { return errors.Is(err, ErrStopping) }
