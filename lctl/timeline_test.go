package lctl_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// TestTimelineStateAtEqualsReplay is the snapshot property: for random
// chains and snapshot intervals, the state a timeline rebuilds at every seq
// is exactly the state a replay from the first event reaches.
func TestTimelineStateAtEqualsReplay(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x7133))
		events := randomChain(rng, 1+rng.IntN(120))
		every := rng.IntN(9) // 0 disables snapshots
		tl := lctl.NewTimeline("prop", every)
		for k := range events {
			tl.Append(events[k])
			// Check a few points at every length, so snapshots taken later
			// are checked against states asked for earlier too.
			for range 3 {
				to := uint64(1 + rng.IntN(k+1))
				assertSameState(t, seed, to, tl.StateAt(to), lctl.Replay("prop", events[:k+1], to))
			}
		}
		for to := uint64(0); to <= uint64(len(events)); to++ {
			assertSameState(t, seed, to, tl.StateAt(to), lctl.Replay("prop", events, to))
		}
	}
}

func assertSameState(t *testing.T, seed, to uint64, got, want *lctl.State) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		t.Fatalf("seed %d, to_seq %d: timeline state differs from replay\n got %s\nwant %s", seed, to, a, b)
	}
}

// TestTimelineStateIsOwned checks that applying events to a state the
// timeline returned changes neither the timeline nor later results.
func TestTimelineStateIsOwned(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	events := randomChain(rng, 200)
	tl := lctl.NewTimeline("own", 5)
	for _, e := range events[:150] {
		tl.Append(e)
	}
	mid := tl.StateAt(100)
	for i := 100; i < 200; i++ {
		mid.Apply(&events[i])
	}
	for _, e := range events[150:] {
		tl.Append(e)
	}
	for to := uint64(1); to <= 200; to += 7 {
		assertSameState(t, 7, to, tl.StateAt(to), lctl.Replay("own", events, to))
	}
	assertSameState(t, 7, 200, mid, lctl.Replay("own", events, 0))
}

// TestTimelineConcurrentReaders runs readers against an appending writer
// (meaningful under -race).
func TestTimelineConcurrentReaders(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	events := randomChain(rng, 600)
	tl := lctl.NewTimeline("race", 16)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 4 {
		wg.Go(func() {
			rr := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := tl.Len()
				if n == 0 {
					continue
				}
				to := uint64(1 + rr.IntN(n))
				s := tl.StateAt(to)
				if s.Seq != to {
					t.Errorf("state at %d has seq %d", to, s.Seq)
					return
				}
				// Mutating the result must not disturb the writer.
				s.Apply(&lctl.Event{Seq: to + 1, Type: "tool_call", Data: map[string]any{"tool": "x"}})
			}
		})
	}
	for _, e := range events {
		tl.Append(e)
	}
	close(stop)
	wg.Wait()
	assertSameState(t, 3, 0, tl.StateAt(0), lctl.Replay("race", events, 0))
}

func TestCloneIsIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	events := randomChain(rng, 300)
	s := lctl.Replay("c", events[:150], 0)
	c := s.Clone()
	if !reflect.DeepEqual(s, c) {
		t.Fatal("clone differs from the original")
	}
	for i := 150; i < 300; i++ {
		c.Apply(&events[i])
	}
	assertSameState(t, 11, 150, s, lctl.Replay("c", events[:150], 0))
	assertSameState(t, 11, 300, c, lctl.Replay("c", events, 0))
}

// TestTimelineSummaryAt: the summary is the full state without Steps.
func TestTimelineSummaryAt(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5a))
		events := randomChain(rng, 1+rng.IntN(100))
		tl := lctl.NewTimeline("sum", 1+rng.IntN(7))
		for _, e := range events {
			tl.Append(e)
		}
		for to := uint64(1); to <= uint64(len(events)); to++ {
			got, _ := tl.SummaryAt(to)
			want := lctl.Replay("sum", events, to)
			if got.Steps != nil {
				t.Fatalf("summary has steps")
			}
			want.Steps = nil
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want)
			if string(a) != string(b) {
				t.Fatalf("seed %d, to %d: summary differs\n got %s\nwant %s", seed, to, a, b)
			}
		}
	}
}
