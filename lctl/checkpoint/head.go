package checkpoint

import (
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
)

// ProblemBehind: an exported chain lacks what the cluster signed since:
// the cluster's latest signed head (Options.Against) is past the chain's
// end, or the chain has another event at that seq. Cutting a chain after
// a signed checkpoint (a run's end, hiding a later rollback) leaves a
// chain that proves itself; only a signed head from elsewhere shows it.
const ProblemBehind = "behind_signed_head"

// Head is a chain's latest signed head as a source other than the file
// knows it (the tracer's live chain): the seq and hash a checkpoint signed
// by a trusted key covers.
type Head struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Keys signed it; Source names where it was read (for messages).
	Keys   []string `json:"keys"`
	Source string   `json:"source"`
}

// LatestHead is the latest head a trusted checkpoint among tail signs:
// tail is the end of a chain (in seq order, the event each checkpoint
// covers included), read from a source other than the file to verify. A
// checkpoint counts only as Verify would count it (trusted and not
// revoked key, this chain's origin, the head it names being the event
// before it in tail). false: no such checkpoint in tail.
func LatestHead(chainID string, tail []lctl.Event, keys note.Verifiers, opts Options) (Head, bool) {
	r := newReport(chainID)
	ck := opts.newChecker(r, keys, chainID)
	ck.intact = ^uint64(0)
	bySeq := make(map[uint64]*lctl.Event, len(tail))
	for i := range tail {
		bySeq[tail[i].Seq] = &tail[i]
	}
	headAt := func(seq uint64) (string, string, bool) {
		e, ok := bySeq[seq]
		if !ok {
			return "", "", false
		}
		return e.Hash, e.Timestamp, true
	}
	var best Head
	found := false
	for i := range tail {
		e := &tail[i]
		if e.Type != EventType {
			continue
		}
		n := len(r.Checkpoints)
		ck.check(e, i+1, headAt)
		if len(r.Checkpoints) == n {
			continue
		}
		c := r.Checkpoints[n]
		if !c.OK || (found && c.Covers <= best.Seq) {
			continue
		}
		h, _, _ := headAt(c.Covers)
		best, found = Head{Seq: c.Covers, Hash: h, Keys: c.Keys}, true
	}
	return best, found
}

// against follows the chain being verified for the event at the head's
// seq.
type against struct {
	head    *Head
	seen    bool
	hash    string
	lastSeq uint64
}

func (a *against) add(e *lctl.Event) {
	if a.head == nil {
		return
	}
	a.lastSeq = max(a.lastSeq, e.Seq)
	if e.Seq == a.head.Seq && !a.seen {
		a.seen, a.hash = true, e.Hash
	}
}

// finish adds the problem or the note of the comparison.
func (a *against) finish(r *Report, positionOf func(seq uint64) int) {
	h := a.head
	if h == nil {
		return
	}
	keys := strings.Join(h.Keys, ", ")
	switch {
	case !a.seen:
		r.Problems = append(r.Problems, lctl.Problem{Seq: a.lastSeq, Position: positionOf(a.lastSeq), Kind: ProblemBehind,
			Message: fmt.Sprintf("%s has a checkpoint signed by %s covering seq %d; this chain ends at seq %d: the events after it (a later rollback, or the run's end) were cut off, or this copy is older",
				h.Source, keys, h.Seq, a.lastSeq)})
	case a.hash != h.Hash:
		r.Problems = append(r.Problems, lctl.Problem{Seq: h.Seq, Position: positionOf(h.Seq), Kind: ProblemBehind,
			Message: fmt.Sprintf("%s has a checkpoint signed by %s saying seq %d is %s; this chain's seq %d is %s: it is not the chain the cluster signed",
				h.Source, keys, h.Seq, clip(h.Hash), h.Seq, clip(a.hash))})
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("the latest signed head %s has (seq %d, signed by %s) is in this chain: nothing the cluster signed up to then is missing from it", h.Source, h.Seq, keys))
	}
}
