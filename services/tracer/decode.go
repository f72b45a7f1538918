package tracer

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/lctl"
)

// decodedMsg is a stream message decoded, with the hash of each event's
// content computed (chain.add checks it against the event's hash). A
// message holds one event, or a pack of a chain's consecutive events, one
// a line (eventlog: "a pack"); no writer makes packs yet.
type decodedMsg struct {
	decodedEvent                // the message's event; a pack's first
	more         []decodedEvent // a pack's further events, in order
	err          error
}

// decodedEvent is one event of a message.
type decodedEvent struct {
	event    lctl.Event
	computed string // "" when the event did not decode or cannot be hashed
	line     []byte // the event as the message holds it; nil: the whole message
}

// errBadPack: a message of several lines that are not a chain's
// consecutive events.
var errBadPack = errors.New("not an event or a pack of consecutive events")

// jsonSpace is the whitespace JSON allows around a value.
const jsonSpace = " \t\r\n"

// decodeMsg decodes a message's event, or each event of a pack (then with
// their lines; the events' seqs must follow each other by one, on one
// chain). A message of one event is decoded as before packs, whole.
func decodeMsg(d *decodedMsg, data []byte) {
	d.more = d.more[:0]
	d.line = nil
	trimmed := bytes.Trim(data, jsonSpace)
	if bytes.IndexByte(trimmed, '\n') < 0 {
		d.event, d.computed, d.err = lctl.DecodeEventHashed(data)
		return
	}
	d.err = nil
	for i := 0; len(trimmed) > 0; i++ {
		line := trimmed
		if nl := bytes.IndexByte(trimmed, '\n'); nl >= 0 {
			line, trimmed = trimmed[:nl], trimmed[nl+1:]
		} else {
			trimmed = nil
		}
		var de decodedEvent
		var err error
		if len(bytes.Trim(line, jsonSpace)) == 0 {
			err = fmt.Errorf("%w: event %d of the pack is empty", errBadPack, i+1)
		} else if de.event, de.computed, err = lctl.DecodeEventHashed(line); err != nil {
			err = fmt.Errorf("event %d of the pack: %w", i+1, err)
		}
		de.line = line
		if err == nil && i > 0 {
			prev := &d.decodedEvent
			if len(d.more) > 0 {
				prev = &d.more[len(d.more)-1]
			}
			if de.event.Seq != prev.event.Seq+1 || de.event.ChainID != prev.event.ChainID {
				err = fmt.Errorf("%w: event %d of the pack is %s/%d after %s/%d", errBadPack, i+1, de.event.ChainID, de.event.Seq, prev.event.ChainID, prev.event.Seq)
			}
		}
		if err != nil {
			d.err = err
			clear(d.more)
			d.more = d.more[:0]
			d.decodedEvent = decodedEvent{}
			return
		}
		if i == 0 {
			d.decodedEvent = de
		} else {
			d.more = append(d.more, de)
		}
	}
}

// drop lets go of the message's events, keeping a pack's slice for reuse.
func (d *decodedMsg) drop() {
	clear(d.more)
	*d = decodedMsg{more: d.more[:0]}
}

// parallelDecodeMin is the batch size from which messages are decoded on
// every core: decoding and hashing are most of the cost of ingest, and
// events decode independently; they are then stored in order.
const parallelDecodeMin = 64

// decodeBatch decodes the batch's messages and hashes their events, on
// every core for a large batch, into out (reused when large enough).
func decodeBatch(batch []jetstream.Msg, out []decodedMsg) []decodedMsg {
	if cap(out) < len(batch) {
		out = make([]decodedMsg, len(batch), max(len(batch), batchSize))
	}
	out = out[:len(batch)]
	one := func(i int) {
		decodeMsg(&out[i], batch[i].Data())
	}
	workers := runtime.GOMAXPROCS(0)
	if len(batch) < parallelDecodeMin || workers < 2 {
		for i := range batch {
			one(i)
		}
		return out
	}
	var wg sync.WaitGroup
	chunk := (len(batch) + workers - 1) / workers
	for lo := 0; lo < len(batch); lo += chunk {
		hi := min(lo+chunk, len(batch))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				one(i)
			}
		})
	}
	wg.Wait()
	return out
}
