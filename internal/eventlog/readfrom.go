package eventlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/lctl"
)

// ErrEventNotFound means a chain has no event at the seq asked for.
var ErrEventNotFound = errors.New("the chain has no such event")

// maxProbes bounds the gets ReadChainFrom makes to find where its first
// event is: each halves what is left of a range of stream sequences, so
// 64 covers any stream; more means the stream does not hold the chain in
// order, which a single writer's chain always is.
const maxProbes = 64

// ReadChainFrom returns the events of chain chainID from its event seq
// from to its last event stored when the read began, read by message gets
// (no consumer: for readers whose NATS users may not make one, the
// executor and the validator, internal/natsauth). It finds where event
// from is on the stream without reading the events before it: the chain's
// events are in chain order on the stream, so a few gets halving the range
// of stream sequences it can be at find it (about log2 of the other
// chains' messages written while the chain was written). Then it gets the
// events from there on, one request each: what it costs grows with the
// events after from, not with the chain.
//
// The events are checked as a piece of a chain (lctl.VerifyFrom): seqs
// from from up by one, each hash matching its content and linking to the
// one before; the events before from are not read, so not checked. Events
// appended while it reads are not returned (the read ends at the last
// event when it began, which it returns last). from 0 or 1 reads the
// whole chain (and checks it whole). ErrChainNotFound when the chain has
// no event, ErrEventNotFound when it has none at seq from.
func (l *Log) ReadChainFrom(ctx context.Context, chainID string, from uint64) ([]lctl.Event, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return nil, err
	}
	if from == 0 {
		from = 1
	}
	p, err := l.locate(ctx, chainID)
	if err != nil {
		return nil, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	if p.last == nil {
		return nil, fmt.Errorf("%w: %s", ErrChainNotFound, chainID)
	}
	lastEvents, err := decodeMsg(nil, p.last.Data)
	if err != nil {
		return nil, fmt.Errorf("read chain %s: stream seq %d: %w", chainID, p.last.Sequence, err)
	}
	last := lastEvents[len(lastEvents)-1]
	if from > last.Seq {
		return nil, fmt.Errorf("%w: chain %s ends at event %d, before event %d", ErrEventNotFound, chainID, last.Seq, from)
	}
	at, firsts, err := p.find(ctx, from, p.last.Sequence, lastEvents)
	if err != nil {
		return nil, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	events := make([]lctl.Event, 0, last.Seq-from+1)
	// (a pack may hold events before from: they are not returned)
	events = append(events, firsts[from-firsts[0].Seq:]...)
	for next := at + 1; next <= p.last.Sequence; {
		msg, err := p.stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(p.subject))
		if err != nil {
			return nil, fmt.Errorf("read chain %s: stream seq %d: %w", chainID, next, err)
		}
		if events, err = decodeMsg(events, msg.Data); err != nil {
			return nil, fmt.Errorf("read chain %s: stream seq %d: %w", chainID, msg.Sequence, err)
		}
		next = msg.Sequence + 1
	}
	if err := lctl.VerifyFrom(events, from); err != nil {
		return nil, fmt.Errorf("read chain %s from event %d: %w", chainID, from, err)
	}
	return events, nil
}

// holds reports whether a message's events (in order, seqs by one) hold
// event seq want.
func holds(events []lctl.Event, want uint64) bool {
	return events[0].Seq <= want && want <= events[len(events)-1].Seq
}

// find returns the stream sequence of the chain's message that holds event
// seq want and that message's events, given the chain's last message's
// events (at stream sequence lastAt). The chain's messages are on the
// stream in order, so a get at a stream sequence returns the chain's first
// message at or after it, whose events say which side of it want is.
//
// A chain written one event per message has event want at least (want -
// first) stream messages after its first event and at least (last - want)
// before its last: the first search narrows by those distances, at least
// halving the range with each get (about log2 of the other chains'
// messages written while the chain was written). A pack puts several
// events in one message, so those distances overstate where want can be;
// when that search does not find it, a second one narrows by the messages
// alone (halving the stream sequences between the first and the last
// message: log2 of them), which finds any event the chain holds in order.
func (p place) find(ctx context.Context, want, lastAt uint64, lastEvents []lctl.Event) (uint64, []lctl.Event, error) {
	if holds(lastEvents, want) {
		return lastAt, lastEvents, nil
	}
	get := func(at uint64) (uint64, []lctl.Event, error) {
		msg, err := p.stream.GetMsg(ctx, at, jetstream.WithGetMsgSubject(p.subject))
		if err != nil {
			return 0, nil, fmt.Errorf("stream seq %d: %w", at, err)
		}
		events, err := decodeMsg(nil, msg.Data)
		if err != nil {
			return 0, nil, fmt.Errorf("stream seq %d: %w", msg.Sequence, err)
		}
		return msg.Sequence, events, nil
	}
	firstAt, firsts, err := get(1)
	if err != nil {
		return 0, nil, err
	}
	if holds(firsts, want) {
		return firstAt, firsts, nil
	}
	if firsts[0].Seq > want || firstAt >= lastAt {
		return 0, nil, fmt.Errorf("%w: event %d (the stream's first is %d)", ErrEventNotFound, want, firsts[0].Seq)
	}
	// want is after the first message and before the last one.
	search := func(byEvents bool) (uint64, []lctl.Event, bool, error) {
		lo, hi := firstAt+1, lastAt-1
		if byEvents {
			lo = firstAt + (want - firsts[len(firsts)-1].Seq)
			if d := lastEvents[0].Seq - want; d < lastAt {
				hi = lastAt - d
			} else {
				return 0, nil, false, nil
			}
		}
		for range maxProbes {
			if lo > hi {
				break
			}
			mid := lo + (hi-lo)/2
			at, events, err := get(mid)
			if err != nil {
				return 0, nil, false, err
			}
			switch {
			case holds(events, want):
				return at, events, true, nil
			case events[0].Seq > want:
				// The chain's first message at or after mid is past
				// want: want is before mid (and, one event a message,
				// (first - want) messages before at).
				hi = mid - 1
				if d := events[0].Seq - want; byEvents && d <= at {
					hi = min(hi, at-d)
				}
			default:
				lo = max(lo, at+1)
				if byEvents {
					lo = max(lo, at+(want-events[len(events)-1].Seq))
				}
			}
		}
		return 0, nil, false, nil
	}
	for _, byEvents := range []bool{true, false} {
		at, events, found, err := search(byEvents)
		if err != nil || found {
			return at, events, err
		}
	}
	return 0, nil, fmt.Errorf("%w: event %d is not where the chain's order puts it on the stream", ErrEventNotFound, want)
}
