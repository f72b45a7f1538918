package lctl

import "fmt"

// Problem is something wrong with a chain, named by the event where it
// shows.
type Problem struct {
	// Seq is the seq of the event (0 when the problem is not tied to one).
	Seq uint64 `json:"seq"`
	// Position is the event's 1-based position in the chain.
	Position int `json:"position"`
	// Kind classifies the problem: duplicate_seq, missing_seq,
	// out_of_order, bad_timestamp, timestamp_order, chain_id, no_hash,
	// edited, resealed, removed, reordered, head_removed, checkpoint.
	Kind string `json:"kind"`
	// Message says what is wrong, naming the event.
	Message string `json:"message"`
}

// String returns the problem's message.
func (p Problem) String() string { return p.Message }

// Problem kinds.
const (
	ProblemDuplicateSeq   = "duplicate_seq"
	ProblemMissingSeq     = "missing_seq"
	ProblemOutOfOrder     = "out_of_order"
	ProblemBadTimestamp   = "bad_timestamp"
	ProblemTimestampOrder = "timestamp_order"
	ProblemChainID        = "chain_id"
	ProblemNoHash         = "no_hash"
	ProblemEdited         = "edited"
	ProblemResealed       = "resealed"
	ProblemRemoved        = "removed"
	ProblemReordered      = "reordered"
	ProblemHeadRemoved    = "head_removed"
	ProblemCheckpoint     = "checkpoint"
)

// Describe names an event for messages: "event 5 (tool_call by executor)".
func Describe(e *Event) string {
	who := e.Agent
	if who == "" {
		return fmt.Sprintf("event %d (%s)", e.Seq, e.Type)
	}
	return fmt.Sprintf("event %d (%s by %s)", e.Seq, e.Type, who)
}

// CheckSequence finds what is wrong with the order of a chain's events
// without looking at hashes: seqs that repeat, are missing or go backwards,
// timestamps that do not parse or go backwards, and events that name
// another chain. Every problem names its event; an empty result means the
// events are in order.
func CheckSequence(chainID string, events []Event) []Problem {
	var out []Problem
	seen := make(map[uint64]int, len(events)) // seq -> position
	// Where each seq first appears, to tell an event that comes early
	// (reordered) from seqs that are missing.
	firstAt := make(map[uint64]int, len(events))
	for i := range events {
		if _, ok := firstAt[events[i].Seq]; !ok {
			firstAt[events[i].Seq] = i + 1
		}
	}
	var maxSeq uint64
	var prevTime *Event
	for i := range events {
		e := &events[i]
		pos := i + 1
		add := func(kind, format string, args ...any) {
			out = append(out, Problem{Seq: e.Seq, Position: pos, Kind: kind, Message: fmt.Sprintf(format, args...)})
		}
		switch first, dup := seen[e.Seq]; {
		case dup:
			add(ProblemDuplicateSeq, "%s at position %d repeats seq %d of the event at position %d (duplicate seq)", Describe(e), pos, e.Seq, first)
		case e.Seq < maxSeq:
			add(ProblemOutOfOrder, "%s at position %d comes after seq %d (events out of order)", Describe(e), pos, maxSeq)
		case e.Seq > maxSeq+1:
			next := maxSeq + 1
			if p, later := firstAt[next]; later && p > pos {
				add(ProblemOutOfOrder, "%s at position %d comes before seq %d, which is at position %d (events out of order)", Describe(e), pos, next, p)
			} else if i == 0 {
				add(ProblemMissingSeq, "%s is the first event; %s missing", Describe(e), seqRange(1, e.Seq-1))
			} else {
				add(ProblemMissingSeq, "%s follows seq %d; %s missing", Describe(e), maxSeq, seqRange(maxSeq+1, e.Seq-1))
			}
		}
		if _, dup := seen[e.Seq]; !dup {
			seen[e.Seq] = pos
		}
		maxSeq = max(maxSeq, e.Seq)
		if e.ChainID != "" && chainID != "" && e.ChainID != chainID {
			add(ProblemChainID, "%s names chain %q, not %q", Describe(e), e.ChainID, chainID)
		}
		if e.Timestamp == "" {
			continue
		}
		t, ok := ParseTime(e.Timestamp)
		if !ok {
			add(ProblemBadTimestamp, "%s has timestamp %q, which is not RFC 3339", Describe(e), e.Timestamp)
			continue
		}
		if prevTime != nil {
			if pt := prevTime.Time(); t.Before(pt) {
				add(ProblemTimestampOrder, "%s has timestamp %s, earlier than %s's %s (timestamps go backwards)",
					Describe(e), e.Timestamp, Describe(prevTime), prevTime.Timestamp)
			}
		}
		prevTime = e
	}
	return out
}

func seqRange(lo, hi uint64) string {
	if lo == hi {
		return fmt.Sprintf("seq %d is", lo)
	}
	return fmt.Sprintf("seqs %d to %d are", lo, hi)
}

// StateHashPrefix starts a state hash of version 1 (HashV1): "sha256:"
// and 64 hex digits. Version 2 (Hash, written since session 5) starts with
// StateHashV2Prefix.
const StateHashPrefix = "sha256:"

// IsStateHash reports whether h has a form State.Hash or State.HashV1
// produces (StateHashVersion is not 0), so it can be checked by replaying;
// other implementations write hashes of their own state that cannot be.
func IsStateHash(h string) bool { return StateHashVersion(h) != 0 }

// CheckpointData returns the payload of a checkpoint event recorded when a
// chain is in state s: state_hash, the hash of s (State.Hash, version 2, of
// the state after every event before the checkpoint, so replaying to the
// seq before the checkpoint and hashing reproduces it), and facts_snapshot,
// each fact's text and confidence, as the spec's example has them.
func CheckpointData(s *State) (map[string]any, error) {
	h, err := s.Hash()
	if err != nil {
		return nil, err
	}
	facts := make(map[string]any, len(s.Facts))
	for id, f := range s.Facts {
		entry := map[string]any{"text": f.Text}
		if f.Confidence != nil {
			entry["confidence"] = *f.Confidence
		}
		if f.Source != "" {
			entry["source"] = f.Source
		}
		facts[id] = entry
	}
	return map[string]any{"state_hash": h, "facts_snapshot": facts}, nil
}
