package validator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// ApprovalsBucket is the JetStream KV bucket where approvals live, one per
// step, under "<run_id>.<step_id>", as protobuf JSON. The validator is its
// only writer; the orchestrator watches it.
const ApprovalsBucket = "XCT_APPROVALS"

// Limits on what an approval stores.
const (
	approvalHistory     = 8
	maxKeyTokenLen      = 128
	maxPreviewKindBytes = 64
	maxPreviewBytes     = 256 << 10
	maxPreviewBaseBytes = 128 // "sha256:" and 64 hex digits, or "absent"
	maxApproverBytes    = 256
	maxDecisionReason   = 4096
	previewCut          = "\n…(preview truncated)"
)

// approvalStore reads and writes approvals in the KV bucket. Every change
// is a compare-and-set on the entry's revision, so two deciders cannot
// both win.
type approvalStore struct {
	kv jetstream.KeyValue
	js jetstream.JetStream
	// markerTTL, when positive, is how long the marker an index key
	// leaves when it is removed is kept: the bucket lets markers expire
	// (provisioning's LimitMarkerTTL). Zero: a plain delete, whose marker
	// stays until purged.
	markerTTL time.Duration
}

// The pending index. An approval's key is "<run>.<step>" (two tokens:
// neither may hold a dot, validKeyToken); the key "pending.<run>.<step>"
// (three tokens, so it is never an approval's, even of a run named
// "pending") says the approval may be pending. It is written before the
// approval is opened and removed after the approval leaves pending, so
// the index holds at least every pending approval, and a list of the
// pending ones reads the index and the approvals it names, not every
// approval ever opened. A start indexes the pending approvals an older
// validator opened (indexPending).
const (
	pendingIndex = "pending"
	// DefaultIndexMarkerTTL is how long a removed index key's marker is
	// kept, where the bucket lets markers expire.
	DefaultIndexMarkerTTL = time.Minute
	// danglingIndexAge is how old an index key naming no approval must be
	// before a list removes it: a request writes the key, then opens the
	// approval, within its call's deadline.
	danglingIndexAge = 10 * time.Minute
)

func indexKey(runID, stepID string) string { return pendingIndex + "." + runID + "." + stepID }

// index writes the index key of an approval about to be opened.
func (st *approvalStore) index(ctx context.Context, runID, stepID string) error {
	if _, err := st.kv.Put(ctx, indexKey(runID, stepID), nil); err != nil {
		return fmt.Errorf("%w: index the approval: %w", ErrApprovalsUnavailable, err)
	}
	return nil
}

// unindex removes the index key of an approval no longer pending. A
// failure leaves a key naming a closed approval, which the next pending
// list removes.
func (st *approvalStore) unindex(ctx context.Context, runID, stepID string) {
	if st.markerTTL > 0 {
		_ = st.kv.Purge(ctx, indexKey(runID, stepID), jetstream.PurgeTTL(st.markerTTL))
		return
	}
	_ = st.kv.Delete(ctx, indexKey(runID, stepID))
}

// approvalsSubjects are the subjects of the approvals bucket.
const approvalsSubjects = "$KV." + ApprovalsBucket + ".>"

// republishedInto returns an error naming a stream that republishes into
// the approvals bucket (jsguard): only the validator may write there, but
// a stream another service made first could republish what that service
// writes as approvals. Asked before an approval lets a step run (a
// human's approval is rare; the common step path does not ask).
func (st *approvalStore) republishedInto(ctx context.Context) error {
	return jsguard.RepublishedInto(ctx, st.js, approvalsSubjects)
}

// openApprovals binds to the bucket, which the admin made
// (internal/provision, with approvalHistory).
func openApprovals(ctx context.Context, js jetstream.JetStream) (*approvalStore, error) {
	kv, err := js.KeyValue(ctx, ApprovalsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("approvals bucket: %w", jsguard.Missing("bucket", ApprovalsBucket))
	}
	if err != nil {
		return nil, fmt.Errorf("approvals bucket: %w", err)
	}
	st := &approvalStore{kv: kv, js: js}
	if status, err := kv.Status(ctx); err == nil {
		if bs, ok := status.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo().Config.AllowMsgTTL {
			st.markerTTL = DefaultIndexMarkerTTL
		}
	}
	return st, nil
}

// indexPending writes the index key of every pending approval that lacks
// one (opened by a validator older than the index), once, at start.
func (st *approvalStore) indexPending(ctx context.Context) (int, error) {
	items, err := st.list(ctx, "")
	if err != nil {
		return 0, err
	}
	made := 0
	for _, sa := range items {
		if sa.a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
			continue
		}
		_, err := st.kv.Create(ctx, indexKey(sa.a.GetRunId(), sa.a.GetStepId()), nil)
		switch {
		case err == nil:
			made++
		case errors.Is(err, jetstream.ErrKeyExists):
		default:
			return made, fmt.Errorf("%w: index the pending approvals: %w", ErrApprovalsUnavailable, err)
		}
	}
	return made, nil
}

func approvalKey(runID, stepID string) string { return runID + "." + stepID }

// get reads one approval and its revision.
func (st *approvalStore) get(ctx context.Context, runID, stepID string) (*xctv1.Approval, uint64, error) {
	entry, err := st.kv.Get(ctx, approvalKey(runID, stepID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrApprovalNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrApprovalsUnavailable, err)
	}
	a, err := decodeApproval(entry.Value())
	if err != nil {
		return nil, 0, err
	}
	return a, entry.Revision(), nil
}

// errUndecodable is a stored approval that does not decode.
var errUndecodable = errors.New("stored approval does not decode")

func decodeApproval(raw []byte) (*xctv1.Approval, error) {
	a := &xctv1.Approval{}
	if err := protojson.Unmarshal(raw, a); err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrApprovalsUnavailable, errUndecodable, err)
	}
	return a, nil
}

// create stores a new approval. If one exists for the step, it is returned
// as stored and created is false.
func (st *approvalStore) create(ctx context.Context, a *xctv1.Approval) (stored *xctv1.Approval, created bool, err error) {
	raw, err := protojson.Marshal(a)
	if err != nil {
		return nil, false, fmt.Errorf("encode approval: %w", err)
	}
	if a.GetState() == xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		if err := st.index(ctx, a.GetRunId(), a.GetStepId()); err != nil {
			return nil, false, err
		}
	}
	_, err = st.kv.Create(ctx, approvalKey(a.GetRunId(), a.GetStepId()), raw)
	if errors.Is(err, jetstream.ErrKeyExists) {
		cur, _, gerr := st.get(ctx, a.GetRunId(), a.GetStepId())
		return cur, false, gerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrApprovalsUnavailable, err)
	}
	return a, true, nil
}

// update replaces an approval if it is still at revision rev.
func (st *approvalStore) update(ctx context.Context, a *xctv1.Approval, rev uint64) error {
	raw, err := protojson.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode approval: %w", err)
	}
	_, err = st.kv.Update(ctx, approvalKey(a.GetRunId(), a.GetStepId()), raw, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return errApprovalConflict
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrApprovalsUnavailable, err)
	}
	if a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		st.unindex(ctx, a.GetRunId(), a.GetStepId())
	}
	return nil
}

// storedApproval is an approval with its revision.
type storedApproval struct {
	a   *xctv1.Approval
	rev uint64
}

// list reads every approval, or a run's.
func (st *approvalStore) list(ctx context.Context, runID string) ([]storedApproval, error) {
	filter := "*.*" // approvals, not the index's keys
	if runID != "" {
		filter = runID + ".*"
	}
	w, err := st.kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrApprovalsUnavailable, err)
	}
	defer func() { _ = w.Stop() }()
	var out []storedApproval
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrApprovalsUnavailable, ctx.Err())
		case entry, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("%w: the approvals watch ended", ErrApprovalsUnavailable)
			}
			if entry == nil { // every present entry was delivered
				return out, nil
			}
			a, err := decodeApproval(entry.Value())
			if err != nil {
				continue // an entry nobody can read approves nothing
			}
			out = append(out, storedApproval{a: a, rev: entry.Revision()})
		}
	}
}

// indexEntry is a key of the pending index: the approval it names and
// when (by the server's clock) it was written.
type indexEntry struct {
	runID, stepID string
	written       time.Time
}

// listPending reads the approvals the pending index names, listChainReads
// at a time: those still pending (expiry is the caller's, asListed). A key
// naming an approval no longer pending is removed, as is one naming no
// approval once it is older than danglingIndexAge by now.
func (st *approvalStore) listPending(ctx context.Context, now time.Time) ([]storedApproval, error) {
	w, err := st.kv.Watch(ctx, pendingIndex+".*.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrApprovalsUnavailable, err)
	}
	var keys []indexEntry
	func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				err = fmt.Errorf("%w: %w", ErrApprovalsUnavailable, ctx.Err())
				return
			case entry, ok := <-w.Updates():
				if !ok {
					err = fmt.Errorf("%w: the approvals index watch ended", ErrApprovalsUnavailable)
					return
				}
				if entry == nil {
					return
				}
				parts := strings.Split(entry.Key(), ".")
				if len(parts) != 3 || !validKeyToken(parts[1]) || !validKeyToken(parts[2]) {
					continue
				}
				keys = append(keys, indexEntry{runID: parts[1], stepID: parts[2], written: entry.Created()})
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	found := make([]*storedApproval, len(keys))
	errs := make([]error, len(keys))
	slots := make(chan struct{}, listChainReads)
	var wg sync.WaitGroup
	for i, k := range keys {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, fmt.Errorf("%w: %w", ErrApprovalsUnavailable, ctx.Err())
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			a, rev, err := st.get(ctx, k.runID, k.stepID)
			switch {
			case errors.Is(err, ErrApprovalNotFound):
				if now.Sub(k.written) > danglingIndexAge {
					st.unindex(ctx, k.runID, k.stepID)
				}
			case errors.Is(err, errUndecodable):
				// an entry nobody can read approves nothing
			case err != nil:
				errs[i] = err
			case a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING:
				st.unindex(ctx, k.runID, k.stepID)
			default:
				found[i] = &storedApproval{a: a, rev: rev}
			}
		}()
	}
	wg.Wait()
	out := make([]storedApproval, 0, len(keys))
	for i := range keys {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if found[i] != nil {
			out = append(out, *found[i])
		}
	}
	return out, nil
}

// expire marks a pending approval whose time has passed EXPIRED. A
// concurrent change wins; the approval is read again.
func (st *approvalStore) expire(ctx context.Context, sa storedApproval, now time.Time) (storedApproval, error) {
	if sa.a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING || now.Before(sa.a.GetExpiresAt().AsTime()) {
		return sa, nil
	}
	exp := proto.CloneOf(sa.a)
	exp.State = xctv1.ApprovalState_APPROVAL_STATE_EXPIRED
	err := st.update(ctx, exp, sa.rev)
	if errors.Is(err, errApprovalConflict) {
		a, rev, gerr := st.get(ctx, sa.a.GetRunId(), sa.a.GetStepId())
		return storedApproval{a: a, rev: rev}, gerr
	}
	if err != nil {
		return sa, err
	}
	return storedApproval{a: exp, rev: sa.rev + 1}, nil
}

// RequestApproval opens a pending approval for a step the policy says
// needs one. The step id must be the step's identity (wire.StepID of the
// run, the step number, the tool and the arguments), and the policy in
// force must require an approval for the step now; its reasons, version
// and approval TTL are recorded with the proposal, the run's principal (who
// may not approve it) and the preview. Asking again for the same step
// returns the stored approval unchanged.
func (s *Service) RequestApproval(ctx context.Context, req *xctv1.RequestApprovalRequest) (*xctv1.RequestApprovalResponse, error) {
	store := s.approvals.Load()
	if store == nil {
		return nil, approvalStatus(ErrApprovalsUnavailable)
	}
	if err := s.approvalCaller(ctx); err != nil {
		return nil, approvalStatus(err)
	}
	req = withCallerApproval(ctx, req)
	run := req.GetRun()
	switch {
	case !validKeyToken(run.GetRunId()):
		return nil, approvalStatus(ErrBadRunID)
	case !validKeyToken(req.GetStepId()):
		return nil, approvalStatus(ErrBadStepID)
	case req.GetProposal().GetTool() == "":
		return nil, approvalStatus(ErrNoTool)
	case strings.TrimSpace(run.GetPrincipal()) == "":
		return nil, approvalStatus(ErrNoPrincipal)
	case req.GetStep() < 1:
		return nil, approvalStatus(fmt.Errorf("%w: step must be at least 1", ErrStepMismatch))
	}
	p := req.GetProposal()
	if want := wire.StepID(run.GetRunId(), int(req.GetStep()), p.GetTool(), p.GetArguments()); want != req.GetStepId() {
		return nil, approvalStatus(ErrStepMismatch)
	}
	if cur, _, err := store.get(ctx, run.GetRunId(), req.GetStepId()); err == nil {
		// Opened before for another principal (who may then not
		// decide it, while this run's principal could): not this
		// run's approval.
		if !auth.SamePrincipal(cur.GetRequestedBy(), run.GetPrincipal()) {
			return nil, approvalStatus(fmt.Errorf("%w (%s)", ErrApprovalOtherPrincipal, cur.GetRequestedBy()))
		}
		return &xctv1.RequestApprovalResponse{Approval: cur}, nil
	} else if !errors.Is(err, ErrApprovalNotFound) {
		return nil, approvalStatus(err)
	}

	installed := s.policy.Load()
	now := s.now()
	v := &xctv1.Verdict{PolicyVersion: installed.version}
	// A rollback's undo is a system step (RollbackRun's, whose undo may
	// need a human as the change it makes would): as Validate judges it
	// when the orchestrator asks.
	vreq := &xctv1.ValidateRequest{Run: run, Step: req.GetStep(), StepId: req.GetStepId(), Proposal: p, Crew: req.GetCrew(),
		SystemStep: wire.IsSystemTool(p.GetTool()) && serviceCaller(ctx)}
	if in := s.judge(ctx, vreq, installed, now, judging{}, v); in == nil || v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
		return nil, approvalStatus(fmt.Errorf("%w: it decides %s (%s)", ErrNoApprovalNeeded,
			decisionWord(v.GetDecision()), strings.Join(reasonIDs(v.GetReasons()), ", ")))
	}
	ttl := v.GetApprovalTtl().AsDuration()
	if ttl <= 0 {
		ttl = DefaultApprovalTTL
	}
	preview := req.GetPreview()
	if why := s.unreadablePreview(ctx, req, installed, now); preview != nil && why != "" {
		preview = &xctv1.Preview{Kind: "text", Content: why, BaseDigest: preview.GetBaseDigest(), Redacted: true}
	}
	if unbound := unboundPreview(p, preview); unbound != "" {
		preview = &xctv1.Preview{Kind: "text", Content: unbound}
	}
	a := &xctv1.Approval{
		RunId:         run.GetRunId(),
		Step:          req.GetStep(),
		StepId:        req.GetStepId(),
		Proposal:      proto.CloneOf(p),
		RequestedBy:   strings.TrimSpace(run.GetPrincipal()),
		Reasons:       v.GetReasons(),
		PolicyVersion: v.GetPolicyVersion(),
		Preview:       clampPreview(preview),
		State:         xctv1.ApprovalState_APPROVAL_STATE_PENDING,
		RequestedAt:   timestamppb.New(now),
		ExpiresAt:     timestamppb.New(now.Add(ttl)),
		OpenedAtSeq:   s.chainSeqNow(ctx, run.GetRunId()),
	}
	if cc := req.GetCrew(); cc != nil {
		// Who asked, in a crew run: the member that proposed the step and
		// the hand-overs that gave it control (the approver decides on
		// them as well as on the run's principal).
		a.Crew, a.Agent, a.HandoffPath = cc.GetCrew(), cc.GetAgent(), slices.Clone(cc.GetHandoffPath())
	}
	stored, created, err := store.create(ctx, a)
	if err != nil {
		return nil, approvalStatus(err)
	}
	if created {
		s.log.Info("approval requested", "run_id", a.GetRunId(), "step", a.GetStep(), "step_id", a.GetStepId(),
			"tool", truncate(p.GetTool(), maxToolNameInMsg), "requested_by", a.GetRequestedBy(), "expires_at", a.GetExpiresAt().AsTime())
	}
	return &xctv1.RequestApprovalResponse{Approval: stored}, nil
}

// unreadablePreview says why the preview of a step may not show the file
// it would change, or "" when it may. fs.write's preview is a diff against
// the file as it is, and it goes into the approval and on the run's chain,
// which every reader reads: it shows the file only when the run could read
// it itself, that is when the policy allows fs.read of the same path for
// this run (and this agent, in a crew). A key the model was refused to
// read is not shown because it proposed to overwrite it.
//
// fs.delete's preview shows the file it would remove (or the entries of
// the directory), fs.move's the entry it would move (session 18): they
// are shown only when the run may both read and list that path (fs.read
// and fs.list of it allowed).
func (s *Service) unreadablePreview(ctx context.Context, req *xctv1.RequestApprovalRequest, installed *installedPolicy, now time.Time) string {
	p := req.GetProposal()
	arg, readers, what := "path", []string{"fs.read"}, "what the step would write is in its arguments"
	switch p.GetTool() {
	case "fs.write":
	case "fs.delete":
		readers, what = []string{"fs.read", "fs.list"}, "the step would delete it"
	case "fs.move":
		arg, readers, what = "from", []string{"fs.read", "fs.list"}, "the step would move it"
	default:
		return ""
	}
	path, ok := p.GetArguments().AsMap()[arg].(string)
	if !ok {
		return ""
	}
	args, err := structpb.NewStruct(map[string]any{"path": path})
	if err != nil {
		return "the current content is not shown: " + err.Error()
	}
	for _, tool := range readers {
		v := &xctv1.Verdict{PolicyVersion: installed.version}
		read := &xctv1.ValidateRequest{Run: req.GetRun(), Step: req.GetStep(), StepId: req.GetStepId(),
			Proposal: &xctv1.NextStep{Tool: tool, Arguments: args}, Crew: req.GetCrew()}
		s.judge(ctx, read, installed, now, judging{}, v)
		if v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
			return fmt.Sprintf("the current content of %s is not shown: this run may not read it (the policy decides %s for %s of it: %s); %s",
				path, decisionWord(v.GetDecision()), tool, strings.Join(reasonIDs(v.GetReasons()), ", "), what)
		}
	}
	return ""
}

// ListApprovals lists approvals, oldest first: pending ones, or all of
// them with all set, for one run or every run. Pending approvals whose
// time has passed are marked EXPIRED on the way.
func (s *Service) ListApprovals(ctx context.Context, req *xctv1.ListApprovalsRequest) (*xctv1.ListApprovalsResponse, error) {
	store := s.approvals.Load()
	if store == nil {
		return nil, approvalStatus(ErrApprovalsUnavailable)
	}
	if id := req.GetRunId(); id != "" && !validKeyToken(id) {
		return nil, approvalStatus(ErrBadRunID)
	}
	var items []storedApproval
	var err error
	if req.GetRunId() == "" && !req.GetAll() {
		items, err = store.listPending(ctx, s.now())
	} else {
		items, err = store.list(ctx, req.GetRunId())
	}
	if err != nil {
		return nil, approvalStatus(err)
	}
	listed, err := s.asListed(ctx, store, items, s.now())
	if err != nil {
		return nil, approvalStatus(err)
	}
	if req.GetRunId() == "" {
		pending := make(map[string]bool, len(listed))
		for _, a := range listed {
			if a.GetState() == xctv1.ApprovalState_APPROVAL_STATE_PENDING {
				pending[checkedKey(a)] = true
			}
		}
		s.keepChecked(pending)
	}
	out := make([]*xctv1.Approval, 0, len(listed))
	for _, a := range listed {
		if req.GetAll() || a.GetState() == xctv1.ApprovalState_APPROVAL_STATE_PENDING {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b *xctv1.Approval) int {
		if c := a.GetRequestedAt().AsTime().Compare(b.GetRequestedAt().AsTime()); c != 0 {
			return c
		}
		if c := strings.Compare(a.GetRunId(), b.GetRunId()); c != 0 {
			return c
		}
		return int(a.GetStep()) - int(b.GetStep())
	})
	return &xctv1.ListApprovalsResponse{Approvals: fitList(s.approvalsFor(ctx, out))}, nil
}

// listChainReads bounds the approvals a list checks at once (each a few
// KV and stream gets: its expiry, its run's chain from where it was
// opened). One after another, hundreds of pending approvals across runs
// cost hundreds of round trips to NATS per list.
const listChainReads = 16

// asListed is each approval of items as a list shows it: expired when its
// time has passed (stored so), withdrawn when its run's chain says so
// (asChained), checked listChainReads at a time, in items' order. The
// first failure to store an expiry fails the list; a caller gone stops it.
func (s *Service) asListed(ctx context.Context, store *approvalStore, items []storedApproval, now time.Time) ([]*xctv1.Approval, error) {
	out := make([]*xctv1.Approval, len(items))
	errs := make([]error, len(items))
	slots := make(chan struct{}, listChainReads)
	var wg sync.WaitGroup
	for i, sa := range items {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			sa, err := store.expire(ctx, sa, now)
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = s.asChained(ctx, store, sa)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// asChained is a pending approval as the run's chain says it is: one the
// chain shows withdrawn (the orchestrator's withdrawal did not reach the
// validator, which was down) is withdrawn at the validator too, and listed
// so, not as pending for an approver to read. A chain that cannot be read
// leaves the approval as stored (its decision reads the chain again, and
// is refused while it cannot).
func (s *Service) asChained(ctx context.Context, store *approvalStore, sa storedApproval) *xctv1.Approval {
	if sa.a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		s.setChecked(sa.a, 0)
		return sa.a
	}
	from := sa.a.GetOpenedAtSeq()
	if c := s.checkedTo(sa.a); c >= from {
		from = c + 1 // read up to c by an earlier list: no withdrawal there
	}
	d, last, err := s.withdrawnFrom(ctx, sa.a, from)
	if err != nil {
		s.log.Warn("the run's chain could not be read to list its approval; listed as stored", "run_id", sa.a.GetRunId(), "step_id", sa.a.GetStepId(), "err", err)
		return sa.a
	}
	if d == nil {
		s.setChecked(sa.a, last)
		return sa.a
	}
	s.setChecked(sa.a, 0)
	cur, err := s.withdrawChained(ctx, store, sa, d)
	if err != nil {
		s.log.Warn("an approval its run's chain shows withdrawn could not be withdrawn at the validator; listed as the chain says", "run_id", sa.a.GetRunId(),
			"step_id", sa.a.GetStepId(), "err", err)
		w := proto.CloneOf(sa.a)
		w.State, w.DecidedBy, w.Reason = xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN, d.By, d.Reason
		return w
	}
	return cur
}

// maxListBytes bounds a ListApprovals answer (a gRPC message is at most
// 16 MiB): a proposal's arguments and preview may be 256 KiB each, and
// one principal's runs may wait for many approvals at once.
const maxListBytes = 8 << 20

// fitList is list, with the arguments, preview and long goal of its
// largest approvals left out, decided ones first, until it is at most
// maxListBytes: each left-out value says how large the proposal was and to
// list its run's approvals (a run waits for one at a time) to see it
// whole. An approval is never cut to look whole: what is left out says so.
func fitList(list []*xctv1.Approval) []*xctv1.Approval {
	sizes := make([]int, len(list))
	total := 0
	for i, a := range list {
		sizes[i] = proto.Size(a)
		total += sizes[i]
	}
	if total <= maxListBytes {
		return list
	}
	order := make([]int, len(list))
	for i := range order {
		order[i] = i
	}
	pending := func(i int) bool { return list[i].GetState() == xctv1.ApprovalState_APPROVAL_STATE_PENDING }
	slices.SortStableFunc(order, func(i, j int) int {
		if pi, pj := pending(i), pending(j); pi != pj {
			if pi {
				return 1
			}
			return -1
		}
		return sizes[j] - sizes[i]
	})
	for _, i := range order {
		if total <= maxListBytes {
			break
		}
		slim := leftOut(list[i], sizes[i])
		total += proto.Size(slim) - sizes[i]
		list[i] = slim
	}
	return list
}

// leftOut is a with its proposal's arguments (each value), its preview and
// a goal longer than 1 KiB replaced by a note.
func leftOut(a *xctv1.Approval, size int) *xctv1.Approval {
	out := proto.CloneOf(a)
	note := fmt.Sprintf("[left out of this list of every run's approvals: the approval is %d bytes; list run %s's approvals to see it whole]",
		size, a.GetRunId())
	if p := out.GetProposal(); p != nil {
		for k := range p.GetArguments().GetFields() {
			p.Arguments.Fields[k] = structpb.NewStringValue(note)
		}
		if len(p.GetGoal()) > 1024 {
			p.Goal = note
		}
	}
	if out.GetPreview() != nil {
		out.Preview.Content = note
	}
	return out
}

// DecideApproval approves or denies a pending approval, named by its run
// and its step number or step id. The approver must be named and must not
// be the principal who started the run; a denial needs a reason. An
// approval that expired (it is marked so), was decided already, or changed
// while this decision was made is refused: of two concurrent decisions,
// exactly one wins.
func (s *Service) DecideApproval(ctx context.Context, req *xctv1.DecideApprovalRequest) (*xctv1.DecideApprovalResponse, error) {
	store := s.approvals.Load()
	if store == nil {
		return nil, approvalStatus(ErrApprovalsUnavailable)
	}
	// The approver is the authenticated caller; only XCT's services may
	// decide in someone else's name.
	caller, err := auth.ActingAs(ctx, req.GetApprover())
	if err != nil {
		return nil, err
	}
	approver := strings.TrimSpace(caller.Name)
	reason := strings.TrimSpace(req.GetReason())
	switch {
	case !validKeyToken(req.GetRunId()):
		return nil, approvalStatus(ErrBadRunID)
	case strings.TrimSpace(req.GetStep()) == "":
		return nil, approvalStatus(ErrBadStepID)
	case approver == "":
		return nil, approvalStatus(ErrNoApprover)
	case len(approver) > maxApproverBytes || !utf8.ValidString(approver):
		return nil, approvalStatus(fmt.Errorf("%w: the approver's name is not valid UTF-8 of at most %d bytes", ErrNoApprover, maxApproverBytes))
	case !req.GetApprove() && reason == "":
		return nil, approvalStatus(ErrNoDenyReason)
	}
	reason = truncate(reason, maxDecisionReason)
	sa, err := s.findApproval(ctx, store, req.GetRunId(), strings.TrimSpace(req.GetStep()))
	if err != nil {
		return nil, approvalStatus(err)
	}
	a := sa.a
	if auth.LookAlike(approver, a.GetRequestedBy()) {
		return nil, approvalStatus(ErrSelfApproval)
	}
	if err := decidable(a); err != nil {
		if resent(a, req.GetApprove(), approver, reason) {
			// This very decision, sent again (its first answer lost):
			// it stands, and nothing is written.
			return &xctv1.DecideApprovalResponse{Approval: a}, nil
		}
		return nil, approvalStatus(err)
	}
	// The run's chain may say the approval was withdrawn while the
	// validator could not be told (it was down): then it is.
	if d, err := s.withdrawnOnChain(ctx, a); err != nil {
		return nil, approvalStatus(err)
	} else if d != nil {
		return nil, approvalStatus(s.withdrawAsChained(ctx, store, sa, d))
	}
	now := s.now()
	if !now.Before(a.GetExpiresAt().AsTime()) {
		if _, err := store.expire(ctx, sa, now); err != nil {
			return nil, approvalStatus(err)
		}
		return nil, approvalStatus(fmt.Errorf("%w at %s", ErrApprovalExpired, a.GetExpiresAt().AsTime().UTC().Format(time.RFC3339)))
	}
	decided := proto.CloneOf(a)
	decided.State = xctv1.ApprovalState_APPROVAL_STATE_DENIED
	if req.GetApprove() {
		decided.State = xctv1.ApprovalState_APPROVAL_STATE_APPROVED
	}
	decided.DecidedAt = timestamppb.New(now)
	decided.DecidedBy = approver
	decided.Reason = reason
	decided.DecidedPolicyVersion = s.policy.Load().version
	if err := store.update(ctx, decided, sa.rev); err != nil {
		if errors.Is(err, errApprovalConflict) {
			if cur, _, gerr := store.get(ctx, a.GetRunId(), a.GetStepId()); gerr == nil {
				if derr := decidable(cur); derr != nil {
					if resent(cur, req.GetApprove(), approver, reason) {
						return &xctv1.DecideApprovalResponse{Approval: cur}, nil
					}
					return nil, approvalStatus(derr)
				}
			}
			return nil, approvalStatus(fmt.Errorf("%w: it changed while this decision was made; look again", ErrApprovalDecided))
		}
		return nil, approvalStatus(err)
	}
	s.log.Info("approval decided", "run_id", a.GetRunId(), "step", a.GetStep(), "step_id", a.GetStepId(),
		"decision", decisionWordOf(decided.GetState()), "by", approver, "reason", s.redactor.Load().Text(reason))
	return &xctv1.DecideApprovalResponse{Approval: decided}, nil
}

// findApproval finds a run's approval by step id or step number. A number
// names an approval only when it is the one approval ever opened for that
// number in the run: with several (a step proposed again after a
// takeover, an undo asked again after a withdrawal) the approver may have
// read another than the one pending now, so the decision must name the
// step id (ErrAmbiguousStep lists them).
func (s *Service) findApproval(ctx context.Context, store *approvalStore, runID, step string) (storedApproval, error) {
	n, err := strconv.Atoi(step)
	if err != nil {
		if !validKeyToken(step) {
			return storedApproval{}, ErrBadStepID
		}
		a, rev, err := store.get(ctx, runID, step)
		return storedApproval{a: a, rev: rev}, err
	}
	items, err := store.list(ctx, runID)
	if err != nil {
		return storedApproval{}, err
	}
	var match []storedApproval
	for _, sa := range items {
		if int(sa.a.GetStep()) == n {
			match = append(match, sa)
		}
	}
	switch len(match) {
	case 0:
		return storedApproval{}, ErrApprovalNotFound
	case 1:
		return match[0], nil
	}
	var ids []string
	for _, sa := range match {
		ids = append(ids, fmt.Sprintf("%s (%s, %s)", sa.a.GetStepId(), decisionWordOf(sa.a.GetState()), truncate(sa.a.GetProposal().GetTool(), maxToolNameInMsg)))
	}
	return storedApproval{}, fmt.Errorf("%w: step %d of run %s has %d: %s", ErrAmbiguousStep, n, runID, len(match), strings.Join(ids, ", "))
}

// decidable says why an approval cannot be decided any more, or nil.
// resent reports whether a decided approval holds exactly the decision
// asked for now (the same way, by the same approver, for the same reason):
// a client that sends its decision again after losing the first answer is
// told the decision it made, not that the approval was decided.
func resent(a *xctv1.Approval, approve bool, approver, reason string) bool {
	want := xctv1.ApprovalState_APPROVAL_STATE_DENIED
	if approve {
		want = xctv1.ApprovalState_APPROVAL_STATE_APPROVED
	}
	return a.GetState() == want && a.GetDecidedBy() == approver && a.GetReason() == reason
}

func decidable(a *xctv1.Approval) error {
	switch a.GetState() {
	case xctv1.ApprovalState_APPROVAL_STATE_PENDING:
		return nil
	case xctv1.ApprovalState_APPROVAL_STATE_EXPIRED:
		return fmt.Errorf("%w at %s", ErrApprovalExpired, a.GetExpiresAt().AsTime().UTC().Format(time.RFC3339))
	case xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN:
		return withdrawnError(a)
	}
	return fmt.Errorf("%w: %s by %s at %s", ErrApprovalDecided, decisionWordOf(a.GetState()), a.GetDecidedBy(),
		a.GetDecidedAt().AsTime().UTC().Format(time.RFC3339))
}

// consultApproval turns a needs-approval verdict into what the step's
// stored approval says: granted and unexpired allows it (and counts it
// against the rate limits), denied denies it with the approver's reason,
// expired denies it. Pending, absent or unreadable leaves it waiting.
func (s *Service) consultApproval(ctx context.Context, installed *installedPolicy, in *Input, v *xctv1.Verdict, j judging) {
	store := s.approvals.Load()
	runID := in.Run.GetRunId()
	if store == nil || !validKeyToken(runID) || !validKeyToken(in.StepID) {
		return
	}
	a, _, err := store.get(ctx, runID, in.StepID)
	if errors.Is(err, ErrApprovalNotFound) {
		return
	}
	if err != nil {
		s.log.Warn("approval could not be read; the step keeps waiting", "run_id", runID, "step_id", in.StepID, "err", err)
		return
	}
	if !sameProposal(a, in) {
		s.log.Error("stored approval is for another proposal than the one with its step id; denied", "run_id", runID, "step_id", in.StepID)
		denyBecause(v, reasonApproval, "the approval stored under this step id is for a different proposal",
			wire.Errorf(wire.CodePolicyDenied, "the approval stored for this step does not match the proposal, so it is denied"))
		v.ApprovalTtl = nil
		return
	}
	if !auth.SamePrincipal(a.GetRequestedBy(), in.Run.GetPrincipal()) {
		s.log.Error("stored approval was opened for another principal than the run's; denied", "run_id", runID, "step_id", in.StepID,
			"requested_by", a.GetRequestedBy(), "principal", in.Run.GetPrincipal())
		denyBecause(v, reasonApproval, "the approval stored under this step id was opened for another principal than the run's",
			wire.Errorf(wire.CodePolicyDenied, "the approval stored for this step was not opened for this run's principal, so it is denied"))
		v.ApprovalTtl = nil
		return
	}
	expiresAt := usableUntil(a)
	expired := !in.Now.Before(expiresAt)
	var forgeable error
	if a.GetState() == xctv1.ApprovalState_APPROVAL_STATE_APPROVED && !expired {
		forgeable = store.republishedInto(ctx)
		if errors.Is(forgeable, jsguard.ErrUnlisted) {
			s.log.Warn("the streams could not be listed; the step keeps waiting", "run_id", runID, "step_id", in.StepID, "err", forgeable)
			return
		}
	}
	// The approval counts while the policy in force asks a human about
	// this step for what the human was shown: the rules and messages that
	// asked (its reasons), whatever else a reload changed. v holds the
	// policy in force's needs-approval verdict for the step.
	underOther := !sameReasons(a.GetReasons(), v.GetReasons())
	switch st := a.GetState(); {
	case st == xctv1.ApprovalState_APPROVAL_STATE_APPROVED && !expired && underOther:
		// Given for what another policy asked: the policy in force asks
		// its own human (the model may propose the step again).
		s.log.Warn("an approval given for other rules than the policy in force asks about the step is not counted; denied", "run_id", runID, "step_id", in.StepID,
			"asked_under", a.GetPolicyVersion(), "decided_under", a.GetDecidedPolicyVersion(), "policy", installed.version,
			"asked_for", strings.Join(reasonIDs(a.GetReasons()), ","), "policy_asks_for", strings.Join(reasonIDs(v.GetReasons()), ","))
		msg := fmt.Sprintf("this step's approval was asked under policy %s (%s) and decided under %s; the policy in force, %s, asks a human about it for other rules (%s), so it does not count: propose the step again to ask under this policy",
			a.GetPolicyVersion(), strings.Join(reasonIDs(a.GetReasons()), ", "), orUnrecorded(a.GetDecidedPolicyVersion()), installed.version,
			strings.Join(reasonIDs(v.GetReasons()), ", "))
		denyBecause(v, reasonApproval, "the approval was given under another policy than the one in force",
			wire.WithDetails(wire.Errorf(wire.CodePolicyDenied, "%s", msg), map[string]any{
				"asked_under": a.GetPolicyVersion(), "decided_under": a.GetDecidedPolicyVersion(), "policy_version": installed.version}))
		v.ApprovalTtl = nil
	case st == xctv1.ApprovalState_APPROVAL_STATE_APPROVED && !expired && forgeable != nil:
		err := forgeable
		s.log.Error("an approval lets a step run only while nothing but the validator writes the approvals; denied", "run_id", runID, "step_id", in.StepID, "err", err)
		denyBecause(v, reasonApproval, "the approvals can be written by another stream than the validator's: "+err.Error(),
			wire.Errorf(wire.CodePolicyDenied, "this step's approval cannot be trusted (the approvals bucket is written by another stream too), so it is denied"))
		v.ApprovalTtl = nil
	case st == xctv1.ApprovalState_APPROVAL_STATE_APPROVED && !expired:
		// What the human approved is the change shown, against the
		// file it was shown against: the grant binds that file.
		in.previewBase = a.GetPreview().GetBaseDigest()
		v.Reasons = append(v.Reasons, &xctv1.Reason{RuleId: reasonApproval, Message: fmt.Sprintf("approved by %s: %s", a.GetDecidedBy(), a.GetReason())})
		v.Decision, v.Error, v.ApprovalTtl = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW, nil, nil
		s.rateRefused(ctx, s.limits, "", installed.limits, in, j.count, v)
	case st == xctv1.ApprovalState_APPROVAL_STATE_DENIED:
		msg := fmt.Sprintf("a human (%s) denied this step: %s", a.GetDecidedBy(), a.GetReason())
		denyBecause(v, reasonApproval, fmt.Sprintf("denied by %s: %s", a.GetDecidedBy(), a.GetReason()),
			wire.WithDetails(wire.Errorf(wire.CodeApprovalDenied, "%s", msg), map[string]any{
				"tool": truncate(in.Tool.GetName(), maxToolNameInMsg), "decided_by": a.GetDecidedBy(), "reason": a.GetReason()}))
		v.ApprovalTtl = nil
	case st == xctv1.ApprovalState_APPROVAL_STATE_APPROVED && expired:
		// Approved in time, and not asked about for a verdict TTL after:
		// say so, not that no one decided.
		at := expiresAt.UTC().Format(time.RFC3339)
		denyBecause(v, reasonApproval, fmt.Sprintf("approved by %s, but not used before %s", a.GetDecidedBy(), at),
			wire.WithDetails(wire.Errorf(wire.CodeApprovalExpired, "this step was approved by %s at %s, but not acted on before %s, when the approval stopped counting; propose it again to ask for a new one, or finish",
				a.GetDecidedBy(), a.GetDecidedAt().AsTime().UTC().Format(time.RFC3339), at),
				map[string]any{"tool": truncate(in.Tool.GetName(), maxToolNameInMsg), "expires_at": at, "decided_by": a.GetDecidedBy()}))
		v.ApprovalTtl = nil
	case st == xctv1.ApprovalState_APPROVAL_STATE_EXPIRED || expired:
		at := expiresAt.UTC().Format(time.RFC3339)
		denyBecause(v, reasonApproval, "the approval expired at "+at,
			wire.WithDetails(wire.Errorf(wire.CodeApprovalExpired, "this step's approval expired at %s; propose it again to ask for a new one, or finish", at),
				map[string]any{"tool": truncate(in.Tool.GetName(), maxToolNameInMsg), "expires_at": at}))
		v.ApprovalTtl = nil
	}
}

// approvedGrace is how long an approval approved before its expiry still
// counts after its decision, when that is later than the expiry: the
// verdict after a decision comes from the run's owner, or, when the owner
// was lost right after the decision, from the next one after a lease and
// a takeover. Counting it only until expires_at lost a human's yes given
// in time to that delay (the chain said APPROVAL_EXPIRED under the
// approval). It is a signed allow's lifetime (verdict.DefaultTTL): what
// the decision amounts to.
const approvedGrace = verdict.DefaultTTL

// usableUntil is when an approval stops counting for a verdict: its
// expires_at, or, for one approved in time (DecideApproval refuses a
// decision at or after expires_at), approvedGrace after its decision if
// that is later.
func usableUntil(a *xctv1.Approval) time.Time {
	until := a.GetExpiresAt().AsTime()
	if a.GetState() != xctv1.ApprovalState_APPROVAL_STATE_APPROVED || a.GetDecidedAt() == nil {
		return until
	}
	decided := a.GetDecidedAt().AsTime()
	if grace := decided.Add(approvedGrace); decided.Before(until) && grace.After(until) {
		return grace
	}
	return until
}

// sameReasons reports whether an approval's reasons (what asked for a
// human when it was opened, shown to the approver) are the ones the policy
// in force gives for the step now: the same rules with the same messages,
// in the same order.
func sameReasons(asked, now []*xctv1.Reason) bool {
	return slices.EqualFunc(asked, now, func(a, b *xctv1.Reason) bool { return proto.Equal(a, b) })
}

// sameProposal reports whether a stored approval is for exactly this
// proposal at this step of this run.
func sameProposal(a *xctv1.Approval, in *Input) bool {
	p := a.GetProposal()
	return a.GetRunId() == in.Run.GetRunId() && a.GetStep() == in.Step && a.GetStepId() == in.StepID &&
		p.GetTool() == in.Proposal.GetTool() && proto.Equal(argsOrEmpty(p), argsOrEmpty(in.Proposal))
}

func argsOrEmpty(p *xctv1.NextStep) *structpb.Struct {
	if a := p.GetArguments(); a != nil {
		return a
	}
	return &structpb.Struct{}
}

// validKeyToken reports whether s can be one token of a KV key: 1 to 128
// of A-Z a-z 0-9 _ -, the characters run ids and step ids use.
func validKeyToken(s string) bool {
	if s == "" || len(s) > maxKeyTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// clampPreview bounds a preview so an approval fits in a KV entry, and
// makes every character of it visible: the content is the model's (a file
// it writes), and a carriage return, an escape sequence or a
// bidirectional override would show the approver, in a terminal or a
// browser, something other than what runs. Each is written as its escape
// (wire.Visible), under a note saying how many there are.
func clampPreview(p *xctv1.Preview) *xctv1.Preview {
	if p == nil {
		return nil
	}
	kind, _ := wire.Visible(p.GetKind(), "")
	content, hidden := wire.Visible(p.GetContent(), "\n\t")
	if hidden > 0 {
		content = fmt.Sprintf(previewHiddenNote, hidden) + content
	}
	out := &xctv1.Preview{Kind: truncate(kind, maxPreviewKindBytes), Content: content, BaseDigest: truncate(p.GetBaseDigest(), maxPreviewBaseBytes), Redacted: p.GetRedacted()}
	if len(out.Content) > maxPreviewBytes {
		out.Content = strings.TrimSuffix(truncate(out.Content, maxPreviewBytes-len(previewCut)), "…") + previewCut
	}
	return out
}

// unboundPreview says why a preview of fs.write's diff is not shown, or
// "" when it may be: a diff names no file it was made against (an
// executor before base digests, or a base dropped on the way) would bind
// no approval to the file the approver saw, and the write would replace
// whatever is there when it runs. Without the diff the approver decides
// from the proposal alone, as for a tool without a preview.
//
// fs.delete's and fs.move's previews (session 18) always name the entry
// they were made from: one that names none is not shown.
func unboundPreview(p *xctv1.NextStep, preview *xctv1.Preview) string {
	if preview == nil || preview.GetBaseDigest() != "" {
		return ""
	}
	switch p.GetTool() {
	case "fs.write":
		if preview.GetKind() == "diff" {
			return "the preview does not say which file it was made against, so it is not shown: the write replaces the file as it is when the step runs"
		}
	case "fs.delete", "fs.move":
		return "the preview does not say which entry it was made from, so it is not shown: the step acts on the entry as it is when it runs"
	}
	return ""
}

// previewHiddenNote heads a preview that had characters that do not show.
const previewHiddenNote = "NOTE: %d characters that do not show as themselves (control, format or bidirectional characters) are written below as escapes (\\r, \\x1b, \\u202e, ...); the step writes them as they are\n"

func decisionWord(d xctv1.VerdictDecision) string {
	switch d {
	case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		return "allow"
	case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
		return "needs approval"
	}
	return "deny"
}

func decisionWordOf(s xctv1.ApprovalState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "APPROVAL_STATE_"))
}

// orUnrecorded is a policy version for messages ("not recorded" for an
// approval decided before decisions recorded theirs).
func orUnrecorded(version string) string {
	if version == "" {
		return "a policy not recorded"
	}
	return version
}
