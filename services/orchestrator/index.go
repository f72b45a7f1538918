package orchestrator

import (
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
)

// runIndex holds every known run, materialized from the stream. Runs this
// process writes are applied as they are appended; all others arrive through
// the stream follower. apply is idempotent by seq, so both paths may deliver
// the same event.
type runIndex struct {
	mu   sync.RWMutex
	runs map[string]*xctv1.Run
}

func newRunIndex() *runIndex { return &runIndex{runs: map[string]*xctv1.Run{}} }

func (x *runIndex) apply(e *lctl.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r, ok := x.runs[e.ChainID]
	if !ok {
		if e.Type != lctl.TypeRunStarted {
			return // not an XCT run (another LCTL writer), or a gap
		}
		r = &xctv1.Run{}
		x.runs[e.ChainID] = r
	}
	applyRunEvent(r, e)
}

// markUnrecorded ends a run whose end could not be written to the log: the
// process knows it failed even though the chain cannot say so.
func (x *runIndex) markUnrecorded(id, message string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if r, ok := x.runs[id]; ok && r.Status == xctv1.RunStatus_RUN_STATUS_RUNNING {
		r.Status = xctv1.RunStatus_RUN_STATUS_FAILED
		r.Message = message
	}
}

// get returns a copy of a run.
func (x *runIndex) get(id string) (*xctv1.Run, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.runs[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(r).(*xctv1.Run), true
}

// list returns copies of the newest runs, without steps.
func (x *runIndex) list(limit int) []*xctv1.Run {
	x.mu.RLock()
	out := make([]*xctv1.Run, 0, len(x.runs))
	for _, r := range x.runs {
		c := &xctv1.Run{}
		proto.Merge(c, r)
		c.Steps = nil
		out = append(out, c)
	}
	x.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].GetCreatedAt().AsTime(), out[j].GetCreatedAt().AsTime()
		if !ti.Equal(tj) {
			return ti.After(tj)
		}
		return out[i].GetRunId() > out[j].GetRunId()
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
