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
	last, err := lctl.DecodeEvent(p.last.Data)
	if err != nil {
		return nil, fmt.Errorf("read chain %s: stream seq %d: %w", chainID, p.last.Sequence, err)
	}
	if from > last.Seq {
		return nil, fmt.Errorf("%w: chain %s ends at event %d, before event %d", ErrEventNotFound, chainID, last.Seq, from)
	}
	at, first, err := p.find(ctx, from, p.last.Sequence, last)
	if err != nil {
		return nil, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	events := make([]lctl.Event, 0, last.Seq-from+1)
	events = append(events, first)
	for next := at + 1; next <= p.last.Sequence; {
		msg, err := p.stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(p.subject))
		if err != nil {
			return nil, fmt.Errorf("read chain %s: stream seq %d: %w", chainID, next, err)
		}
		e, err := lctl.DecodeEvent(msg.Data)
		if err != nil {
			return nil, fmt.Errorf("read chain %s: stream seq %d: %w", chainID, msg.Sequence, err)
		}
		events = append(events, e)
		next = msg.Sequence + 1
	}
	if err := lctl.VerifyFrom(events, from); err != nil {
		return nil, fmt.Errorf("read chain %s from event %d: %w", chainID, from, err)
	}
	return events, nil
}

// find returns the stream sequence of the chain's event seq want and the
// event, given the chain's last event (at stream sequence lastAt). The
// chain's events are on the stream in order, one message each, so event
// want is at least (want - first) messages after the first event and at
// least (last - want) before the last: a get at a stream sequence returns
// the chain's first event at or after it, whose seq says which side of it
// want is, and narrows the range by at least half.
func (p place) find(ctx context.Context, want, lastAt uint64, last lctl.Event) (uint64, lctl.Event, error) {
	if want == last.Seq {
		return lastAt, last, nil
	}
	get := func(at uint64) (uint64, lctl.Event, error) {
		msg, err := p.stream.GetMsg(ctx, at, jetstream.WithGetMsgSubject(p.subject))
		if err != nil {
			return 0, lctl.Event{}, fmt.Errorf("stream seq %d: %w", at, err)
		}
		e, err := lctl.DecodeEvent(msg.Data)
		if err != nil {
			return 0, lctl.Event{}, fmt.Errorf("stream seq %d: %w", msg.Sequence, err)
		}
		return msg.Sequence, e, nil
	}
	at, e, err := get(1)
	if err != nil {
		return 0, lctl.Event{}, err
	}
	if e.Seq == want {
		return at, e, nil
	}
	if e.Seq > want || last.Seq-want > lastAt {
		return 0, lctl.Event{}, fmt.Errorf("%w: event %d (the stream's first is %d)", ErrEventNotFound, want, e.Seq)
	}
	lo, hi := at+(want-e.Seq), lastAt-(last.Seq-want)
	for range maxProbes {
		if lo > hi {
			break
		}
		mid := lo + (hi-lo)/2
		at, e, err := get(mid)
		if err != nil {
			return 0, lctl.Event{}, err
		}
		switch {
		case e.Seq == want:
			return at, e, nil
		case e.Seq > want:
			// The first event at or after mid is past want: want is
			// before mid, and (e.Seq - want) events before at.
			hi = min(mid-1, at-(e.Seq-want))
		default:
			lo = max(lo, at+(want-e.Seq))
		}
	}
	return 0, lctl.Event{}, fmt.Errorf("%w: event %d is not where the chain's order puts it on the stream", ErrEventNotFound, want)
}
