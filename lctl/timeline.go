package lctl

import (
	"sort"
	"sync"
)

// DefaultSnapshotEvery is how many events a Timeline applies between two
// snapshots unless told otherwise.
const DefaultSnapshotEvery = 1000

// stepChunk is how many Steps entries a snapshot stores per shared chunk.
const stepChunk = 128

// Timeline is one chain's events with the state after its latest event and
// snapshots of the state every N events, so the state at any seq is rebuilt
// from the nearest snapshot: O(events since that snapshot) reducer work
// instead of a replay from the first event.
//
// Snapshots share what does not change between them: the append-only lists
// are slices of the live state's arrays, Steps are kept in immutable chunks
// that only the chunks that changed are copied from, and only changed facts
// are copied. A snapshot costs O(N + facts + steps/128) to take.
//
// One goroutine appends; any number may call StateAt, Events and Len
// concurrently with it.
type Timeline struct {
	chainID string
	every   int

	mu       sync.RWMutex
	events   []Event
	sorted   bool // seqs strictly increase in append order
	live     *State
	snaps    []*snapshot // by position, ascending; snaps[0] is the empty state
	pending  int         // events applied since the last snapshot
	chunks   [][]Step    // Steps of the last snapshot, in immutable chunks
	nSteps   int         // len(Steps) at the last snapshot
	factsAt  map[string]*Fact
	disabled bool
}

// snapshot is the state after the first pos events of a timeline.
type snapshot struct {
	pos int
	// base has every field of the state but Steps (in steps) and the step
	// index (rebuilt). Its facts are frozen copies nobody changes; its lists
	// are length-capped slices of the live state's arrays.
	base   State
	steps  [][]Step
	nSteps int
}

// NewTimeline returns an empty timeline for a chain that snapshots its state
// every `every` events; every <= 0 disables snapshots, so StateAt replays
// from the first event.
func NewTimeline(chainID string, every int) *Timeline {
	t := &Timeline{chainID: chainID, every: every, sorted: true, live: NewState(chainID), disabled: every <= 0}
	if !t.disabled {
		t.live.track = &changeTrack{steps: map[int]struct{}{}, facts: map[string]struct{}{}}
	}
	t.factsAt = map[string]*Fact{}
	t.snaps = []*snapshot{{pos: 0, base: *NewState(chainID)}}
	return t
}

// ChainID returns the chain the timeline holds.
func (t *Timeline) ChainID() string { return t.chainID }

// Append adds the next event and applies it to the live state.
func (t *Timeline) Append(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.events); n > 0 && e.Seq <= t.events[n-1].Seq {
		t.sorted = false
	}
	t.events = append(t.events, e)
	t.live.Apply(&t.events[len(t.events)-1])
	if t.disabled {
		return
	}
	t.pending++
	if t.pending >= t.every {
		t.snapshotLocked()
	}
}

// Len returns the number of events.
func (t *Timeline) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.events)
}

// Events returns the events, in append order. The slice must not be
// modified; later appends do not show in it.
func (t *Timeline) Events() []Event {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return capped(t.events)
}

// Snapshots returns how many snapshots the timeline keeps (the empty state
// at the start included).
func (t *Timeline) Snapshots() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.snaps)
}

// StateAt returns the state Replay(chainID, events, toSeq) would: the
// events applied in order up to the first whose seq is beyond toSeq (toSeq 0
// applies them all). The caller owns the result.
func (t *Timeline) StateAt(toSeq uint64) *State {
	s, _ := t.StateAtFrom(toSeq)
	return s
}

// StateAtFrom is StateAt, also returning the seq of the last event in the
// snapshot the state was rebuilt from (0: replayed from the first event).
func (t *Timeline) StateAtFrom(toSeq uint64) (*State, uint64) {
	return t.stateAt(toSeq, true)
}

// SummaryAt is StateAtFrom without Steps (nil in the result; everything
// else is exact). Steps are the one part of the state that grows with the
// chain and changes in place, so leaving them out makes the cost
// O(events since the snapshot + facts), whatever the chain's length: what a
// summary of the state at a seq needs.
func (t *Timeline) SummaryAt(toSeq uint64) (*State, uint64) {
	return t.stateAt(toSeq, false)
}

func (t *Timeline) stateAt(toSeq uint64, withSteps bool) (*State, uint64) {
	t.mu.RLock()
	pos := t.cutLocked(toSeq)
	snap := t.snaps[sort.Search(len(t.snaps), func(i int) bool { return t.snaps[i].pos > pos })-1]
	tail := t.events[snap.pos:pos:pos]
	live := listHeads{
		toolCalls: capped(t.live.ToolCalls),
		errors:    capped(t.live.Errors),
		unknown:   capped(t.live.UnknownTypes),
		unfolded:  capped(t.live.unfolded),
		contracts: capped(t.live.ContractValidations),
		routings:  capped(t.live.ModelRoutings),
		history:   make(map[string][]FactChange, len(t.live.Facts)),
	}
	for id, f := range t.live.Facts {
		live.history[id] = capped(f.History)
	}
	from := uint64(0)
	if snap.pos > 0 {
		from = t.events[snap.pos-1].Seq
	}
	t.mu.RUnlock()
	return snap.replay(tail, live, withSteps), from
}

// cutLocked returns how many events a replay to toSeq applies.
func (t *Timeline) cutLocked(toSeq uint64) int {
	n := len(t.events)
	if toSeq == 0 {
		return n
	}
	if t.sorted {
		return sort.Search(n, func(i int) bool { return t.events[i].Seq > toSeq })
	}
	for i := range t.events {
		if t.events[i].Seq > toSeq {
			return i
		}
	}
	return n
}

// listHeads are the live state's append-only lists as of a StateAt call.
type listHeads struct {
	toolCalls []ToolCall
	errors    []ErrorRecord
	unknown   []uint64
	unfolded  []uint64
	contracts []ContractValidation
	routings  []ModelRouting
	// history is every fact's history, which is append-only too (a fact
	// is never removed; an add keeps its history).
	history map[string][]FactChange
}

// replay rebuilds the snapshot's state and applies tail to it. The
// append-only lists start empty: the elements the tail appends are, by
// determinism, the live state's elements at the same positions, so the
// result's lists are the live lists cut at the right length, and nothing
// is copied.
func (sn *snapshot) replay(tail []Event, live listHeads, withSteps bool) *State {
	s := sn.base // copies the scalars and list headers
	s.track = nil
	s.hc = nil
	s.Facts = make(map[string]*Fact, len(sn.base.Facts))
	for id, f := range sn.base.Facts {
		s.Facts[id] = f.frozen()
	}
	s.Agents = capped(sn.base.Agents)
	if sn.base.CurrentStep != nil {
		cur := *sn.base.CurrentStep
		s.CurrentStep = &cur
	}
	s.EventTypes = make(map[string]int, len(sn.base.EventTypes))
	for k, v := range sn.base.EventTypes {
		s.EventTypes[k] = v
	}
	s.Run = sn.base.Run.clone()
	if withSteps {
		s.Steps = make([]Step, sn.nSteps, sn.nSteps+len(tail)/2+1)
		off := 0
		for _, c := range sn.steps {
			off += copy(s.Steps[off:], c)
		}
		s.rebuildStepIndex()
	} else {
		s.Steps, s.idx, s.noSteps = nil, &stepIndex{}, true
	}

	bases := [6]int{len(sn.base.ToolCalls), len(sn.base.Errors), len(sn.base.UnknownTypes),
		len(sn.base.ContractValidations), len(sn.base.ModelRoutings), len(sn.base.unfolded)}
	s.ToolCalls, s.Errors, s.UnknownTypes, s.ContractValidations, s.ModelRoutings = nil, nil, nil, nil, nil
	s.unfolded = nil
	// Fact histories, the same way: what the tail appends is the live
	// history's next entries, so appending to the snapshot's (which would
	// copy a history as long as the chain, for every fact the tail
	// touches) is not needed.
	histBase := make(map[*Fact][]FactChange, len(s.Facts))
	for _, f := range s.Facts {
		histBase[f] = f.History
		f.History = nil
	}
	for i := range tail {
		s.Apply(&tail[i])
	}
	for id, f := range s.Facts {
		base, known := histBase[f]
		if !known && len(f.History) > 0 {
			// A fact added again in the tail keeps its history: its
			// entries before the tail are the old record's.
			if old, ok := sn.base.Facts[id]; ok {
				base = old.History
			}
		}
		n := len(base) + len(f.History)
		if lh := live.history[id]; n <= len(lh) {
			f.History = lh[:n:n]
		} else {
			f.History = append(capped(base), f.History...)
		}
		if f.History == nil {
			f.History = []FactChange{}
		}
	}
	s.ToolCalls = live.toolCalls[: bases[0]+len(s.ToolCalls) : bases[0]+len(s.ToolCalls)]
	s.Errors = live.errors[: bases[1]+len(s.Errors) : bases[1]+len(s.Errors)]
	s.UnknownTypes = live.unknown[: bases[2]+len(s.UnknownTypes) : bases[2]+len(s.UnknownTypes)]
	s.ContractValidations = live.contracts[: bases[3]+len(s.ContractValidations) : bases[3]+len(s.ContractValidations)]
	s.ModelRoutings = live.routings[: bases[4]+len(s.ModelRoutings) : bases[4]+len(s.ModelRoutings)]
	s.unfolded = live.unfolded[: bases[5]+len(s.unfolded) : bases[5]+len(s.unfolded)]
	s.noSteps = false
	if !withSteps {
		s.idx = nil // Steps is nil: a later Apply rebuilds an empty index
	}
	return &s
}

// snapshotLocked records the live state as a snapshot, copying only what
// changed since the previous one.
func (t *Timeline) snapshotLocked() {
	live := t.live
	tr := live.track

	// Steps: reuse every chunk untouched since the last snapshot.
	chunks := make([][]Step, (len(live.Steps)+stepChunk-1)/stepChunk)
	copy(chunks, t.chunks)
	rebuild := map[int]bool{}
	for i := range tr.steps {
		rebuild[i/stepChunk] = true
	}
	for c := t.nSteps / stepChunk; c < len(chunks); c++ {
		rebuild[c] = true
	}
	for c := range rebuild {
		if c >= len(chunks) {
			continue
		}
		lo, hi := c*stepChunk, min((c+1)*stepChunk, len(live.Steps))
		chunks[c] = append([]Step(nil), live.Steps[lo:hi]...)
	}

	// Facts: reuse every frozen fact that did not change.
	facts := make(map[string]*Fact, len(live.Facts))
	for id, f := range t.factsAt {
		facts[id] = f
	}
	for id := range tr.facts {
		if f, ok := live.Facts[id]; ok {
			facts[id] = f.frozen()
		} else {
			delete(facts, id)
		}
	}

	base := *live
	base.track = nil
	base.hc = nil
	base.idx = nil
	base.Steps = nil
	base.Facts = facts
	base.Agents = capped(live.Agents)
	if live.CurrentStep != nil {
		cur := *live.CurrentStep
		base.CurrentStep = &cur
	}
	base.ToolCalls = capped(live.ToolCalls)
	base.Errors = capped(live.Errors)
	base.UnknownTypes = capped(live.UnknownTypes)
	base.unfolded = capped(live.unfolded)
	base.ContractValidations = capped(live.ContractValidations)
	base.ModelRoutings = capped(live.ModelRoutings)
	base.EventTypes = make(map[string]int, len(live.EventTypes))
	for k, v := range live.EventTypes {
		base.EventTypes[k] = v
	}
	base.Run = live.Run.clone()

	t.snaps = append(t.snaps, &snapshot{pos: len(t.events), base: base, steps: chunks, nSteps: len(live.Steps)})
	t.chunks, t.nSteps, t.factsAt = chunks, len(live.Steps), facts
	t.pending = 0
	clear(tr.steps)
	clear(tr.facts)
}
