package eventlog

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/lctl"
)

// Batched appends: a writer that has many events at once (the tracer,
// converting an OpenTelemetry trace) sends them to a stream that allows
// atomic batch publish (LCTL_OTEL, as provisioned) in atomic batches: the
// events of a batch go out without waiting for each other, and the
// stream stores all of them or none. The chain's rules are those of
// Append: the events are sealed in order, each on the one before; the
// batch's first event carries Nats-Expected-Last-Subject-Sequence (so a
// second writer's event in between fails the batch instead of forking the
// chain) and every event its message id <chain_id>/<seq>. The stream
// checks every event of a batch, and its limits for the whole batch,
// before it stores any: a refusal for want of room, a wrong last
// sequence or a message id stored before stores nothing of the batch.

// Draft is an event for AppendBatch to seal and append.
type Draft struct {
	Time  time.Time // the event's timestamp (zero: now)
	Type  string
	Agent string
	Data  map[string]any
}

// MaxBatch is the most events one atomic batch holds: nats-server's
// default limit for an atomic batch (its max_batch_size). A write of more
// is sent as several batches, each acknowledged before the next is sent.
const MaxBatch = 1000

// MinDiskBatch is the fewest events AppendBatch sends as an atomic batch
// to a stream of one replica stored in files (the embedded server's):
// there the server stages each batch in a file store of its own, made,
// synced and removed per batch, which costs more than a few hundred
// acknowledged appends (BenchmarkAppendBatch: 15-45 ms for a batch of 4
// to 64 events at load ~16, against 0.15-0.2 ms an append; 136 ms for
// 1000 against 176 ms). A replicated stream stages a batch in memory and
// replicates it in one proposal, where every append is a replication
// round trip: there any write of two events or more is a batch.
const MinDiskBatch = 256

// maxBatchesInFlight bounds the atomic batches one Publisher has open at
// once: a stream takes at most 50 (nats-server's per-stream limit) and
// refuses more.
const maxBatchesInFlight = 16

// PartialError is a batched append that stored some of its events and
// not the rest: the batches before the failing one are on the chain.
type PartialError struct {
	Stored, Total int
	Err           error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("%d of %d events stored before the write failed: %v", e.Stored, e.Total, e.Err)
}

func (e *PartialError) Unwrap() error { return e.Err }

// AppendBatch appends drafts to the chain in order, as Append would one
// after the other, and returns the events it stored. On a stream that
// allows atomic batch publish the events are sent in atomic batches of at
// most MaxBatch, one round trip each (on a one-replica file-stored
// stream, only a write of MinDiskBatch events or more); otherwise (fewer,
// or a stream provisioned before XCT asked for atomic publish) one at a
// time, as Append does.
// Either way it returns after every event is durable, or with an error:
// then the writer refuses further appends, as after a failed Append, and
// when the events of earlier batches were stored the error is a
// *PartialError saying how many. As with Append, the caller hands the
// drafts' data over and keeps the timestamps in order.
func (w *ChainWriter) AppendBatch(ctx context.Context, drafts []Draft) ([]lctl.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]lctl.Event, 0, len(drafts))
	partial := func(err error) error {
		if len(out) == 0 {
			return err
		}
		return &PartialError{Stored: len(out), Total: len(drafts), Err: err}
	}
	if w.minBatch == 0 || len(drafts) < w.minBatch {
		for _, d := range drafts {
			e, err := w.appendLocked(ctx, d.Time, d.Type, d.Agent, d.Data)
			if err != nil {
				return out, partial(err)
			}
			out = append(out, e)
		}
		return out, nil
	}
	// Batches of equal size: 1001 events are two of 501 and 500, not
	// 1000 and a batch of one.
	batches := (len(drafts) + MaxBatch - 1) / MaxBatch
	size := (len(drafts) + batches - 1) / batches
	for len(drafts[len(out):]) > 0 {
		chunk := drafts[len(out):]
		chunk = chunk[:min(len(chunk), size)]
		events, err := w.appendAtomic(ctx, chunk)
		if err != nil {
			return out, partial(err)
		}
		out = append(out, events...)
	}
	return out, nil
}

// appendAtomic stores drafts (at most MaxBatch) as one atomic batch; w.mu
// is held.
func (w *ChainWriter) appendAtomic(ctx context.Context, drafts []Draft) ([]lctl.Event, error) {
	if w.failed != nil {
		return nil, fmt.Errorf("append to chain %s: writer stopped after an earlier failure: %w", w.chainID, w.failed)
	}
	if len(drafts) == 1 {
		d := drafts[0]
		e, err := w.appendLocked(ctx, d.Time, d.Type, d.Agent, d.Data)
		if err != nil {
			return nil, err
		}
		return []lctl.Event{e}, nil
	}
	events, raws, err := w.sealAll(drafts)
	if err != nil {
		return nil, err
	}
	first := events[0].Seq
	last, err := w.pub.PublishBatch(ctx, w.subject, raws, func(i int) string { return w.msgID(first + uint64(i)) }, w.streamSeq)
	if err != nil {
		err = conflictOf(err)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeBatchDuplicate {
			// A message id of the batch is stored: another writer's
			// event at one of its seqs (this writer's own earlier
			// batches are behind w.seq).
			err = fmt.Errorf("%w: %w", ErrConflict, err)
		}
		w.failed = err
		return nil, fmt.Errorf("append events %d-%d to chain %s: %w", first, events[len(events)-1].Seq, w.chainID, err)
	}
	e := events[len(events)-1]
	w.seq, w.prevHash, w.streamSeq, w.lastAppend = e.Seq, e.Hash, last, e
	return events, nil
}

// errCodeBatchDuplicate is nats-server's error code for an atomic batch
// holding a message id the stream stored before (JSAtomicPublishContainsDuplicateMessageErr).
const errCodeBatchDuplicate jetstream.ErrorCode = 10201

// ErrBatchRefused is an atomic batch the stream refused as a whole
// (wrapped with the stream's *jetstream.APIError): none of its events was
// stored.
var ErrBatchRefused = errors.New("the stream stored none of the batch")

// PublishBatch writes datas to subject as one atomic batch: every message
// or none is stored, the first only if the subject's last stream sequence
// is lastSeq, each with msgID(i) for deduplication. It returns the stream
// sequence of the last message. The messages before the last are sent
// without waiting for an answer; the last commits the batch, and the
// stream's answer to it says what became of all. A refused batch fails
// with ErrBatchRefused and the stream's *jetstream.APIError (wrapped);
// nobody answering with jetstream.ErrNoStreamResponse. The stream must
// allow atomic publish.
func (p *Publisher) PublishBatch(ctx context.Context, subject string, datas [][]byte, msgID func(int) string, lastSeq uint64) (uint64, error) {
	seq, err := p.publishBatch(ctx, subject, datas, msgID, lastSeq)
	p.health.Wrote(p.stream, err)
	return seq, err
}

func (p *Publisher) publishBatch(ctx context.Context, subject string, datas [][]byte, msgID func(int) string, lastSeq uint64) (uint64, error) {
	if len(datas) == 0 {
		return 0, errors.New("publish batch: no messages")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, publishTimeout)
		defer cancel()
	}
	select {
	case p.batches <- struct{}{}:
		defer func() { <-p.batches }()
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
	}
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	batchID := base64.RawURLEncoding.EncodeToString(id[:])
	for i, data := range datas {
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{
			"Nats-Batch-Id":       []string{batchID},
			"Nats-Batch-Sequence": []string{strconv.Itoa(i + 1)},
			jetstream.MsgIDHeader: []string{msgID(i)},
		}}
		if i == 0 {
			m.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(lastSeq, 10)}
		}
		if i < len(datas)-1 {
			if err := p.nc.PublishMsg(m); err != nil {
				// Nothing is committed without the last message.
				return 0, fmt.Errorf("%w: %w", ErrNotSent, err)
			}
			continue
		}
		m.Header["Nats-Batch-Commit"] = []string{"1"}
		resp, err := p.nc.RequestMsgWithContext(ctx, m)
		if errors.Is(err, nats.ErrNoResponders) {
			return 0, jetstream.ErrNoStreamResponse
		}
		if err != nil {
			return 0, err
		}
		return p.batchAck(resp.Data, batchID, len(datas))
	}
	panic("unreachable")
}

// batchAck reads the stream's answer to a batch's commit.
func (p *Publisher) batchAck(data []byte, batchID string, n int) (uint64, error) {
	var a struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
		Batch  string              `json:"batch"`
		Count  int                 `json:"count"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	switch {
	case a.Error != nil:
		return 0, fmt.Errorf("%w: %w", ErrBatchRefused, a.Error)
	case a.Stream != p.stream || a.Seq == 0 || a.Batch != batchID || a.Count != n:
		return 0, fmt.Errorf("%w: %s", jetstream.ErrInvalidJSAck, data)
	}
	return a.Seq, nil
}
