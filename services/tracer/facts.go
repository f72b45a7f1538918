package tracer

import (
	"sort"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// factIndex answers "the facts as they stood after seq N" (QueryFacts,
// `lctl replay --to-seq --chain`, `lctl query --to-seq --chain`) without
// reading the chain from its start: it keeps where the fact events are and
// a copy of the fact store every factSnapEvery of them, so a query applies
// at most that many events to the nearest copy, whatever the chain's
// length.
type factIndex struct {
	live  *analysis.FactStoreBuilder
	pos   []int32 // positions of the fact events in the chain
	snaps []factSnap
}

// factSnap is the fact store after the fact events before pos[next].
type factSnap struct {
	next  int    // fact events applied: pos[:next]
	seq   uint64 // seq of the last of them (0: none)
	store *analysis.FactStoreBuilder
}

// factSnapEvery is how many fact events lie between two copies.
const factSnapEvery = 256

func newFactIndex() *factIndex {
	return &factIndex{live: analysis.NewFactStoreBuilder(), snaps: []factSnap{{store: analysis.NewFactStoreBuilder()}}}
}

// add takes the chain's next event, at position i.
func (x *factIndex) add(i int, e *lctl.Event) {
	if e.Type != lctl.TypeFactAdded && e.Type != lctl.TypeFactModified {
		return
	}
	x.live.Add(e)
	x.pos = append(x.pos, int32(i))
	if len(x.pos)%factSnapEvery == 0 {
		x.snaps = append(x.snaps, factSnap{next: len(x.pos), seq: e.Seq, store: x.live.Clone()})
	}
}

// factView is a consistent, read-only piece of the index (taken with the
// chain's events under the store's lock).
type factView struct {
	pos   []int32
	snaps []factSnap
}

func (x *factIndex) view() factView {
	return factView{pos: x.pos[:len(x.pos):len(x.pos)], snaps: x.snaps[:len(x.snaps):len(x.snaps)]}
}

// at returns what analysis.FactStore(events, toSeq) returns (toSeq 0: all
// of them), events being the chain's.
func (v factView) at(events []lctl.Event, toSeq uint64) []*analysis.FactRecord {
	if toSeq == 0 {
		toSeq = ^uint64(0)
	}
	// The last copy made after no event beyond toSeq.
	k := sort.Search(len(v.snaps), func(i int) bool { return v.snaps[i].seq > toSeq }) - 1
	snap := v.snaps[max(k, 0)]
	b := snap.store.Clone()
	for _, p := range v.pos[snap.next:] {
		if int(p) >= len(events) {
			break
		}
		e := &events[p]
		if e.Seq > toSeq {
			break
		}
		b.Add(e)
	}
	return b.Facts()
}
