package lctl_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestStateCanonicalMatchesGeneric checks the hand-written canonical
// encoder of State byte for byte against Canonical, which goes through
// encoding/json: on random chains, an XCT-shaped chain, the zero State and
// a state with nil lists.
func TestStateCanonicalMatchesGeneric(t *testing.T) {
	states := []*lctl.State{
		{},
		lctl.NewState("empty"),
		lctl.Replay("gen", lctltest.Chain("gen", 3000, lctltest.Options{}), 0),
		lctl.Replay("x", xctChain(t), 0),
		lctl.Replay("spec", specEvents(t), 0),
	}
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		states = append(states, lctl.Replay("r\u00e9\u2028\U0001F600", randomChain(rng, 1+rng.IntN(80)), 0))
	}
	odd := lctl.NewState("odd")
	odd.Apply(&lctl.Event{Seq: 1, Type: "fact_added", Agent: "a<b>&\x01", Data: map[string]any{"id": "\ufb01", "text": "x\u00e9\xff", "confidence": 1e-7}})
	odd.Apply(&lctl.Event{Seq: 2, Type: "fact_added", Agent: "a", Data: map[string]any{"id": "\U0001F600", "text": "y", "confidence": 0.1}})
	odd.Apply(&lctl.Event{Seq: 3, Type: "step_end", Data: map[string]any{"duration_ms": 1e20, "tokens": map[string]any{"input": 9007199254740992.0}}})
	states = append(states, odd)
	for i, s := range states {
		// The hashed form lists every unfolded event's seq as
		// unknown_types (recognized types included): see
		// TestStateHashKeepsUnfoldedTypes.
		hashed := *s
		hashed.UnknownTypes = lctl.HashedUnknown(s)
		want, err := lctl.Canonical(&hashed)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lctl.CanonicalStateJSON(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("state %d: direct canonical JSON differs\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestStateHashCache: a state hashed again and again while events are
// applied (what verify and a session do) keeps what it wrote; every hash
// equals that of a copy hashed from scratch. Random chains (steps
// revisited, facts re-added, lists of every kind), an XCT chain and the
// generated workflow, hashed at irregular points.
func TestStateHashCache(t *testing.T) {
	// Each hash is checked against one from scratch, so the cost grows
	// with the square of the workflow's length: under the race detector
	// (one goroutine: it finds nothing here) a quarter of it, as
	// TestStateHashV2Incremental does.
	n := 4000
	if lctl.RaceDetector {
		n = 1000
	}
	chains := map[string][]lctl.Event{
		"workflow": lctltest.Workflow("w", n, lctltest.WorkflowOptions{}),
		"xct":      xctChain(t),
	}
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		chains["random-"+string(rune('a'+seed%26))+string(rune('0'+seed/26))] = randomChain(rng, 50+rng.IntN(400))
	}
	for name, events := range chains {
		rng := rand.New(rand.NewPCG(uint64(len(events)), 3))
		s := lctl.NewState("c")
		s.CacheHashes()
		hashes := 0
		for i := range events {
			s.Apply(&events[i])
			if rng.IntN(7) != 0 && i != len(events)-1 && len(events) > 40 {
				continue
			}
			got, err := s.HashV1()
			if err != nil {
				t.Fatal(err)
			}
			want, err := s.Clone().HashV1() // a copy starts without the cache
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s: after event %d (hash %d): cached %s, from scratch %s", name, i+1, hashes, got, want)
			}
			hashes++
		}
		if hashes < 3 {
			t.Errorf("%s: only %d hashes", name, hashes)
		}
	}
}
