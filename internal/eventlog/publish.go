package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/storehealth"
)

// Publisher makes the conditional writes of the step path: a publish to a
// stream's subject that lands only if the subject's last stream sequence
// is the one expected (Nats-Expected-Last-Subject-Sequence; 0: the subject
// has no message), optionally with a message id the stream deduplicates
// on, acknowledged by the stream.
//
// It is the request the generic JetStream client sends for PublishMsg with
// those options, so the same conditions hold, without that client's
// per-write costs: options and headers built per call and the
// acknowledgement decoded by reflection. Both the chain appends and the
// executor's step records go through it.
type Publisher struct {
	nc     *nats.Conn
	stream string // the stream's name, as acknowledgements name it
	// health is told each write's outcome (ReportTo; nil: nobody).
	health *storehealth.Monitor
	// batches holds a place for each atomic batch open (PublishBatch).
	batches chan struct{}
	// group matches the writes' replies (replies.go).
	replies *replies
}

// ReportTo tells m the outcome of every later write (a stream that cannot
// store makes the process report NOT_SERVING: internal/storehealth).
func (p *Publisher) ReportTo(m *storehealth.Monitor) { p.health = m }

// NewPublisher returns a Publisher for stream's subjects over nc.
func NewPublisher(nc *nats.Conn, stream string) *Publisher {
	return &Publisher{nc: nc, stream: stream, batches: make(chan struct{}, maxBatchesInFlight), replies: &replies{nc: nc}}
}

// PubAck is what the stream acknowledged.
type PubAck struct {
	Seq       uint64 // the message's stream sequence
	Duplicate bool   // the message id was stored before: Seq is that message's
}

// publishTimeout bounds a write whose context has no deadline, as the
// generic client's default API timeout does.
const publishTimeout = 5 * time.Second

// Retries of a write nobody answered (a stream leader being elected), as
// the generic client does.
const (
	publishRetryWait     = 250 * time.Millisecond
	publishRetryAttempts = 2
)

// A replicated stream refuses a conditional write with 10164 ("wrong last
// sequence", JSStreamWrongLastSequenceConstantErr) while another write of
// the same subject is still in process, before proposing it: nothing of
// it is stored. The server sends a write's acknowledgement before it
// clears the subject's in-process mark, so a writer whose next write
// follows its previous one's acknowledgement closely is refused although
// nobody else wrote (seen 8 times in ~330,000 writes on a three-node
// cluster, session 19). Such a write is sent again, unchanged (the same
// expected sequence and message id, so it still lands only after the
// write it expects), a few times after short waits; a write still refused
// then, or refused because the subject's last sequence is another
// (10071), fails as before: another writer was first.
const (
	inProcessWait     = time.Millisecond
	inProcessAttempts = 6 // waits of 1, 2, 4, 8, 16, 32 ms: 63 ms at most
)

// inProcess reports a write refused because another of its subject was
// still in process (see inProcessWait). Every write asks it, so a write
// that succeeded (nil) is answered first: errors.As takes the target's
// address, which puts it on the heap, one allocation per write otherwise.
func inProcess(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Publish writes data to subject if the subject's last stream sequence is
// lastSeq, with msgID (none if empty) for deduplication. A refused write
// fails with the stream's *jetstream.APIError (wrapped); nobody answering
// with jetstream.ErrNoStreamResponse.
func (p *Publisher) Publish(ctx context.Context, subject string, data []byte, msgID string, lastSeq uint64) (PubAck, error) {
	ack, err := p.publish(ctx, subject, data, msgID, lastSeq)
	p.health.Wrote(p.stream, err)
	return ack, err
}

func (p *Publisher) publish(ctx context.Context, subject string, data []byte, msgID string, lastSeq uint64) (PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		if ctx.Done() == nil {
			// A context that never ends (context.Background, or
			// context.WithoutCancel: the executor's step records):
			// bounded by publishTimeout on the client's pooled timer,
			// as PublishWithin, instead of a context, timer and
			// callback made for this write alone.
			return p.publishUntil(time.Now().Add(publishTimeout), subject, data, msgID, lastSeq)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, publishTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return PubAck{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	w := write{subject: subject, data: data, msgID: msgID, lastSeq: lastSeq}
	ack, err := p.request(ctx, w)
	for r := 0; inProcess(err) && r < inProcessAttempts; r++ {
		t := time.NewTimer(inProcessWait << r)
		select {
		case <-ctx.Done():
			t.Stop()
			return ack, err
		case <-t.C:
		}
		ack, err = p.request(ctx, w)
	}
	return ack, err
}

// write is one conditional write's fields.
type write struct {
	subject string
	data    []byte
	msgID   string
	lastSeq uint64
}

// send sends w once, with a reply of its own (replies.go; or, when its replies
// cannot be subscribed to, as a request of its own), bounded by b, and
// returns the reply.
func (p *Publisher) send(b bound, w write) (*nats.Msg, error) {
	if p.replies.begin() == nil {
		return p.replies.request(b, w.subject, w.data, w.msgID, w.lastSeq)
	}
	pm := pubMsgs.Get().(*pubMsg)
	defer pm.put()
	m := pm.fill(w.subject, w.data, w.msgID, w.lastSeq)
	if b.ctx != nil {
		return p.nc.RequestMsgWithContext(b.ctx, m)
	}
	left := time.Until(b.deadline)
	if left <= 0 {
		return nil, nats.ErrTimeout
	}
	return p.nc.RequestMsg(m, left)
}

// request sends w once under ctx (again, a little later, when nobody
// listens yet) and reads the stream's answer.
func (p *Publisher) request(ctx context.Context, w write) (PubAck, error) {
	resp, err := p.send(bound{ctx: ctx}, w)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < publishRetryAttempts; r++ {
		t := time.NewTimer(publishRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = p.send(bound{ctx: ctx}, w)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return PubAck{}, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return PubAck{}, err
	}
	return p.ack(resp.Data)
}

// PublishWithin is Publish bounded by timeout instead of by a context:
// the request waits on the NATS client's pooled timer, so a caller whose
// only bound is a duration (the orchestrator's appends) makes no context,
// timer and callback of its own per write. As under a context's deadline,
// a write whose time is up before it is sent is not sent (ErrNotSent),
// one nobody answers in time fails with context.DeadlineExceeded
// (wrapping the client's own error), and one nobody listens to is retried
// within the same bound.
func (p *Publisher) PublishWithin(timeout time.Duration, subject string, data []byte, msgID string, lastSeq uint64) (PubAck, error) {
	return p.PublishUntil(time.Now().Add(timeout), subject, data, msgID, lastSeq)
}

// PublishUntil is PublishWithin with the bound given as a time.
func (p *Publisher) PublishUntil(deadline time.Time, subject string, data []byte, msgID string, lastSeq uint64) (PubAck, error) {
	ack, err := p.publishUntil(deadline, subject, data, msgID, lastSeq)
	p.health.Wrote(p.stream, err)
	return ack, err
}

func (p *Publisher) publishUntil(deadline time.Time, subject string, data []byte, msgID string, lastSeq uint64) (PubAck, error) {
	left := time.Until(deadline)
	if left <= 0 {
		return PubAck{}, fmt.Errorf("%w: %w", ErrNotSent, context.DeadlineExceeded)
	}
	w := write{subject: subject, data: data, msgID: msgID, lastSeq: lastSeq}
	ack, err := p.requestUntil(deadline, w)
	for r := 0; inProcess(err) && r < inProcessAttempts; r++ {
		wait := inProcessWait << r
		if time.Until(deadline) <= wait {
			return ack, err
		}
		time.Sleep(wait)
		ack, err = p.requestUntil(deadline, w)
	}
	return ack, err
}

// requestUntil sends w once, bounded by deadline (again, a little later,
// when nobody listens yet), and reads the stream's answer.
func (p *Publisher) requestUntil(deadline time.Time, w write) (PubAck, error) {
	if time.Until(deadline) <= 0 {
		return PubAck{}, context.DeadlineExceeded
	}
	resp, err := p.send(bound{deadline: deadline}, w)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < publishRetryAttempts; r++ {
		t := time.NewTimer(min(publishRetryWait, time.Until(deadline)))
		<-t.C
		if time.Until(deadline) <= 0 {
			err = context.DeadlineExceeded
			break
		}
		resp, err = p.send(bound{deadline: deadline}, w)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return PubAck{}, jetstream.ErrNoStreamResponse
	case errors.Is(err, nats.ErrTimeout):
		return PubAck{}, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	case err != nil:
		return PubAck{}, err
	}
	return p.ack(resp.Data)
}

// pubMsg is a write's request, kept for the next write: the client reads
// a request's headers into bytes when it sends it and keeps nothing of the
// message after the call returns, so its header map and values need not
// be made anew per write.
type pubMsg struct {
	m       nats.Msg
	lastSeq [1]string
	msgID   [1]string
}

var pubMsgs = sync.Pool{New: func() any { return &pubMsg{m: nats.Msg{Header: make(nats.Header, 2)}} }}

// fill makes pm the request for one write.
func (pm *pubMsg) fill(subject string, data []byte, msgID string, lastSeq uint64) *nats.Msg {
	pm.lastSeq[0] = strconv.FormatUint(lastSeq, 10)
	pm.m.Header[jetstream.ExpectedLastSubjSeqHeader] = pm.lastSeq[:]
	if msgID != "" {
		pm.msgID[0] = msgID
		pm.m.Header[jetstream.MsgIDHeader] = pm.msgID[:]
	} else {
		delete(pm.m.Header, jetstream.MsgIDHeader)
	}
	pm.m.Subject, pm.m.Data = subject, data
	return &pm.m
}

// put returns pm to the pool holding nothing of its write.
func (pm *pubMsg) put() {
	pm.m.Subject, pm.m.Data, pm.lastSeq[0], pm.msgID[0] = "", nil, "", ""
	pubMsgs.Put(pm)
}

// ack reads the stream's answer to a write: the sequence it was stored
// at, or the error it reports.
func (p *Publisher) ack(data []byte) (PubAck, error) {
	// What the server sends for a stored write: {"stream":"<name>","seq":N}.
	// Anything else (an error, a domain, a duplicate) is decoded in full.
	if rest, ok := bytes.CutPrefix(data, []byte(`{"stream":"`)); ok {
		if rest, ok = bytes.CutPrefix(rest, []byte(p.stream)); ok {
			if rest, ok = bytes.CutPrefix(rest, []byte(`","seq":`)); ok {
				if digits, ok := bytes.CutSuffix(rest, []byte("}")); ok {
					if seq, err := strconv.ParseUint(string(digits), 10, 64); err == nil && seq > 0 {
						return PubAck{Seq: seq}, nil
					}
				}
			}
		}
	}
	var a struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	switch {
	case a.Error != nil:
		return PubAck{}, fmt.Errorf("nats: %w", a.Error)
	case a.Stream != p.stream || a.Seq == 0:
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	return PubAck{Seq: a.Seq, Duplicate: a.Duplicate}, nil
}
