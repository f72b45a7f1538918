// Package eventlog stores LCTL chains on NATS JetStream, one subject per
// chain, as docs/architecture.md decides: the chains XCT's runs write on
// the stream "LCTL" (lctl.chain.<chain_id>), the chains the tracer makes
// from OpenTelemetry traces (otel-<trace id>) on a stream of their own,
// "LCTL_OTEL" (lctl.otel.<trace id>). Two streams, so that the tracer's
// NATS user may publish to the otel subjects and no run's chain: a NATS
// permission matches whole subject tokens, and lctl.chain.otel-* is not
// one. Otel chains written before LCTL_OTEL existed stay where they are
// (lctl.chain.otel-<trace id> on LCTL) and are read there; nobody appends
// to them any more.
//
// A ChainWriter is the single writer of one chain: each append carries
// Nats-Expected-Last-Subject-Sequence, so a second writer of the same chain
// fails instead of forking it, and Nats-Msg-Id <chain_id>/<seq>, so a retried
// append is stored once.
package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/storehealth"
	"github.com/xct-dev/xct/lctl"
)

// Stream and subject names.
const (
	StreamName    = "LCTL"
	SubjectPrefix = "lctl.chain."
	AllSubjects   = SubjectPrefix + "*"

	// OTelStreamName is the stream of the chains made from OpenTelemetry
	// traces; chain otel-<rest> is stored on lctl.otel.<rest>.
	OTelStreamName    = "LCTL_OTEL"
	OTelSubjectPrefix = "lctl.otel."
	AllOTelSubjects   = OTelSubjectPrefix + "*"
	// OTelChainPrefix starts every chain id made from a trace (the same
	// as lctl/otlp.ChainPrefix).
	OTelChainPrefix = "otel-"
)

// IsOTel reports whether chainID names a chain made from a trace.
func IsOTel(chainID string) bool { return strings.HasPrefix(chainID, OTelChainPrefix) }

// Subject returns the subject a chain's events are written to:
// lctl.otel.<rest> for chain otel-<rest>, lctl.chain.<chain_id> for any
// other.
func Subject(chainID string) string {
	if rest, ok := strings.CutPrefix(chainID, OTelChainPrefix); ok {
		return OTelSubjectPrefix + rest
	}
	return SubjectPrefix + chainID
}

// LegacySubject is where a chain's events were written before otel
// chains had their own stream: lctl.chain.<chain_id> for every chain.
func LegacySubject(chainID string) string { return SubjectPrefix + chainID }

// ChainOf returns the chain a stream subject holds ("", false for a
// subject of neither stream).
func ChainOf(subject string) (string, bool) {
	if id, ok := strings.CutPrefix(subject, SubjectPrefix); ok {
		return id, true
	}
	if rest, ok := strings.CutPrefix(subject, OTelSubjectPrefix); ok {
		return OTelChainPrefix + rest, true
	}
	return "", false
}

// Errors callers act on.
var (
	// ErrChainNotFound means the stream holds no event of the chain.
	ErrChainNotFound = errors.New("chain not found")
	// ErrConflict means another writer appended to the chain first.
	ErrConflict = errors.New("chain was appended to by another writer")
	// ErrNoStream means the server has no LCTL stream (Bind does not
	// create it).
	ErrNoStream = errors.New("no LCTL stream")
	// ErrNotSent means an append failed before its write was sent (its
	// deadline had passed): it was certainly not stored. Any other
	// failure but a refusal by the stream may have been stored unseen.
	ErrNotSent = errors.New("the write was not sent")
)

// Log is the event log on one NATS connection.
type Log struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	pub    *Publisher
	// otel is LCTL_OTEL (nil when Bind found none: a server XCT has not
	// run on since it was made); otelPub writes to it.
	otel    jetstream.Stream
	otelPub *Publisher
}

// Open binds to the LCTL and LCTL_OTEL streams, which the admin made
// (internal/provision, `xct nats provision`): a missing one is
// jsguard.ErrMissing, saying what to run. An existing stream is used as it
// is, its size limits, replicas and duplicate window being the operator's;
// one with settings XCT never makes is refused (ErrStreamSettings). The
// streams' settings are provisioning's.
func Open(ctx context.Context, nc *nats.Conn) (*Log, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	stream, err := bindChecked(ctx, js, StreamName, AllSubjects)
	if err != nil {
		return nil, err
	}
	otel, err := bindChecked(ctx, js, OTelStreamName, AllOTelSubjects)
	if err != nil {
		return nil, err
	}
	if err := republishedInto(ctx, js); err != nil {
		return nil, err
	}
	return &Log{js: js, stream: stream, pub: NewPublisher(nc, StreamName), otel: otel, otelPub: NewPublisher(nc, OTelStreamName)}, nil
}

// bindChecked binds to the stream name on subjects and checks it.
func bindChecked(ctx context.Context, js jetstream.JetStream, name, subjects string) (jetstream.Stream, error) {
	stream, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, jsguard.Missing("stream", name)
	}
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", name, err)
	}
	if err := CheckStream(stream.CachedInfo().Config, name, subjects); err != nil {
		return nil, err
	}
	return stream, nil
}

// ErrStreamSettings means the LCTL (or LCTL_OTEL) stream exists with
// settings XCT never makes, or another stream republishes into the
// chains: whoever creates a stream first sets them, and
// another service allowed to create it (the tracer) could have made it
// republish chain messages into other subjects (the tool catalog, or a
// run's chain from LCTL_OTEL: the server's own publish, past every
// permission), source other streams into it, or let its messages be
// deleted, purged or rolled up.
var ErrStreamSettings = errors.New("an LCTL stream has settings XCT never makes")

// CheckStream refuses a stream name XCT did not make as it makes them
// (subjects: its one subject pattern).
// Size limits, replicas and the duplicate window are the operator's.
func CheckStream(c jetstream.StreamConfig, name, subjects string) error {
	if bad := jsguard.Unlike(c, []string{subjects}, true); len(bad) > 0 {
		return fmt.Errorf("%w: %s: %s; an operator must look at it and remove it (nats stream rm %s) before XCT uses it",
			ErrStreamSettings, name, strings.Join(bad, "; "), name)
	}
	return nil
}

// chainSubjects are both chain spaces, for the republish guard.
const chainSubjects = "lctl.>"

// republishedInto refuses a server where a stream republishes into the
// chains' subjects (jsguard): a bucket made to republish into
// lctl.chain.<key> would write on a run's chain past every permission.
// Services could make their buckets until session 8; the admin alone does
// now (internal/provision, which refuses such a stream too), and this
// stays for an operator's mistake. Asked again for a while when the
// streams cannot be listed (NATS reconnecting).
func republishedInto(ctx context.Context, js jetstream.JetStream) error {
	err := jsguard.RepublishedIntoPatiently(ctx, js, chainSubjects)
	if errors.Is(err, jsguard.ErrRepublished) {
		return fmt.Errorf("%w: %w; an operator must look at it and remove it before XCT uses the log", ErrStreamSettings, err)
	}
	return err
}

// Bind binds to the LCTL stream for reading, and to LCTL_OTEL when it
// exists. Unlike Open it never creates or changes a stream: a server
// without LCTL is ErrNoStream. Read-only tools (lctl tail) use it.
func Bind(ctx context.Context, nc *nats.Conn) (*Log, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	stream, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w %s on this server", ErrNoStream, StreamName)
	}
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", StreamName, err)
	}
	l := &Log{js: js, stream: stream, pub: NewPublisher(nc, StreamName), otelPub: NewPublisher(nc, OTelStreamName)}
	otel, err := js.Stream(ctx, OTelStreamName)
	switch {
	case err == nil:
		l.otel = otel
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("bind stream %s: %w", OTelStreamName, err)
	}
	return l, nil
}

// ReportTo tells m the outcome of every later append (internal/storehealth).
func (l *Log) ReportTo(m *storehealth.Monitor) {
	l.pub.ReportTo(m)
	l.otelPub.ReportTo(m)
}

// ErrLegacyChain means an otel chain was written before LCTL_OTEL existed:
// it is read at its old subject, and nothing appends to it any more.
var ErrLegacyChain = errors.New("the chain was written at its old subject on LCTL, before otel chains had their own stream; it is read, not appended to")

// place is where a chain's events are: the stream, the subject, and the
// last event's message (nil when the chain has none).
type place struct {
	stream  jetstream.Stream
	pub     *Publisher
	subject string
	last    *jetstream.RawStreamMsg
	legacy  bool // an otel chain at its old subject on LCTL
}

// locate finds chainID's events: a run's chain on LCTL; an otel chain on
// LCTL_OTEL, or at its old subject on LCTL when only that holds it. A
// chain with no event is placed where it would be written (last nil).
func (l *Log) locate(ctx context.Context, chainID string) (place, error) {
	if !IsOTel(chainID) {
		p := place{stream: l.stream, pub: l.pub, subject: Subject(chainID)}
		return p, l.lastOf(ctx, &p)
	}
	if l.otel != nil {
		p := place{stream: l.otel, pub: l.otelPub, subject: Subject(chainID)}
		if err := l.lastOf(ctx, &p); err != nil || p.last != nil {
			return p, err
		}
	}
	old := place{stream: l.stream, pub: l.pub, subject: LegacySubject(chainID), legacy: true}
	if err := l.lastOf(ctx, &old); err != nil || old.last != nil {
		return old, err
	}
	if l.otel == nil {
		return old, nil
	}
	return place{stream: l.otel, pub: l.otelPub, subject: Subject(chainID)}, nil
}

// lastOf reads the last message on p's subject into p.last (nil if none).
func (l *Log) lastOf(ctx context.Context, p *place) error {
	msg, err := p.stream.GetLastMsgForSubject(ctx, p.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", p.subject, err)
	}
	p.last = msg
	return nil
}

// JetStream returns the JetStream context the log uses.
func (l *Log) JetStream() jetstream.JetStream { return l.js }

// ChainWriter appends to one chain. It is safe for concurrent use, but a
// chain should have one writer: that is what makes its order the truth.
type ChainWriter struct {
	chainID string
	subject string
	stream  jetstream.Stream // where the chain is
	pub     *Publisher

	mu        sync.Mutex
	seq       uint64 // seq of the last event appended
	prevHash  string // hash of the last event appended
	streamSeq uint64 // stream sequence of the last event appended
	failed    error  // set once an append failed in an unknown way
	// minBatch is the fewest events AppendBatch sends as an atomic
	// batch (0: the stream does not allow atomic publish).
	minBatch   int
	now        func() time.Time
	lastAppend lctl.Event
}

// NewChainWriter returns a writer for a chain that has no events yet. Its
// first append fails with ErrConflict if the chain already exists.
func (l *Log) NewChainWriter(chainID string) (*ChainWriter, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return nil, err
	}
	w := &ChainWriter{chainID: chainID, subject: Subject(chainID), stream: l.stream, pub: l.pub, now: time.Now}
	if IsOTel(chainID) {
		if l.otel == nil {
			return nil, fmt.Errorf("chain %s: %w %s (bound, not opened)", chainID, ErrNoStream, OTelStreamName)
		}
		w.stream, w.pub = l.otel, l.otelPub
	}
	if info := w.stream.CachedInfo(); info != nil && info.Config.AllowAtomicPublish {
		w.minBatch = 2
		if info.Config.Replicas <= 1 && info.Config.Storage == jetstream.FileStorage {
			w.minBatch = MinDiskBatch
		}
	}
	return w, nil
}

// ResumeChainWriter returns a writer that continues an existing chain after
// its last stored event. An otel chain at its old subject is
// ErrLegacyChain.
func (l *Log) ResumeChainWriter(ctx context.Context, chainID string) (*ChainWriter, error) {
	w, err := l.NewChainWriter(chainID)
	if err != nil {
		return nil, err
	}
	p, err := l.locate(ctx, chainID)
	if err != nil {
		return nil, fmt.Errorf("resume chain %s: %w", chainID, err)
	}
	if p.legacy {
		return nil, fmt.Errorf("resume chain %s: %w", chainID, ErrLegacyChain)
	}
	msg := p.last
	if msg == nil {
		return w, nil
	}
	e, err := msgLast(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("resume chain %s: last event: %w", chainID, err)
	}
	w.seq, w.prevHash, w.streamSeq, w.lastAppend = e.Seq, e.Hash, msg.Sequence, e
	return w, nil
}

// ChainID returns the chain this writer appends to.
func (w *ChainWriter) ChainID() string { return w.chainID }

// Last returns the last event appended (or found by ResumeChainWriter);
// the zero Event before the first.
func (w *ChainWriter) Last() lctl.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastAppend
}

// Seq returns the seq of the last appended event (0 before the first).
func (w *ChainWriter) Seq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// Append seals a new event after the last one and stores it durably. It
// returns only after JetStream acknowledged the event. After an append fails
// the writer refuses further appends: the caller must not act on a
// transition it could not record. The returned event's data may share
// maps and slices with data: the caller hands data over and changes
// neither afterwards.
func (w *ChainWriter) Append(ctx context.Context, eventType, agent string, data map[string]any) (lctl.Event, error) {
	return w.append(ctx, time.Time{}, eventType, agent, data)
}

// AppendAt is Append with the event's timestamp given instead of the
// current time: for events converted from a record that carries its own
// time (an OpenTelemetry span). The caller keeps timestamps in order and,
// as with Append, does not change data afterwards.
func (w *ChainWriter) AppendAt(ctx context.Context, at time.Time, eventType, agent string, data map[string]any) (lctl.Event, error) {
	if at.IsZero() {
		return lctl.Event{}, fmt.Errorf("append to chain %s: a zero timestamp", w.chainID)
	}
	return w.append(ctx, at, eventType, agent, data)
}

// AppendWithin is Append bounded by timeout, counted from the call,
// instead of by a context (Publisher.PublishUntil): the same event, checks
// and failures (an append whose time is up before it is sent is not sent:
// ErrNotSent), without a context and timer made per append by a caller
// that has only a duration to bound it with.
func (w *ChainWriter) AppendWithin(timeout time.Duration, eventType, agent string, data map[string]any) (lctl.Event, error) {
	deadline := time.Now().Add(timeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendBounded(bound{deadline: deadline}, time.Time{}, eventType, agent, data)
}

// append is Append at time at (zero: now).
func (w *ChainWriter) append(ctx context.Context, at time.Time, eventType, agent string, data map[string]any) (lctl.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked(ctx, at, eventType, agent, data)
}

// appendLocked is append with w.mu held.
func (w *ChainWriter) appendLocked(ctx context.Context, at time.Time, eventType, agent string, data map[string]any) (lctl.Event, error) {
	return w.appendBounded(bound{ctx: ctx}, at, eventType, agent, data)
}

// bound is what limits an append: a context, or when there is none a
// deadline (AppendWithin).
type bound struct {
	ctx      context.Context
	deadline time.Time
}

// appendBounded is appendLocked bounded by b.
func (w *ChainWriter) appendBounded(b bound, at time.Time, eventType, agent string, data map[string]any) (lctl.Event, error) {
	if w.failed != nil {
		return lctl.Event{}, fmt.Errorf("append to chain %s: writer stopped after an earlier failure: %w", w.chainID, w.failed)
	}
	e, raw, err := w.seal(at, eventType, agent, data, w.seq+1, w.prevHash)
	if err != nil {
		return lctl.Event{}, err
	}
	var ack PubAck
	if b.ctx == nil {
		ack, err = w.pub.PublishUntil(b.deadline, w.subject, raw, w.msgID(e.Seq), w.streamSeq)
	} else {
		ack, err = w.pub.Publish(b.ctx, w.subject, raw, w.msgID(e.Seq), w.streamSeq)
	}
	if err != nil {
		err = conflictOf(err)
		w.failed = err
		return lctl.Event{}, fmt.Errorf("append event %d to chain %s: %w", e.Seq, w.chainID, err)
	}
	if ack.Duplicate {
		// The message id <chain>/<seq> was stored before. That is our own
		// append retried only if the stored message is this very event:
		// a replicated stream checks the id before the expected sequence,
		// so another writer's event at this seq also comes back as a
		// duplicate, and going on from it would fork the chain.
		ctx := b.ctx
		if ctx == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(context.Background(), b.deadline)
			defer cancel()
		}
		if err := w.sameAsStored(ctx, ack.Seq, raw); err != nil {
			w.failed = err
			return lctl.Event{}, fmt.Errorf("append event %d to chain %s: %w", e.Seq, w.chainID, err)
		}
	}
	w.seq, w.prevHash, w.streamSeq, w.lastAppend = e.Seq, e.Hash, ack.Seq, e
	return e, nil
}

// seal makes the event seq of the chain after the event whose hash is
// prevHash, at time at (zero: now), and its stored body.
func (w *ChainWriter) seal(at time.Time, eventType, agent string, data map[string]any, seq uint64, prevHash string) (lctl.Event, []byte, error) {
	if at.IsZero() {
		at = w.now()
	}
	// Normalize the payload to JSON types, so the event returned here is
	// exactly the event a reader decodes from the stream. What of data
	// already is JSON values is shared, not copied (Append's contract).
	norm, err := lctl.DataShared(data)
	if err != nil {
		return lctl.Event{}, nil, fmt.Errorf("append to chain %s: %w", w.chainID, err)
	}
	if norm == nil {
		norm = map[string]any{}
	}
	e := lctl.Event{
		ChainID:   w.chainID,
		Seq:       seq,
		Type:      eventType,
		Timestamp: lctl.FormatTime(at),
		Agent:     agent,
		Data:      norm,
	}
	// The stored body is the event's canonical JSON with its hash, encoded
	// once for the hash and the body.
	raw, err := e.SealEncoded(prevHash)
	if err != nil {
		return lctl.Event{}, nil, fmt.Errorf("encode event: %w", err)
	}
	return e, raw, nil
}

// msgID is the message id of the chain's event seq: the stream stores
// one message per id within its duplicate window.
func (w *ChainWriter) msgID(seq uint64) string { return w.chainID + "/" + strconv.FormatUint(seq, 10) }

// conflictOf marks err as ErrConflict when the stream refused a write
// because the chain's last event was not the one expected (replicated
// streams report a write of the chain still in process with the second
// code, after the Publisher's resends: see inProcessWait).
func conflictOf(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// sameAsStored checks that the stream's message at seq is raw on this
// chain's subject: ErrConflict if another event is stored there, an error
// of its own if the message cannot be read (the writer then stops, since
// it cannot know what the chain holds).
func (w *ChainWriter) sameAsStored(ctx context.Context, seq uint64, raw []byte) error {
	stored, err := w.stream.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("a duplicate acknowledgement for stream message %d, which cannot be read back: %w", seq, err)
	}
	if stored.Subject != w.subject || !bytes.Equal(stored.Data, raw) {
		return fmt.Errorf("%w: message id taken by another event (stream message %d on %s)", ErrConflict, seq, stored.Subject)
	}
	return nil
}

// ReadChain returns every event of a chain, in order, as stored now.
func (l *Log) ReadChain(ctx context.Context, chainID string) ([]lctl.Event, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return nil, err
	}
	var events []lctl.Event
	err := l.Follow(ctx, chainID, FollowOptions{StopAtEnd: true}, func(e lctl.Event) error {
		events = append(events, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// ReadChainByGets is ReadChain for a reader that may not make consumers
// on the stream (the executor and the validator: internal/natsauth): the
// whole chain by message gets, one request per event, checked whole
// (ReadChainFrom from its first event). For reads as rare as a human's
// decision, not for following; a reader that knows where the events it
// needs begin reads from there (ReadChainFrom).
func (l *Log) ReadChainByGets(ctx context.Context, chainID string) ([]lctl.Event, error) {
	return l.ReadChainFrom(ctx, chainID, 1)
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// StopAtEnd returns once the events stored when Follow started were
	// delivered, instead of waiting for new ones.
	StopAtEnd bool
}

// ErrStop may be returned by a Follow callback to end following cleanly.
var ErrStop = errors.New("stop")

// Follow delivers a chain's events in order to fn, from the first, and then
// new ones as they are appended, until ctx ends, fn returns an error (ErrStop
// ends cleanly) or, with StopAtEnd, the events stored at the start were
// delivered. chainID "" follows every chain: those of LCTL and those of
// LCTL_OTEL, each stream in its order (fn is never called concurrently).
func (l *Log) Follow(ctx context.Context, chainID string, opts FollowOptions, fn func(lctl.Event) error) error {
	if chainID == "" {
		return l.followAll(ctx, opts, fn)
	}
	if err := lctl.ValidateChainID(chainID); err != nil {
		return err
	}
	p := place{stream: l.stream, subject: Subject(chainID)}
	if opts.StopAtEnd || IsOTel(chainID) {
		var err error
		if p, err = l.locate(ctx, chainID); err != nil {
			return fmt.Errorf("read chain %s: %w", chainID, err)
		}
	}
	var lastStreamSeq uint64
	if opts.StopAtEnd {
		if p.last == nil {
			return fmt.Errorf("%w: %s", ErrChainNotFound, chainID)
		}
		lastStreamSeq = p.last.Sequence
	}
	return followStream(ctx, p.stream, p.subject, opts.StopAtEnd, lastStreamSeq, fn)
}

// followAll follows every chain of both streams.
func (l *Log) followAll(ctx context.Context, opts FollowOptions, fn func(lctl.Event) error) error {
	type source struct {
		stream  jetstream.Stream
		subject string
	}
	sources := []source{{l.stream, AllSubjects}}
	if l.otel != nil {
		sources = append(sources, source{l.otel, AllOTelSubjects})
	}
	follow := func(ctx context.Context, src source, fn func(lctl.Event) error) error {
		var lastStreamSeq uint64
		if opts.StopAtEnd {
			info, err := src.stream.Info(ctx)
			if err != nil {
				return fmt.Errorf("read stream: %w", err)
			}
			if info.State.Msgs == 0 {
				return nil
			}
			lastStreamSeq = info.State.LastSeq
		}
		return followStream(ctx, src.stream, src.subject, opts.StopAtEnd, lastStreamSeq, fn)
	}
	if len(sources) == 1 {
		return follow(ctx, sources[0], fn)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		stopped bool // fn returned ErrStop
		wg      sync.WaitGroup
		errs    = make([]error, len(sources))
	)
	serial := func(e lctl.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return ErrStop
		}
		err := fn(e)
		if errors.Is(err, ErrStop) {
			stopped = true
		}
		if err != nil {
			cancel(err)
		}
		return err
	}
	for i, src := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = follow(ctx, src, serial)
			if errs[i] != nil {
				cancel(errs[i])
			}
		}()
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		if errors.Is(cause, ErrStop) {
			return nil
		}
		return cause
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// followStream delivers the events on subject of stream to fn in order;
// with stopAtEnd, until the message at lastStreamSeq.
func followStream(ctx context.Context, stream jetstream.Stream, subject string, stopAtEnd bool, lastStreamSeq uint64, fn func(lctl.Event) error) error {
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			iter.Stop()
		case <-stopped:
			iter.Stop()
		}
	}()
	var events []lctl.Event // a message's: one, or a pack's
	for {
		msg, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("follow %s: %w", subject, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow %s: %w", subject, err)
		}
		clear(events)
		if events, err = decodeMsg(events[:0], msg.Data()); err != nil {
			return fmt.Errorf("follow %s: stream seq %d: %w", subject, meta.Sequence.Stream, err)
		}
		for _, e := range events {
			if err := fn(e); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		if stopAtEnd && meta.Sequence.Stream >= lastStreamSeq {
			return nil
		}
	}
}

// Chains returns every chain id in both streams with its number of
// stream messages: its events, when each message holds one (a pack holds
// several: then the count says whether a chain changed, not where it
// ends). It asks the server for its per-subject counts, without reading
// events.
func (l *Log) Chains(ctx context.Context) (map[string]uint64, error) {
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(AllSubjects))
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subject, n := range info.State.Subjects {
		out[subject[len(SubjectPrefix):]] = n
	}
	if l.otel == nil {
		return out, nil
	}
	info, err = l.otel.Info(ctx, jetstream.WithSubjectFilter(AllOTelSubjects))
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	for subject, n := range info.State.Subjects {
		if id, ok := ChainOf(subject); ok {
			out[id] += n
		}
	}
	return out, nil
}

// Ends returns the first and the last event of a chain: enough to summarize
// it without reading it whole.
func (l *Log) Ends(ctx context.Context, chainID string) (first, last lctl.Event, err error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return first, last, err
	}
	p, err := l.locate(ctx, chainID)
	if err != nil {
		return first, last, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	if p.last == nil {
		return first, last, fmt.Errorf("%w: %s", ErrChainNotFound, chainID)
	}
	fm, err := p.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(p.subject))
	if err != nil {
		return first, last, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	lm := p.last
	if first, err = msgFirst(fm.Data); err != nil {
		return first, last, fmt.Errorf("read chain %s: first event: %w", chainID, err)
	}
	if last, err = msgLast(lm.Data); err != nil {
		return first, last, fmt.Errorf("read chain %s: last event: %w", chainID, err)
	}
	return first, last, nil
}

// LastSeq returns the seq of a chain's last event (ErrChainNotFound when it
// has none): one read, to tell whether a cached view is still current.
func (l *Log) LastSeq(ctx context.Context, chainID string) (uint64, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return 0, err
	}
	p, err := l.locate(ctx, chainID)
	if err != nil {
		return 0, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	if p.last == nil {
		return 0, fmt.Errorf("%w: %s", ErrChainNotFound, chainID)
	}
	e, err := msgLast(p.last.Data)
	if err != nil {
		return 0, fmt.Errorf("read chain %s: last event: %w", chainID, err)
	}
	return e.Seq, nil
}
