package orchestrator

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/provision"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Honest outcomes (docs/lifecycle.md, "A step in doubt"). A step is "not
// executed" only when that is proven: the executor refused the request
// before claiming the step, the request never left this process, or the
// executor's record says so. Everything else is in doubt until the record
// is read; the model is told nothing about the step before that, and what
// it is told is what the record holds.

// callExecute is Execute with what its failure proves: notSent is true when
// the request provably never reached the executor (no transport stream was
// ever opened for it).
func (r *run) callExecute(ctx context.Context, req *xctv1.ExecuteRequest) (resp *xctv1.ExecuteResponse, notSent bool, err error) {
	var p peer.Peer
	resp, err = r.svc.executor.Execute(ctx, req, grpc.Peer(&p))
	// gRPC fills the peer only once a transport stream existed for the
	// call: without one not a byte of the request was written.
	return resp, err != nil && p.Addr == nil, err
}

// failedCall classifies a failed Execute call. Only a call refused before
// the claim (InvalidArgument) or never sent is "not executed"; any other
// failure (a broken stream, a deadline, a record store the executor could
// not use, an executor killed mid-call) leaves the outcome unknown.
func failedCall(err error, notSent bool) *xctv1.Error {
	st := status.Convert(err)
	switch {
	case st.Code() == codes.InvalidArgument:
		return wire.WithDetails(wire.Errorf(wire.CodeExecutorUnavailable, "the executor refused the call: %s", st.Message()),
			map[string]any{"grpc_code": st.Code().String(), "outcome_unknown": false, "not_executed": true})
	case notSent:
		return wire.WithDetails(wire.Errorf(wire.CodeExecutorUnavailable, "the executor could not be reached, the step was not sent: %s", st.Message()),
			map[string]any{"grpc_code": st.Code().String(), "outcome_unknown": false, "not_executed": true})
	}
	return wire.WithDetails(wire.Errorf(wire.CodeInDoubt, "the call to the executor failed in flight (%s: %s): the step may have acted", st.Code(), st.Message()),
		map[string]any{"grpc_code": st.Code().String(), "outcome_unknown": true})
}

// recordedOutcome is what the executor's record of a step says.
type recordedOutcome int

const (
	outcomeUnknown  recordedOutcome = iota // the record could not be read
	outcomeFinal                           // succeeded or failed (a fence too)
	outcomeRunning                         // pending, before its deadline
	outcomeDoubtful                        // in doubt: pending past its deadline, or recorded so
	outcomeRetry                           // a human allowed one more attempt
)

// readRecord asks the executor for the step's record, fencing a step
// without one (it is then provably not executed) when fence is set. A
// record read once and missing later proves nothing (it outlived the
// executor's --step-retention while the step waited, or was deleted): the
// step may have acted, so it is not fenced then, and stays unknown.
func (r *run) readRecord(stepID string, fence bool) (recordedOutcome, *xctv1.GetStepResponse, error) {
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.TakeoverTimeout)
	defer cancel()
	resp, err := r.svc.executor.GetStep(ctx, &xctv1.GetStepRequest{StepId: stepID, Fence: fence})
	if !fence && status.Code(err) == codes.NotFound {
		return outcomeUnknown, nil, status.Errorf(codes.NotFound, "the executor has no record of step %s, which proves nothing now "+
			"(a record read before is gone, or one could have outlived the step retention): the step may have acted, and only a human's decision (xct resolve) settles it", stepID)
	}
	if err != nil {
		return outcomeUnknown, nil, err
	}
	switch rec := resp.GetStep(); {
	case rec.GetState() == xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED, rec.GetState() == xctv1.StepRecordState_STEP_RECORD_STATE_FAILED:
		return outcomeFinal, resp, nil
	case rec.GetState() == xctv1.StepRecordState_STEP_RECORD_STATE_RETRY:
		return outcomeRetry, resp, nil
	case resp.GetInDoubt():
		return outcomeDoubtful, resp, nil
	case rec.GetState() == xctv1.StepRecordState_STEP_RECORD_STATE_PENDING:
		return outcomeRunning, resp, nil
	}
	return outcomeUnknown, resp, fmt.Errorf("step %s has a record in state %s", stepID, resp.GetStep().GetState())
}

// fenceable reports whether a step may be fenced (a missing record
// recorded as not executed): only while no record of it can have expired,
// that is while the step is younger than the executor's records are kept
// (the steps bucket's age limit, --step-retention; a minute's margin for
// clocks). An older step without a record may have acted: it is unknown.
func (r *run) fenceable(st *openStep) bool {
	ctx, cancel := context.WithTimeout(r.traceCtx(context.Background()), r.svc.cfg.TakeoverTimeout)
	defer cancel()
	s, err := r.svc.events.JetStream().Stream(ctx, "KV_"+provision.StepsBucket)
	if err != nil {
		r.log.Warn("the step records' retention cannot be read; a step without a record is not taken for not executed", "run", r.id, "step", st.step, "err", err)
		return false
	}
	since := st.started
	if !st.at.IsZero() {
		since = st.at
	}
	keep := s.CachedInfo().Config.MaxAge
	return keep <= 0 || time.Since(since) < keep-time.Minute
}

// replay is the answer a final record gives.
func replay(rec *xctv1.StepRecord) *xctv1.ExecuteResponse {
	return &xctv1.ExecuteResponse{Response: rec.GetResponse(), Duration: rec.GetDuration(), Replayed: true, Attempt: rec.GetAttempt()}
}

// settleStep learns the outcome of a step whose call left it unknown
// (doubt says why). It reads the executor's record with backoff while the
// executor or its store cannot answer, waits while the step is still
// running, re-runs an idempotent step found in doubt once, runs a step a
// human released for a retry, and otherwise waits for a human: the run is
// IN_DOUBT (a step_in_doubt event) until the record has an outcome. A
// read-only or idempotent tool is not waited for past SettleTimeout: its
// unknown outcome is returned as it is, and settleRepeatable makes it a
// plain error (running it again is safe). It returns the outcome, or an
// error when the run must stop (cancelled, handed over, the log lost).
func (r *run) settleStep(st *openStep, v *xctv1.Verdict, doubt *xctv1.Error) (*xctv1.ExecuteResponse, *xctv1.Error, error) {
	wait := 50 * time.Millisecond
	quiet := time.Now().Add(r.svc.cfg.SettleTimeout) // until then, the run is not yet IN_DOUBT
	rerun := false
	seen := false // a record of the step was read: its absence later is no proof
	for {
		state, resp, err := r.readRecord(st.stepID, !seen && r.fenceable(st))
		seen = seen || state == outcomeRunning || state == outcomeDoubtful || state == outcomeRetry
		switch state {
		case outcomeFinal:
			rec := resp.GetStep()
			if st.doubtRecorded {
				r.log.Info("step in doubt settled from its record", "run", r.id, "step", st.step, "state", rec.GetState().String())
			}
			return replay(rec), nil, nil
		case outcomeRetry:
			res, execErr, err := r.call(st, v)
			if err != nil {
				return nil, nil, err
			}
			if execErr == nil || !unknownOutcome(execErr) {
				return res, execErr, nil
			}
			doubt = execErr
		case outcomeDoubtful:
			if resp.GetStep().GetIdempotent() && !rerun {
				// Running an idempotent call again is safe: the executor
				// re-runs it (once per attempt it finds in doubt).
				rerun = true
				r.log.Warn("step in doubt re-run (idempotent tool)", "run", r.id, "step", st.step, "step_id", st.stepID)
				res, execErr, err := r.call(st, v)
				if err != nil {
					return nil, nil, err
				}
				execErr = notStartedAgain(st.step, recordState(resp), res, execErr)
				if execErr == nil || !unknownOutcome(execErr) {
					return res, execErr, nil
				}
				doubt = execErr
				if notStarted(execErr) {
					// No fresh verdict (the validator down, say): the
					// re-run never started, so it is still to be had;
					// the loop waits and tries again.
					rerun = false
				} else {
					continue
				}
			} else {
				why := "the tool is not idempotent"
				if resp.GetStep().GetIdempotent() {
					why = "its one re-run did not settle it"
				}
				doubt = wire.Errorf(wire.CodeInDoubt, "step %s (%s) may or may not have acted: its executor's record is %s and %s",
					st.stepID, resp.GetStep().GetTool(), recordState(resp), why)
				quiet = time.Time{} // only a human can settle it: say so now
			}
		case outcomeRunning:
			// Still executing somewhere: its outcome or its deadline comes.
		default:
			r.log.Warn("cannot read the record of a step in doubt; asking again", "run", r.id, "step", st.step, "err", err)
			if err != nil {
				doubt = wire.Errorf(wire.CodeInDoubt, "the outcome of step %s is unknown: %s", st.stepID, status.Convert(err).Message())
			}
		}
		if !time.Now().Before(quiet) && state != outcomeDoubtful && r.repeatable(st.ns.GetTool()) {
			return nil, doubt, nil // safe to propose again: settleRepeatable says so
		}
		if !st.doubtRecorded && !time.Now().Before(quiet) {
			if err := r.recordInDoubt(st, doubt, resp); err != nil {
				return nil, nil, err
			}
		}
		if err := r.pause(wait); err != nil {
			return nil, nil, err
		}
		wait = min(wait*2, r.svc.cfg.SettlePoll)
	}
}

// call executes the open step again with its step id (the executor answers
// from its record, or runs an attempt a human or its idempotence allows).
func (r *run) call(st *openStep, v *xctv1.Verdict) (*xctv1.ExecuteResponse, *xctv1.Error, error) {
	var res *xctv1.ExecuteResponse
	var execErr *xctv1.Error
	if st.argsRedacted {
		res, execErr = r.recoverStep(st)
	} else {
		// A verdict starts one attempt: another attempt needs a fresh one
		// (binding.go asks the validator again and records it).
		var err error
		if res, execErr, err = r.execute(st, unsigned(v)); err != nil {
			return nil, nil, err
		}
	}
	if execErr == nil {
		execErr = res.GetResponse().GetError()
	}
	if execErr != nil && !unknownOutcome(execErr) {
		return nil, execErr, nil
	}
	return res, execErr, nil
}

// notStartedAgain is the answer to a re-run of a step an earlier attempt
// of which may have acted (its record is earlier), said truthfully: a
// call that proves only that the re-run did not act (never sent, or
// refused before the claim: failedCall's not_executed) says nothing of the
// earlier attempt, so the step is still in doubt and no new attempt
// started (the settle loop tries again). A replayed record (res) is the
// step's own outcome and stands.
func notStartedAgain(step int, earlier string, res *xctv1.ExecuteResponse, e *xctv1.Error) *xctv1.Error {
	if notExec, _ := e.GetDetails().AsMap()["not_executed"].(bool); res != nil || !notExec {
		return e
	}
	return stillInDoubt(step, earlier, e)
}

// notStarted reports whether e says a new attempt of a step never started
// (binding.go's stillInDoubt: no fresh verdict for it).
func notStarted(e *xctv1.Error) bool {
	_, ok := e.GetDetails().AsMap()["not_started"]
	return ok
}

// unsigned is v without its signed grant.
func unsigned(v *xctv1.Verdict) *xctv1.Verdict {
	out := proto.CloneOf(v)
	out.Signed = nil
	return out
}

// provenNotExecuted checks a "not executed" answer about the call just made
// against what the step went through before: for a step resumed from its
// chain, an earlier call (by the previous owner) may have acted, so the
// answer about this call says nothing about the step, and its outcome is
// read from the record like any unknown one.
func provenNotExecuted(st *openStep, e *xctv1.Error) *xctv1.Error {
	if notExec, _ := e.GetDetails().AsMap()["not_executed"].(bool); !notExec || !st.resumed {
		return e
	}
	return wire.WithDetails(wire.Errorf(wire.CodeInDoubt, "%s; but the step was resumed after a takeover, so an earlier call may have acted", e.GetMessage()),
		map[string]any{"outcome_unknown": true})
}

// recordState names a record's state for people.
func recordState(resp *xctv1.GetStepResponse) string {
	if resp == nil {
		return "unknown (not readable)"
	}
	s := resp.GetStep().GetState().String()
	if resp.GetInDoubt() && resp.GetStep().GetState() == xctv1.StepRecordState_STEP_RECORD_STATE_PENDING {
		return "pending past its deadline"
	}
	return map[string]string{
		"STEP_RECORD_STATE_PENDING":   "pending",
		"STEP_RECORD_STATE_IN_DOUBT":  "in doubt",
		"STEP_RECORD_STATE_SUCCEEDED": "succeeded",
		"STEP_RECORD_STATE_FAILED":    "failed",
		"STEP_RECORD_STATE_RETRY":     "released for a retry",
	}[s]
}

// recordInDoubt puts the step's doubt on the chain: the run is IN_DOUBT
// from here until the step's outcome follows.
func (r *run) recordInDoubt(st *openStep, doubt *xctv1.Error, resp *xctv1.GetStepResponse) error {
	data := xctevent.StepInDoubt{
		Step: st.step, StepID: st.stepID, Tool: st.ns.GetTool(), Reason: doubt.GetMessage(),
		RecordState: recordState(resp),
		Resolve:     fmt.Sprintf("xct resolve %s %d --outcome succeeded|failed|retry", r.id, st.step),
	}
	if err := r.record(agentOrchestrator, data); err != nil {
		return err
	}
	st.doubtRecorded = true
	r.log.Error("step in doubt: the run waits for its outcome", "run", r.id, "step", st.step, "step_id", st.stepID, "reason", r.redactText(doubt.GetMessage()),
		"resolve", data.Resolve)
	return nil
}

// pause waits d, or returns why the run must stop waiting: cancelled, or
// handed over (the next owner settles the step from the chain).
func (r *run) pause(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.ctx.Done():
		return context.Cause(r.ctx)
	case <-r.release:
		return errReleased
	}
}
