package eventlog

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/xct-dev/xct/lctl"
)

// A chain's stream message holds one sealed event, or several of the
// chain's consecutive events (a pack): their sealed JSON in chain order,
// each after the first on a line of its own ('\n' between two events).
// An event's canonical JSON never holds a newline byte (lctl escapes
// every control character in strings), so the newline cannot be part of
// an event. No writer makes packs yet: every reader accepts them first,
// so that a later writer may put a step's events in one message (issue
// 14, session 19's shape c: two messages a step instead of four). The
// readers here (Follow and ReadChain, ReadChainFrom, Ends, LastSeq,
// ResumeChainWriter) return the same events for a chain written one event
// per message and for the same chain written in packs; Chains still
// counts messages, which a pack makes fewer than its events.

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
