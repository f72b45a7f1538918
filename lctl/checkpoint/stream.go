package checkpoint

import (
	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
)

// ringSize is how many of the latest events' hashes StreamVerifier keeps:
// a checkpoint covers the event just before it (the orchestrator signs as
// soon as it appended), so a few are plenty.
const ringSize = 64

// StreamVerifier is Verify for a chain read one event at a time (never all
// of it in memory), whose hash chain the caller checks: it takes events
// that link up from the first. Memory is bounded by the events since the
// last checkpoint.
type StreamVerifier struct {
	opts Options
	r    *Report
	ck   checker
	n    int
	ring [ringSize]struct {
		seq  uint64
		hash string
		ts   string
	}
	// pending are the seqs since the last verified checkpoint's cover,
	// in order: unsigned unless a later checkpoint covers them.
	pending []uint64
	ends    ends
	against against
}

// NewStreamVerifier returns a verifier before the first event.
func NewStreamVerifier(chainID string, keys note.Verifiers, opts Options) *StreamVerifier {
	v := &StreamVerifier{opts: opts, r: newReport(chainID), against: against{head: opts.Against}}
	v.ck = opts.newChecker(v.r, keys, chainID)
	return v
}

// Add takes the next event; the caller has checked that it is the next
// seq, that its hash matches its content and that it links to the one
// before. It returns false when a checkpoint covers an event too far back
// to be checked here: use Verify.
func (v *StreamVerifier) Add(e *lctl.Event) bool {
	v.n++
	if v.n == 1 {
		v.r.firstSeq = e.Seq
	}
	v.ck.intact = uint64(v.n)
	slot := &v.ring[e.Seq%ringSize]
	slot.seq, slot.hash, slot.ts = e.Seq, e.Hash, e.Timestamp
	v.ends.add(e)
	v.against.add(e)
	if e.Type != EventType {
		v.pending = append(v.pending, e.Seq)
		return true
	}
	far := false
	signed := v.ck.check(e, v.n, func(seq uint64) (string, string, bool) {
		s := v.ring[seq%ringSize]
		if s.seq != seq {
			far = true
			return "", "", false
		}
		return s.hash, s.ts, true
	})
	if far {
		return false
	}
	if !signed {
		v.pending = append(v.pending, e.Seq)
	}
	// What is covered now is no longer pending.
	k := 0
	for k < len(v.pending) && v.pending[k] <= v.r.Covered {
		k++
	}
	v.pending = v.pending[k:]
	return true
}

// Report is Verify's report on the events added.
func (v *StreamVerifier) Report() *Report {
	r := v.r
	r.Events = v.n
	for _, s := range v.pending {
		if s > r.Covered {
			r.Unsigned = append(r.Unsigned, s)
		}
	}
	pos := func(seq uint64) int { return int(seq) }
	v.against.finish(r, pos)
	r.finish(v.opts, pos, v.ends)
	return r
}
