package analysis

import (
	"fmt"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

// StreamVerifier is Verify for a chain read as a stream, one event at a
// time, in time linear in the chain: the state is kept and advanced, never
// rebuilt. It covers chains whose seqs, timestamps and links are in order
// (what a chain written by XCT is); when an event is not (a seq out of
// place, a hash that does not match, a missing link), Add says so and the
// caller verifies the whole chain with Verify, whose report on a broken
// chain needs all of it (where a reordered event went, which event was
// re-sealed).
//
// A chain without hashes (what other implementations write) streams too:
// its report is the full one's, one problem for the whole chain. So does a
// chain of which only some events carry a hash: each that does not is a
// problem. When events without a hash come before the first that has one,
// Add stops with NeedsNoHash set, and the caller verifies again from the
// first event with KeepNoHash (the first pass cannot know that it must
// keep a problem for each).
type StreamVerifier struct {
	chainID           string
	n                 int
	firstSeq, lastSeq uint64
	stamped           int
	prevHash          string
	state             *lctl.State
	cpProblems        []lctl.Problem
	cpNotes           []string
	checked, total    int
	started, finished int
	afterFinished     int // events after the last run_finished, signed checkpoints aside
	// summary keeps the state without its steps (lctl.NewSummaryState):
	// what fact snapshots need. A checkpoint with a state hash needs the
	// whole state; Add then stops with NeedsState set.
	summary    bool
	NeedsState bool
	// hashed and unhashed count the events with and without a hash;
	// noHash are the problems of those without (kept once an event with
	// a hash was seen, or from the start with keepNoHash).
	hashed, unhashed int
	noHash           []lctl.Problem
	keepNoHash       bool
	NeedsNoHash      bool
}

// KeepNoHash makes v keep a problem for each event without a hash from
// the first event: for a verification again after Add stopped with
// NeedsNoHash. Call it before the first Add.
func (v *StreamVerifier) KeepNoHash() { v.keepNoHash = true }

// NewStreamVerifier returns a verifier before the first event.
func NewStreamVerifier(chainID string) *StreamVerifier {
	s := lctl.NewState(chainID)
	s.CacheHashes() // version-1 hashes (old chains) write only what changed; version 2 keeps itself
	return &StreamVerifier{chainID: chainID, state: s, started: -1, finished: -1}
}

// NewStreamVerifierSummary is NewStreamVerifier keeping the state without
// its steps, which are most of a long chain's state and which only a
// checkpoint's state hash covers: at the first such checkpoint Add returns
// false with NeedsState set, and the caller verifies again from the first
// event with NewStreamVerifier. On a chain without state hashes it reports
// what NewStreamVerifier's would, for less.
func NewStreamVerifierSummary(chainID string) *StreamVerifier {
	s := lctl.NewSummaryState(chainID)
	s.FactsOnly() // what a fact snapshot is checked against
	return &StreamVerifier{chainID: chainID, state: s, started: -1, finished: -1, summary: true}
}

// DataTypes says which events' data Add reads, by type
// (lctl.StreamOptions.Data): what its state reads, and checkpoints. It
// reads nothing of v, so the decoding cores may call it.
func (v *StreamVerifier) DataTypes() func(typ string) bool {
	state := v.state.DataTypes()
	return func(typ string) bool { return typ == lctl.TypeCheckpoint || state(typ) }
}

// Add takes the next event, with the hash of its content (ComputeHash and
// its error). The caller has checked its seq (one more than the event
// before, starting at 1), its chain id and its timestamp (parses, not
// before the one before). It returns false when the event breaks the hash
// chain: use Verify.
func (v *StreamVerifier) Add(e *lctl.Event, computed string, hashErr error) bool {
	pos := v.n + 1
	if e.Hash == "" {
		// Not linked: its prev_hash is not looked at, nor the next
		// event's link to it (as Verify does).
		if v.hashed > 0 || v.keepNoHash {
			v.noHash = append(v.noHash, lctl.Problem{Seq: e.Seq, Position: pos, Kind: lctl.ProblemNoHash,
				Message: lctl.Describe(e) + " has no hash"})
		}
		v.unhashed++
	} else {
		if hashErr != nil || computed != e.Hash {
			return false
		}
		if v.hashed == 0 && v.unhashed > 0 && !v.keepNoHash {
			// The events before were each a problem after all.
			v.NeedsNoHash = true
			return false
		}
		if v.n == 0 && e.PrevHash != "" || v.n > 0 && v.prevHash != "" && e.PrevHash != v.prevHash {
			return false
		}
		v.hashed++
	}
	v.prevHash = e.Hash
	if v.n == 0 {
		v.firstSeq = e.Seq
	}
	v.lastSeq = e.Seq
	if e.Timestamp != "" {
		v.stamped++
	}
	if e.Type == lctl.TypeCheckpoint {
		if h, ok := e.Str("state_hash"); ok && v.summary && lctl.IsStateHash(h) {
			v.NeedsState = true
			return false
		}
		v.total++
		ps, did, ns := checkCheckpoint(v.state, e, pos)
		v.cpProblems = append(v.cpProblems, ps...)
		v.cpNotes = append(v.cpNotes, ns...)
		if did {
			v.checked++
		}
	}
	switch e.Type {
	case lctl.TypeRunStarted:
		v.started = v.n
	case lctl.TypeRunFinished:
		v.finished = v.n
		v.afterFinished = 0
	}
	// The run's end is signed after it: signed checkpoints do not count.
	if v.finished >= 0 && v.finished != v.n && e.Type != checkpoint.EventType {
		v.afterFinished++
	}
	v.state.Apply(e)
	v.n++
	return true
}

// Report is what Verify reports on the events added.
func (v *StreamVerifier) Report() *VerifyReport {
	r := &VerifyReport{ChainID: v.chainID, Events: v.n, Problems: []lctl.Problem{}, Notes: []string{}}
	seqSummary := "no events"
	if v.n > 0 {
		seqSummary = fmt.Sprintf("seq %d..%d, no gaps or duplicates", v.firstSeq, v.lastSeq)
	}
	r.add("sequence", seqSummary, []lctl.Problem{})
	timeSummary := "every timestamp parses; none goes backwards"
	if v.stamped == 0 && v.n > 0 {
		timeSummary = "no event has a timestamp"
		r.Notes = append(r.Notes, "no event has a timestamp, so durations come only from duration_ms")
	} else if v.stamped < v.n {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of %d events have no timestamp", v.n-v.stamped, v.n))
	}
	r.add("timestamps", timeSummary, []lctl.Problem{})
	hashSummary := "no events"
	var hashProblems []lctl.Problem
	switch {
	case v.n > 0 && v.hashed == 0:
		hashSummary = ""
		hashProblems = []lctl.Problem{{Seq: v.firstSeq, Position: 1, Kind: lctl.ProblemNoHash, Message: noHashMessage}}
	case v.n > 0:
		hashSummary = fmt.Sprintf("%d events linked, every hash matches its event", v.n)
		hashProblems = v.noHash
	}
	r.add("hash_chain", hashSummary, hashProblems)
	var cpSummary string
	switch {
	case v.total == 0:
		cpSummary = "no checkpoints"
	case v.checked == v.total:
		cpSummary = fmt.Sprintf("%d %s; state hashes and fact snapshots match the replay", v.total, plural(v.total, "checkpoint", "checkpoints"))
	default:
		cpSummary = fmt.Sprintf("%d of %d checkpoints could be checked", v.checked, v.total)
	}
	r.Notes = append(r.Notes, v.cpNotes...)
	r.add("checkpoints", cpSummary, v.cpProblems)
	if v.started >= 0 && v.finished < 0 {
		r.Notes = append(r.Notes, "the run has no run_finished event: it is still running, or the chain was cut short")
	}
	if k := v.afterFinished; k > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d %s after run_finished", k, plural(k, "event comes", "events come")))
	}
	sortProblems(r.Problems)
	if len(r.Problems) > 0 {
		first := r.Problems[0]
		r.First = &first
	}
	r.OK = len(r.Problems) == 0
	return r
}
