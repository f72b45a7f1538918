package orchestrator

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/telemetry"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Spans of a run, after the OpenTelemetry GenAI semantic conventions: one
// trace per run rooted at invoke_agent, a chat span per model call and an
// execute_tool span per proposed step, under which the validator and
// executor calls nest. Spans only describe the loop; they never steer it.
// Without a configured exporter the global provider is a no-op.

const tracerName = "github.com/xct-dev/xct/services/orchestrator"

func tracer() trace.Tracer { return otel.Tracer(tracerName) }

// startRunSpan opens the run's root span. The StartRun call that caused it
// is linked, not parented: each run is its own trace, with ids derived from
// the run id (telemetry.RunSpanIDs). A replica that took the run over (the
// chain has more than run_started) opens its span under that root instead.
func (r *run) startRunSpan(caller context.Context) {
	ctx, root := telemetry.WithRunRoot(context.Background(), r.id), trace.WithNewRoot()
	if r.writer.Seq() > 1 {
		ctx, root = telemetry.UnderRun(context.Background(), r.id), trace.WithLinks()
	}
	_, r.span = tracer().Start(ctx, "invoke_agent "+r.model,
		root,
		trace.WithLinks(trace.LinkFromContext(caller)),
		trace.WithAttributes(
			semconv.GenAIOperationNameInvokeAgent,
			semconv.GenAIConversationID(r.id),
			attribute.String("xct.chain.id", r.id),
			semconv.GenAIAgentName(r.agentName()),
		))
}

// startRollbackSpan opens the span of a rollback of an ended run, under
// the run's root span, so its undo steps show in the run's trace.
func (r *run) startRollbackSpan() {
	_, r.span = tracer().Start(telemetry.UnderRun(context.Background(), r.id), "rollback "+r.id,
		trace.WithAttributes(
			semconv.GenAIConversationID(r.id),
			attribute.String("xct.chain.id", r.id),
			attribute.String("xct.principal", r.principal),
		))
}

// endRunSpan closes the run's root span with how the run ended.
func (r *run) endRunSpan(status, message string) {
	if r.span == nil {
		return
	}
	r.span.SetAttributes(
		attribute.String("xct.run.status", status),
		semconv.GenAIUsageInputTokens(int(r.tokensIn)),
		semconv.GenAIUsageOutputTokens(int(r.tokensOut)),
	)
	if status != xctevent.StatusDone {
		r.span.SetStatus(otelcodes.Error, r.redactText(message))
	}
	r.span.End()
}

// traceCtx returns ctx carrying the run's innermost open span (the step's,
// else the run's), so calls made for it nest under it.
func (r *run) traceCtx(ctx context.Context) context.Context {
	switch {
	case r.stepSpan != nil:
		return trace.ContextWithSpan(ctx, r.stepSpan)
	case r.span != nil:
		return trace.ContextWithSpan(ctx, r.span)
	}
	return ctx
}

// spansRecorded reports whether the run's spans are recorded: its root
// span is (a provider is installed and sampled it). When it is not, the
// model call and step spans are not made: they would record nothing, and
// making them cost ~17 allocations a step. Calls still carry the root's
// span context (traceCtx).
func (r *run) spansRecorded() bool { return r.span != nil && r.span.IsRecording() }

// startChat opens the span of one model call (nil when spans are not
// recorded).
func (r *run) startChat(ctx context.Context, ref string) (context.Context, trace.Span) {
	if !r.spansRecorded() {
		return r.traceCtx(ctx), nil
	}
	provider, model, _ := strings.Cut(ref, ":")
	return tracer().Start(r.traceCtx(ctx), "chat "+model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			semconv.GenAIOperationNameChat,
			semconv.GenAIRequestModel(model),
			semconv.GenAIProviderNameKey.String(provider),
		))
}

// endChat closes a model call's span with its usage or its error (its
// message redacted: an endpoint's error can echo a URL with a password).
func (r *run) endChat(span trace.Span, resp *xctv1.ProposeResponse, err error) {
	if span == nil {
		return
	}
	if err != nil {
		msg := r.redactText(err.Error())
		span.RecordError(errors.New(msg))
		span.SetStatus(otelcodes.Error, msg)
	} else {
		span.SetAttributes(
			semconv.GenAIUsageInputTokens(int(resp.GetUsage().GetInputTokens())),
			semconv.GenAIUsageOutputTokens(int(resp.GetUsage().GetOutputTokens())),
		)
		if m := resp.GetModel(); m != "" {
			span.SetAttributes(semconv.GenAIResponseModel(m))
		}
	}
	span.End()
}

// startStep opens the span of a proposed step; endStep closes it.
func (r *run) startStep(stepID, tool string) {
	if !r.spansRecorded() {
		return
	}
	_, r.stepSpan = tracer().Start(r.traceCtx(context.Background()), "execute_tool "+tool,
		trace.WithAttributes(
			semconv.GenAIOperationNameExecuteTool,
			semconv.GenAIToolName(tool),
			semconv.GenAIToolCallID(stepID),
		))
}

// stepResult notes a step's outcome on its span, right after its tool_call
// or error event was recorded (that event's seq is the writer's last).
func (r *run) stepResult(outcome, summary string) {
	r.stepResultAt(outcome, summary, r.writer.Seq())
}

// stepResultAt is stepResult for the tool_call or error at seq.
func (r *run) stepResultAt(outcome, summary string, seq uint64) {
	if r.stepSpan == nil {
		return
	}
	r.stepSpan.SetAttributes(attribute.Int64("lctl.seq", int64(seq)), attribute.String("xct.step.outcome", outcome))
	if outcome != xctevent.OutcomeSuccess {
		r.stepSpan.SetStatus(otelcodes.Error, r.redactText(summary))
	}
}

func (r *run) endStep() {
	if r.stepSpan != nil {
		r.stepSpan.End()
		r.stepSpan = nil
	}
}

// agentName names the run's agent in telemetry: its model's, or its crew.
func (r *run) agentName() string {
	if r.crew != nil {
		return r.crew.sess.Crew().Name
	}
	return r.proposer.Name()
}
