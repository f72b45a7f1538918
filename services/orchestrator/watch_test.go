package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
)

// feed is a follow function fed by the test: one call per hub.
type feed struct {
	calls   atomic.Int32
	events  chan lctl.Event
	stopped chan struct{}
}

func (f *feed) follow(ctx context.Context, _ string, fn func(lctl.Event) error) error {
	f.calls.Add(1)
	defer close(f.stopped)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-f.events:
			if err := fn(e); err != nil {
				return nil // ErrStop
			}
		}
	}
}

// TestWatchersShareOneFollower: many watchers of a run make one follow
// call; each gets every event, a late one the backlog too; the follower
// stops with the last watcher; the cap is per principal.
func TestWatchersShareOneFollower(t *testing.T) {
	t.Parallel()
	f := &feed{events: make(chan lctl.Event), stopped: make(chan struct{})}
	w := newWatches(f.follow)
	const watchers = 50
	hubs := make([]*watchHub, watchers)
	for i := range hubs {
		h, err := w.acquire("dave", "run-1", watchers)
		if err != nil {
			t.Fatal(err)
		}
		hubs[i] = h
	}
	if _, err := w.acquire("dave", "run-1", watchers); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("past the cap: %v", err)
	}
	other, err := w.acquire("erin", "run-1", watchers)
	if err != nil {
		t.Fatalf("another principal at dave's cap: %v", err)
	}
	f.events <- lctl.Event{Seq: 1, Type: lctl.TypeRunStarted}
	f.events <- lctl.Event{Seq: 2, Type: lctl.TypeStepStart}

	read := func(h *watchHub, want int) []uint64 {
		t.Helper()
		var seqs []uint64
		deadline := time.After(10 * time.Second)
		for i := 0; len(seqs) < want; {
			evs, _, more, _ := h.next(i)
			for _, e := range evs {
				seqs = append(seqs, e.Seq)
				i++
			}
			if len(seqs) >= want {
				break
			}
			select {
			case <-more:
			case <-deadline:
				t.Fatalf("got %v, want %d events", seqs, want)
			}
		}
		return seqs
	}
	var wg sync.WaitGroup
	for _, h := range hubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := read(h, 2); len(got) != 2 || got[0] != 1 || got[1] != 2 {
				t.Errorf("watcher read %v", got)
			}
		}()
	}
	wg.Wait()
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("%d watchers made %d follow calls", watchers+1, n)
	}
	f.events <- lctl.Event{Seq: 3, Type: lctl.TypeRunFinished}
	late, err := w.acquire("erin", "run-1", watchers)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(late, 3); got[2] != 3 {
		t.Fatalf("late watcher read %v", got)
	}
	if _, over, _, ferr := late.next(3); !over || ferr != nil {
		t.Fatalf("after run_finished: over %v err %v", over, ferr)
	}
	<-f.stopped // the follower ended at run_finished
	for _, h := range hubs {
		if h != other {
			t.Fatal("two hubs for one run")
		}
		w.release("dave", h)
	}
	w.release("erin", other)
	w.release("erin", late)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.hubs) != 0 || len(w.open) != 0 {
		t.Fatalf("left: %d hubs, %v open", len(w.hubs), w.open)
	}
}

// A follower that failed is not shared with new watchers: they get a
// new one.
func TestFailedFollowerIsNotShared(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	fail := make(chan struct{})
	w := newWatches(func(ctx context.Context, _ string, _ func(lctl.Event) error) error {
		if calls.Add(1) == 1 {
			<-fail
			return context.DeadlineExceeded // the first feed breaks
		}
		<-ctx.Done()
		return ctx.Err()
	})
	first, err := w.acquire("dave", "run-1", 10)
	if err != nil {
		t.Fatal(err)
	}
	close(fail)
	testutil.Eventually(t, time.Minute, func() error {
		if !first.failed() {
			return errors.New("not failed yet")
		}
		return nil
	})
	second, err := w.acquire("dave", "run-1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("a new watcher shares the failed feed")
	}
	testutil.Eventually(t, time.Minute, func() error {
		if n := calls.Load(); n != 2 {
			return fmt.Errorf("%d follow calls", n)
		}
		return nil
	})
	w.release("dave", first)
	w.release("dave", second)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.hubs) != 0 || len(w.open) != 0 {
		t.Fatalf("left: %d hubs, %v open", len(w.hubs), w.open)
	}
}
