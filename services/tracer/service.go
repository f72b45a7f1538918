// Package tracer reads the LCTL event stream and materializes chains: it
// keeps every chain's events on local disk and in memory, checks their hash
// chain as they arrive, and answers list, get, replay and export over gRPC,
// along with the lctl analyses (verify, diff, stats, bottlenecks, fact
// confidence, fact queries, contract validation) for clients in any
// language.
//
// Each chain is kept as an lctl.Timeline: its events, the state after the
// last one and a snapshot of the state every Config.SnapshotEvery events, so
// ReplayChain to any seq applies at most that many events.
//
// Events come from a durable JetStream pull consumer ("tracer") on each of
// the two streams (LCTL, the runs' chains, and LCTL_OTEL, the chains made
// from OpenTelemetry traces: internal/eventlog), whose messages are handled
// together. The consumers acknowledge cumulatively (AckAllPolicy): after a
// batch, one ack per stream covers every message through the batch's
// highest (acker). An event that could not be stored is acknowledged too:
// its chain falls behind, and the tracer reads the chain back from the
// stream until it is stored (retryBehind), holding the recorded position
// back meanwhile. The streams are where events are
// durable; the tracer's files
// are a view of it. A batch's events are appended to
// <DataDir>/chains/<chain_id>.jsonl (one write per chain, no sync) before
// they become visible to the RPCs and are acknowledged. Every
// Config.SyncInterval, and at Stop, the written files are synced and the
// position in each stream through which everything is on disk is recorded
// (files.go); a tracer starting again reads the stream from there, so what
// a crash cut short of the files is delivered again, and a redelivered
// event (at-least-once) is recognized by its seq and skipped. When an event
// arrives ahead of the chain's next seq (a redelivery overtaken by newer
// events, or a chain file that lost its tail) the missing events are read
// back from the stream; only events the stream really lacks are recorded as
// a gap on the chain's summary.
//
// One tracer process owns the durable consumer: replicas of the tracer would
// share its messages, each seeing part of every chain.
package tracer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/debugger"
)

// ConsumerName is the durable consumer the tracer reads the stream with.
const ConsumerName = "tracer"

const (
	// batchSize bounds how many events are written and acked together.
	batchSize = 1024
	// ackWait is how long JetStream waits for an ack before redelivering.
	ackWait = 30 * time.Second
	// retryDelay is how long a chain whose events could not be stored
	// waits before it is read back from the stream; it doubles with each
	// failure, up to maxRetryDelay.
	retryDelay    = time.Second
	maxRetryDelay = 30 * time.Second
	// repairTimeout bounds reading a chain back from the stream.
	repairTimeout = 30 * time.Second
	// maxRestartDelay bounds the wait before the consumer is set up again
	// after it failed.
	maxRestartDelay = 5 * time.Second
)

// Service is the tracer. Build it with New, serve its RPCs with Register,
// run it with Start and end it with Stop. A stopped Service is not started
// again.
type Service struct {
	cfg   Config
	nc    *nats.Conn
	log   *slog.Logger
	store *store

	mu      sync.Mutex // guards the fields below
	started bool
	stopped bool
	events  *eventlog.Log
	cancel  context.CancelFunc
	done    chan struct{} // closed when the consumer goroutine ended

	// Used by the consumer goroutine only (set up by Start).
	files *chainFiles
	// feeds are the streams consumed, each with its durable consumer and
	// progress: LCTL, then LCTL_OTEL.
	feeds []*feed
	// damaged are chains whose files were cut at start, to read back
	// from the stream before consuming.
	damaged []string
	decoded []decodedMsg // reused between batches
	pos     []msgPos     // reused between batches
	// behind are the chains whose events could not be stored.
	behind   map[string]*behindChain
	validIDs map[string]struct{} // chain ids that passed lctl.ValidateChainID
	http     *httpServer         // nil when Config.HTTPListen is empty
	// otlp ingests OpenTelemetry traces (otlp_ingest.go).
	otlp *ingester
	// ui is the visual debugger on the HTTP listener (nil without one);
	// validator is its connection for approvals (nil without
	// Config.ValidatorAddr).
	ui        *debugger.Handler
	validator *grpc.ClientConn
	// orchestrator is the debugger's connection for Cancel (ui.go).
	orchestrator *grpc.ClientConn
}

// New builds a tracer that reads the stream on nc and keeps chains under
// cfg.DataDir, creating the directory if missing. log may be nil.
func New(cfg Config, nc *nats.Conn, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, errors.New("tracer: a NATS connection is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("service", "tracer")
	dir := filepath.Join(cfg.DataDir, "chains")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("tracer: create data directory: %w", err)
	}
	s := &Service{cfg: cfg, nc: nc, log: log, store: newStore(dir, log, cfg.snapshotEvery(), cfg.maxResidentEvents())}
	red, err := redact.Config{File: cfg.RedactRules}.Build(context.Background(), nil) // nil: a key of this process (RedactRules)
	if err != nil {
		return nil, fmt.Errorf("tracer: OTLP redaction: %w", err)
	}
	s.otlp = newIngester(cfg.OTLP, log, s.eventLog, red)
	return s, nil
}

// Register serves the TracerService on g. Until Start has loaded the store
// its RPCs answer UNAVAILABLE.
func (s *Service) Register(g *grpc.Server) {
	lctlv1.RegisterTracerServiceServer(g, &handler{svc: s})
	coltracepb.RegisterTraceServiceServer(g, &otlpGRPC{in: s.otlp})
}

// Start binds the chain streams (the admin made them: internal/provision),
// loads the chains stored under DataDir, and starts consuming. ctx
// bounds the start only; consuming goes on until Stop.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.started {
		return ErrAlreadyStarted
	}
	events, err := eventlog.Open(ctx, s.nc)
	if err != nil {
		return fmt.Errorf("tracer: %w", err)
	}
	events.ReportTo(s.cfg.StoreHealth)
	damaged, err := s.store.load()
	if err != nil {
		return fmt.Errorf("tracer: load store: %w", err)
	}
	feeds := newFeeds()
	for _, f := range feeds {
		from, err := s.startPosition(ctx, events, f)
		if err != nil {
			return fmt.Errorf("tracer: %w", err)
		}
		if f.cons, err = positionConsumer(ctx, events.JetStream(), f, from+1, s.cfg.maxAckPending()); err != nil {
			return fmt.Errorf("tracer: %w", err)
		}
		f.progress = newProgress(from)
	}
	s.files, s.feeds, s.damaged = newChainFiles(s.store.dir), feeds, damaged
	s.validIDs = map[string]struct{}{}
	s.behind = map[string]*behindChain{}
	hs, err := s.startHTTP(ctx)
	if err != nil {
		return fmt.Errorf("tracer: %w", err)
	}
	s.http = hs
	runCtx, cancel := context.WithCancel(context.Background())
	s.started, s.events, s.cancel, s.done = true, events, cancel, make(chan struct{})
	go s.run(runCtx)
	go s.otlp.run(runCtx)
	s.log.Info("tracer started", "data_dir", s.cfg.DataDir)
	return nil
}

// Stop ends consuming: the batch in progress is finished (written, acked),
// events received but not processed are handed back to the stream, and the
// chain files are synced.
// It waits until then or until ctx ends. Waiters in WaitForSeq get
// ErrStopped.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	cancel, done, hs := s.cancel, s.done, s.http
	s.cancel, s.stopped = nil, true
	s.mu.Unlock()
	defer s.store.close()
	hs.stop(ctx)
	s.otlp.drain(ctx)
	s.closeUI()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		s.log.Info("tracer stopped")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("tracer: stop: %w", ctx.Err())
	}
}

// eventLog returns the event log, nil before Start.
func (s *Service) eventLog() *eventlog.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}

// WaitForSeq blocks until the chain is materialized up to seq (its events
// through seq are stored and visible to the RPCs), ctx ends, or the service
// stops (ErrStopped).
func (s *Service) WaitForSeq(ctx context.Context, chainID string, seq uint64) error {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return err
	}
	for {
		last, changed, closed := s.store.watch(chainID)
		if last >= seq {
			return nil
		}
		if closed {
			return fmt.Errorf("wait for %s/%d: %w", chainID, seq, ErrStopped)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s/%d: %w", chainID, seq, ctx.Err())
		case <-changed:
		}
	}
}

// feed is one stream the tracer consumes: its durable consumer, the
// messages done, and the position recorded in its file.
type feed struct {
	stream  string // the stream's name
	filter  string // its chains' subjects
	posFile string // where its position is recorded (in the chains directory)

	cons     jetstream.Consumer
	progress *progress
	// pos is what the recorded position refers to.
	pos streamPosition
	// acks acknowledges the messages done (consume resets it).
	acks acker
	// delivered is the consumer delivery seq of the last message received
	// from cons (consume resets it: its consumer is new).
	delivered uint64
}

// newFeeds returns the streams the tracer consumes. LCTL's position is in
// positionFile, as before LCTL_OTEL existed.
func newFeeds() []*feed {
	return []*feed{
		{stream: eventlog.StreamName, filter: eventlog.AllSubjects, posFile: positionFile},
		{stream: eventlog.OTelStreamName, filter: eventlog.AllOTelSubjects, posFile: positionFile + "." + eventlog.OTelStreamName},
	}
}

// feedOf returns the feed of stream (nil for none).
func (s *Service) feedOf(stream string) *feed {
	for _, f := range s.feeds {
		if f.stream == stream {
			return f
		}
	}
	return nil
}

// startPosition is the stream seq through which the chain files hold every
// event of f's stream, as the last sync recorded it; 0 (read the whole
// stream) when nothing was recorded or the record is of another stream.
func (s *Service) startPosition(ctx context.Context, events *eventlog.Log, f *feed) (uint64, error) {
	st, err := events.JetStream().Stream(ctx, f.stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", f.stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", f.stream, err)
	}
	f.pos = streamPosition{Stream: f.stream, Created: info.Created}
	pos, ok, err := readPosition(s.store.dir, f.posFile)
	switch {
	case err != nil:
		s.log.Warn("reading the whole stream again", "stream", f.stream, "err", err)
		return 0, nil
	case !ok:
		return 0, nil
	case pos.Stream != f.pos.Stream || !pos.Created.Equal(f.pos.Created):
		s.log.Warn("the chain files were made from another stream; reading the whole stream again",
			"stream", f.stream, "recorded_created", pos.Created, "stream_created", f.pos.Created)
		return 0, nil
	}
	return pos.Seq, nil
}

func consumerConfig(f *feed, start uint64, maxAckPending int) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "XCT tracer: materializes LCTL chains",
		FilterSubject: f.filter,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       ackWait,
		MaxAckPending: maxAckPending,
	}
	if start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	return cfg
}

// positionConsumer sets f's durable consumer up to deliver its stream from
// seq start: it is made anew, because what it acknowledged before may not
// have reached the disk (a consumer's start cannot be moved). Made anew, it
// also has the ack policy of consumerConfig whatever the one before had
// (a consumer's ack policy cannot be changed; tracers before session 9
// made theirs with explicit acks).
func positionConsumer(ctx context.Context, js jetstream.JetStream, f *feed, start uint64, maxAckPending int) (jetstream.Consumer, error) {
	if err := js.DeleteConsumer(ctx, f.stream, ConsumerName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("reset consumer %s of %s: %w", ConsumerName, f.stream, err)
	}
	cons, err := js.CreateConsumer(ctx, f.stream, consumerConfig(f, start, maxAckPending))
	if err != nil {
		return nil, fmt.Errorf("create consumer %s of %s: %w", ConsumerName, f.stream, err)
	}
	return cons, nil
}

// resumeConsumer sets f's durable consumer up again after consuming
// failed: made anew, delivering from after the last message done. The old
// one may have delivered messages that never reached the tracer (in the
// stopped iterator's buffer, or lost with a connection): acknowledgements
// are cumulative, so the next ack on it would acknowledge them unread.
func (s *Service) resumeConsumer(ctx context.Context, f *feed) (jetstream.Consumer, error) {
	return positionConsumer(ctx, s.events.JetStream(), f, f.progress.floor()+1, s.cfg.maxAckPending())
}

// run consumes until ctx ends, setting the consumer up again (with a
// growing delay) whenever it fails, so a deleted consumer or a lost
// connection does not end the tracer. At the end it syncs the files.
func (s *Service) run(ctx context.Context) {
	defer close(s.done)
	defer s.closeFiles()
	s.repairDamaged(ctx)
	delay := 100 * time.Millisecond
	for {
		err := s.consume(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Error("consuming the event stream failed; starting again", "err", err, "delay", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRestartDelay)
		for _, f := range s.feeds {
			if c, err := s.resumeConsumer(ctx, f); err != nil {
				s.log.Error("set up the stream consumer", "stream", f.stream, "err", err)
			} else {
				f.cons = c
			}
		}
	}
}

// syncFiles syncs the written chain files and records the position in
// each stream they now hold everything through.
func (s *Service) syncFiles() {
	floors := make([]uint64, len(s.feeds))
	for i, f := range s.feeds {
		floors[i] = f.progress.floor()
	}
	if err := s.files.sync(); err != nil {
		s.log.Error("sync chain files", "err", err)
		return
	}
	for i, f := range s.feeds {
		if floors[i] == f.pos.Seq {
			continue
		}
		pos := f.pos
		pos.Seq = floors[i]
		if err := writePosition(s.store.dir, f.posFile, pos); err != nil {
			s.log.Error("record stream position", "stream", f.stream, "err", err)
			continue
		}
		f.pos = pos
	}
}

// closeFiles syncs and closes the chain files at the end.
func (s *Service) closeFiles() {
	s.syncFiles()
	if err := s.files.close(); err != nil {
		s.log.Error("close chain files", "err", err)
	}
}

// repairDamaged reads back from the stream the events of the chains whose
// files were cut at start.
func (s *Service) repairDamaged(ctx context.Context) {
	for _, id := range s.damaged {
		if s.store.isCold(id) {
			if _, err := s.store.warm(id); err != nil {
				s.log.Error("read a cold chain back from its file", "chain_id", id, "err", err)
			}
		}
		s.files.begin()
		err := s.repair(ctx, s.files, id, s.store.lastSeq(id), ^uint64(0))
		failed, werr := s.files.write()
		if err = errors.Join(err, werr); err != nil {
			s.log.Warn("read a damaged chain file's events back from the stream", "chain_id", id, "err", err)
		}
		s.store.addBatch(s.files.pending, failed)
	}
	if len(s.damaged) > 0 {
		// The events read back lie before the recorded position: they
		// must be on disk before anything relies on it again.
		if err := s.files.sync(); err != nil {
			s.log.Error("sync repaired chain files", "err", err)
		}
	}
	s.damaged = nil
	s.store.broadcast()
}

// consume reads the messages of every feed and handles them in batches:
// whatever is already delivered, up to batchSize, is written once and then
// acked; the files are synced every Config.SyncInterval. When one feed's
// messages cannot be read, every feed stops and consume returns its error.
func (s *Service) consume(ctx context.Context) error {
	for _, f := range s.feeds {
		// The consumer is new (Start, resumeConsumer): its deliveries
		// count from 1.
		f.acks, f.delivered = acker{}, 0
	}
	iters := make([]jetstream.MessagesContext, 0, len(s.feeds))
	stopAll := func() {
		for _, it := range iters {
			it.Stop()
		}
	}
	for _, f := range s.feeds {
		iter, err := f.cons.Messages(jetstream.PullMaxMessages(batchSize))
		if err != nil {
			stopAll()
			return fmt.Errorf("pull messages of %s: %w", f.stream, err)
		}
		iters = append(iters, iter)
	}
	stopIter := context.AfterFunc(ctx, stopAll)
	defer stopIter()
	defer stopAll()

	msgs := make(chan jetstream.Msg, batchSize)
	// The first error is the one that stopped the feeds; the others
	// then say their iterator was stopped.
	readErr := make(chan error, len(iters))
	var readers sync.WaitGroup
	for _, iter := range iters {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				m, err := iter.Next()
				if err != nil {
					readErr <- err
					stopAll()
					return
				}
				select {
				case msgs <- m:
				case <-ctx.Done():
					s.handBack(m)
				}
			}
		}()
	}
	go func() {
		readers.Wait()
		close(msgs)
	}()

	tick := time.NewTicker(s.cfg.syncInterval())
	defer tick.Stop()
	retryTick := time.NewTicker(retryDelay)
	defer retryTick.Stop()
	batch := make([]jetstream.Msg, 0, batchSize)
	// lost is set when a delivery did not reach the tracer: from then on
	// nothing is handled or acknowledged, and consume ends.
	var lost error
	for {
		var (
			m  jetstream.Msg
			ok bool
		)
		select {
		case m, ok = <-msgs:
		case <-tick.C:
			s.syncFiles()
			s.store.evict() // readers warm chains too
			continue
		case <-retryTick.C:
			if len(s.behind) > 0 && ctx.Err() == nil {
				s.retryBehind(ctx)
			}
			continue
		}
		if !ok {
			break
		}
		batch = append(batch[:0], m)
	fill:
		for len(batch) < batchSize {
			select {
			case m, ok := <-msgs:
				if !ok {
					break fill
				}
				batch = append(batch, m)
			default:
				break fill
			}
		}
		if ctx.Err() != nil {
			for _, m := range batch {
				s.handBack(m)
			}
			continue
		}
		if lost != nil {
			continue // the consumer is made anew (resumeConsumer)
		}
		pos, err := s.positions(batch)
		if err != nil {
			lost = err
			s.log.Error("a delivery did not reach the tracer; setting the consumer up again", "err", err)
			stopAll()
		}
		s.handleBatch(ctx, batch[:len(pos)], pos)
	}
	err := <-readErr
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if lost != nil {
		return lost
	}
	return fmt.Errorf("next message: %w", err)
}

// msgPos is where a message of a batch is: its feed, its stream seq.
type msgPos struct {
	f   *feed
	seq uint64
}

// positions returns the feed and stream seq of the batch's messages, up to
// the first that shows a delivery was lost: the consumer numbers its
// deliveries (redeliveries too) from 1, and one not numbered the last
// one's + 1 means some never reached the tracer (a connection lost, a pull
// of someone else's) or the consumer is not the one the tracer set up.
// Acknowledgements being cumulative, the next one would acknowledge the
// missing ones unread; the error says the consumer must be made anew.
// A message without its position (not a consumer's) is treated alike.
func (s *Service) positions(batch []jetstream.Msg) ([]msgPos, error) {
	s.pos = s.pos[:0]
	for _, m := range batch {
		stream, seq, delivered, err := position(m)
		if err != nil {
			return s.pos, fmt.Errorf("a message without its stream position (subject %s): %w", m.Subject(), err)
		}
		f := s.feedOf(stream)
		if f == nil {
			return s.pos, fmt.Errorf("a message of stream %s, which the tracer does not consume", stream)
		}
		if delivered != f.delivered+1 {
			return s.pos, fmt.Errorf("stream %s: consumer delivery %d after %d (stream seq %d)", stream, delivered, f.delivered, seq)
		}
		f.delivered = delivered
		s.pos = append(s.pos, msgPos{f, seq})
	}
	return s.pos, nil
}

// handBack returns an unprocessed message to the stream for prompt
// redelivery, in order, to whoever consumes next.
func (s *Service) handBack(m jetstream.Msg) {
	if err := m.Nak(); err != nil {
		s.log.Debug("nak", "subject", m.Subject(), "err", err)
	}
}

// verdict is what becomes of a message once handled.
type verdict int

const (
	ack   verdict = iota // stored (or already stored)
	retry                // could not store now: its chain falls behind
	term                 // can never be stored
)

// handleBatch stores a batch of events: each chain's new events are written
// to its file in one write, and only then are the events added to the
// in-memory chains (so readers never see an event that is not in the
// files), acknowledged, and waiters woken. A chain whose events could not
// be written falls behind with them (and its later events), so each chain
// stays in order: they are read back from the stream (retryBehind), and
// the recorded position stays before them until then.
func (s *Service) handleBatch(ctx context.Context, batch []jetstream.Msg, pos []msgPos) {
	if len(batch) == 0 {
		return
	}
	files := s.files
	files.begin()
	verdicts := make([]verdict, len(batch))
	chains := make([]string, len(batch))
	blocked := map[string]bool{}
	s.decoded = decodeBatch(batch, s.decoded)
	for i, m := range batch {
		verdicts[i], chains[i] = s.handle(ctx, files, m, blocked, &s.decoded[i])
	}
	for i := range s.decoded {
		s.decoded[i].drop() // drop the events' references until the next batch
	}
	failed, err := files.write()
	if err != nil {
		// The events of the failed chains are not stored: the chains
		// fall behind, to be read back from the stream.
		s.log.Error("store chain files", "err", err)
	}
	s.store.addBatch(files.pending, failed)
	s.store.evict()
	for i, m := range batch {
		v := verdicts[i]
		if v == ack && failed[chains[i]] {
			v = retry
		}
		f, seq := pos[i].f, pos[i].seq
		if v == retry {
			s.fallBehind(chains[i], f, seq)
		} else {
			// Stored, or never storable (term).
			f.progress.done(seq)
		}
		// Every message handled is acknowledged (the cumulative ack
		// below, which a term would be too): an event not stored is
		// the tracer's to read back.
		f.acks.handled(m, seq)
	}
	for _, f := range s.feeds {
		if err := f.acks.ack(); err != nil {
			s.log.Warn("acknowledge events", "stream", f.stream, "err", err)
		}
	}
	s.store.broadcast()
}

// behindChain is a chain some of whose events could not be stored: the
// first of its stream messages not done (one per stream; a chain's events
// are on one), and when it is read back next.
type behindChain struct {
	firsts []streamRef
	delay  time.Duration
	next   time.Time
}

// streamRef is a message of a feed's stream.
type streamRef struct {
	f   *feed
	seq uint64
}

// fallBehind records that the event at seq of f's stream, of chain id, is
// not stored: the chain is read back from the stream until it is, and the
// recorded position stays before the chain's first message not stored.
// Only that one is kept open in the progress (the chain's later messages
// are done once it is, since reading it back reads them too), so a chain
// behind for long holds no memory per message.
func (s *Service) fallBehind(id string, f *feed, seq uint64) {
	b := s.behind[id]
	if b == nil {
		b = &behindChain{delay: retryDelay, next: time.Now().Add(retryDelay)}
		s.behind[id] = b
	}
	for i := range b.firsts {
		r := &b.firsts[i]
		if r.f != f {
			continue
		}
		switch {
		case seq > r.seq:
			f.progress.done(seq)
		case seq < r.seq: // a redelivery of an earlier message
			f.progress.notDone(seq)
			f.progress.done(r.seq)
			r.seq = seq
		}
		return
	}
	f.progress.notDone(seq)
	b.firsts = append(b.firsts, streamRef{f, seq})
}

// retryBehind reads back from the stream the chains that fell behind and
// are due, storing them as a batch. A chain whose events are then all
// stored has its messages done; the others are tried again later, each
// failure doubling the wait (up to maxRetryDelay).
func (s *Service) retryBehind(ctx context.Context) {
	now := time.Now()
	files := s.files
	files.begin()
	var tried []string
	for id, b := range s.behind {
		if now.Before(b.next) {
			continue
		}
		if s.store.isCold(id) {
			if _, err := s.store.warm(id); err != nil {
				s.log.Error("read a cold chain back from its file", "chain_id", id, "err", err)
			}
		}
		if err := s.repair(ctx, files, id, s.lastSeq(files, id), ^uint64(0)); err != nil {
			s.log.Warn("read a chain's events not stored back from the stream", "chain_id", id, "err", err)
			b.later(now)
			continue
		}
		tried = append(tried, id)
	}
	failed, err := files.write()
	if err != nil {
		s.log.Error("store chain files", "err", err)
	}
	s.store.addBatch(files.pending, failed)
	for _, id := range tried {
		b := s.behind[id]
		if failed[id] {
			b.later(now)
			continue
		}
		for _, r := range b.firsts {
			r.f.progress.done(r.seq)
		}
		delete(s.behind, id)
	}
	s.store.evict()
	s.store.broadcast()
}

// later schedules the chain's next read-back after a failure.
func (b *behindChain) later(now time.Time) {
	b.delay = min(2*b.delay, maxRetryDelay)
	b.next = now.Add(b.delay)
}

// acker acknowledges one feed's messages cumulatively: with AckAllPolicy
// the ack of a message acknowledges every message of the consumer at or
// below its stream seq. After each batch it acknowledges the highest
// message handled: every message below it was delivered before it (a
// consumer delivers in stream order; a redelivery is of a message already
// handled) and handled, stored or fallen behind (the tracer's to read
// back). What the acknowledgements do not promise is that the files hold
// the events: the recorded position does (files.go).
//
// The server ignores an ack whose consumer delivery seq is not above the
// last one it took: messages are handled in delivery order, and the
// message acknowledged is new in its batch (a redelivery of the highest
// handled message replaces it). An ack that is lost leaves its messages
// pending: they are delivered again after the ack wait, skipped as
// duplicates, and acknowledged then.
type acker struct {
	last  jetstream.Msg // the highest message handled, nil for none
	seq   uint64        // its stream seq
	acked bool          // last's ack was sent
}

// handled records that m, at stream seq seq, is handled.
func (a *acker) handled(m jetstream.Msg, seq uint64) {
	if a.last == nil || seq >= a.seq {
		// Equal: m is a redelivery of last (an ack lost), with a newer
		// delivery seq.
		a.last, a.seq, a.acked = m, seq, false
	}
}

// ack sends the ack of the highest message handled, once.
func (a *acker) ack() error {
	if a.last == nil || a.acked {
		return nil
	}
	a.acked = true
	return a.last.Ack()
}

// position returns the stream a consumer's message is from, its seq there
// and the consumer's delivery seq, read from the message's reply subject
// (ackPosition) without the allocations of Metadata, which it falls back to
// for a subject of another form.
func position(m jetstream.Msg) (stream string, seq, delivered uint64, err error) {
	if stream, seq, delivered, ok := ackPosition(m.Reply()); ok {
		return stream, seq, delivered, nil
	}
	meta, err := m.Metadata()
	if err != nil {
		return "", 0, 0, err
	}
	return meta.Stream, meta.Sequence.Stream, meta.Sequence.Consumer, nil
}

// ackPosition reads the stream, the stream seq and the consumer's delivery
// seq from a JetStream message's reply subject, which is
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<delivery seq>.<time>.<pending>
// (9 tokens) or, from servers that name the domain and the account,
// $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<delivery seq>.…
// (11 tokens or more). ok is false for anything else.
func ackPosition(reply string) (stream string, seq, delivered uint64, ok bool) {
	const maxTokens = 16
	var starts [maxTokens + 1]int // where each token starts; one past the end last
	n := 1
	for i := 0; i < len(reply); i++ {
		if reply[i] == '.' {
			if n == maxTokens {
				return "", 0, 0, false
			}
			starts[n] = i + 1
			n++
		}
	}
	starts[n] = len(reply) + 1
	token := func(i int) string { return reply[starts[i] : starts[i+1]-1] }
	if token(0) != "$JS" || token(1) != "ACK" {
		return "", 0, 0, false
	}
	var streamAt int
	switch {
	case n == 9:
		streamAt = 2
	case n >= 11:
		streamAt = 4
	default:
		return "", 0, 0, false
	}
	stream = token(streamAt)
	seq, err := strconv.ParseUint(token(streamAt+3), 10, 64)
	if err != nil {
		return "", 0, 0, false
	}
	delivered, err = strconv.ParseUint(token(streamAt+4), 10, 64)
	if stream == "" || err != nil {
		return "", 0, 0, false
	}
	return stream, seq, delivered, true
}

// handle stores one message's event (or a pack's events) in the batch,
// reading back from the stream any events of its chain that should have
// come before it. It returns what to do with the message and the chain it
// belongs to.
func (s *Service) handle(ctx context.Context, files *chainFiles, m jetstream.Msg, blocked map[string]bool, d *decodedMsg) (verdict, string) {
	id, ok := eventlog.ChainOf(m.Subject())
	if !ok {
		s.log.Error("event on a subject that names no chain", "subject", m.Subject())
		return term, ""
	}
	if err := s.validChainID(id); err != nil {
		s.log.Error("event on a subject that names no chain", "subject", m.Subject(), "err", err)
		return term, ""
	}
	if blocked[id] || s.behind[id] != nil {
		// Its earlier events are not stored: this one waits with them.
		return retry, id
	}
	if s.store.isCold(id) {
		if _, err := s.store.warm(id); err != nil {
			s.log.Error("read a cold chain back from its file", "chain_id", id, "err", err)
		}
	}
	if err := d.err; err != nil {
		streamSeq := uint64(0)
		if meta, merr := m.Metadata(); merr == nil {
			streamSeq = meta.Sequence.Stream
		}
		s.store.fail(id, fmt.Sprintf("stream message %d does not decode as an event: %v", streamSeq, err))
		return term, id
	}
	// One event, or each of a pack's in order: the message is stored
	// when all of them are.
	v := s.handleEvent(ctx, files, m, id, blocked, &d.decodedEvent)
	for i := 0; v == ack && i < len(d.more); i++ {
		v = s.handleEvent(ctx, files, m, id, blocked, &d.more[i])
	}
	return v, id
}

// handleEvent stores one event of message m of chain id.
func (s *Service) handleEvent(ctx context.Context, files *chainFiles, m jetstream.Msg, id string, blocked map[string]bool, de *decodedEvent) verdict {
	e := &de.event
	last := s.lastSeq(files, id)
	if e.Seq <= last {
		if h, pending := files.hashes[pendingKey{id, e.Seq}]; pending {
			if h != e.Hash {
				s.store.fail(id, fmt.Sprintf("event %d: a second, different event %d was delivered (the chain was forked)", e.Seq, e.Seq))
			}
		} else {
			s.store.duplicate(id, e)
		}
		return ack
	}
	if e.Seq > last+1 {
		if err := s.repair(ctx, files, id, last, e.Seq); err != nil {
			s.log.Warn("read missing events back from the stream", "chain_id", id, "err", err)
			blocked[id] = true
			return retry
		}
	}
	raw := de.line
	if raw == nil {
		raw = m.Data()
	}
	if err := s.persist(files, id, e, raw, de.computed); err != nil {
		s.log.Error("store event", "chain_id", id, "seq", e.Seq, "err", err)
		blocked[id] = true
		return retry
	}
	return ack
}

// validChainID is lctl.ValidateChainID, remembering the ids that passed
// (a regular expression per event was ~1% of ingest).
func (s *Service) validChainID(id string) error {
	if _, ok := s.validIDs[id]; ok {
		return nil
	}
	if err := lctl.ValidateChainID(id); err != nil {
		return err
	}
	if len(s.validIDs) >= maxValidIDs {
		clear(s.validIDs)
	}
	s.validIDs[id] = struct{}{}
	return nil
}

// maxValidIDs bounds the chain ids validChainID remembers.
const maxValidIDs = 1 << 16

// lastSeq is the chain's last seq, counting events pending in the batch.
func (s *Service) lastSeq(files *chainFiles, id string) uint64 {
	if n, ok := files.last[id]; ok {
		return n
	}
	return s.store.lastSeq(id)
}

// repair stores the events between after and before (exclusive) that the
// stream holds for the chain. Events the stream lacks stay missing, and
// storing the next event records the gap. The chain is read as it streams
// by: only the events stored are kept (a long chain read back for a few
// events would otherwise be held whole).
func (s *Service) repair(ctx context.Context, files *chainFiles, id string, after, before uint64) error {
	ctx, cancel := context.WithTimeout(ctx, repairTimeout)
	defer cancel()
	err := s.events.Follow(ctx, id, eventlog.FollowOptions{StopAtEnd: true}, func(e lctl.Event) error {
		if e.Seq <= after || e.Seq >= before || e.Seq <= s.lastSeq(files, id) {
			return nil
		}
		return s.persist(files, id, &e, nil, "")
	})
	if err != nil {
		return fmt.Errorf("read chain %s back: %w", id, err)
	}
	return nil
}

// persist adds e to the batch: its line to the chain's file, the event to
// what the batch makes visible once the file is written. raw is the event as
// the stream holds it: stored as it is when it is one line of JSON (what
// XCT's writers store), re-encoded otherwise. raw decoded as e, so it is
// valid JSON.
func (s *Service) persist(files *chainFiles, id string, e *lctl.Event, raw []byte, computed string) error {
	line := raw
	if len(line) == 0 || bytes.IndexByte(line, '\n') >= 0 || bytes.IndexByte(line, '\r') >= 0 {
		var err error
		if line, err = json.Marshal(e); err != nil {
			return fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
	}
	files.add(id, line, e, computed)
	return nil
}
