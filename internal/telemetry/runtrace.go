package telemetry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"

	"go.opentelemetry.io/otel/trace"
)

// A run's trace has ids derived from the run id, so a process that did
// not open the run's root span (a rollback long after the run ended, a
// replica that took the run over) can still put its spans under it, and
// anyone holding a run id can find its trace.

// RunSpanIDs returns the trace id and the root span id of a run's trace.
func RunSpanIDs(runID string) (trace.TraceID, trace.SpanID) {
	sum := sha256.Sum256([]byte("xct run trace\x00" + runID))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	return tid, sid
}

type rootIDsKey struct{}

type rootIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// WithRunRoot returns ctx asking the tracer provider of Setup to give the
// next root span started with it the run's ids (RunSpanIDs). Other
// providers ignore it.
func WithRunRoot(ctx context.Context, runID string) context.Context {
	tid, sid := RunSpanIDs(runID)
	return context.WithValue(ctx, rootIDsKey{}, rootIDs{trace: tid, span: sid})
}

// UnderRun returns ctx whose parent span is the run's root span (a remote
// span context built from RunSpanIDs), so spans started with it join the
// run's trace under its root.
func UnderRun(ctx context.Context, runID string) context.Context {
	tid, sid := RunSpanIDs(runID)
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
}

// idGenerator gives random ids, except to a root span whose context asks
// for a run's ids.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if ids, ok := ctx.Value(rootIDsKey{}).(rootIDs); ok {
		return ids.trace, ids.span
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}
