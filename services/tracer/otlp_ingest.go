package tracer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/otlp"
)

// OpenTelemetry in: the tracer accepts OTLP trace exports (gRPC and HTTP),
// converts each trace with lctl/otlp and appends it to the event log as
// chain otel-<trace id>, so the chains are replayed, diffed and tailed like
// any other. The tracer is the only writer of otel- chains, which are
// stored on their own stream (LCTL_OTEL, internal/eventlog): its NATS user
// may publish there and on no run's chain. A trace whose chain was written
// before that stream existed (at lctl.chain.otel-<trace id>) is refused.
//
// Exporters send a trace in pieces: a span is exported when it ends, so an
// agent's span arrives after the model and tool spans inside it. To write
// the chain in the order things happened, the spans of a trace are held in
// memory until its root span (one without a parent) arrives, or no span of
// it arrived for OTLPConfig.Hold, or the trace holds MaxHeldSpans spans;
// then the held spans are converted, sorted by time, and appended. Spans
// that arrive after that are appended to the same chain (their events are
// dated no earlier than the chain's last event; the span's own time stays in
// the event). An export that completes a trace returns after its events are
// durable; spans held for later are acknowledged before, so a tracer that
// crashes within Hold loses them. Hold < 0 appends every export before
// answering.

// OTLPConfig configures OTLP ingestion.
type OTLPConfig struct {
	// Hold is how long the spans of a trace without its root span are held
	// before they are written anyway (0: DefaultOTLPHold; < 0: not held).
	Hold time.Duration
	// MaxBody bounds an OTLP/HTTP request body, compressed and after
	// decompression (0: DefaultOTLPMaxBody).
	MaxBody int64
}

// Defaults of OTLPConfig.
const (
	DefaultOTLPHold    = 10 * time.Second
	DefaultOTLPMaxBody = 16 << 20
	// maxHeldSpans bounds the spans held for one trace, and maxHeldTotal
	// for all traces; past them, held spans are written without waiting.
	maxHeldSpans = 10000
	maxHeldTotal = 100000
	// maxOTelChains bounds the chains whose writer and span ids are kept in
	// memory; a chain evicted is read back from the stream when it grows.
	maxOTelChains = 1024
	// maxWarningText bounds the warnings an export response carries.
	maxWarningText = 4096
)

// RegisterFlags registers the OTLP flags on fs.
func (c *OTLPConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Hold, "tracer-otlp-hold", DefaultOTLPHold, "how long the spans of an OTLP trace whose root span has not arrived are held before they are written (negative: write every export at once)")
	fs.Int64Var(&c.MaxBody, "tracer-otlp-max-body", DefaultOTLPMaxBody, "largest OTLP/HTTP request body in bytes, compressed and decompressed")
}

func (c OTLPConfig) hold() time.Duration {
	if c.Hold == 0 {
		return DefaultOTLPHold
	}
	return c.Hold
}

func (c OTLPConfig) maxBody() int64 {
	if c.MaxBody <= 0 {
		return DefaultOTLPMaxBody
	}
	return c.MaxBody
}

// ingester turns OTLP exports into chains on the event log.
type ingester struct {
	log  *slog.Logger
	hold time.Duration
	// events returns the event log, nil before the tracer started.
	events func() *eventlog.Log
	// redactor replaces secrets in what the spans carry (attributes,
	// status and error messages) before they go on a chain: an exporter's
	// token in a span attribute would otherwise stay on a chain every
	// reader reads and nothing purges.
	redactor *redact.Redactor

	mu     sync.Mutex
	held   map[string]*heldTrace // by chain id
	total  int                   // spans held, all traces
	chains map[string]*otelChain // by chain id
}

// heldTrace is the spans of a trace waiting to be written.
type heldTrace struct {
	trace *otlp.Trace
	last  time.Time // when a span of it last arrived
	// exporter is the principal who exported them ("" without
	// authentication): the held spans of a trace are one exporter's.
	exporter string
}

// otelChain is what the tracer knows of a chain it writes. mu serializes
// the writes to the chain; users counts who is between get and put.
type otelChain struct {
	mu        sync.Mutex
	users     int
	w         *eventlog.ChainWriter
	seen      map[string]bool
	agents    map[string]string
	prevAgent string
	notBefore time.Time
	// refused: why the tracer never appends to the chain
	// (errForeignChain, eventlog.ErrLegacyChain), known without reading
	// it again.
	refused error
	// exporter is the principal whose spans the chain holds, as its first
	// event names it (otel.exporter); only that principal's spans are
	// appended. A chain written before exporters were recorded names none
	// and takes anyone's, as it did.
	exporter string
}

func newIngester(cfg OTLPConfig, log *slog.Logger, events func() *eventlog.Log, red *redact.Redactor) *ingester {
	return &ingester{log: log, hold: cfg.hold(), events: events, redactor: red, held: map[string]*heldTrace{}, chains: map[string]*otelChain{}}
}

// exportResult is what an export did: spans rejected and the warnings to
// report.
type exportResult struct {
	rejected int64
	warnings []string
}

// message joins the warnings for an OTLP partial-success error_message.
func (r exportResult) message() string {
	var b strings.Builder
	for i, w := range r.warnings {
		if b.Len()+len(w) > maxWarningText {
			fmt.Fprintf(&b, "; and %d more", len(r.warnings)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(w)
	}
	return b.String()
}

// errIngestUnavailable marks failures an exporter should retry.
var errIngestUnavailable = errors.New("cannot write to the event log")

// errForeignChain is a chain otel-<trace id> that another writer started
// (its first event is not a converted span): the tracer never appends to
// it, and the trace's spans are refused, not retried.
var errForeignChain = errors.New("its chain exists and was not written by the tracer")

// errOtherExporter is a trace whose chain holds another principal's spans:
// one submitter never appends to another's trace (its trace id is listed
// to every reader). The spans are refused, not retried.
var errOtherExporter = errors.New("its chain holds the spans of another exporter")

// refusedChain reports spans the tracer never appends to their chain:
// another writer's chain, an otel chain at its old subject, or another
// exporter's trace.
func refusedChain(err error) bool {
	return errors.Is(err, errForeignChain) || errors.Is(err, eventlog.ErrLegacyChain) || errors.Is(err, errOtherExporter)
}

// export takes one export's spans, by exporter (the authenticated
// principal; "" without authentication): traces whose root arrived (or
// all, when nothing is held) are written before it returns.
func (in *ingester) export(ctx context.Context, exporter string, rss []*tracepb.ResourceSpans) (exportResult, error) {
	var res exportResult
	if in.events() == nil {
		return res, fmt.Errorf("%w: %w", errIngestUnavailable, ErrNotReady)
	}
	traces, rejected, warnings := otlp.Group(rss)
	res.rejected = int64(rejected)
	for _, w := range warnings {
		res.warnings = append(res.warnings, w.String())
	}
	var now []string
	in.mu.Lock()
	for _, t := range traces {
		key := heldKey(t.ChainID, exporter)
		h := in.held[key]
		if h == nil {
			h = &heldTrace{trace: &otlp.Trace{TraceID: t.TraceID, ChainID: t.ChainID}, exporter: exporter}
			in.held[key] = h
		}
		h.trace.Spans = append(h.trace.Spans, t.Spans...)
		h.last = time.Now()
		in.total += len(t.Spans)
		if in.hold < 0 || hasRoot(t) || len(h.trace.Spans) >= maxHeldSpans || in.total >= maxHeldTotal {
			now = append(now, key)
		}
	}
	in.mu.Unlock()
	var errs []error
	for _, key := range now {
		ws, refused, err := in.flush(ctx, key)
		res.warnings = append(res.warnings, ws...)
		res.rejected += int64(refused)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

func hasRoot(t *otlp.Trace) bool {
	for _, s := range t.Spans {
		if len(s.Span.GetParentSpanId()) == 0 {
			return true
		}
	}
	return false
}

// heldKey is the key of a trace's spans held for one exporter: the chain
// id, then the exporter. Each exporter's spans are held and written on
// their own, so one cannot hold back or mix into another's.
func heldKey(chainID, exporter string) string { return chainID + "\x00" + exporter }

// flush writes the held spans of one exporter's trace (key: heldKey). On
// failure the spans stay held (an exporter's retry sends them again;
// repeats are skipped by span id), except for a chain they are never
// appended to: they are dropped and counted in refused, with a warning.
func (in *ingester) flush(ctx context.Context, key string) (warnings []string, refused int, err error) {
	chainID, _, _ := strings.Cut(key, "\x00")
	c := in.get(chainID)
	defer in.put(chainID, c)
	c.mu.Lock()
	defer c.mu.Unlock()
	in.mu.Lock()
	h := in.held[key]
	if h != nil {
		delete(in.held, key)
		in.total -= len(h.trace.Spans)
	}
	in.mu.Unlock()
	if h == nil {
		return nil, 0, nil
	}
	warnings, err = in.write(ctx, c, h.trace, h.exporter)
	if refusedChain(err) {
		in.log.Warn("OTLP spans refused: the tracer does not append to their chain", "chain", chainID, "spans", len(h.trace.Spans), "why", err)
		return append(warnings, fmt.Sprintf("%d spans of trace %x refused: chain %s: %v", len(h.trace.Spans), h.trace.TraceID, chainID, err)),
			len(h.trace.Spans), nil
	}
	if err != nil {
		in.mu.Lock()
		if cur := in.held[key]; cur != nil {
			cur.trace.Spans = append(h.trace.Spans, cur.trace.Spans...)
		} else {
			in.held[key] = h
		}
		in.total += len(h.trace.Spans)
		in.mu.Unlock()
	}
	return warnings, 0, err
}

// write converts a trace's spans, exported by exporter, and appends them to
// its chain; c.mu is held.
func (in *ingester) write(ctx context.Context, c *otelChain, t *otlp.Trace, exporter string) ([]string, error) {
	log := in.events()
	if log == nil {
		return nil, fmt.Errorf("%w: %w", errIngestUnavailable, ErrNotReady)
	}
	if c.refused != nil {
		return nil, c.refused
	}
	if c.w == nil {
		if err := in.load(ctx, log, c, t.ChainID); refusedChain(err) {
			c.refused = err
			return nil, err
		} else if err != nil {
			return nil, fmt.Errorf("%w: %w", errIngestUnavailable, err)
		}
	}
	first := c.w.Seq() == 0
	if !first && c.exporter != "" && c.exporter != exporter {
		return nil, errOtherExporter
	}
	r := otlp.ConvertTrace(t, otlp.Options{NotBefore: c.notBefore, PrevAgent: c.prevAgent, Agents: c.agents, Seen: c.seen})
	warnings := make([]string, 0, len(r.Warnings))
	for _, w := range r.Warnings {
		warnings = append(warnings, w.String())
	}
	if len(warnings) > 0 {
		in.log.Warn("OTLP spans converted with warnings", "chain", t.ChainID, "warnings", len(warnings), "first", warnings[0])
	}
	if first && len(r.Events) > 0 && exporter != "" {
		// The chain's first event names who exported it.
		// (A copy: conversion shares a span's reference between the
		// events it makes, and only the first names the exporter.)
		if ref, ok := r.Events[0].Data["otel"].(map[string]any); ok {
			ref = maps.Clone(ref)
			ref["exporter"] = exporter
			r.Events[0].Data["otel"] = ref
		}
	}
	scope := in.redactor.Scope() // one trace's write: a secret found by its key is also replaced where it recurs
	drafts := make([]eventlog.Draft, len(r.Events))
	for i, d := range r.Events {
		drafts[i] = eventlog.Draft{Time: d.Time, Type: d.Type, Agent: d.Agent, Data: scope.Map(d.Data)}
	}
	// One write of the trace's events: atomic batches of up to
	// eventlog.MaxBatch events, each all or nothing.
	stored, err := c.w.AppendBatch(ctx, drafts)
	if len(stored) > 0 && first {
		c.exporter = exporter
	}
	if err != nil {
		// The writer refuses further appends; read the chain back next
		// time. Spans already on the chain are then skipped by their
		// ids: say so when a write stopped between two batches, since
		// a span whose first event was stored and its last was not
		// stays so.
		c.w = nil
		var partial *eventlog.PartialError
		if errors.As(err, &partial) {
			in.log.Error("OTLP spans partly written: the trace's chain holds the events of the batches before the failure", "chain", t.ChainID,
				"stored", partial.Stored, "events", partial.Total, "err", partial.Err)
		}
		return warnings, fmt.Errorf("%w: %w", errIngestUnavailable, err)
	}
	if len(drafts) > 0 {
		c.notBefore = drafts[len(drafts)-1].Time
	}
	for _, id := range r.Spans {
		c.seen[id] = true
	}
	for id, a := range r.Agents {
		c.agents[id] = a
	}
	c.prevAgent = r.LastAgent
	return warnings, nil
}

// load resumes a chain's writer and reads back what earlier writes left:
// span ids, their agents, the last step's agent and the last timestamp.
func (in *ingester) load(ctx context.Context, log *eventlog.Log, c *otelChain, chainID string) error {
	w, err := log.ResumeChainWriter(ctx, chainID)
	if err != nil {
		return err
	}
	c.seen, c.agents, c.prevAgent, c.notBefore, c.exporter = map[string]bool{}, map[string]string{}, "", time.Time{}, ""
	if w.Seq() > 0 {
		events, err := log.ReadChain(ctx, chainID)
		if err != nil {
			return err
		}
		// Every event the tracer writes carries its span's reference; a
		// chain that starts otherwise is another writer's (a run's).
		if len(events) > 0 {
			ref, ok := events[0].Data["otel"]
			if !ok {
				return errForeignChain
			}
			if m, ok := ref.(map[string]any); ok {
				c.exporter, _ = m["exporter"].(string)
			}
		}
		for i := range events {
			e := &events[i]
			if ref, ok := e.Data["otel"].(map[string]any); ok {
				if id, ok := ref["span_id"].(string); ok {
					c.seen[id] = true
					if e.Agent != "" {
						c.agents[id] = e.Agent
					}
				}
			}
			if e.Type == lctl.TypeStepStart {
				c.prevAgent = e.Agent
			}
			if t, ok := lctl.ParseTime(e.Timestamp); ok && t.After(c.notBefore) {
				c.notBefore = t
			}
		}
	}
	c.w = w
	return nil
}

// get returns the chain's entry, marking it in use.
func (in *ingester) get(chainID string) *otelChain {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := in.chains[chainID]
	if c == nil {
		c = &otelChain{}
		in.chains[chainID] = c
	}
	c.users++
	return c
}

// put releases the entry and evicts unused entries past maxOTelChains.
func (in *ingester) put(chainID string, c *otelChain) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c.users--
	if len(in.chains) <= maxOTelChains {
		return
	}
	for id, e := range in.chains {
		if e.users == 0 && id != chainID {
			delete(in.chains, id)
			if len(in.chains) <= maxOTelChains {
				return
			}
		}
	}
}

// due returns the keys (heldKey) of the held spans that waited long enough
// (all of them when all is set).
func (in *ingester) due(all bool) []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for id, h := range in.held {
		if all || time.Since(h.last) >= in.hold {
			out = append(out, id)
		}
	}
	return out
}

// run writes held traces once they waited Hold, until ctx ends.
func (in *ingester) run(ctx context.Context) {
	if in.hold <= 0 {
		return
	}
	tick := time.NewTicker(max(in.hold/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, key := range in.due(false) {
			if _, _, err := in.flush(ctx, key); err != nil && ctx.Err() == nil {
				chain, exporter, _ := strings.Cut(key, "\x00")
				in.log.Error("write held OTLP spans", "chain", chain, "exporter", exporter, "err", err)
			}
		}
	}
}

// drain writes every held trace (at shutdown).
func (in *ingester) drain(ctx context.Context) {
	for _, key := range in.due(true) {
		if _, _, err := in.flush(ctx, key); err != nil {
			chain, exporter, _ := strings.Cut(key, "\x00")
			in.log.Error("write held OTLP spans at shutdown; they are lost", "chain", chain, "exporter", exporter, "err", err)
		}
	}
}
