// Package eventlog stores LCTL chains on the NATS JetStream stream "LCTL",
// one subject per chain (lctl.chain.<chain_id>), as ARCHITECTURE.md decides.
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

	"github.com/xct-dev/xct/lctl"
)

// Stream and subject names.
const (
	StreamName    = "LCTL"
	SubjectPrefix = "lctl.chain."
	AllSubjects   = SubjectPrefix + "*"
)

// Subject returns the subject a chain's events are stored on.
func Subject(chainID string) string { return SubjectPrefix + chainID }

// Errors callers act on.
var (
	// ErrChainNotFound means the stream holds no event of the chain.
	ErrChainNotFound = errors.New("chain not found")
	// ErrConflict means another writer appended to the chain first.
	ErrConflict = errors.New("chain was appended to by another writer")
	// ErrNoStream means the server has no LCTL stream (Bind does not
	// create it).
	ErrNoStream = errors.New("no LCTL stream")
)

// Config is the stream's configuration, applied by whoever creates it first.
type Config struct {
	// Replicas of the stream: 1 embedded, 3 in production.
	Replicas int
	// Duplicates is the window in which a retried append is deduplicated.
	Duplicates time.Duration
}

// DefaultConfig is the embedded (single node) configuration.
func DefaultConfig() Config { return Config{Replicas: 1, Duplicates: time.Hour} }

// Log is the event log on one NATS connection.
type Log struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	pub    *Publisher
}

// Open binds to the LCTL stream, creating it with cfg if it does not exist.
// An existing stream is used as it is: its settings belong to whoever
// created it.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Log, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = time.Hour
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "LCTL event chains written by XCT",
		Subjects:    []string{AllSubjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.Duplicates,
		DenyDelete:  true,
		DenyPurge:   true,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		stream, err = js.Stream(ctx, StreamName)
	}
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", StreamName, err)
	}
	if err := checkStream(stream.CachedInfo().Config); err != nil {
		return nil, err
	}
	return &Log{js: js, stream: stream, pub: NewPublisher(nc, StreamName)}, nil
}

// ErrStreamSettings means the LCTL stream exists with settings XCT never
// makes: whoever creates a stream first sets them, and another service
// allowed to create it (the tracer) could have made it republish chain
// messages into other subjects (the tool catalog: the server's own
// publish, past every permission), source other streams into it, or let
// its messages be deleted, purged or rolled up.
var ErrStreamSettings = errors.New("the LCTL stream has settings XCT never makes")

// checkStream refuses a LCTL stream XCT did not make as it makes them.
// Size limits, replicas and the duplicate window are the operator's.
func checkStream(c jetstream.StreamConfig) error {
	var bad []string
	if c.RePublish != nil {
		bad = append(bad, fmt.Sprintf("republish %s to %s", c.RePublish.Source, c.RePublish.Destination))
	}
	if len(c.Sources) > 0 {
		bad = append(bad, "sources")
	}
	if c.Mirror != nil {
		bad = append(bad, "a mirror")
	}
	if c.SubjectTransform != nil {
		bad = append(bad, "a subject transform")
	}
	if !c.DenyDelete || !c.DenyPurge || c.AllowRollup {
		bad = append(bad, fmt.Sprintf("deny delete %v, deny purge %v, rollups %v", c.DenyDelete, c.DenyPurge, c.AllowRollup))
	}
	if len(c.Subjects) != 1 || c.Subjects[0] != AllSubjects {
		bad = append(bad, fmt.Sprintf("subjects %v", c.Subjects))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s; an operator must look at it and remove it (nats stream rm %s) before XCT uses it",
			ErrStreamSettings, strings.Join(bad, "; "), StreamName)
	}
	return nil
}

// Bind binds to the LCTL stream for reading. Unlike Open it never creates
// or changes the stream: a server without it is ErrNoStream. Read-only
// tools (lctl tail) use it.
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
	return &Log{js: js, stream: stream, pub: NewPublisher(nc, StreamName)}, nil
}

// JetStream returns the JetStream context the log uses.
func (l *Log) JetStream() jetstream.JetStream { return l.js }

// ChainWriter appends to one chain. It is safe for concurrent use, but a
// chain should have one writer: that is what makes its order the truth.
type ChainWriter struct {
	log     *Log
	chainID string
	subject string

	mu         sync.Mutex
	seq        uint64 // seq of the last event appended
	prevHash   string // hash of the last event appended
	streamSeq  uint64 // stream sequence of the last event appended
	failed     error  // set once an append failed in an unknown way
	now        func() time.Time
	lastAppend lctl.Event
}

// NewChainWriter returns a writer for a chain that has no events yet. Its
// first append fails with ErrConflict if the chain already exists.
func (l *Log) NewChainWriter(chainID string) (*ChainWriter, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return nil, err
	}
	return &ChainWriter{log: l, chainID: chainID, subject: Subject(chainID), now: time.Now}, nil
}

// ResumeChainWriter returns a writer that continues an existing chain after
// its last stored event.
func (l *Log) ResumeChainWriter(ctx context.Context, chainID string) (*ChainWriter, error) {
	w, err := l.NewChainWriter(chainID)
	if err != nil {
		return nil, err
	}
	msg, err := l.stream.GetLastMsgForSubject(ctx, w.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return w, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resume chain %s: %w", chainID, err)
	}
	e, err := lctl.DecodeEvent(msg.Data)
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
// transition it could not record.
func (w *ChainWriter) Append(ctx context.Context, eventType, agent string, data map[string]any) (lctl.Event, error) {
	return w.append(ctx, time.Time{}, eventType, agent, data)
}

// AppendAt is Append with the event's timestamp given instead of the
// current time: for events converted from a record that carries its own
// time (an OpenTelemetry span). The caller keeps timestamps in order.
func (w *ChainWriter) AppendAt(ctx context.Context, at time.Time, eventType, agent string, data map[string]any) (lctl.Event, error) {
	if at.IsZero() {
		return lctl.Event{}, fmt.Errorf("append to chain %s: a zero timestamp", w.chainID)
	}
	return w.append(ctx, at, eventType, agent, data)
}

// append is Append at time at (zero: now).
func (w *ChainWriter) append(ctx context.Context, at time.Time, eventType, agent string, data map[string]any) (lctl.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.IsZero() {
		at = w.now()
	}
	if w.failed != nil {
		return lctl.Event{}, fmt.Errorf("append to chain %s: writer stopped after an earlier failure: %w", w.chainID, w.failed)
	}
	// Normalize the payload to JSON types, so the event returned here is
	// exactly the event a reader decodes from the stream.
	norm, err := lctl.DataOf(data)
	if err != nil {
		return lctl.Event{}, fmt.Errorf("append to chain %s: %w", w.chainID, err)
	}
	if norm == nil {
		norm = map[string]any{}
	}
	e := lctl.Event{
		ChainID:   w.chainID,
		Seq:       w.seq + 1,
		Type:      eventType,
		Timestamp: lctl.FormatTime(at),
		Agent:     agent,
		Data:      norm,
	}
	// The stored body is the event's canonical JSON with its hash, encoded
	// once for the hash and the body.
	raw, err := e.SealEncoded(w.prevHash)
	if err != nil {
		return lctl.Event{}, fmt.Errorf("encode event: %w", err)
	}
	ack, err := w.log.pub.Publish(ctx, w.subject, raw, w.chainID+"/"+strconv.FormatUint(e.Seq, 10), w.streamSeq)
	if err != nil {
		var apiErr *jetstream.APIError
		// Replicated streams report the conflict with the second code.
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			err = fmt.Errorf("%w: %w", ErrConflict, err)
		}
		w.failed = err
		return lctl.Event{}, fmt.Errorf("append event %d to chain %s: %w", e.Seq, w.chainID, err)
	}
	if ack.Duplicate {
		// The message id <chain>/<seq> was stored before. That is our own
		// append retried only if the stored message is this very event:
		// a replicated stream checks the id before the expected sequence,
		// so another writer's event at this seq also comes back as a
		// duplicate, and going on from it would fork the chain.
		if err := w.sameAsStored(ctx, ack.Seq, raw); err != nil {
			w.failed = err
			return lctl.Event{}, fmt.Errorf("append event %d to chain %s: %w", e.Seq, w.chainID, err)
		}
	}
	w.seq, w.prevHash, w.streamSeq, w.lastAppend = e.Seq, e.Hash, ack.Seq, e
	return e, nil
}

// sameAsStored checks that the stream's message at seq is raw on this
// chain's subject: ErrConflict if another event is stored there, an error
// of its own if the message cannot be read (the writer then stops, since
// it cannot know what the chain holds).
func (w *ChainWriter) sameAsStored(ctx context.Context, seq uint64, raw []byte) error {
	stored, err := w.log.stream.GetMsg(ctx, seq)
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
// delivered. chainID "" follows every chain.
func (l *Log) Follow(ctx context.Context, chainID string, opts FollowOptions, fn func(lctl.Event) error) error {
	subject := AllSubjects
	if chainID != "" {
		if err := lctl.ValidateChainID(chainID); err != nil {
			return err
		}
		subject = Subject(chainID)
	}
	var lastStreamSeq uint64
	if opts.StopAtEnd {
		if chainID != "" {
			last, err := l.stream.GetLastMsgForSubject(ctx, subject)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("%w: %s", ErrChainNotFound, chainID)
			}
			if err != nil {
				return fmt.Errorf("read chain %s: %w", chainID, err)
			}
			lastStreamSeq = last.Sequence
		} else {
			info, err := l.stream.Info(ctx)
			if err != nil {
				return fmt.Errorf("read stream: %w", err)
			}
			lastStreamSeq = info.State.LastSeq
			if info.State.Msgs == 0 {
				return nil
			}
		}
	}
	cons, err := l.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
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
		e, err := lctl.DecodeEvent(msg.Data())
		if err != nil {
			return fmt.Errorf("follow %s: stream seq %d: %w", subject, meta.Sequence.Stream, err)
		}
		if err := fn(e); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
		if opts.StopAtEnd && meta.Sequence.Stream >= lastStreamSeq {
			return nil
		}
	}
}

// Chains returns every chain id in the stream with its number of events.
// It asks the server for its per-subject counts, without reading events.
func (l *Log) Chains(ctx context.Context) (map[string]uint64, error) {
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(AllSubjects))
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subject, n := range info.State.Subjects {
		out[subject[len(SubjectPrefix):]] = n
	}
	return out, nil
}

// Ends returns the first and the last event of a chain: enough to summarize
// it without reading it whole.
func (l *Log) Ends(ctx context.Context, chainID string) (first, last lctl.Event, err error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return first, last, err
	}
	subject := Subject(chainID)
	fm, err := l.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return first, last, fmt.Errorf("%w: %s", ErrChainNotFound, chainID)
	}
	if err != nil {
		return first, last, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	lm, err := l.stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return first, last, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	if first, err = lctl.DecodeEvent(fm.Data); err != nil {
		return first, last, fmt.Errorf("read chain %s: first event: %w", chainID, err)
	}
	if last, err = lctl.DecodeEvent(lm.Data); err != nil {
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
	msg, err := l.stream.GetLastMsgForSubject(ctx, Subject(chainID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, fmt.Errorf("%w: %s", ErrChainNotFound, chainID)
	}
	if err != nil {
		return 0, fmt.Errorf("read chain %s: %w", chainID, err)
	}
	e, err := lctl.DecodeEvent(msg.Data)
	if err != nil {
		return 0, fmt.Errorf("read chain %s: last event: %w", chainID, err)
	}
	return e.Seq, nil
}
