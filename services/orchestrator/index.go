package orchestrator

import (
	"sync"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// runIndex caches runs materialized from their chains. Runs this process
// writes are applied event by event as they are appended; any other run is
// read from the stream when asked for (see Service.lookup) and cached once
// it has ended, because an ended chain never changes. Nothing here is a
// source of truth: dropping the cache only costs reads.
type runIndex struct {
	mu        sync.RWMutex
	runs      map[string]*indexed      // full runs, with steps
	summaries map[string]listedSummary // ended runs without steps, for listings
}

// listedSummary is an ended run's summary and the number of its chain's
// stream messages when it was made (0: not known). A chain's message
// count is what a listing learns of every chain at once (eventlog's
// Chains), and a message may hold several events (a pack): the count says
// whether the chain changed since, not where it ends.
type listedSummary struct {
	run  *xctv1.Run
	msgs uint64
}

// indexed is a cached run: its view, and the end this process knows of
// when the chain could not record it.
type indexed struct {
	view       *xctevent.Run
	unrecorded string
	status     xctv1.RunStatus // how it ended; UNSPECIFIED: as its chain says
}

func (c *indexed) record() *xctv1.Run {
	r := runRecord(c.view)
	if c.status != xctv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		r.Status = c.status
		r.Message = c.unrecorded
	}
	return r
}

func newRunIndex() *runIndex {
	return &runIndex{runs: map[string]*indexed{}, summaries: map[string]listedSummary{}}
}

// apply folds one event of a run into the cache (idempotent by seq).
func (x *runIndex) apply(e *lctl.Event) { x.applyParsed(e, nil) }

// applyParsed is apply with e already parsed (p is xctevent.Parse(e), or
// nil).
func (x *runIndex) applyParsed(e *lctl.Event, p xctevent.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.runs[e.ChainID]
	if !ok {
		if e.Type != lctl.TypeRunStarted {
			return
		}
		c = &indexed{view: &xctevent.Run{}}
		x.runs[e.ChainID] = c
	}
	c.view.ApplyParsed(e, p)
}

// put caches a run folded from its chain; the index owns v from now on.
func (x *runIndex) put(v *xctevent.Run) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.runs[v.ChainID] = &indexed{view: v}
}

// drop forgets a run, so the next read comes from its chain.
func (x *runIndex) drop(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.runs, id)
	delete(x.summaries, id)
}

// markUnrecorded ends a run whose end could not be written to the log: the
// process knows it failed (or was cancelled) even though the chain cannot
// say so.
func (x *runIndex) markUnrecorded(id, message string, status xctv1.RunStatus) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c, ok := x.runs[id]; ok && !c.view.Over() {
		c.status, c.unrecorded = status, message
	}
}

// unrecordedEnd reports whether the run's end is known here only: its
// loop ended but its run_finished could not be appended (markUnrecorded),
// so its chain is live and a takeover continues it.
func (x *runIndex) unrecordedEnd(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	c, ok := x.runs[id]
	return ok && c.status != xctv1.RunStatus_RUN_STATUS_UNSPECIFIED && !c.view.Over()
}

// get returns the record of a cached run (the caller's to keep).
func (x *runIndex) get(id string) (*xctv1.Run, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	c, ok := x.runs[id]
	if !ok {
		return nil, false
	}
	return c.record(), true
}

// summary returns a run without its steps, from either cache.
func (x *runIndex) summary(id string) (*xctv1.Run, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if c, ok := x.runs[id]; ok {
		r := c.record()
		r.Steps = nil
		return r, true
	}
	if l, ok := x.summaries[id]; ok {
		return proto.Clone(l.run).(*xctv1.Run), true
	}
	return nil, false
}

// currentSummary returns a run without its steps when what is cached is
// current for a chain of msgs stream messages: a run this process folds
// event by event that has read at least as many events (a message holds
// one or more), or an ended run's summary made when the chain had
// exactly msgs messages.
func (x *runIndex) currentSummary(id string, msgs uint64) (*xctv1.Run, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if c, ok := x.runs[id]; ok {
		r := c.record()
		r.Steps = nil
		return r, r.GetLastSeq() >= msgs
	}
	if l, ok := x.summaries[id]; ok && l.msgs == msgs && msgs > 0 {
		return proto.Clone(l.run).(*xctv1.Run), true
	}
	return nil, false
}

// putSummary caches an ended run's summary, made when its chain had msgs
// stream messages (0: not known; a listing makes it again).
func (x *runIndex) putSummary(r *xctv1.Run, msgs uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.summaries[r.GetRunId()] = listedSummary{run: withoutSteps(r), msgs: msgs}
}

func withoutSteps(r *xctv1.Run) *xctv1.Run {
	c := &xctv1.Run{}
	steps := r.Steps
	r.Steps = nil
	proto.Merge(c, r)
	r.Steps = steps
	return c
}

func ended(r *xctv1.Run) bool {
	return r.GetStatus() != xctv1.RunStatus_RUN_STATUS_UNSPECIFIED && !live(r.GetStatus())
}

// live reports whether a run in status st has not ended: it runs, or waits
// for a human (an approval, a step in doubt).
func live(st xctv1.RunStatus) bool {
	switch st {
	case xctv1.RunStatus_RUN_STATUS_RUNNING, xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL, xctv1.RunStatus_RUN_STATUS_IN_DOUBT:
		return true
	}
	return false
}
