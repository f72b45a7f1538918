package orchestrator

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
)

// DefaultMaxWatches is how many WatchRun streams one principal may hold
// open in the cluster when the configuration does not say.
const DefaultMaxWatches = 64

// WatchRun does not spend a JetStream consumer per client: the watchers of
// one run share one follower (an ordered consumer of the run's subject)
// that buffers the run's events in memory and wakes them as events
// arrive; the follower stops when its last watcher goes. Each principal
// holds at most MaxWatches open streams across the cluster
// (RESOURCE_EXHAUSTED past that; watchcount.go), so the consumers a
// principal can make the server hold are bounded too.

// watchHub is the shared follower of one run.
type watchHub struct {
	runID  string
	cancel context.CancelFunc
	refs   int // guarded by watches.mu

	mu      sync.Mutex
	events  []lctl.Event
	done    bool  // run_finished was read: nothing more comes
	err     error // the follower failed
	changed chan struct{}
}

// watches are the hubs and the open streams per principal.
type watches struct {
	mu     sync.Mutex
	hubs   map[string]*watchHub
	open   map[string]int
	follow func(ctx context.Context, runID string, fn func(lctl.Event) error) error
	// serving are the ids of the watches this instance counts in the
	// cluster's records (watchcount.go) and serves.
	serving map[string]bool
}

func newWatches(follow func(ctx context.Context, runID string, fn func(lctl.Event) error) error) *watches {
	return &watches{hubs: map[string]*watchHub{}, open: map[string]int{}, follow: follow, serving: map[string]bool{}}
}

// serve marks watch id served here (true) or no longer (false).
func (w *watches) serve(id string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on {
		w.serving[id] = true
	} else {
		delete(w.serving, id)
	}
}

// isServing reports whether watch id is served here.
func (w *watches) isServing(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.serving[id]
}

// acquire counts one more stream for principal, refused past limit, and
// returns the run's hub, starting its follower if it has none.
func (w *watches) acquire(principal, runID string, limit int) (*watchHub, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[principal] >= limit {
		return nil, status.Errorf(codes.ResourceExhausted,
			"%s already has %d runs watched on this orchestrator, the limit per principal: close a watch first", principalName(principal), limit)
	}
	w.open[principal]++
	h := w.hubs[runID]
	if h != nil && h.failed() {
		// A feed that failed (NATS was away) is not shared with new
		// watchers: they get a follower of their own, which may work now.
		// Its current watchers keep it until they leave.
		h = nil
	}
	if h == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h = &watchHub{runID: runID, cancel: cancel, changed: make(chan struct{})}
		w.hubs[runID] = h
		go h.run(ctx, w.follow)
	}
	h.refs++
	return h, nil
}

// release gives back what acquire took; the last watcher stops the hub.
func (w *watches) release(principal string, h *watchHub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[principal]--; w.open[principal] <= 0 {
		delete(w.open, principal)
	}
	if h.refs--; h.refs == 0 {
		h.cancel()
		if w.hubs[h.runID] == h {
			delete(w.hubs, h.runID)
		}
	}
}

func principalName(p string) string {
	if p == "" {
		return "the anonymous caller"
	}
	return p
}

// run follows the run's events into the hub until run_finished, an error,
// or the last watcher leaving.
func (h *watchHub) run(ctx context.Context, follow func(context.Context, string, func(lctl.Event) error) error) {
	err := follow(ctx, h.runID, func(e lctl.Event) error {
		h.mu.Lock()
		h.events = append(h.events, e)
		finished := e.Type == lctl.TypeRunFinished
		h.done = finished
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
		if finished {
			return eventlog.ErrStop
		}
		return nil
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		if err == nil {
			err = errors.New("the run's event feed ended")
		}
		h.err = err
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// failed reports whether the hub's follower ended with an error.
func (h *watchHub) failed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err != nil
}

// next returns the events from index i, whether the feed is over, a
// channel closed when there is more, and the feed's error.
func (h *watchHub) next(i int) ([]lctl.Event, bool, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var evs []lctl.Event
	if i < len(h.events) {
		evs = h.events[i:len(h.events):len(h.events)]
	}
	return evs, h.done || h.err != nil, h.changed, h.err
}

// watchRun implements WatchRun over the shared hubs.
func (s *Service) watchRun(req *xctv1.WatchRunRequest, stream grpc.ServerStreamingServer[xctv1.WatchRunResponse]) error {
	ctx := stream.Context()
	if _, err := s.lookup(ctx, req.GetRunId()); err != nil {
		return toStatus(err)
	}
	principal := ""
	if p, ok := auth.FromContext(ctx); ok {
		principal = p.Name
	}
	// Counted across the cluster first (served here before it is
	// counted, so that a prune here does not take it for a leftover),
	// then on this orchestrator, which shares the run's follower.
	id := newWatchID()
	s.watches.serve(id, true)
	defer s.watches.serve(id, false)
	if err := s.takeWatch(ctx, principal, id, s.cfg.MaxWatches); err != nil {
		return err
	}
	defer s.giveWatch(principal, id)
	h, err := s.watches.acquire(principal, req.GetRunId(), s.cfg.MaxWatches)
	if err != nil {
		return err
	}
	defer s.watches.release(principal, h)
	sent := req.GetFromSeq()
	for i := 0; ; {
		evs, over, more, ferr := h.next(i)
		for _, e := range evs {
			i++
			if e.Seq < req.GetFromSeq() {
				continue
			}
			pe, err := lctlpb.ToProto(&e)
			if err != nil {
				return toStatus(err)
			}
			if err := stream.Send(&xctv1.WatchRunResponse{Event: pe}); err != nil {
				return err
			}
			sent = e.Seq + 1
		}
		if over && len(evs) == 0 {
			if ferr != nil && !errors.Is(ferr, context.Canceled) {
				return toStatus(ferr)
			}
			return nil
		}
		if over {
			continue // send what is left, then end
		}
		select {
		case <-more:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.closing:
			// A stopping orchestrator ends its streams once its runs are
			// handed over; the client watches again from where it was.
			return status.Errorf(codes.Unavailable, "orchestrator %s is stopping: watch run %s again from seq %d", s.instance, req.GetRunId(), sent)
		}
	}
}
