package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
)

// recordTimeout bounds the writes that record a step's outcome: they run
// even when the caller has gone, because the effect already happened.
const recordTimeout = 10 * time.Second

// recordWait is Config.RecordTimeout, or recordTimeout.
func (s *Service) recordWait() time.Duration {
	if s.cfg.RecordTimeout > 0 {
		return s.cfg.RecordTimeout
	}
	return recordTimeout
}

// maxStepIDBytes bounds a step id (it is a KV key).
const maxStepIDBytes = 128

// Record states, shorter.
const (
	statePending   = xctv1.StepRecordState_STEP_RECORD_STATE_PENDING
	stateSucceeded = xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED
	stateFailed    = xctv1.StepRecordState_STEP_RECORD_STATE_FAILED
	stateInDoubt   = xctv1.StepRecordState_STEP_RECORD_STATE_IN_DOUBT
	stateRetry     = xctv1.StepRecordState_STEP_RECORD_STATE_RETRY
)

// validStepID accepts ids that are valid KV keys and blob names:
// 1-128 of A-Z a-z 0-9 _ -.
func validStepID(id string) bool {
	if id == "" || len(id) > maxStepIDBytes {
		return false
	}
	for _, r := range id {
		if !wordRune(r) {
			return false
		}
	}
	return true
}

// argumentsDigest is "sha256:" and the hex SHA-256 of the arguments'
// canonical JSON (RFC 8785): the form step ids and signed verdicts use.
func argumentsDigest(args map[string]any) string {
	return readCall(args).digest
}

// call is a call's arguments read once: as JSON values, in canonical form
// (nil if they have none, which cannot happen for structpb values) and
// their digest. The verdict check and the step record use the same.
type call struct {
	args      map[string]any
	canonical []byte
	digest    string
}

// readCall reads args (nil: {}).
func readCall(args map[string]any) call {
	if args == nil {
		args = map[string]any{}
	}
	c, err := verdict.CanonicalArguments(args)
	if err != nil {
		// structpb values are always JSON; keep a digest that matches
		// nothing canonical.
		sum := sha256.Sum256([]byte(fmt.Sprint(args)))
		return call{args: args, digest: "sha256-invalid:" + hex.EncodeToString(sum[:])}
	}
	return call{args: args, canonical: c, digest: verdict.DigestOf(c)}
}

// callOf reads a request's arguments.
func callOf(req *xctv1.ExecuteRequest) call {
	var args map[string]any
	if req.GetArguments() != nil {
		args = req.GetArguments().AsMap()
		unsignZeros(args)
	}
	return readCall(args)
}

// unsignZeros makes every -0 in v 0, in place. The canonical form that
// verdicts and step ids digest writes -0 as 0 (RFC 8785), so a verdict
// for {"n": 0} verifies for {"n": -0}: the tool must act on the value the
// verdict digests, not on the other spelling (a remote tool or an MCP
// server is sent "-0").
func unsignZeros(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = unsignZero(e)
		}
	case []any:
		for i, e := range v {
			v[i] = unsignZero(e)
		}
	}
}

// unsignZero is e with -0 made 0, its members so made in place.
func unsignZero(e any) any {
	if f, ok := e.(float64); ok && f == 0 {
		return 0.0
	}
	unsignZeros(e)
	return e
}

// legacyArgumentsDigest is the digest records written before canonical
// digests carry: encoding/json with sorted keys. A record that has one is
// still matched, so a step asked again after an upgrade is replayed.
func legacyArgumentsDigest(args map[string]any) string {
	if args == nil {
		args = map[string]any{}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		raw = []byte(fmt.Sprint(args))
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// sameArguments reports whether a recorded digest is of the call's
// arguments (the legacy form is computed only when the canonical one
// differs).
func sameArguments(recorded string, c call) bool {
	return recorded == c.digest || recorded == legacyArgumentsDigest(c.args)
}

// stepClaim is this executor's right to act for one attempt of a step: the
// pending record it wrote and that record's revision.
type stepClaim struct {
	store StepStore
	rec   *xctv1.StepRecord
	rev   uint64
	// prev is the record this attempt replaced (nil for the first): what
	// to put back if the attempt ends without acting.
	prev *xctv1.StepRecord
}

// claim makes this executor the one that acts for the step, or returns
// what to answer instead: the recorded outcome (replay), IN_DOUBT, or a
// refusal. A gRPC error means the record store could not be used, so
// nothing was executed; or the caller went away while waiting.
func (s *Service) claim(ctx context.Context, req *xctv1.ExecuteRequest, st *servedTool, c call) (*stepClaim, *xctv1.ExecuteResponse, error) {
	store, err := s.store()
	if err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "%v; this call did not run the tool", err)
	}
	effect, idem := st.classify(c.args)
	digest := c.digest
	fresh := func(attempt int32) *xctv1.StepRecord {
		now := time.Now()
		return &xctv1.StepRecord{
			StepId:          req.GetStepId(),
			RunId:           req.GetRunId(),
			Tool:            req.GetTool(),
			ArgumentsDigest: digest,
			State:           statePending,
			Attempt:         attempt,
			Effect:          effect,
			Idempotent:      idem,
			Executor:        s.instance,
			StartedAt:       timestamppb.New(now),
			Deadline:        timestamppb.New(now.Add(st.timeout + s.cfg.StepGrace)),
		}
	}
	// Record writes are not cut short by the caller: a write abandoned
	// halfway could land unseen and leave a pending record nobody acts on.
	// (Each JetStream request is bounded by the client's own timeout.)
	sctx := context.WithoutCancel(ctx)
	// noStart refuses every new attempt on this call's verdict (its
	// policy was replaced, epoch.go); a recorded outcome is still
	// answered, so the record is read instead of created.
	noStart := s.startRefusal(ctx, req.GetStepId())
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, status.FromContextError(err).Err()
		}
		if noStart == nil {
			rec := withGrant(fresh(1), grantOf(ctx))
			rev, err := store.Create(sctx, rec)
			if err == nil {
				return &stepClaim{store: store, rec: rec, rev: rev}, nil, nil
			}
			if !errors.Is(err, ErrStepExists) {
				if s.unclaim(sctx, store, rec, nil) {
					continue // this claim landed unseen and is released: claim again
				}
				return nil, nil, storeErr(ctx, req.GetStepId(), err)
			}
		}
		cur, rev, err := store.Get(sctx, req.GetStepId())
		if errors.Is(err, ErrStepNotFound) {
			if noStart != nil {
				return nil, nil, noStart
			}
			continue // removed meanwhile: try to create it again
		}
		if err != nil {
			return nil, nil, storeErr(ctx, req.GetStepId(), err)
		}
		// A record without a call (a fence, or a resolution of a step that
		// had none) holds for whatever call carries its step id.
		called := cur.GetTool() != "" || cur.GetArgumentsDigest() != ""
		if called && (cur.GetTool() != req.GetTool() || !sameArguments(cur.GetArgumentsDigest(), c)) {
			return nil, s.answer(wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
				"step id %s was already used for another call (tool %s); a step id names one call", req.GetStepId(), cur.GetTool()),
				map[string]any{"step_id": req.GetStepId(), "recorded_tool": cur.GetTool()}), cur, false), nil
		}
		switch cur.GetState() {
		case stateSucceeded, stateFailed:
			if unboundResolution(cur, called) {
				if noStart != nil {
					return nil, nil, noStart
				}
				// A human's decision about a step that had no record, not
				// bound to a doubt on the run's chain: it settled no doubt
				// (the step may have had yet to run), so it does not stand
				// for the call. (Session 14: an operator resolved a step
				// waiting for its approval "succeeded" with a result of
				// their own, and the approved call replayed it.)
				r := cur.GetResolution()
				reason := fmt.Sprintf("resolved %s by %s at %s, bound to no doubt on the run's chain: a resolution settles a step in doubt, not one yet to run",
					strings.ToLower(strings.TrimPrefix(r.GetDecision().String(), "STEP_DECISION_")), r.GetResolvedBy(), r.GetResolvedAt().AsTime().UTC().Format(time.RFC3339))
				next := withGrant(rerun(cur, fresh(1), reason), grantOf(ctx))
				next.Tool, next.ArgumentsDigest, next.Effect, next.Idempotent = req.GetTool(), digest, effect, idem
				next.Resolution = nil
				if rev, err := store.Update(sctx, next, rev); err == nil {
					s.log.WarnContext(ctx, "a step resolved before it was allowed runs under its verdict", "step_id", cur.GetStepId(),
						"resolved_by", r.GetResolvedBy(), "decision", r.GetDecision().String())
					return &stepClaim{store: store, rec: next, rev: rev, prev: cur}, nil, nil
				} else if !errors.Is(err, ErrStepConflict) && !s.unclaim(sctx, store, next, cur) {
					return nil, nil, storeErr(ctx, req.GetStepId(), err)
				}
				continue
			}
			resp, err := s.recordedResponse(sctx, store, cur)
			if err != nil {
				return nil, nil, storeErr(ctx, req.GetStepId(), err)
			}
			return nil, &xctv1.ExecuteResponse{Response: resp, Duration: cur.GetDuration(), Replayed: true, Attempt: cur.GetAttempt()}, nil
		case stateInDoubt:
			return nil, s.answer(inDoubtError(cur), cur, true), nil
		case stateRetry:
			if grantUsed(cur, grantOf(ctx)) {
				return nil, nil, grantSpent(cur)
			}
			if noStart != nil {
				return nil, nil, noStart
			}
			next := withGrant(rerun(cur, fresh(cur.GetAttempt()+1), "retry allowed by "+cur.GetResolution().GetResolvedBy()), grantOf(ctx))
			next.Tool, next.ArgumentsDigest = req.GetTool(), digest
			if rev, err := store.Update(sctx, next, rev); err == nil {
				return &stepClaim{store: store, rec: next, rev: rev, prev: cur}, nil, nil
			} else if !errors.Is(err, ErrStepConflict) && !s.unclaim(sctx, store, next, cur) {
				return nil, nil, storeErr(ctx, req.GetStepId(), err)
			}
		case statePending:
			deadline := cur.GetDeadline().AsTime()
			if time.Now().Before(deadline) {
				// Another call is executing the step (here or in another
				// executor): wait for its outcome, at most until its
				// deadline, then look again.
				wctx, cancel := context.WithDeadline(ctx, deadline)
				err := store.WaitChange(wctx, req.GetStepId(), rev)
				cancel()
				if ctx.Err() != nil {
					return nil, nil, status.FromContextError(ctx.Err()).Err()
				}
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					return nil, nil, storeErr(ctx, req.GetStepId(), err)
				}
				continue
			}
			// Its executor stopped mid-step: the step is in doubt, unless
			// its tool provably had not acted yet.
			if s.unstarted(cur, time.Now()) {
				if _, _, err := s.settleUnstarted(ctx, store, cur, rev); err == nil {
					continue // its outcome now (or the record as it changed)
				}
				// The store failed: in doubt, as any step whose record
				// cannot be settled.
			}
			if cur.GetIdempotent() {
				if grantUsed(cur, grantOf(ctx)) {
					return nil, nil, grantSpent(cur)
				}
				if noStart != nil {
					return nil, nil, noStart
				}
				reason := fmt.Sprintf("in doubt: attempt %d by %s was not recorded by its deadline; the call is idempotent", cur.GetAttempt(), cur.GetExecutor())
				next := withGrant(rerun(cur, fresh(cur.GetAttempt()+1), reason), grantOf(ctx))
				if rev, err := store.Update(sctx, next, rev); err == nil {
					s.log.WarnContext(ctx, "step in doubt re-run (idempotent)", "step_id", cur.GetStepId(), "tool", cur.GetTool(), "attempt", next.GetAttempt())
					return &stepClaim{store: store, rec: next, rev: rev, prev: cur}, nil, nil
				} else if !errors.Is(err, ErrStepConflict) && !s.unclaim(sctx, store, next, cur) {
					return nil, nil, storeErr(ctx, req.GetStepId(), err)
				}
				continue
			}
			doubt := cloneRecord(cur)
			doubt.State = stateInDoubt
			if _, err := store.Update(sctx, doubt, rev); err == nil {
				s.log.ErrorContext(ctx, "step in doubt: a human must decide", "step_id", cur.GetStepId(), "run_id", cur.GetRunId(), "tool", cur.GetTool(), "attempt", cur.GetAttempt(), "executor", cur.GetExecutor())
				return nil, s.answer(inDoubtError(doubt), doubt, true), nil
			} else if !errors.Is(err, ErrStepConflict) {
				return nil, nil, storeErr(ctx, req.GetStepId(), err)
			}
		default:
			return nil, nil, status.Errorf(codes.DataLoss, "step %s has a record in an unknown state %v; nothing was executed", req.GetStepId(), cur.GetState())
		}
	}
}

// unboundResolution reports whether rec is a human's resolution of a step
// that had no record (no call, no state before it) that no step_in_doubt
// on the run's chain bound: ResolveStep binds every decision it takes with
// chains, so this is one written without (an executor without NATS, or
// before decisions were bound). It does not stand for a call. A fence (the
// orchestrator's "not executed") carries no resolution and still holds; no
// clock is compared.
func unboundResolution(rec *xctv1.StepRecord, called bool) bool {
	r := rec.GetResolution()
	return !called && r != nil && r.GetPreviousState() == xctv1.StepRecordState_STEP_RECORD_STATE_UNSPECIFIED &&
		rec.GetAttempt() == 0 && r.GetInDoubtSeq() == 0
}

// unclaim undoes a claim whose write failed but may have been stored
// unseen (its acknowledgement lost: a timeout, a stream leader change): if
// the step's record is now exactly the claim this call wrote (wrote), it
// did land, and no tool acted for it, so it is released (removed, or put
// back to prev for a later attempt) and the caller claims again; a claim
// left pending would be in doubt at its deadline although nothing acted.
// It reports whether the claim was released; false (the record is not
// this call's, or cannot be read or changed) leaves the outcome to the
// caller's store error.
func (s *Service) unclaim(ctx context.Context, store StepStore, wrote, prev *xctv1.StepRecord) bool {
	cur, rev, err := store.Get(ctx, wrote.GetStepId())
	if err != nil || !proto.Equal(cur, wrote) {
		return false
	}
	if prev == nil {
		err = store.Delete(ctx, wrote.GetStepId(), rev)
	} else {
		_, err = store.Update(ctx, prev, rev)
	}
	if err != nil {
		return false
	}
	s.log.WarnContext(ctx, "step claim stored unseen (its write timed out) and released; claiming again", "step_id", wrote.GetStepId(), "attempt", wrote.GetAttempt())
	return true
}

// rerun is the record of a new attempt of cur, keeping its history.
func rerun(cur, fresh *xctv1.StepRecord, reason string) *xctv1.StepRecord {
	next := cloneRecord(cur)
	next.State = statePending
	next.Attempt = fresh.GetAttempt()
	next.Executor = fresh.GetExecutor()
	next.StartedAt = fresh.GetStartedAt()
	next.Deadline = fresh.GetDeadline()
	next.FinishedAt, next.Response, next.ResponseBlob, next.Duration = nil, nil, "", nil
	next.Reruns = append(next.Reruns, &xctv1.StepRerun{Attempt: next.GetAttempt(), At: fresh.GetStartedAt(), Reason: reason, Executor: fresh.GetExecutor()})
	return next
}

// answer is a response that did not come from running the tool now.
func (s *Service) answer(e *xctv1.Error, rec *xctv1.StepRecord, replayed bool) *xctv1.ExecuteResponse {
	return &xctv1.ExecuteResponse{Response: wire.ErrorResponse(e), Duration: durationpb.New(0), Replayed: replayed, Attempt: rec.GetAttempt()}
}

// settleUnsure applies the rule for a tool that cannot tell whether it
// acted (outcome_unknown) to the call rec records: for a read-only or
// idempotent call the failure is definite (running it again changes
// nothing more, so proposing it again is safe: outcome_unknown false,
// repeatable true, as the orchestrator says for such a tool); any other
// call's step is in doubt, which finish records.
func settleUnsure(resp *xctv1.Response, rec *xctv1.StepRecord) *xctv1.Response {
	e := resp.GetError()
	if !toolUnsure(e) || (rec.GetEffect() != xctv1.Effect_EFFECT_READ && !rec.GetIdempotent()) {
		return resp
	}
	out := proto.CloneOf(e)
	details := e.GetDetails().AsMap()
	details["outcome_unknown"], details["repeatable"] = false, true
	if st, err := structpb.NewStruct(details); err == nil {
		out.Details = st
	}
	out.Message = e.GetMessage() + " (the call is read-only or idempotent: nothing is in doubt, and proposing it again is safe)"
	return wire.ErrorResponse(out)
}

// toolUnsure reports whether a tool's error says it cannot tell whether
// it acted (outcome_unknown: its call was sent and the answer lost).
func toolUnsure(e *xctv1.Error) bool {
	return e.GetDetails().GetFields()["outcome_unknown"].GetBoolValue()
}

// inDoubtError is the IN_DOUBT signal for a step.
func inDoubtError(rec *xctv1.StepRecord) *xctv1.Error {
	why := "its executor stopped before recording the outcome"
	if e := rec.GetResponse().GetError(); toolUnsure(e) {
		why = "the tool could not tell (" + e.GetMessage() + ")"
	}
	return wire.WithDetails(wire.Errorf(wire.CodeInDoubt,
		"step %s (%s) may or may not have acted: %s, and the tool is not idempotent. "+
			"The run must stop until a human checks and resolves the step", rec.GetStepId(), rec.GetTool(), why),
		map[string]any{
			"step_id":    rec.GetStepId(),
			"run_id":     rec.GetRunId(),
			"tool":       rec.GetTool(),
			"attempt":    rec.GetAttempt(),
			"executor":   rec.GetExecutor(),
			"started_at": rec.GetStartedAt().AsTime().Format(time.RFC3339Nano),
			"resolve":    "xct resolve " + rec.GetRunId() + " " + rec.GetStepId() + " --outcome succeeded|failed|retry",
		})
}

// storeErr is the gRPC error for a record store failure during a claim.
// This call did not run the tool, but whether an earlier call of the step
// did is unknown: the record could not be read or written. So the answer
// never says "not executed"; the caller learns the step's outcome from
// its record (GetStep) once the store answers again.
func storeErr(ctx context.Context, stepID string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, ErrStepCorrupt) {
		return status.Errorf(codes.DataLoss, "step %s: record unreadable: %v; this call did not run the tool, the step's outcome is unknown", stepID, err)
	}
	return status.Errorf(codes.Unavailable, "step %s: %s: %v; this call did not run the tool, the step's outcome is unknown until its record can be read", stepID, outcomeUnknown, err)
}

// outcomeUnknown starts every answer of a reader that could not reach the
// step records: never "nothing was executed".
const outcomeUnknown = "outcome unknown: the step record store cannot be reached"

// compensator stores compensations for the claimed attempt.
func (c *stepClaim) compensator() func(*Compensation) error {
	return func(comp *Compensation) error {
		comp.StepID, comp.Attempt = c.rec.GetStepId(), c.rec.GetAttempt()
		data, err := json.Marshal(comp)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		name := fmt.Sprintf("%s.%d.compensation", c.rec.GetStepId(), c.rec.GetAttempt())
		if err := c.store.PutBlob(ctx, name, data); err != nil {
			return fmt.Errorf("store compensation: %w", err)
		}
		next := cloneRecord(c.rec)
		next.Compensations = append(next.Compensations, &xctv1.StepCompensation{
			Attempt: c.rec.GetAttempt(), Blob: name, Size: int64(len(data)), Checksum: checksum(data),
		})
		rev, err := c.store.Update(ctx, next, c.rev)
		if err != nil {
			return fmt.Errorf("record compensation: %w", err)
		}
		c.rec, c.rev = next, rev
		return nil
	}
}

// finish records the outcome of the claimed attempt. It returns an error
// when the outcome could not be recorded: the tool acted, but the record
// still says pending, so the caller must not be told an outcome the record
// does not hold (the chain and the record would disagree). Recording is
// then retried in the background until the store answers (fixRecord); a
// reader of the step (GetStep) sees the outcome as soon as it is written.
func (s *Service) finish(c *stepClaim, resp *xctv1.Response, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.recordWait())
	defer cancel()
	// The claim's record becomes the outcome's: nothing reads the pending
	// form after the tool returned (a tool that committed was waited for,
	// compensations included), and the claim ends here either way.
	rec := c.rec
	rec.State = stateSucceeded
	if e := resp.GetError(); e != nil {
		rec.State = stateFailed
		if toolUnsure(e) && rec.GetEffect() != xctv1.Effect_EFFECT_READ && !rec.GetIdempotent() {
			// The tool cannot tell whether it acted (its call was sent,
			// its answer lost): not a failure, a step in doubt, which
			// a human settles (ResolveStep) and no call runs again.
			rec.State = stateInDoubt
		}
	}
	rec.Response = resp
	rec.FinishedAt = timestamppb.Now()
	rec.Duration = durationpb.New(d)
	rev, err := s.writeOutcome(ctx, c.store, rec, c.rev)
	if err != nil {
		s.log.ErrorContext(ctx, "step acted but its outcome could not be recorded yet: retrying in the background", "step_id", rec.GetStepId(), "tool", rec.GetTool(), "error", err)
		s.fixing.Add(1)
		go func() {
			defer s.fixing.Done()
			s.fixRecord(c.store, rec, c.rev)
		}()
		return err
	}
	c.rec, c.rev = rec, rev
	return nil
}

// writeOutcome writes a finished record over revision rev, its response in
// a blob when it does not fit in the record.
func (s *Service) writeOutcome(ctx context.Context, store StepStore, rec *xctv1.StepRecord, rev uint64) (uint64, error) {
	n, err := store.Update(ctx, rec, rev)
	if !errors.Is(err, ErrRecordTooLarge) {
		return n, err
	}
	name := fmt.Sprintf("%s.%d.response", rec.GetStepId(), rec.GetAttempt())
	data, err := protojson.Marshal(rec.GetResponse())
	if err != nil {
		return 0, err
	}
	if err := store.PutBlob(ctx, name, data); err != nil {
		return 0, fmt.Errorf("store response: %w", err)
	}
	rec.Response, rec.ResponseBlob = nil, name
	return store.Update(ctx, rec, rev)
}

// fixRetryMax bounds how long an outcome not yet recorded is retried.
const fixRetryMax = 10 * time.Minute

// fixRecord keeps trying to record an outcome that finish could not, with
// backoff, until it is written or the record no longer belongs to this
// attempt. A record that another executor marked in doubt meanwhile (its
// deadline passed) still gets the outcome: this process knows it, and in
// doubt means only that nobody did. A human decision is never overwritten.
func (s *Service) fixRecord(store StepStore, rec *xctv1.StepRecord, rev uint64) {
	wait := 100 * time.Millisecond
	until := time.Now().Add(fixRetryMax)
	for time.Now().Before(until) {
		ctx, cancel := context.WithTimeout(context.Background(), s.recordWait())
		_, err := s.writeOutcome(ctx, store, cloneRecord(rec), rev)
		if errors.Is(err, ErrStepConflict) {
			cur, curRev, gerr := store.Get(ctx, rec.GetStepId())
			switch {
			case gerr != nil:
				err = gerr
			case cur.GetAttempt() != rec.GetAttempt() || cur.GetResolution() != nil ||
				(cur.GetState() != statePending && cur.GetState() != stateInDoubt):
				cancel()
				s.log.Error("step outcome not recorded: its record changed meanwhile", "step_id", rec.GetStepId(),
					"state", stateName(cur.GetState()), "attempt", cur.GetAttempt(), "outcome", stateName(rec.GetState()))
				return
			default:
				rev = curRev
				_, err = s.writeOutcome(ctx, store, cloneRecord(rec), rev)
			}
		}
		cancel()
		if err == nil {
			s.log.Info("step outcome recorded after a retry", "step_id", rec.GetStepId(), "state", stateName(rec.GetState()))
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.quit:
			t.Stop()
			s.log.Error("executor stopped before the step's outcome could be recorded: it is in doubt", "step_id", rec.GetStepId(), "outcome", stateName(rec.GetState()))
			return
		}
		wait = min(wait*2, 5*time.Second)
	}
	s.log.Error("step acted but its outcome was never recorded: it is in doubt", "step_id", rec.GetStepId(), "outcome", stateName(rec.GetState()))
}

// release undoes the claim of an attempt that did not act (the caller
// went away, or the executor is stopping, before the tool committed): the
// first attempt's record is removed, so the step can run later; a later
// attempt's record goes back to what it was.
func (s *Service) release(c *stepClaim) {
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	var err error
	if c.prev == nil {
		err = c.store.Delete(ctx, c.rec.GetStepId(), c.rev)
	} else {
		_, err = c.store.Update(ctx, c.prev, c.rev)
	}
	if err != nil {
		s.log.WarnContext(ctx, "step did not act but its pending record could not be released", "step_id", c.rec.GetStepId(), "error", err)
	}
}

// recordedResponse returns a finished record's response, from its blob if
// it was stored apart.
func (s *Service) recordedResponse(ctx context.Context, store StepStore, rec *xctv1.StepRecord) (*xctv1.Response, error) {
	if rec.GetResponseBlob() == "" {
		if rec.GetResponse() == nil {
			return wire.ErrorResponse(wire.Errorf(wire.CodeToolFailure, "step %s was recorded without a response", rec.GetStepId())), nil
		}
		return rec.GetResponse(), nil
	}
	data, err := store.Blob(ctx, rec.GetResponseBlob())
	if err != nil {
		return nil, fmt.Errorf("response of step %s: %w", rec.GetStepId(), err)
	}
	resp := &xctv1.Response{}
	if err := protojson.Unmarshal(data, resp); err != nil {
		return nil, fmt.Errorf("%w: response of step %s: %w", ErrStepCorrupt, rec.GetStepId(), err)
	}
	return resp, nil
}

// Step returns the record of a step, with its response loaded when it is
// stored apart, and whether the step is in doubt now (recorded so, or
// pending past its deadline).
func (s *Service) Step(ctx context.Context, stepID string) (*xctv1.StepRecord, bool, error) {
	if !validStepID(stepID) {
		return nil, false, fmt.Errorf("%w: %q", ErrBadStepID, stepID)
	}
	store, err := s.store()
	if err != nil {
		return nil, false, err
	}
	return s.step(ctx, store, stepID, false)
}

// SettledStep is Step for the caller settling the step (the orchestrator,
// as for Fence): a step whose tool provably did not act although its
// executor stopped mid-step (unstarted) is first recorded as not executed
// (settleUnstarted), instead of being answered in doubt.
func (s *Service) SettledStep(ctx context.Context, stepID string) (*xctv1.StepRecord, bool, error) {
	if !validStepID(stepID) {
		return nil, false, fmt.Errorf("%w: %q", ErrBadStepID, stepID)
	}
	store, err := s.store()
	if err != nil {
		return nil, false, err
	}
	return s.step(ctx, store, stepID, true)
}

// step is Step, settling an unstarted step when settle is set.
func (s *Service) step(ctx context.Context, store StepStore, stepID string, settle bool) (*xctv1.StepRecord, bool, error) {
	rec, rev, err := store.Get(ctx, stepID)
	if err != nil {
		return nil, false, err
	}
	if settle && s.unstarted(rec, time.Now()) {
		// Its executor stopped before the tool could act: recorded so
		// (or, when the record changed meanwhile, read again).
		switch next, ok, serr := s.settleUnstarted(ctx, store, rec, rev); {
		case ok:
			rec = next
		case serr == nil: // changed meanwhile
			if rec, _, err = store.Get(ctx, stepID); err != nil {
				return nil, false, err
			}
		}
	}
	if rec.GetResponseBlob() != "" {
		resp, err := s.recordedResponse(ctx, store, rec)
		if err != nil {
			return nil, false, err
		}
		rec.Response = resp
	}
	return rec, inDoubt(rec, time.Now()), nil
}

// Fence is Step for a caller that must know whether a step acted after
// its Execute call failed: a step without a record is recorded as not
// executed (FAILED, EXECUTOR_UNAVAILABLE with details.not_executed), with
// the same conditional create a claim uses. Either the fence is first and
// a call of the step still in flight replays "not executed" instead of
// acting, or the claim is first and the fence reads its record. So "not
// executed" is then proven, not guessed.
func (s *Service) Fence(ctx context.Context, stepID string) (*xctv1.StepRecord, bool, error) {
	if !validStepID(stepID) {
		return nil, false, fmt.Errorf("%w: %q", ErrBadStepID, stepID)
	}
	store, err := s.store()
	if err != nil {
		return nil, false, err
	}
	now := timestamppb.Now()
	rec := &xctv1.StepRecord{
		StepId: stepID, State: stateFailed, Executor: s.instance, StartedAt: now, FinishedAt: now,
		Response: wire.ErrorResponse(wire.WithDetails(wire.Errorf(wire.CodeExecutorUnavailable,
			"step %s was not executed: the executor has no record of it (its call never reached a tool, or was abandoned before the tool committed an effect); nothing acted, propose it again if it is still needed", stepID),
			map[string]any{"step_id": stepID, "not_executed": true, "outcome_unknown": false})),
	}
	if _, err := store.Create(context.WithoutCancel(ctx), rec); err == nil {
		s.log.WarnContext(ctx, "step fenced: recorded as not executed", "step_id", stepID)
		return proto.CloneOf(rec), false, nil
	} else if !errors.Is(err, ErrStepExists) {
		return nil, false, err
	}
	return s.step(ctx, store, stepID, true)
}

// unstarted reports whether rec, at now, is a step whose tool provably
// did not act although its executor stopped mid-step: pending past its
// deadline, the first attempt, of a tool that records its compensation
// before any effect (CompensatedFirst, as served here: tool names are
// the cluster's, and fs.* are the built-ins'), and no compensation of
// that attempt on the record. Such a record is settled as not executed
// (settleUnstarted) instead of waiting in doubt for a human. Later
// attempts are not (an earlier one may have acted), nor records with a
// human's decision.
func (s *Service) unstarted(rec *xctv1.StepRecord, now time.Time) bool {
	if rec.GetState() != statePending || now.Before(rec.GetDeadline().AsTime()) || rec.GetAttempt() != 1 || rec.GetResolution() != nil {
		return false
	}
	st, ok := s.tool(rec.GetTool())
	if !ok {
		return false
	}
	if _, first := st.tool.(CompensatedFirst); !first {
		return false
	}
	for _, c := range rec.GetCompensations() {
		if c.GetAttempt() == rec.GetAttempt() {
			return false // it reached its commit point: it may have acted
		}
	}
	return true
}

// settleUnstarted records an unstarted step (rec at revision rev) as not
// executed: FAILED, EXECUTOR_UNAVAILABLE with details.not_executed, like
// a fence. The update is conditional on rev, the revision the attempt's
// compensation would have to replace: whichever lands first wins, so
// either the tool recorded its compensation (and may act: the record is
// then read again, in doubt) or it never can (CommitCompensated fails and
// the tool stops without acting). It reports whether the record is now
// the returned one; err is a failure of the store other than a conflict.
func (s *Service) settleUnstarted(ctx context.Context, store StepStore, rec *xctv1.StepRecord, rev uint64) (*xctv1.StepRecord, bool, error) {
	next := cloneRecord(rec)
	next.State = stateFailed
	next.FinishedAt = timestamppb.Now()
	next.Response = wire.ErrorResponse(wire.WithDetails(wire.Errorf(wire.CodeExecutorUnavailable,
		"step %s was not executed: its executor %s stopped before %s recorded how to undo its effect, which it does before it acts (attempt %d, pending past its deadline); nothing acted, propose it again if it is still needed",
		rec.GetStepId(), rec.GetExecutor(), rec.GetTool(), rec.GetAttempt()),
		map[string]any{"step_id": rec.GetStepId(), "not_executed": true, "outcome_unknown": false}))
	if _, err := store.Update(context.WithoutCancel(ctx), next, rev); err != nil {
		if errors.Is(err, ErrStepConflict) {
			return nil, false, nil
		}
		s.log.WarnContext(ctx, "a step that provably did not act could not be recorded so", "step_id", rec.GetStepId(), "error", err)
		return nil, false, err
	}
	s.log.WarnContext(ctx, "step recorded as not executed: its executor stopped before the tool recorded its compensation", "step_id", rec.GetStepId(),
		"tool", rec.GetTool(), "executor", rec.GetExecutor())
	return next, true, nil
}

// NotExecuted reports whether a record proves its step did not act: a
// fence, or a resolution that said so.
func NotExecuted(rec *xctv1.StepRecord) bool {
	if rec.GetState() != stateFailed {
		return false
	}
	v, _ := rec.GetResponse().GetError().GetDetails().AsMap()["not_executed"].(bool)
	return v
}

// inDoubt reports whether a record is in doubt at now.
func inDoubt(rec *xctv1.StepRecord, now time.Time) bool {
	switch rec.GetState() {
	case stateInDoubt:
		return true
	case statePending:
		return !now.Before(rec.GetDeadline().AsTime())
	}
	return false
}

// Resolution is a human decision about a step.
type Resolution struct {
	// Decision is succeeded, failed or retry.
	Decision xctv1.StepDecision
	// ResolvedBy names who decided; required.
	ResolvedBy string
	// Reason is kept for the audit.
	Reason string
	// Result, for a step resolved as succeeded, is the JSON result to
	// record (what the human observed); nil records a short statement.
	Result any
	// RunID is the run of the step, whose chain must show it in doubt;
	// needed when the executor has no record of the step (else the
	// record's, which it must match).
	RunID string
	// InDoubtSeq is the seq of the step_in_doubt on the run's chain this
	// decision settles; it must be the step's current doubt. 0 takes the
	// current one (the ResolveStep RPC requires it).
	InDoubtSeq uint64
}

// ResolveStep records a human decision about a step in doubt: it
// succeeded (the recorded result is r.Result), it failed, or it may be
// executed once more (retry: the next Execute with the step id acts
// again). The step must be in doubt on its run's chain (doubt.go): the
// decision is bound to that step_in_doubt (r.InDoubtSeq, when given, must
// name it), so it settles nothing else. The record keeps who decided,
// when, why and which doubt. It returns ErrNotInDoubt for a step that is
// not in doubt (on its chain, or by its record), ErrChainUnreadable,
// ErrStepNotFound, ErrStepConflict when the record changed meanwhile (ask
// again), ErrBadResolution for an empty decision or author or a run that
// is not the step's, ErrBadStepID. The CLI (xct resolve) calls it through
// the ResolveStep RPC. An executor without NATS (unit tests) has no
// chains and checks the record only (a failed step may then be retried).
func (s *Service) ResolveStep(ctx context.Context, stepID string, r Resolution) (*xctv1.StepRecord, error) {
	switch {
	case !validStepID(stepID):
		return nil, fmt.Errorf("%w: %q", ErrBadStepID, stepID)
	case r.ResolvedBy == "":
		return nil, fmt.Errorf("%w: resolved_by is required", ErrBadResolution)
	case r.Decision == xctv1.StepDecision_STEP_DECISION_UNSPECIFIED || xctv1.StepDecision_name[int32(r.Decision)] == "":
		return nil, fmt.Errorf("%w: decision is required (succeeded, failed or retry)", ErrBadResolution)
	}
	store, err := s.store()
	if err != nil {
		return nil, err
	}
	cur, rev, err := store.Get(ctx, stepID)
	if errors.Is(err, ErrStepNotFound) {
		// No record: no executor claimed the step (or its record expired).
		// The human's decision becomes its record, so the run waiting on
		// it goes on and a late call of the step replays the decision.
		cur = &xctv1.StepRecord{StepId: stepID}
	} else if err != nil {
		return nil, err
	}
	// A step in doubt takes any decision; without chains (no NATS), a
	// failed step may be retried.
	retryFailed := s.nc == nil && r.Decision == xctv1.StepDecision_STEP_DECISION_RETRY && cur.GetState() == stateFailed && !NotExecuted(cur)
	if rev != 0 && !inDoubt(cur, time.Now()) && !retryFailed {
		if same := decided(cur.GetState()) == r.Decision; same {
			// Already so: the record's outcome stands and the run goes on
			// with it; nothing is written.
			return proto.CloneOf(cur), nil
		}
		if cur.GetState() == statePending {
			return nil, fmt.Errorf("%w: step %s is still executing on %s until %s; its outcome is recorded by then, or it is in doubt and can be resolved",
				ErrNotInDoubt, stepID, cur.GetExecutor(), cur.GetDeadline().AsTime().Format(time.RFC3339))
		}
		return nil, fmt.Errorf("%w: step %s is %s (recorded by %s); a recorded outcome is not overwritten", ErrNotInDoubt, stepID, stateName(cur.GetState()), recordedBy(cur))
	}
	// In doubt by its record (or without one): its run's chain must say
	// so too, and the decision is bound to that doubt.
	runID, doubtSeq, err := s.doubtOnChain(ctx, stepID, cur, r)
	if err != nil {
		return nil, err
	}
	if r.Decision == xctv1.StepDecision_STEP_DECISION_RETRY {
		if err := s.mayRelease(ctx, runID, stepID, r.ResolvedBy); err != nil {
			return nil, err
		}
	}
	now := timestamppb.Now()
	rec := cloneRecord(cur)
	rec.Resolution = &xctv1.StepResolution{Decision: r.Decision, ResolvedBy: r.ResolvedBy, Reason: r.Reason, ResolvedAt: now, PreviousState: cur.GetState(),
		InDoubtSeq: doubtSeq}
	if rec.GetRunId() == "" {
		rec.RunId = runID
	}
	switch r.Decision {
	case xctv1.StepDecision_STEP_DECISION_SUCCEEDED:
		result := s.redactorOrNil().Value(r.Result)
		if result == nil {
			result = map[string]any{"resolved": "succeeded", "resolved_by": r.ResolvedBy, "reason": r.Reason}
		}
		resp, err := wire.SuccessResponse(result)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadResolution, err)
		}
		rec.State, rec.Response, rec.ResponseBlob, rec.FinishedAt = stateSucceeded, resp, "", now
	case xctv1.StepDecision_STEP_DECISION_FAILED:
		rec.State, rec.ResponseBlob, rec.FinishedAt = stateFailed, "", now
		rec.Response = wire.ErrorResponse(wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
			"the step's outcome was in doubt; %s resolved it as failed: %s", r.ResolvedBy, r.Reason),
			map[string]any{"step_id": stepID, "resolved_by": r.ResolvedBy, "reason": r.Reason}))
	case xctv1.StepDecision_STEP_DECISION_RETRY:
		rec.State, rec.Response, rec.ResponseBlob, rec.FinishedAt = stateRetry, nil, "", nil
	}
	if rev == 0 {
		_, err = store.Create(ctx, rec)
		if errors.Is(err, ErrStepExists) {
			err = ErrStepConflict // recorded meanwhile: ask again
		}
	} else {
		_, err = store.Update(ctx, rec, rev)
	}
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "step resolved", "step_id", stepID, "decision", r.Decision.String(), "resolved_by", r.ResolvedBy, "previous_state", cur.GetState().String(),
		"run_id", runID, "in_doubt_seq", doubtSeq)
	return proto.CloneOf(rec), nil
}

// doubtOnChain checks that the run's chain shows step stepID in doubt now
// (cur is its record, empty when it has none) and returns the run and the
// seq of that step_in_doubt. An executor without chains (no NATS) returns
// seq 0 and checks nothing.
func (s *Service) doubtOnChain(ctx context.Context, stepID string, cur *xctv1.StepRecord, r Resolution) (string, uint64, error) {
	runID := cur.GetRunId()
	switch {
	case runID != "" && r.RunID != "" && r.RunID != runID:
		return "", 0, fmt.Errorf("%w: step %s is of run %s, not %s", ErrBadResolution, stepID, runID, r.RunID)
	case runID == "":
		runID = r.RunID
	}
	chains, err := s.chainReader(ctx)
	if err != nil || chains == nil {
		return runID, 0, err
	}
	if runID == "" {
		return "", 0, fmt.Errorf("%w: the executor has no record of step %s: name its run (run_id), whose chain must show it in doubt", ErrBadResolution, stepID)
	}
	if err := lctl.ValidateChainID(runID); err != nil {
		return "", 0, fmt.Errorf("%w: run id: %w", ErrBadResolution, err)
	}
	seq, err := chainDoubt(ctx, chains, runID, stepID, r.InDoubtSeq)
	if err != nil {
		return "", 0, err
	}
	if r.InDoubtSeq != 0 && r.InDoubtSeq != seq {
		return "", 0, fmt.Errorf("%w: the decision settles the doubt of step %s recorded at event %d of run %s, and the step's doubt now is the one at event %d "+
			"(a later attempt's): look at the step again and decide about this doubt", ErrNotInDoubt, stepID, r.InDoubtSeq, runID, seq)
	}
	return runID, seq, nil
}

// decided is the decision that leaves a record in state st (UNSPECIFIED
// for a state no decision leaves).
func decided(st xctv1.StepRecordState) xctv1.StepDecision {
	switch st {
	case stateSucceeded:
		return xctv1.StepDecision_STEP_DECISION_SUCCEEDED
	case stateFailed:
		return xctv1.StepDecision_STEP_DECISION_FAILED
	case stateRetry:
		return xctv1.StepDecision_STEP_DECISION_RETRY
	}
	return xctv1.StepDecision_STEP_DECISION_UNSPECIFIED
}

// recordedBy names who gave a record its state: a resolver or an executor.
func recordedBy(rec *xctv1.StepRecord) string {
	if by := rec.GetResolution().GetResolvedBy(); by != "" {
		return by
	}
	return "executor " + rec.GetExecutor()
}

// stateName is a record state for messages: "succeeded", "pending", ...
func stateName(st xctv1.StepRecordState) string {
	switch st {
	case statePending:
		return "pending"
	case stateSucceeded:
		return "succeeded"
	case stateFailed:
		return "failed"
	case stateInDoubt:
		return "in doubt"
	case stateRetry:
		return "released for a retry"
	}
	return st.String()
}

// resultValue turns a protobuf Value into the Go value of Resolution.Result.
func resultValue(v *structpb.Value) any {
	if v == nil {
		return nil
	}
	return v.AsInterface()
}
