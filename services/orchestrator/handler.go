package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/storehealth"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/otlp"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// The OrchestratorService RPCs (service.go has the lifecycle).

// StartRun implements OrchestratorService.
func (s *Service) StartRun(ctx context.Context, req *xctv1.StartRunRequest) (*xctv1.StartRunResponse, error) {
	r, err := s.startRun(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	run, _ := s.runs.get(r.id)
	return &xctv1.StartRunResponse{Run: run}, nil
}

func (s *Service) startRun(ctx context.Context, req *xctv1.StartRunRequest) (*run, error) {
	if req.GetGoal() == "" {
		return nil, status.Error(codes.InvalidArgument, "goal is required")
	}
	if req.GetModel() == "" && len(req.GetCrew()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "model is required (scripted:FILE, openai:MODEL or grpc:ADDR), or a crew file")
	}
	if req.GetMaxSteps() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_steps must not be negative")
	}
	id := req.GetRunId()
	if id == "" {
		id = newRunID()
	} else if err := lctl.ValidateChainID(id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	} else if strings.HasPrefix(id, otlp.ChainPrefix) {
		// The tracer writes the chains of OTLP traces under that prefix,
		// resuming whatever chain has the id: a run there would share its
		// chain with spans anyone who may export traces sends.
		return nil, status.Errorf(codes.InvalidArgument, "run id %q: ids starting with %q are the chains of ingested OpenTelemetry traces", id, otlp.ChainPrefix)
	}
	// The run's principal is the authenticated caller; its roles go on
	// the chain, so the validator's policies see them (run.roles).
	principal, roles, err := actingPrincipal(ctx, req.GetPrincipal())
	if err != nil {
		return nil, err
	}
	maxSteps, err := s.stepBudget(req, roles)
	if err != nil {
		return nil, err
	}
	if err := s.cfg.StoreHealth.FullErr(startStreams...); err != nil {
		// Known full: refused before anything is written (no owner key,
		// no quota, no index entry), at once; a retry cannot help until
		// an operator makes room.
		return nil, storeFull(err)
	}
	// A crew run proposes through its agents' models (crew.go); any other
	// run through its one model.
	model := req.GetModel()
	var (
		cr       *crewRun
		proposer Proposer
	)
	if len(req.GetCrew()) > 0 {
		c, err := loadCrew(req.GetCrewFile(), req.GetCrew())
		if err != nil {
			return nil, err
		}
		sess, err := crew.NewSession(c, id, nil, crew.SessionOptions{CheckpointEvery: s.cfg.CrewCheckpointEvery})
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		model, cr = crewModelPrefix+c.Name, &crewRun{sess: sess, proposers: map[string]Proposer{}}
	} else if proposer, err = s.newProposer(model); err != nil {
		return nil, err
	}
	tools, err := s.toolCatalog(ctx)
	if err != nil {
		closeProposer(proposer)
		return nil, err
	}
	if cr != nil {
		// Every tool an agent may propose must be in the catalog.
		if err := cr.sess.Crew().CheckCatalog(tools); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "crew file %s: %v", req.GetCrewFile(), err)
		}
	}
	writer, err := s.events.NewChainWriter(id)
	if err != nil {
		closeProposer(proposer)
		return nil, err
	}
	rctx, rcancel := context.WithCancelCause(context.Background())
	r := &run{
		runSpec: runSpec{
			id: id, tools: modelCatalog(tools), goal: req.GetGoal(), principal: principal, roles: roles,
			labels: req.GetLabels(), maxSteps: maxSteps, model: model, started: time.Now(),
		},
		svc: s, log: s.log, writer: writer, proposer: proposer, crew: cr,
		ctx: rctx, cancel: rcancel, done: make(chan struct{}), left: make(chan struct{}), release: make(chan struct{}),
	}
	s.mu.Lock()
	if prev := s.active[id]; s.stopping || prev != nil {
		stopping, starting := s.stopping, prev != nil && prev.starting
		s.mu.Unlock()
		rcancel(nil)
		closeProposer(proposer)
		switch {
		case stopping:
			return nil, ErrStopping
		case starting:
			// Another call (a client's retry of this one, say) is still
			// starting the run: whether it exists is not known until its
			// run_started is recorded.
			return nil, status.Errorf(codes.Unavailable, "run %s is being started by another call on this orchestrator and its start is not recorded yet; retry: ALREADY_EXISTS then says it started", id)
		}
		return nil, fmt.Errorf("%w: %s", ErrRunExists, id)
	}
	if n := s.runsOfLocked(principal); n >= s.cfg.MaxRuns {
		s.mu.Unlock()
		rcancel(nil)
		closeProposer(proposer)
		return nil, status.Errorf(codes.ResourceExhausted,
			"%s already has %d runs in progress on this orchestrator, the limit per principal (--max-runs): wait for one to end, or cancel one", principal, n)
	}
	r.starting = true
	s.active[id] = r
	s.mu.Unlock()
	rev, err := s.claimStart(ctx, id)
	if err != nil {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		rcancel(nil)
		closeProposer(proposer)
		return nil, err
	}
	r.lease.set(rev)
	// The limit per principal holds across the cluster: counted once the
	// run's owner key exists (quota.go drops the runs whose key is gone).
	counted, err := s.takeQuota(ctx, principal, id, s.cfg.MaxRuns)
	if err != nil {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		rcancel(nil)
		closeProposer(proposer)
		s.abandonStart(r)
		return nil, err
	}
	// The run is indexed as live before its run_started can land: once
	// on the chain without an owner key, only the index finds it
	// (orphans.go).
	if err := s.list(ctx, id); err != nil {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		rcancel(nil)
		closeProposer(proposer)
		if counted {
			s.giveQuota(principal, id)
		}
		s.abandonStart(r)
		return nil, status.Errorf(codes.Unavailable, "run %s not started: %v; retry", id, err)
	}
	var started xctevent.Event = xctevent.RunStarted{
		RunID: id, Goal: req.GetGoal(), Model: model, Principal: principal,
		Roles: roles, Labels: req.GetLabels(), MaxSteps: maxSteps,
	}
	if cr != nil {
		started = crewStarted(started.(xctevent.RunStarted), cr.sess.Crew(), req.GetCrew())
	}
	if err = r.record(agentOrchestrator, started); err != nil {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		rcancel(nil)
		r.closeProposers()
		if appendMayHaveLanded(err) {
			// The chain may have begun: the owner key stays, so a
			// takeover resumes the run within a lease (or, finding no
			// chain, deletes the key). Deleting it would leave a run
			// that exists and that no orchestrator ever runs.
			s.log.Warn("run start not confirmed by the event log; it may have been recorded: its claim is left for a takeover", "run", id, "err", err)
			return nil, status.Errorf(codes.Unavailable,
				"run %s: its start may have been recorded although the event log did not confirm it (%v); retry with the same run id: ALREADY_EXISTS then says it was, and the run goes on within %v",
				id, err, s.cfg.RunLease)
		}
		if counted {
			s.giveQuota(principal, id)
		}
		if errors.Is(err, eventlog.ErrConflict) {
			// The run's chain exists, and this call holds its owner key:
			// no orchestrator runs it (an ended run, or one whose start
			// landed after its claim was cleared). It is resumed here,
			// which only deletes the key of an ended run.
			s.resumeUnowned(ctx, r)
			return nil, fmt.Errorf("%w: %s", ErrRunExists, id)
		}
		s.abandonStart(r)
		s.unlist(id) // its run_started was refused: it never started
		if storehealth.IsFull(err) {
			return nil, storeFull(fmt.Errorf("NATS stream %s cannot store: %w", eventlog.StreamName, err))
		}
		return nil, err
	}
	s.mu.Lock()
	r.starting = false
	s.mu.Unlock()
	s.log.Info("run started", "run", id, "model", model, "principal", principal)
	r.startRunSpan(ctx)
	s.launch(r)
	return r, nil
}

// startStreams are the streams a run's start writes to: its chain, its
// owner key and its principal's quota.
var startStreams = []string{eventlog.StreamName, "KV_" + OwnersBucket, "KV_" + QuotaBucket}

// storeFull is the refusal of a start while a stream it writes to cannot
// store for want of room: RESOURCE_EXHAUSTED, which a client does not
// retry (UNAVAILABLE told `xct run` to retry for its --start-retry),
// naming the stream and the cause. Nothing recorded is lost: JetStream
// refuses the new write (discard new), it drops no stored event.
func storeFull(err error) error {
	return status.Errorf(codes.ResourceExhausted,
		"no run is started while the event log cannot store (%v): an operator must make room (free disk space, raise the stream's max_bytes or max_msgs, or the server's max_file_store); nothing recorded is lost", err)
}

// DefaultMaxRuns is how many runs one principal may have in progress at
// once in the cluster. Each run may hold JetStream consumers while it
// waits (for an approval: one on the approvals' stream, whose consumers
// are bounded for everyone by natsauth.MaxConsumersPerStream; for a step's
// record) and a model and tool call in flight: without a bound one
// principal's runs could take them all, and every other principal's
// approval waits would fail.
const DefaultMaxRuns = 128

// runsOfLocked counts the runs of principal this orchestrator has in
// progress (started, taken over or rolling back here); s.mu is held.
func (s *Service) runsOfLocked(principal string) int {
	n := 0
	for _, r := range s.active {
		if r.principal == principal {
			n++
		}
	}
	return n
}

// GetRun implements OrchestratorService.
func (s *Service) GetRun(ctx context.Context, req *xctv1.GetRunRequest) (*xctv1.GetRunResponse, error) {
	r, err := s.lookup(ctx, req.GetRunId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &xctv1.GetRunResponse{Run: fitRun(r)}, nil
}

// lookup returns a run: from the cache when this process writes it or it
// has ended (an ended chain never changes), otherwise read from its chain.
func (s *Service) lookup(ctx context.Context, id string) (*xctv1.Run, error) {
	if err := lctl.ValidateChainID(id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if strings.HasPrefix(id, otlp.ChainPrefix) {
		// No run has such an id (StartRun refuses it): the chain is an
		// OTLP trace's, on a stream the orchestrator does not read
		// (natsauth: it makes consumers on the runs' chains only).
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	if owner := s.owner(id); owner != nil {
		// Wait for an append in flight: the caller may have seen it on the log.
		owner.recording.Lock()
		r, ok := s.runs.get(id)
		owner.recording.Unlock()
		if ok {
			return r, nil
		}
	}
	if r, ok := s.runs.get(id); ok && ended(r) {
		// An ended run changes only by a rollback, which another replica
		// may have run: one read of the chain's last seq tells. Without the
		// log, the cached run is the best there is.
		if s.nc != nil && !s.nc.IsConnected() {
			return r, nil
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last, err := s.events.LastSeq(lctx, id)
		cancel()
		if err != nil {
			s.log.Debug("cannot tell whether an ended run grew: serving the cached one", "run", id, "err", err)
			return r, nil //nolint:nilerr // the cached run is the answer when the log cannot be read
		}
		if last <= r.GetLastSeq() {
			return r, nil
		}
	}
	events, err := s.events.ReadChain(ctx, id)
	if errors.Is(err, eventlog.ErrChainNotFound) || (err == nil && (len(events) == 0 || events[0].Type != lctl.TypeRunStarted)) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	view := xctevent.Fold(events)
	s.runs.put(view)
	r := runRecord(view)
	if live(r.GetStatus()) {
		s.notePendingCancel(ctx, r)
	}
	return r, nil
}

// notePendingCancel says in r's message that a cancel is recorded in the
// run's owner key while its end is not on its chain yet (its owner
// stopping, or a takeover to come: the log full, the owner gone). One
// read of the key; none if it cannot be read.
func (s *Service) notePendingCancel(ctx context.Context, r *xctv1.Run) {
	kctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := s.owners.Get(kctx, r.GetRunId())
	if err != nil {
		return
	}
	rec, ok := decodeOwner(e.Value())
	if !ok || rec.Cancel == nil {
		return
	}
	r.Message = rec.Cancel.cause().Error() + ": the cancel is recorded and the run takes no further step; its end is not on the chain yet"
}

// owner returns the run if this process runs its loop.
func (s *Service) owner(id string) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active[id]
}

// owns reports whether this process runs the loop of a run.
func (s *Service) owns(id string) bool { return s.owner(id) != nil }

// chainSummary is a run's summary (without its steps) from its chain's
// first and last events, or from the whole chain when its last event may
// follow the run's end and says no status itself (a signed checkpoint, a
// rollback's start or end): the two ends alone said RUNNING for every run
// ended by a cluster that signs checkpoints. nil when the chain is not a
// run's (another LCTL writer's).
func (s *Service) chainSummary(ctx context.Context, id string) (*xctv1.Run, error) {
	first, last, err := s.events.Ends(ctx, id)
	if err != nil {
		return nil, err
	}
	if first.Type != lctl.TypeRunStarted {
		return nil, nil
	}
	view := &xctevent.Run{}
	view.Apply(&first)
	view.Apply(&last)
	r := runRecord(view)
	switch last.Type {
	case lctl.TypeSignedCheckpoint, lctl.TypeRollbackStarted, lctl.TypeRollbackFinished:
		if !ended(r) {
			events, err := s.events.ReadChain(ctx, id)
			if err != nil {
				return nil, err
			}
			r = runRecord(xctevent.Fold(events))
		}
	}
	r.Steps = nil
	return r, nil
}

// ListRuns implements OrchestratorService. It lists every chain in the
// stream and summarizes each (chainSummary); summaries of ended runs are
// cached.
func (s *Service) ListRuns(ctx context.Context, req *xctv1.ListRunsRequest) (*xctv1.ListRunsResponse, error) {
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxListRuns)
	chains, err := s.events.Chains(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	runs := make([]*xctv1.Run, 0, len(chains))
	for id, count := range chains {
		if r, ok := s.runs.currentSummary(id, count); ok && (ended(r) || s.owns(id)) {
			runs = append(runs, r)
			continue
		}
		r, err := s.chainSummary(ctx, id)
		if err != nil {
			return nil, toStatus(err)
		}
		if r == nil {
			continue // another LCTL writer's chain, not a run
		}
		if ended(r) {
			s.runs.putSummary(r, count)
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool {
		ti, tj := runs[i].GetCreatedAt().AsTime(), runs[j].GetCreatedAt().AsTime()
		if !ti.Equal(tj) {
			return ti.After(tj)
		}
		return runs[i].GetRunId() > runs[j].GetRunId()
	})
	if len(runs) > limit {
		runs = runs[:limit]
	}
	for i, r := range runs {
		runs[i] = listEntry(r)
	}
	return &xctv1.ListRunsResponse{Runs: runs}, nil
}

// Bounds of a ListRuns answer: a list is a summary of each run, so that
// however long the runs' goals, labels and end messages (64 KiB, 64 of
// 1 KiB, a model's done message of up to 256 KiB), MaxListRuns of them fit
// in one gRPC message. GetRun has each whole.
const (
	MaxListRuns       = 1000
	maxListEntryText  = 1024 // bytes of a goal or message in a list
	maxListEntryLabel = 1024 // bytes of all of a run's labels in a list
)

// listEntry is r as a list shows it: its goal and message cut at
// maxListEntryText bytes (on a rune boundary, "…" added), its labels left
// out when they are longer than maxListEntryLabel in all. r is not changed
// (it may be the cache's).
func listEntry(r *xctv1.Run) *xctv1.Run {
	labels := 0
	for k, v := range r.GetLabels() {
		labels += len(k) + len(v)
	}
	if len(r.GetGoal()) <= maxListEntryText && len(r.GetMessage()) <= maxListEntryText && labels <= maxListEntryLabel {
		return r
	}
	out := proto.CloneOf(r)
	out.Goal, out.Message = cutText(out.GetGoal(), maxListEntryText), cutText(out.GetMessage(), maxListEntryText)
	if labels > maxListEntryLabel {
		out.Labels = nil
	}
	return out
}

// cutText is s cut to at most n bytes on a rune boundary, with "…" when
// it was cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// WatchRun implements OrchestratorService.
func (s *Service) WatchRun(req *xctv1.WatchRunRequest, stream grpc.ServerStreamingServer[xctv1.WatchRunResponse]) error {
	return s.watchRun(req, stream) // watch.go
}
