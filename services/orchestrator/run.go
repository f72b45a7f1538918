package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/text"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Agent names recorded on events the system itself causes.
const (
	agentOrchestrator = "orchestrator"
	agentValidator    = "validator"
	agentExecutor     = "executor"
)

// errCancelled is the cause of a run cancelled through CancelRun (who, and
// why; cancel.go).
type errCancelled struct{ reason, by string }

// run is one governed run in this process: its single chain writer, its
// model and the derived context. Its loop is the only code that appends to
// its chain.
type run struct {
	runSpec
	usage

	svc      *Service
	log      *slog.Logger
	writer   *eventlog.ChainWriter
	proposer Proposer // the run's model; nil for a crew run
	crew     *crewRun // a crew run's session and models (crew.go)

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the loop returned
	// left is closed once a launched run (Service.launch) left the active
	// set and gave up its owner key; nil for a rollback's.
	left chan struct{}

	// lease is the run's claim in the owners bucket (owners.go); release
	// is closed when this process stops and wants to hand the run over at
	// its next step boundary; resumed is where a run taken over from
	// another orchestrator continues (resume.go).
	lease       lease
	release     chan struct{}
	releaseOnce sync.Once
	resumed     *resumeState

	// recording is held while an event is appended and folded into the
	// views, so a reader that saw the event on the log never reads a view
	// without it.
	recording sync.Mutex

	at    int  // the step the loop is at
	ended bool // run_finished is on the chain
	// endRecorded is set, under recording, once run_finished is on the
	// chain (ended is set later, by the loop).
	endRecorded bool
	// starting is set (under svc.mu) while StartRun has not recorded the
	// run's run_started yet.
	starting bool

	transcript transcript

	// span is the run's root span, stepSpan the open step's (telemetry.go).
	span, stepSpan trace.Span

	// scope redacts the current step's events (redaction.go).
	scope *redact.Scope
}

// runSpec is what a run is, as its run_started records it: fixed for the
// run's life.
type runSpec struct {
	id        string
	goal      string
	model     string
	principal string
	roles     []string
	labels    map[string]string
	maxSteps  int
	tools     []*xctv1.ToolDescriptor // the model's catalog
	started   time.Time
}

// usage is what the run has used so far, for its budgets.
type usage struct {
	tokensIn          int64
	tokensOut         int64
	consecutiveErrors int
	// unrecorded counts model calls earlier owners may have made that no
	// event holds (counted at the takeover: RunResumed.UnrecordedCalls);
	// the next call recorded charges them (chargeUnrecorded). callCut
	// says a stop cut this owner's model call short (run_released says
	// so, for the next owner to count it).
	unrecorded int
	callCut    bool
	// lastCall is what the last call that answered reported using: a
	// later call failing without a usage is estimated from it
	// (failedCallTokens).
	lastCall xctevent.Tokens
}

// chargeUnrecorded charges the model calls earlier owners may have made
// and no event holds (r.unrecorded) at what the call being recorded used,
// in and out tokens: the request was the same, since the chain had not
// changed. The charge is added to the run's tokens and returned for the
// event that records the call (nil when nothing is owed).
func (r *run) chargeUnrecorded(in, out int64) *xctevent.Unrecorded {
	n := r.unrecorded
	if n == 0 {
		return nil
	}
	r.unrecorded = 0
	u := &xctevent.Unrecorded{Calls: n, Tokens: xctevent.Tokens{Input: in * int64(n), Output: out * int64(n)}}
	r.tokensIn += u.Tokens.Input
	r.tokensOut += u.Tokens.Output
	return u
}

// runContext is what the validator is told about the run at a step.
func (r *run) runContext(step int) *xctv1.RunContext {
	var models []string
	model := r.model
	if r.crew != nil {
		models = r.crew.sess.Crew().ModelRefs() // its tokens are priced at the dearest
		if m := r.crew.sess.StepModel(); m != "" {
			model = m // run.model: the model that proposed the step, not "crew:NAME"
		}
	}
	return &xctv1.RunContext{
		RunId:             r.id,
		Principal:         r.principal,
		PrincipalRoles:    r.roles,
		Labels:            r.labels,
		StepsUsed:         int32(step),
		ConsecutiveErrors: int32(r.consecutiveErrors),
		InputTokens:       r.tokensIn,
		OutputTokens:      r.tokensOut,
		Model:             model,
		Models:            models,
		Elapsed:           durationpb.New(time.Since(r.started)),
	}
}

// errLogLost marks an append that failed: the run must stop without acting.
var errLogLost = errors.New("event log unavailable")

// record appends one event and folds it into the run's views. Appends use
// their own deadline: a cancelled run still records how it ended.
func (r *run) record(agent string, ev xctevent.Event) error {
	r.recording.Lock()
	defer r.recording.Unlock()
	return r.recordLocked(agent, ev)
}

// recordLocked is record under r.recording.
func (r *run) recordLocked(agent string, ev xctevent.Event) error {
	// (bounded on the NATS client's pooled timer: no context per event;
	// a write whose time is up before it is sent is not sent, ErrNotSent)
	e, err := r.writer.AppendWithin(r.svc.cfg.AppendTimeout, ev.Type(), agent, r.redactEvent(ev.Type(), ev.Data()))
	if err != nil {
		return fmt.Errorf("%w: %w", errLogLost, err)
	}
	return r.fold(&e)
}

// fold folds an event just appended into the run's views (transcript, run
// index, crew session) and appends a signed checkpoint after it when one
// is due. It runs under r.recording.
func (r *run) fold(e *lctl.Event) error {
	parsed := xctevent.Parse(e) // once, for both views
	r.transcript.applyParsed(parsed)
	r.svc.runs.applyParsed(e, parsed)
	if err := r.observe(e); err != nil {
		return err
	}
	r.checkpointAfter(e) // checkpoint.go
	return nil
}

// pending is an event made and not yet appended, to go on the chain with
// the next ones of its step in one message (recordPack).
type pending struct {
	agent string
	ev    xctevent.Event
	at    time.Time // when it happened, its timestamp (zero: when appended)
}

// recordPack appends events as record would, one after the other, but as
// one stream message with one acknowledgement (eventlog's pack): the
// chain holds the same events, in the same order, with the same hashes;
// none of them is durable before all are. Each event is redacted in turn
// (a step_start opens its step's scope before the verdict is redacted)
// and folded into the views in order once the pack is acknowledged. A
// checkpoint due after an event inside the pack (checkpointAfter) splits
// the pack there, so it stays right after that event as with record.
func (r *run) recordPack(events ...pending) error {
	if r.svc.cfg.EventPerMessage {
		for _, p := range events {
			if err := r.record(p.agent, p.ev); err != nil {
				return err
			}
		}
		return nil
	}
	r.recording.Lock()
	defer r.recording.Unlock()
	var buf [2]eventlog.Draft
	drafts := buf[:0]
	next := r.writer.Seq() + 1
	for i, p := range events {
		t := p.ev.Type()
		drafts = append(drafts, eventlog.Draft{Time: p.at, Type: t, Agent: p.agent, Data: r.redactEvent(t, p.ev.Data())})
		if i < len(events)-1 && !r.checkpointDue(t, next+uint64(i)) {
			continue
		}
		appended, err := r.writer.AppendPackWithin(r.svc.cfg.AppendTimeout, drafts)
		for j := range appended { // (a pack too large for one message may be stored in part)
			if ferr := r.fold(&appended[j]); ferr != nil && err == nil {
				return ferr
			}
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errLogLost, err)
		}
		next += uint64(len(drafts))
		drafts = drafts[:0]
	}
	return nil
}

// observe folds an appended event into a crew run's session. The session
// refusing an event the run wrote means the chain and the crew disagree:
// the run stops as for a lost log.
func (r *run) observe(e *lctl.Event) error {
	if r.crew == nil {
		return nil
	}
	if err := r.crew.sess.Observe(e); err != nil {
		return fmt.Errorf("%w: %w", errLogLost, err)
	}
	return nil
}

// closeProposers closes the run's model clients.
func (r *run) closeProposers() {
	if r.proposer != nil {
		_ = r.proposer.Close()
	}
	if r.crew != nil {
		r.crew.close()
	}
}

// loop is XCT protocol §5: context → one decision → validate → execute or
// refuse → append the result → repeat until done. Every transition is on
// the chain before the next one happens; in particular a step is executed
// only after its allow verdict was durably recorded.
func (r *run) loop() {
	defer close(r.done)
	defer r.closeProposers()
	status, message := r.steps()
	defer r.endRunSpan(status, message)
	switch status {
	case statusReleased:
		r.handOver(message)
		return
	case statusAbandoned:
		r.log.Warn("run left to another orchestrator", "run", r.id, "reason", message)
		r.svc.runs.drop(r.id)
		return
	}
	err := r.finishErr(status, message)
	switch {
	case errors.Is(err, eventlog.ErrConflict):
		r.svc.runs.drop(r.id) // another orchestrator writes the chain now
	case errors.Is(err, errLogLost):
		st := xctv1.RunStatus_RUN_STATUS_FAILED
		if c, ok := r.cancelled(); ok {
			// The cancel is in the owner key: the next owner records it.
			st = xctv1.RunStatus_RUN_STATUS_CANCELLED
			message = c.Error() + "; its end is not on the chain yet (" + err.Error() + "): the next owner records it, and the run takes no further step"
		}
		r.svc.runs.markUnrecorded(r.id, message, st)
	case err == nil:
		r.ended = true // the owner key goes once the run left the active set
	}
}

// Ways a loop stops without ending its run.
const (
	// statusReleased: this process is stopping and handed the run over.
	statusReleased = "released"
	// statusAbandoned: another orchestrator owns the run now.
	statusAbandoned = "abandoned"
)

// requestRelease asks the loop to hand the run over at its next step
// boundary (or at once while it waits for a human).
func (r *run) requestRelease() {
	if r.release != nil {
		r.releaseOnce.Do(func() { close(r.release) })
	}
}

func (r *run) releaseRequested() bool {
	select {
	case <-r.release:
		return true
	default:
		return false
	}
}

// stopped says how the loop ends when err (or the run's cancellation)
// stopped it; ok is false for an error that simply fails the run.
func (r *run) stopped(err error) (status, message string, ok bool) {
	cause := context.Cause(r.ctx)
	switch {
	case errors.Is(err, eventlog.ErrConflict) || errors.Is(cause, errOwnershipLost):
		return statusAbandoned, "another orchestrator appended to the chain", true
	case errors.Is(err, errReleased) || errors.Is(cause, errReleased):
		return statusReleased, "", true
	case errors.Is(err, errLogLost):
		return xctevent.StatusFailed, err.Error(), true
	case cause != nil:
		return xctevent.StatusCancelled, cause.Error(), true
	}
	return "", "", false
}

// steps runs iterations until the run ends, or is handed over, and says
// how. A run taken over continues where its chain stops: an open step is
// finished first, then the loop proposes the next one.
func (r *run) steps() (status, message string) {
	from, invalidInARow, open := 1, 0, (*openStep)(nil)
	if rs := r.resumed; rs != nil {
		if rs.endMessage != "" {
			return xctevent.StatusFailed, rs.endMessage // the last step already ended the run
		}
		if rs.invalidInARow >= r.svc.cfg.RepairBudget {
			return xctevent.StatusFailed, fmt.Sprintf("the model produced %d invalid outputs in a row (repair budget %d)", rs.invalidInARow, r.svc.cfg.RepairBudget)
		}
		from, invalidInARow, open = rs.next, rs.invalidInARow, rs.open
		if open != nil {
			from = open.step
		}
	}
	for step := from; ; step++ {
		r.at = step
		if r.releaseRequested() {
			return statusReleased, ""
		}
		if status, message, ok := r.stopped(nil); ok {
			if open != nil && status == xctevent.StatusCancelled {
				// A run taken over with a cancel in its key: the step its
				// chain leaves open is closed, nothing more is started.
				if err := r.closeOpen(open); err != nil {
					if status, message, ok := r.stopped(err); ok && status != xctevent.StatusCancelled {
						return status, message
					}
				}
			}
			return status, message
		}
		var outcome iterationOutcome
		var err error
		if open != nil {
			outcome, err = r.finishStep(open)
			open = nil
		} else {
			if step > r.maxSteps {
				e := wire.Errorf(wire.CodeBudgetExceeded, "the run's step budget of %d is used up", r.maxSteps)
				if err := r.record(agentOrchestrator, errorEvent(step, "", e)); err != nil {
					if status, message, ok := r.stopped(err); ok {
						return status, message
					}
					return xctevent.StatusFailed, err.Error()
				}
				return xctevent.StatusFailed, e.GetMessage()
			}
			outcome, err = r.iterate(step)
		}
		if err != nil {
			if status, message, ok := r.stopped(err); ok {
				return status, message
			}
			return xctevent.StatusFailed, err.Error()
		}
		if outcome.kind == outcomeStep && outcome.message == xctevent.OutcomeSuccess {
			r.consecutiveErrors = 0
		} else if outcome.kind != outcomeDone {
			r.consecutiveErrors++
		}
		switch outcome.kind {
		case outcomeDone:
			return xctevent.StatusDone, outcome.message
		case outcomeInvalid:
			invalidInARow++
			if invalidInARow >= r.svc.cfg.RepairBudget {
				return xctevent.StatusFailed, fmt.Sprintf("the model produced %d invalid outputs in a row (repair budget %d)", invalidInARow, r.svc.cfg.RepairBudget)
			}
		default:
			invalidInARow = 0
		}
	}
}

type outcomeKind int

const (
	outcomeStep outcomeKind = iota
	outcomeInvalid
	outcomeDone
)

type iterationOutcome struct {
	kind    outcomeKind
	message string
}

// iterate runs one step. It returns an error only when the run must end.
func (r *run) iterate(step int) (iterationOutcome, error) {
	started := time.Now()
	var (
		resp            *xctv1.ProposeResponse
		agent, modelRef string
		err             error
	)
	if r.crew != nil {
		// The crew's agent in control proposes, on its model (crew.go).
		if resp, agent, modelRef, err = r.crewPropose(step); err != nil {
			return iterationOutcome{}, err
		}
	} else {
		agent, modelRef = r.proposer.Name(), r.model
		req := &xctv1.ProposeRequest{
			RunId:        r.id,
			Goal:         r.goal,
			Tools:        r.tools,
			History:      r.transcript.history(),
			Instructions: instructions,
		}
		resp, err = r.callModel(r.proposer, r.model, agent, req)
		if err != nil {
			// What the failed call used counts against the run, as a crew's
			// fallback does (crewPropose): run_finished says so. An
			// endpoint that did not say is charged an estimate.
			spent := r.failedCallTokens(err, req)
			if spent != nil {
				r.tokensIn += spent.Input
				r.tokensOut += spent.Output
			}
			if cause := context.Cause(r.ctx); cause != nil {
				return iterationOutcome{}, cause
			}
			// The model endpoint failed: that is not model output, and there are
			// no implicit retries. Record it (with what the call used, so a run
			// taken over before its run_finished counts it) and end the run.
			e := wire.Errorf(wire.CodeGenerationFailed, "model %s did not answer: %v", agent, err)
			ev := errorEvent(step, "", e)
			ev.Tokens = spent
			if spent != nil {
				ev.Unrecorded = r.chargeUnrecorded(spent.Input, spent.Output)
			} else {
				ev.Unrecorded = r.chargeUnrecorded(0, 0)
			}
			if rerr := r.record(agent, ev); rerr != nil {
				return iterationOutcome{}, rerr
			}
			return iterationOutcome{}, fmt.Errorf("model %s did not answer: %w", agent, err)
		}
	}
	tokens := xctevent.Tokens{Input: resp.GetUsage().GetInputTokens(), Output: resp.GetUsage().GetOutputTokens()}
	r.tokensIn += resp.GetUsage().GetInputTokens()
	r.tokensOut += resp.GetUsage().GetOutputTokens()
	r.noteCall(tokens)
	// The step's tokens (its step_end's): its call's, and what it charges
	// for calls of earlier owners that no event holds.
	unrecorded := r.chargeUnrecorded(tokens.Input, tokens.Output)
	charged := tokens
	if unrecorded != nil {
		charged.Input += unrecorded.Tokens.Input
		charged.Output += unrecorded.Tokens.Output
	}

	decision, args, perr := wire.ParseDecisionArgs([]byte(resp.GetOutput()))
	if perr != nil {
		return iterationOutcome{kind: outcomeInvalid}, r.recordInvalid(step, agent, resp.GetOutput(), perr, tokens, unrecorded, charged, started)
	}
	if done := decision.GetDone(); done != nil {
		return iterationOutcome{kind: outcomeDone, message: done.GetMessage()}, nil
	}
	ns := decision.GetNextStep()
	// The arguments as JSON values, once (as parsed: ns.Arguments is made
	// from this map): the step id, the step_start and the tool_call are all
	// made from it.
	stepID := wire.StepIDOf(r.id, step, ns.GetTool(), args)
	if r.svc.log.Enabled(context.Background(), slog.LevelDebug) {
		r.svc.log.Debug("step proposed", "run", r.id, "step", step, "tool", ns.GetTool())
	}
	proposed := xctevent.StepStart{
		Step: step, StepID: stepID, Intent: ns.GetGoal(), InputSummary: summarizeProposal(ns.GetTool(), args),
		Tool: ns.GetTool(), Arguments: args, Model: resp.GetModel(), Confidence: ns.Confidence,
		Tokens:     &tokens, // so a run taken over before the step_end counts them (resume.go)
		Unrecorded: unrecorded,
	}
	var ev xctevent.Event = proposed
	if r.crew != nil {
		// The agent's profile, with the model that served the step.
		ev = crew.Merge(proposed, r.crew.sess.StepStartFields(modelRef))
	}
	st := &openStep{step: step, stepID: stepID, ns: ns, args: args, agent: agent, tokens: charged, started: started}
	if r.crew != nil || r.svc.cfg.EventPerMessage {
		// On the chain before the validator is asked: a crew's session
		// folds it first (a step_start decays the facts the verdict weighs).
		if err := r.record(agent, ev); err != nil {
			return iterationOutcome{}, err
		}
	} else {
		// Recorded with its verdict, in one message (decideStep): until
		// then nothing of the step is on the chain, and nothing acts.
		st.start = &pending{agent: agent, ev: ev, at: time.Now()}
	}
	return r.finishStep(st)
}

// callModel asks proposer p (model reference ref) for the next decision,
// within the propose timeout. A proposer that streams hands its stream's
// events to the chain as they come, recorded by agent.
func (r *run) callModel(p Proposer, ref, agent string, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	pctx, cancel := context.WithTimeout(r.ctx, r.svc.cfg.ProposeTimeout)
	defer cancel()
	pctx, chat := r.startChat(pctx, ref)
	var (
		resp *xctv1.ProposeResponse
		err  error
	)
	if sp, ok := p.(StreamingProposer); ok && sp.Streaming() {
		resp, err = sp.ProposeStream(pctx, req, func(ev xctevent.Event) error { return r.record(agent, ev) })
	} else {
		resp, err = p.Propose(pctx, req)
	}
	r.endChat(chat, resp, err)
	if err != nil && errors.Is(context.Cause(r.ctx), errReleased) {
		r.callCut = true // the endpoint may have charged for it: run_released says so
	}
	return resp, err
}

// openStep is a step whose step_start is on the chain (or held in start,
// to go with its verdict), and what else of it is: nothing yet for a step just proposed; anything up to its outcome
// for a step resumed from the chain of another orchestrator.
type openStep struct {
	// start is the step_start of a step just proposed, when it goes on the
	// chain with the verdict (decideStep) rather than before it.
	start   *pending
	step    int
	stepID  string
	ns      *xctv1.NextStep
	args    map[string]any // ns's arguments as JSON values (shared, never modified)
	agent   string
	tokens  xctevent.Tokens // what the step's step_end records: its call's, and unrecorded calls it charges
	started time.Time
	at      time.Time // a resumed step's step_start time on the chain (started is the resume's)

	invalid           bool           // the model's output was not a decision
	argsRedacted      bool           // the chain's arguments are not the proposal's (redacted)
	errorRecorded     bool           // (invalid) its error event is on the chain
	verdict           *xctv1.Verdict // the last verdict on the chain
	verdictAgent      string
	approvalRequested bool
	approvalExpires   time.Time
	decided           string // approved, denied or expired, once recorded
	outcome, summary  string // once the tool_call or error is on the chain
	inDoubt           *xctv1.Error
	doubtRecorded     bool // step_in_doubt is on the chain: the run waits for the outcome
	resumed           bool // read from the chain after a takeover: an earlier call may have acted
	system            bool // a system step (a rollback's undo): judged with validateSystem
	// attempted: an attempt of the step may have acted (an Execute sent
	// with an allow that the executor did not refuse before its claim;
	// for a resumed step, the chain's xctevent.Step.Attempted).
	attempted bool
}

// inDoubtMessage is how a run stopped by a step in doubt ends.
func inDoubtMessage(runID string, step int, stepID string, e *xctv1.Error) string {
	return fmt.Sprintf("step %d (%s) is in doubt: %s; decide with: xct resolve %s %d --outcome succeeded|failed|retry",
		step, stepID, e.GetMessage(), runID, step)
}

// finishInvalid ends a step whose invalid model output is on the chain
// but whose error or step_end is not (a step resumed after a takeover).
func (r *run) finishInvalid(st *openStep) error {
	e := wire.Errorf(wire.CodeGenerationFailed, "the model's output was not a decision")
	if !st.errorRecorded {
		if err := r.record(st.agent, errorEvent(st.step, "", e)); err != nil {
			return err
		}
	}
	return r.record(st.agent, st.end(xctevent.OutcomeInvalid, e.GetMessage()))
}

// unknownOutcome reports whether an error leaves open whether the step
// acted: the executor says it is in doubt, or the call to it failed in
// flight.
func unknownOutcome(e *xctv1.Error) bool {
	if e.GetCode() == string(wire.CodeInDoubt) {
		return true
	}
	if unknown, ok := e.GetDetails().AsMap()["outcome_unknown"].(bool); ok && unknown {
		return true
	}
	return false
}

// recordInvalid records model output that is not a decision: it goes back
// to the model as an error signal.
func (r *run) recordInvalid(step int, agent, raw string, perr error, tokens xctevent.Tokens, unrecorded *xctevent.Unrecorded, charged xctevent.Tokens, started time.Time) error {
	const keep = 4096
	shown := raw
	if len(shown) > keep {
		// Cut on a character boundary: the text goes on the chain.
		shown = text.Truncate(shown, keep) + "(truncated)"
	}
	if err := r.record(agent, xctevent.StepStart{Step: step, InputSummary: "invalid model output", Raw: &shown, Tokens: &tokens, Unrecorded: unrecorded}); err != nil {
		return err
	}
	e := wire.Errorf(wire.CodeGenerationFailed, "%v", perr)
	if err := r.record(agent, errorEvent(step, "", e)); err != nil {
		return err
	}
	st := &openStep{step: step, tokens: charged, started: started}
	return r.record(agent, st.end(xctevent.OutcomeInvalid, e.GetMessage()))
}

// validate asks the validator. A validator that cannot be asked, or that
// answers without a decision, is a deny: the system fails closed.
func (r *run) validate(step int, stepID string, ns *xctv1.NextStep) (*xctv1.Verdict, string) {
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	defer cancel()
	req := &xctv1.ValidateRequest{
		Run:      r.runContext(step),
		Step:     int32(step),
		StepId:   stepID,
		Proposal: ns,
	}
	req.Crew = r.crewContext(ns)
	resp, err := r.svc.validator.Validate(ctx, req)
	if err == nil && resp.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED {
		return resp.GetVerdict(), agentValidator
	}
	reason := "the validator returned no decision"
	if err != nil {
		reason = "the validator could not be reached: " + status.Convert(err).Message()
	}
	r.log.Warn("validator unavailable: denying", "run", r.id, "step", step, "err", err)
	return failClosed(reason), agentOrchestrator
}

// execute asks the executor to run an allowed step, with the validator's
// signed verdict for it (binding.go). Cancelling the run does not
// interrupt it: a step that started is recorded as it ended. A verdict
// the executor refuses because its policy was replaced after it was
// signed (a reload while the step was on its way) is judged again, once,
// under the policy in force (rejudge), which may wait for a human. The
// error is for a run that must stop (cancelled or handed over while it
// waits, the log lost).
func (r *run) execute(st *openStep, v *xctv1.Verdict) (*xctv1.ExecuteResponse, *xctv1.Error, error) {
	signed, replay, refused := r.signedVerdict(st, v)
	if replay != nil || refused != nil {
		return replay, refused, nil
	}
	req := &xctv1.ExecuteRequest{
		RunId:     r.id,
		StepId:    st.stepID,
		Tool:      st.ns.GetTool(),
		Arguments: st.ns.GetArguments(),
		Verdict:   signed,
	}
	resp, notSent, err := r.callExecuteWithin(req)
	if err != nil && policyReplaced(err) {
		var stop error
		if signed, replay, refused, stop = r.rejudge(st); stop != nil || replay != nil || refused != nil {
			return replay, refused, stop
		}
		req.Verdict = signed
		resp, notSent, err = r.callExecuteWithin(req)
	}
	st.attempted = true // (sent with an allow the executor did not refuse unread: it may have acted)
	if err != nil {
		return nil, failedCall(err, notSent), nil // outcome.go: in doubt unless proven not executed
	}
	return resp, nil, nil
}

// callExecuteWithin is callExecute within the call timeout.
func (r *run) callExecuteWithin(req *xctv1.ExecuteRequest) (*xctv1.ExecuteResponse, bool, error) {
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.CallTimeout)
	defer cancel()
	return r.callExecute(ctx, req)
}

// stopFor cancels the run's loop with cause, under r.recording: an event
// being appended is on the chain before the cause is set, and every event
// appended after sees it (a cancel answered after stopFor is followed by
// no step_start and no Execute: cancelledStep, steps).
// It reports whether run_finished was on the chain already: the cause
// came too late to change how the run ended.
func (r *run) stopFor(cause error) (endRecorded bool) {
	r.recording.Lock()
	defer r.recording.Unlock()
	r.cancel(cause)
	return r.endRecorded
}

// cancelled is the cancel that stopped the run's loop, if one did.
func (r *run) cancelled() (errCancelled, bool) {
	var c errCancelled
	ok := errors.As(context.Cause(r.ctx), &c)
	return c, ok
}

// finishErr records the run's end. A run cancelled before its end is on
// the chain ends cancelled, whatever else was ending it (said after the
// cancel): the cancel was answered, and the chain says it was heard.
func (r *run) finishErr(status, message string) error {
	r.recording.Lock()
	defer r.recording.Unlock()
	if c, ok := r.cancelled(); ok && status != xctevent.StatusCancelled {
		message = fmt.Sprintf("%s (the run was ending %s: %s)", c.Error(), status, message)
		status = xctevent.StatusCancelled
	}
	// Model calls earlier owners may have made that no event holds, owed
	// when the run ends without another call (a takeover that found a
	// cancel): charged in the totals, estimated as a failed call is.
	if r.unrecorded > 0 {
		est := r.callEstimate()
		r.chargeUnrecorded(est.Input, est.Output)
	}
	err := r.recordLocked(agentOrchestrator, xctevent.RunFinished{
		Status: status, Message: message, Steps: len(r.transcript.turns),
		Tokens: xctevent.Tokens{Input: r.tokensIn, Output: r.tokensOut},
	})
	if err == nil {
		r.endRecorded = true
	}
	if err != nil {
		r.log.Error("run ended but its end could not be recorded", "run", r.id, "status", status, "message", r.redactText(message), "err", err)
	}
	return err
}

// summarizeProposal is a short human line for a proposal: the tool and its
// path- or name-like arguments.
func summarizeProposal(tool string, args map[string]any) string {
	var b strings.Builder
	b.WriteString(tool)
	for _, k := range []string{"path", "from", "to", "url", "name", "command"} {
		if v, ok := args[k].(string); ok {
			if len(v) > 80 {
				v = v[:80] + "…"
			}
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	return b.String()
}
