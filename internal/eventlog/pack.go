package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// A chain's stream message holds one sealed event, or several of the
// chain's consecutive events (a pack): their sealed JSON in chain order,
// each after the first on a line of its own ('\n' between two events).
// An event's canonical JSON never holds a newline byte (lctl escapes
// every control character in strings), so the newline cannot be part of
// an event. The readers accept packs before any writer makes them, so
// that a writer may put a step's events in one message (issue
// 14, session 19's shape c: two messages a step instead of four). The
// readers here (Follow and ReadChain, ReadChainFrom, Ends, LastSeq,
// ResumeChainWriter) return the same events for a chain written one event
// per message and for the same chain written in packs; Chains still
// counts messages, which a pack makes fewer than its events.
// AppendPackWithin writes packs; nothing calls it yet.

// packHeaderRoom is what a pack leaves of the maximum payload for its
// headers (the message id and the expected sequence).
const packHeaderRoom = 1024

// ErrBadPack means a stream message of a chain is not one event or a
// pack of consecutive events.
var ErrBadPack = errors.New("not an event or a pack of consecutive events")

// jsonSpace is the whitespace JSON allows around a value.
const jsonSpace = " \t\r\n"

// decodeMsg returns the events of a chain's stream message in order: one,
// or a pack's, whose seqs must follow each other by one. appendTo is
// appended to and returned.
func decodeMsg(appendTo []lctl.Event, data []byte) ([]lctl.Event, error) {
	data = bytes.Trim(data, jsonSpace)
	if bytes.IndexByte(data, '\n') < 0 {
		// One event (what every writer makes today): as it was read
		// before packs.
		e, err := lctl.DecodeEvent(data)
		if err != nil {
			return appendTo, err
		}
		return append(appendTo, e), nil
	}
	start := len(appendTo)
	for i := 0; len(data) > 0; i++ {
		line := data
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, data = data[:nl], data[nl+1:]
		} else {
			data = nil
		}
		if len(bytes.Trim(line, jsonSpace)) == 0 {
			return appendTo[:start], fmt.Errorf("%w: event %d of the pack is empty", ErrBadPack, i+1)
		}
		e, err := lctl.DecodeEvent(line)
		if err != nil {
			return appendTo[:start], fmt.Errorf("event %d of the pack: %w", i+1, err)
		}
		if i > 0 {
			prev := appendTo[len(appendTo)-1]
			if e.Seq != prev.Seq+1 || e.ChainID != prev.ChainID {
				return appendTo[:start], fmt.Errorf("%w: event %d of the pack is %s/%d after %s/%d", ErrBadPack, i+1, e.ChainID, e.Seq, prev.ChainID, prev.Seq)
			}
		}
		appendTo = append(appendTo, e)
	}
	return appendTo, nil
}

// msgFirst returns the first event of a chain's stream message.
func msgFirst(data []byte) (lctl.Event, error) {
	data = bytes.Trim(data, jsonSpace)
	if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
		data = data[:nl]
	}
	return lctl.DecodeEvent(data)
}

// msgLast returns the last event of a chain's stream message (of a pack,
// only its last line is decoded).
func msgLast(data []byte) (lctl.Event, error) {
	data = bytes.Trim(data, jsonSpace)
	if nl := bytes.LastIndexByte(data, '\n'); nl >= 0 {
		data = data[nl+1:]
	}
	return lctl.DecodeEvent(data)
}

// AppendPackWithin appends drafts to the chain in order as one stream
// message (a pack), bounded by timeout as AppendWithin: the events are
// sealed as Append would seal them one after the other, the message
// carries the message id of its last event and the chain's last stream
// sequence as expected, and the call returns when the stream has stored
// the whole pack (one write, one acknowledgement) or with an error, after
// which the writer refuses further appends as after a failed Append. A
// pack larger than the connection's maximum payload is appended as
// separate waited appends instead. One draft is an ordinary append.
// The orchestrator's step writes [step_start, verdict] and [tool_call or
// error, step_end] so (recordPack, issue 14).
func (w *ChainWriter) AppendPackWithin(timeout time.Duration, drafts []Draft) ([]lctl.Event, error) {
	deadline := time.Now().Add(timeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(drafts) == 0 {
		return nil, nil
	}
	if len(drafts) == 1 {
		d := drafts[0]
		e, err := w.appendBounded(bound{deadline: deadline}, d.Time, d.Type, d.Agent, d.Data)
		if err != nil {
			return nil, err
		}
		return []lctl.Event{e}, nil
	}
	if w.failed != nil {
		return nil, fmt.Errorf("append to chain %s: writer stopped after an earlier failure: %w", w.chainID, w.failed)
	}
	events, raws, err := w.sealAll(drafts)
	if err != nil {
		return nil, err
	}
	size := len(drafts) - 1 // the newlines between the events
	for _, raw := range raws {
		size += len(raw)
	}
	if int64(size+packHeaderRoom) > w.pub.nc.MaxPayload() {
		// Too large for one message: one append each, each waited for.
		out := make([]lctl.Event, 0, len(drafts))
		for _, d := range drafts {
			e, err := w.appendBounded(bound{deadline: deadline}, d.Time, d.Type, d.Agent, d.Data)
			if err != nil {
				if len(out) > 0 {
					err = &PartialError{Stored: len(out), Total: len(drafts), Err: err}
				}
				return out, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	pack := make([]byte, 0, size)
	for i, raw := range raws {
		if i > 0 {
			pack = append(pack, '\n')
		}
		pack = append(pack, raw...)
	}
	last := events[len(events)-1]
	ack, err := w.pub.PublishUntil(deadline, w.subject, pack, w.msgID(last.Seq), w.streamSeq)
	if err != nil {
		err = conflictOf(err)
		w.failed = err
		return nil, fmt.Errorf("append events %d to %d to chain %s: %w", events[0].Seq, last.Seq, w.chainID, err)
	}
	if ack.Duplicate {
		// As Append: the message id was stored before; going on is
		// right only if the stored message is this very pack.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := w.sameAsStored(ctx, ack.Seq, pack); err != nil {
			w.failed = err
			return nil, fmt.Errorf("append events %d to %d to chain %s: %w", events[0].Seq, last.Seq, w.chainID, err)
		}
	}
	w.seq, w.prevHash, w.streamSeq, w.lastAppend = last.Seq, last.Hash, ack.Seq, last
	return events, nil
}

// sealAll seals drafts in order as the chain's next events, each after
// the one before, without appending them; w.mu is held.
func (w *ChainWriter) sealAll(drafts []Draft) ([]lctl.Event, [][]byte, error) {
	events := make([]lctl.Event, len(drafts))
	raws := make([][]byte, len(drafts))
	seq, prev := w.seq, w.prevHash
	for i, d := range drafts {
		e, raw, err := w.seal(d.Time, d.Type, d.Agent, d.Data, seq+1, prev)
		if err != nil {
			return nil, nil, err
		}
		events[i], raws[i] = e, raw
		seq, prev = e.Seq, e.Hash
	}
	return events, raws, nil
}
