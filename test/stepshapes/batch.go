package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	errStopped = errors.New("writer stopped")
	errNoAck   = errors.New("no acknowledgement in time")
)

// parseAck reads a stream's acknowledgement of one write.
func parseAck(data []byte, stream string) (uint64, error) {
	if rest, ok := bytes.CutPrefix(data, []byte(`{"stream":"`+stream+`","seq":`)); ok {
		if digits, ok := bytes.CutSuffix(rest, []byte("}")); ok {
			if seq, err := strconv.ParseUint(string(digits), 10, 64); err == nil && seq > 0 {
				return seq, nil
			}
		}
	}
	var a struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Stream    string `json:"stream"`
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
		Batch     string `json:"batch"`
		Count     int    `json:"count"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return 0, fmt.Errorf("not an acknowledgement: %q", data)
	}
	switch {
	case a.Error != nil:
		return 0, fmt.Errorf("refused: %d %s", a.Error.ErrCode, a.Error.Description)
	case a.Stream != stream || a.Seq == 0:
		return 0, fmt.Errorf("not this stream's acknowledgement: %q", data)
	case a.Duplicate:
		return 0, fmt.Errorf("a duplicate: %q", data)
	}
	return a.Seq, nil
}

// header is a write's headers: message id (none if empty) and the
// subject's expected last stream sequence.
func header(msgID string, expect uint64) nats.Header {
	h := make(nats.Header, 4)
	h[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(expect, 10)}
	if msgID != "" {
		h[jetstream.MsgIDHeader] = []string{msgID}
	}
	return h
}

// pending is a write sent and not yet acknowledged.
type pending struct {
	done chan struct{}
	seq  uint64
	err  error
}

func (p *pending) wait() (uint64, error) {
	t := time.NewTimer(writeBound)
	defer t.Stop()
	select {
	case <-p.done:
		return p.seq, p.err
	case <-t.C:
		return 0, errNoAck
	}
}

// asyncPub sends writes whose acknowledgements are waited for later
// (variant b).
type asyncPub struct {
	nc      *nats.Conn
	stream  string
	prefix  string
	sub     *nats.Subscription
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]*pending
}

func newAsyncPub(nc *nats.Conn, stream string) (*asyncPub, error) {
	p := &asyncPub{nc: nc, stream: stream, prefix: nc.NewInbox() + ".", waiting: map[uint64]*pending{}}
	sub, err := nc.Subscribe(p.prefix+"*", p.onAck)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	p.sub = sub
	return p, nil
}

func (p *asyncPub) send(subject string, data []byte, msgID string, expect uint64) (*pending, error) {
	pd := &pending{done: make(chan struct{})}
	p.mu.Lock()
	p.next++
	tok := p.next
	p.waiting[tok] = pd
	p.mu.Unlock()
	m := &nats.Msg{Subject: subject, Reply: p.prefix + strconv.FormatUint(tok, 10), Data: data, Header: header(msgID, expect)}
	if err := p.nc.PublishMsg(m); err != nil {
		p.mu.Lock()
		delete(p.waiting, tok)
		p.mu.Unlock()
		return nil, err
	}
	return pd, nil
}

func (p *asyncPub) onAck(m *nats.Msg) {
	tok, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, p.prefix), 10, 64)
	if err != nil {
		return
	}
	p.mu.Lock()
	pd := p.waiting[tok]
	delete(p.waiting, tok)
	p.mu.Unlock()
	if pd == nil {
		return
	}
	pd.seq, pd.err = parseAck(m.Data, p.stream)
	close(pd.done)
}

func (p *asyncPub) stop() { _ = p.sub.Unsubscribe() }

// batcher is group commit (variants d, cd, dA): callers hand their write
// over and wait; one loop takes every write waiting, sends them all, and
// when every one of them is acknowledged (or, atomic, the batch's commit
// is) releases their callers together, then takes the next group. Each
// write still carries its own message id and expected last subject
// sequence; a run has one write in flight at a time, so a group holds at
// most one write per subject.
type batcher struct {
	nc     *nats.Conn
	stream string
	atomic bool
	in     chan *breq
	quit   chan struct{}
	done   chan struct{}
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	gen     uint64
	cur     []*breq
	left    int
	flushed chan struct{}
}

type breq struct {
	subject  string
	data     []byte
	msgID    string
	expect   uint64
	seq      uint64
	err      error
	answered bool
	done     chan struct{}
}

// maxGroup bounds a group: an atomic batch holds at most 1000 messages
// (the server's default max_batch_size).
const maxGroup = 1000

func newBatcher(nc *nats.Conn, stream string, atomicBatch bool) *batcher {
	b := &batcher{nc: nc, stream: stream, atomic: atomicBatch, in: make(chan *breq, maxGroup),
		quit: make(chan struct{}), done: make(chan struct{}), prefix: nc.NewInbox() + "."}
	sub, err := nc.Subscribe(b.prefix+"*", b.onAck)
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err != nil {
		panic(err) // a fresh connection's subscription
	}
	b.sub = sub
	go b.loop()
	return b
}

func (b *batcher) stop() {
	close(b.quit)
	<-b.done
	_ = b.sub.Unsubscribe()
}

func (b *batcher) write(subject string, data []byte, msgID string, expect uint64) (uint64, error) {
	r := &breq{subject: subject, data: data, msgID: msgID, expect: expect, done: make(chan struct{})}
	select {
	case b.in <- r:
	case <-b.quit:
		return 0, errStopped
	}
	<-r.done
	return r.seq, r.err
}

func (b *batcher) loop() {
	defer close(b.done)
	group := make([]*breq, 0, maxGroup)
	for {
		select {
		case r := <-b.in:
			group = append(group[:0], r)
		case <-b.quit:
			return
		}
	fill:
		for len(group) < maxGroup {
			select {
			case r := <-b.in:
				group = append(group, r)
			default:
				break fill
			}
		}
		if b.atomic && len(group) > 1 {
			b.flushAtomic(group)
		} else {
			b.flushEach(group)
		}
		for _, r := range group {
			close(r.done)
		}
	}
}

// flushEach sends every write of the group, each with its own reply,
// and waits for all their acknowledgements.
func (b *batcher) flushEach(group []*breq) {
	b.mu.Lock()
	b.gen++
	gen := strconv.FormatUint(b.gen, 10)
	b.cur, b.left = group, len(group)
	flushed := make(chan struct{})
	b.flushed = flushed
	b.mu.Unlock()
	for i, r := range group {
		m := &nats.Msg{Subject: r.subject, Reply: b.prefix + gen + "_" + strconv.Itoa(i), Data: r.data, Header: header(r.msgID, r.expect)}
		if err := b.nc.PublishMsg(m); err != nil {
			b.answer(b.gen, i, 0, err)
		}
	}
	t := time.NewTimer(writeBound)
	defer t.Stop()
	select {
	case <-flushed:
	case <-t.C:
		b.mu.Lock()
		for _, r := range group {
			if !r.answered {
				r.answered, r.err = true, errNoAck
			}
		}
		b.cur = nil
		b.mu.Unlock()
	}
}

func (b *batcher) onAck(m *nats.Msg) {
	g, i, ok := strings.Cut(strings.TrimPrefix(m.Subject, b.prefix), "_")
	if !ok {
		return
	}
	gen, err1 := strconv.ParseUint(g, 10, 64)
	idx, err2 := strconv.Atoi(i)
	if err1 != nil || err2 != nil {
		return
	}
	seq, err := parseAck(m.Data, b.stream)
	b.answer(gen, idx, seq, err)
}

// answer records write i of group gen's outcome.
func (b *batcher) answer(gen uint64, i int, seq uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen != b.gen || b.cur == nil || i < 0 || i >= len(b.cur) || b.cur[i].answered {
		return
	}
	r := b.cur[i]
	r.answered, r.seq, r.err = true, seq, err
	if b.left--; b.left == 0 {
		b.cur = nil
		close(b.flushed)
	}
}

// flushAtomic sends the group as one atomic batch across subjects: every
// write or none is stored, in the group's order, at consecutive stream
// sequences; the stream checks each subject's expected last sequence
// (one write per subject in a group) and message id before storing any.
func (b *batcher) flushAtomic(group []*breq) {
	b.mu.Lock()
	b.gen++
	id := fmt.Sprintf("%s%d", strings.TrimPrefix(b.prefix, "_INBOX."), b.gen)
	b.mu.Unlock()
	id = strings.ReplaceAll(id, ".", "")
	fail := func(err error) {
		for _, r := range group {
			r.err = err
		}
	}
	for i, r := range group {
		h := header(r.msgID, r.expect)
		h["Nats-Batch-Id"] = []string{id}
		h["Nats-Batch-Sequence"] = []string{strconv.Itoa(i + 1)}
		m := &nats.Msg{Subject: r.subject, Data: r.data, Header: h}
		if i < len(group)-1 {
			if err := b.nc.PublishMsg(m); err != nil {
				fail(err)
				return
			}
			continue
		}
		h["Nats-Batch-Commit"] = []string{"1"}
		resp, err := b.nc.RequestMsg(m, writeBound)
		if err != nil {
			fail(err)
			return
		}
		last, err := parseAck(resp.Data, b.stream)
		if err != nil {
			fail(err)
			return
		}
		first := last - uint64(len(group)) + 1
		for j, r := range group {
			r.seq = first + uint64(j)
		}
	}
}
