package analysis

import (
	"time"

	"github.com/xct-dev/xct/lctl"
)

// Steps nest: an OpenTelemetry agent span contains its model calls and the
// agents it invokes; a step of an agent may run inside that agent's open
// step. A nested step's time is already in its parent's, so totals count
// only the outermost steps that ended, and each step's own time (SelfMS)
// is its duration less the steps inside it. Streams (stream_start to
// stream_end) are timed the same way.

// parentOf finds the step e starts inside: the open step whose span is
// e's parent span (data.otel), else, for a step without an XCT step number
// (XCT steps never nest), the agent's innermost open step.
func (st *stepTimer) parentOf(e *lctl.Event, o *openStep, numbered bool) *openStep {
	var parent *openStep
	if ref, ok := e.Get("otel").(map[string]any); ok {
		if id, ok := ref["span_id"].(string); ok && id != "" {
			o.spanID = id
			st.bySpan[id] = o
		}
		if pid, ok := ref["parent_span_id"].(string); ok && pid != "" {
			parent = st.bySpan[pid]
		}
	}
	if parent == nil && !numbered {
		parent = st.agents.of(e.Agent).current
	}
	if parent == o {
		return nil
	}
	return parent
}

// end closes a step (or a stream) whose DurationMS is set.
func (st *stepTimer) end(o *openStep) {
	o.ended = true
	o.timing.SelfMS = max(0, o.timing.DurationMS-o.childMS)
	if o.parent != nil && !o.parent.ended {
		o.parent.childMS += o.timing.DurationMS
	}
	if o.spanID != "" && st.bySpan[o.spanID] == o {
		delete(st.bySpan, o.spanID)
	}
	st.order[o.index] = nil
	// Only a step inside another, or a stream, is looked at again at the
	// end: the others (every XCT step) are not kept, so a long chain's
	// steps are held once, as their timings (with durations, as their
	// durations).
	top := o.parent == nil && !o.timing.Stream
	if st.durations {
		st.durs.add(o.timing.DurationMS)
	}
	if !top || !st.durations {
		st.out.add(o.timing)
	}
	if top {
		o = nil
	}
	st.outSteps.add(o)
}

// insideEnded reports whether a step that ended runs inside another that
// ended too (its time is in that one's).
func (o *openStep) insideEnded() bool {
	for p := o.parent; p != nil; p = p.parent {
		if p.ended {
			return true
		}
	}
	return false
}

// stream times a stream from stream_start to stream_end as a step of its
// agent, inside the agent's open step if any: its duration is stream_end's
// duration_ms, else the time between the two events.
func (st *stepTimer) stream(e *lctl.Event, t time.Time) {
	switch e.Type {
	case lctl.TypeStreamStart:
		o := &openStep{start: t, index: len(st.order)}
		o.timing = StepTiming{Agent: e.Agent, Step: int64(e.Seq), StartSeq: e.Seq, Intent: "stream", Stream: true}
		a := st.agents.of(e.Agent)
		o.parent = a.current
		if o.parent != nil {
			o.timing.ParentSeq = o.parent.timing.StartSeq
			o.parent.parentOfSome = true
		}
		st.order = appendDoubling(st.order, o)
		a.stream = o
	case lctl.TypeStreamChunk:
		if o := st.agents.of(e.Agent).stream; o != nil {
			if n, ok := intAt(e, "tokens"); ok && n > 0 {
				o.streamed += n
			}
		}
	case lctl.TypeStreamEnd:
		a := st.agents.of(e.Agent)
		o := a.stream
		if o == nil {
			return
		}
		a.stream = nil
		o.timing.EndSeq = e.Seq
		o.timing.Tokens = o.streamed
		if n, ok := intAt(e, "total_tokens"); ok && n >= 0 {
			o.timing.Tokens = n
		}
		if ms, ok := numberAt(e, "duration_ms"); ok && ms >= 0 {
			o.timing.DurationMS = ms
		} else if !t.IsZero() && !o.start.IsZero() {
			o.timing.DurationMS = float64(t.Sub(o.start).Microseconds()) / 1000
		}
		st.end(o)
		if o.parent == nil {
			a.orphan, a.hasOrphan = orphanStream{o, st.out.len() - 1}, true
		}
	}
}

// orphanStream is a stream that ended outside every step, and its index
// in the timer's out.
type orphanStream struct {
	o   *openStep
	out int
}

// adopt makes the agent's last stream outside every step part of step o,
// the agent's next numbered (XCT) step: XCT records a step after the model
// call that proposed it, and the step's duration and tokens include the
// stream's. Counted on its own, the stream's time and tokens would be
// counted twice.
func (st *stepTimer) adopt(agent string, o *openStep) {
	a := st.agents.of(agent)
	if !a.hasOrphan {
		return
	}
	orphan := a.orphan
	a.orphan, a.hasOrphan = orphanStream{}, false
	orphan.o.parent = o
	o.parentOfSome = true
	o.childMS += orphan.o.timing.DurationMS
	st.out.at(orphan.out).ParentSeq = o.timing.StartSeq
}

// unreportedStreamTokens sums the tokens of the streams that ended outside
// any step, or inside one whose step_end reports no tokens (a step that
// reports tokens counts its stream's).
func (st *stepTimer) unreportedStreamTokens() int64 {
	var n int64
	st.outSteps.each(func(_ int, p **openStep) {
		if o := *p; o != nil && o.timing.Stream && (o.parent == nil || !o.parent.reportsTokens) {
			n += o.timing.Tokens
		}
	})
	return n
}
