// Package analysis answers the questions people debugging a multi-agent run
// ask of an LCTL chain: what happened at each event (Line), whether the log
// is intact (Verify), where two runs diverged (Diff), what the run cost
// (ComputeStats), where the time went (Bottlenecks), how far facts can be
// trusted (Confidence), whether agents kept their contracts
// (ValidateContracts), and which facts match a query (ParseQuery,
// FactStore).
//
// Every function works on events in memory and does no I/O beyond the
// readers it is given, so the lctl CLI and the tracer's RPCs share them.
package analysis

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
	"github.com/xct-dev/xct/lctl/text"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Line renders an event the way `lctl replay` prints it, as the spec does:
// "[2] code-analyzer: fact_added F1 (confidence: 0.85)".
func Line(e *lctl.Event) string {
	return string(AppendLine(make([]byte, 0, 96), e))
}

// AppendLine appends Line(e) to dst: replay prints a million lines without
// a string for each.
func AppendLine(dst []byte, e *lctl.Event) []byte {
	// Much of a line is what a model wrote: every character that does
	// not show as itself (an escape sequence, a bidirectional override)
	// is written as its escape, so the terminal shows what is there.
	start := len(dst)
	if out, ok := appendLineFast(dst, e); ok {
		return text.EscapeHidden(out, start)
	}
	return text.EscapeHidden(appendLineGeneral(dst, e), start)
}

// appendLineHead writes the start every line has: "[seq] agent: type",
// and the subject after a space when there is one.
func appendLineHead(dst []byte, e *lctl.Event, subject string) []byte {
	dst = append(dst, '[')
	dst = appendUint(dst, e.Seq)
	dst = append(dst, "] "...)
	dst = append(dst, agentName(e.Agent)...)
	dst = append(dst, ": "...)
	dst = append(dst, e.Type...)
	if subject != "" {
		dst = append(dst, ' ')
		dst = append(dst, subject...)
	}
	return dst
}

// appendLineGeneral is AppendLine through Summarize.
func appendLineGeneral(dst []byte, e *lctl.Event) []byte {
	subject, detail := Summarize(e)
	dst = appendLineHead(dst, e, subject)
	if detail != "" {
		dst = append(dst, " ("...)
		dst = append(dst, detail...)
		dst = append(dst, ')')
	}
	return dst
}

// appendLineFast appends Line(e) for the events a long chain is mostly
// made of (steps, verdicts, tool calls, facts), written straight into dst:
// Summarize's strings, its list of parts and their join are most of what
// rendering a line costs otherwise. It renders exactly what Summarize
// says; ok false, having appended nothing, for anything else (another
// type, a step with invalid model output, a profile or no tool and
// intent, a fact with a consensus block), which the general way renders.
func appendLineFast(dst []byte, e *lctl.Event) ([]byte, bool) {
	s := func(k string) string { v, _ := e.Str(k); return v }
	has := func(k string) bool { _, ok := e.Lookup(k); return ok }
	var subject, intent, tool, from, to string
	// The type once, as a small number for the second switch below.
	var kind int
	const (
		stepStart = iota + 1
		stepEnd
		toolCall
		verdict
		fact
		handoff
	)
	switch e.Type {
	case lctl.TypeStepStart:
		kind = stepStart
		if has("raw") || has("agent_profile") {
			return dst, false
		}
		intent, tool = s("intent"), s("tool")
		if intent == "" && tool == "" {
			return dst, false // the model may be shown
		}
	case lctl.TypeStepEnd:
		kind = stepEnd
	case lctl.TypeToolCall:
		kind, subject = toolCall, s("tool")
	case lctl.TypeVerdict:
		kind, subject = verdict, s("tool")
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		kind = fact
		if has("consensus") {
			return dst, false
		}
		subject = s("id")
	case lctl.TypeHandoff:
		kind = handoff
		// The shape crews and lctlgen write: from, to and a number of
		// facts (summarizeHandoff says the rest).
		if has("summary") || has("reason") || has("suggested_queries") || has("depth") {
			return dst, false
		}
		if _, ok := e.Float("facts"); !ok && has("facts") {
			return dst, false
		}
		if to = s("to"); to == "" {
			return dst, false
		}
		if from = s("from"); from == "" {
			from = e.Agent
		}
	default:
		return dst, false
	}
	dst = appendLineHead(dst, e, subject)
	if to != "" { // a handoff's subject
		dst = append(dst, ' ')
		if from != "" {
			dst = append(dst, from...)
			dst = append(dst, ' ')
		}
		dst = append(dst, "→ "...)
		dst = append(dst, to...)
	}
	w := lineParts{b: dst}
	switch kind {
	case stepStart:
		if n, ok := intAt(e, "step"); ok {
			w.next()
			w.b = append(w.b, "step "...)
			w.b = appendInt(w.b, n)
		}
		w.next()
		if tool != "" {
			w.b = append(w.b, tool...)
			if intent != "" {
				w.b = append(w.b, ": "...)
				w.b = appendClip(w.b, intent, 60)
			}
		} else {
			w.b = appendClip(w.b, intent, 60)
		}
	case stepEnd:
		if o := s("outcome"); o != "" {
			w.next()
			w.b = append(w.b, o...)
		}
		if ms, ok := numberAt(e, "duration_ms"); ok {
			w.next()
			w.b = appendDuration(w.b, ms)
		}
		in, out, ok := e.TokenPair() // tokensOf's pair, read already
		if !ok {
			if t, has := e.Object("tokens"); has {
				in, out = tokensOf(t)
			}
		}
		if in+out > 0 {
			w.next()
			w.b = appendCount(w.b, in+out)
			w.b = append(w.b, " tokens"...)
		}
	case fact:
		if c, ok := numberAt(e, "confidence"); ok {
			w.next()
			w.b = append(w.b, "confidence: "...)
			w.b = strconv.AppendFloat(w.b, c, 'f', 2, 64)
		}
		if r := s("reason"); r != "" {
			w.next()
			w.b = append(w.b, "reason: "...)
			w.b = appendClip(w.b, r, 40)
		}
		if w.n == 0 {
			if t := s("text"); t != "" {
				w.next()
				w.b = appendClip(w.b, t, 60)
			}
		}
	case toolCall:
		if ms, ok := numberAt(e, "duration_ms"); ok {
			w.next()
			w.b = appendDuration(w.b, ms)
		}
		if st := s("status"); st != "" && st != "success" {
			w.next()
			w.b = append(w.b, st...)
		}
	case verdict:
		if dec := s("decision"); dec != "" {
			w.next()
			w.b = append(w.b, dec...)
			// eventRules' ids, written as they are found (no list).
			w.b, _ = e.AppendStrs(w.b, "reasons", "rule_id", " by ", ", ")
		}
		if n, ok := intAt(e, "step"); ok {
			w.next()
			w.b = append(w.b, "step "...)
			w.b = appendInt(w.b, n)
		}
	case handoff:
		if n, ok := intAt(e, "facts"); ok {
			w.next()
			w.b = appendInt(w.b, n)
			w.b = append(w.b, ' ')
			w.b = append(w.b, plural(int(n), "fact", "facts")...)
		}
	}
	if w.n > 0 {
		w.b = append(w.b, ')')
	}
	return w.b, true
}

// lineParts writes a line's detail: " (" before the first part, ", "
// between parts (the caller closes it when n > 0).
type lineParts struct {
	b []byte
	n int
}

func (w *lineParts) next() {
	if w.n == 0 {
		w.b = append(w.b, " ("...)
	} else {
		w.b = append(w.b, ", "...)
	}
	w.n++
}

// appendDuration appends FormatDuration(ms).
func appendDuration(b []byte, ms float64) []byte {
	switch {
	case ms >= 0 && ms < 10:
		return append(appendShortest(b, math.Round(ms*100)/100), "ms"...)
	case ms >= 10 && ms < 1000:
		return append(appendShortest(b, math.Round(ms*10)/10), "ms"...)
	}
	return append(b, FormatDuration(ms)...)
}

// appendShortest is strconv.AppendFloat(b, x, 'f', -1, 64) for x in
// [0, 1000): a whole number (most durations are whole milliseconds) as
// its digits, without the shortest-digits search.
func appendShortest(b []byte, x float64) []byte {
	if x >= 1 && x < 1000 && x == math.Trunc(x) {
		return appendUint(b, uint64(x))
	}
	return strconv.AppendFloat(b, x, 'f', -1, 64)
}

// appendCount appends FormatCount(n).
func appendCount(b []byte, n int64) []byte {
	if n < 0 {
		return append(b, FormatCount(n)...)
	}
	if n < 1000 {
		return appendUint(b, uint64(n))
	}
	var digits [20]byte
	d := appendUint(digits[:0], uint64(n))
	// The digits before the first comma, then three at a time.
	head := len(d) % 3
	if head == 0 {
		head = 3
	}
	b = append(b, d[:head]...)
	for i := head; i < len(d); i += 3 {
		b = append(b, ',', d[i], d[i+1], d[i+2])
	}
	return b
}

// appendInt is strconv.AppendInt(b, n, 10).
func appendInt(b []byte, n int64) []byte {
	if n < 0 {
		return strconv.AppendInt(b, n, 10)
	}
	return appendUint(b, uint64(n))
}

// decimalPairs holds "00" to "99".
const decimalPairs = "0001020304050607080910111213141516171819" +
	"2021222324252627282930313233343536373839" +
	"4041424344454647484950515253545556575859" +
	"6061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// appendUint is strconv.AppendUint(b, u, 10) written in place: a line's
// seq, step and counts (a million lines, each with a number or two),
// without the copy from strconv's buffer.
func appendUint(b []byte, u uint64) []byte {
	if u < 10 {
		return append(b, byte('0'+u))
	}
	// The number of digits: from the bits, one more when u reaches the
	// next power of ten.
	n := (bits.Len64(u) * 1233) >> 12
	if u >= pow10[n] {
		n++
	}
	at := len(b)
	if cap(b)-at < n {
		b = slices.Grow(b, n)
	}
	b = b[:at+n]
	d := b[at:]
	i := n
	for u >= 100 {
		q := u / 100
		r := (u - q*100) * 2
		i -= 2
		d[i], d[i+1] = decimalPairs[r], decimalPairs[r+1]
		u = q
	}
	if u >= 10 {
		d[0], d[1] = decimalPairs[2*u], decimalPairs[2*u+1]
	} else {
		d[0] = byte('0' + u)
	}
	return b
}

// pow10[i] is ten to the i (up to 10^19, the last a uint64 holds).
var pow10 = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// agentName is how an event's agent is shown; "-" when it has none (the
// spec's streaming events do not name one).
func agentName(a string) string {
	if a == "" {
		return "-"
	}
	return a
}

// Summarize returns what Line shows after the type: the subject the event is
// about (a fact id, a tool, an error code) and a short detail.
func Summarize(e *lctl.Event) (subject, detail string) {
	d := e
	s := func(k string) string { v, _ := d.Str(k); return v }
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	// addS is add("%s", v) without fmt: replay formats every event.
	addS := func(v string) { parts = append(parts, v) }
	switch e.Type {
	case lctl.TypeStepStart:
		if raw := s("raw"); raw != "" && s("intent") == "" {
			if n, ok := intAt(d, "step"); ok {
				return "", fmt.Sprintf("step %d, invalid model output: %s", n, clip(oneLine(raw), 60))
			}
			return "", "invalid model output: " + clip(oneLine(raw), 60)
		}
		intent := s("intent")
		if n, ok := intAt(d, "step"); ok {
			addS("step " + strconv.FormatInt(n, 10))
		}
		if tool := s("tool"); tool != "" {
			if intent != "" {
				addS(tool + ": " + clip(oneLine(intent), 60))
			} else {
				addS(tool)
			}
		} else if intent != "" {
			addS(clip(oneLine(intent), 60))
		}
		if m := modelOf(d); m != "" && s("tool") == "" && intent == "" {
			add("model %s", m)
		}
		if p, ok := profileOf(e.Agent, d); ok && p.String() != "" {
			add("as %s", p) // profile.go
		}
	case lctl.TypeStepEnd:
		if o := s("outcome"); o != "" {
			addS(o)
		}
		if ms, ok := numberAt(d, "duration_ms"); ok {
			addS(FormatDuration(ms))
		}
		if t, ok := d.Object("tokens"); ok {
			in, out := tokensOf(t)
			if in+out > 0 {
				addS(FormatCount(in+out) + " tokens")
			}
		}
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		subject = s("id")
		if c, ok := numberAt(d, "confidence"); ok {
			addS("confidence: " + strconv.FormatFloat(c, 'f', 2, 64))
		}
		if r := s("reason"); r != "" {
			add("reason: %s", clip(oneLine(r), 40))
		}
		if c := consensusText(d); c != "" {
			add("%s", c) // profile.go
		}
		if len(parts) == 0 && s("text") != "" {
			addS(clip(oneLine(s("text")), 60))
		}
	case lctl.TypeToolCall:
		subject = s("tool")
		if ms, ok := numberAt(d, "duration_ms"); ok {
			addS(FormatDuration(ms))
		}
		if st := s("status"); st != "" && st != "success" {
			addS(st)
		}
	case lctl.TypeError:
		subject = s("code")
		kind := strings.Trim(s("category")+"/"+s("type"), "/")
		msg := clip(oneLine(s("message")), 80)
		switch {
		case kind != "" && msg != "":
			add("%s: %s", kind, msg)
		case kind != "":
			addS(kind)
		case msg != "":
			addS(msg)
		}
		if b, ok := d.Get("recoverable").(bool); ok && !b {
			add("not recoverable")
		}
	case lctl.TypeCheckpoint:
		if h := s("state_hash"); h != "" {
			add("state_hash %s", clipHash(h))
		}
		if fs, ok := d.Object("facts_snapshot"); ok { // counted, not decoded
			n := fs.Len()
			add("%d %s", n, plural(n, "fact", "facts"))
		}
	case lctl.TypeContractValidation:
		subject = s("contract")
		dir, st := s("direction"), s("status")
		switch {
		case dir != "" && st != "":
			add("%s: %s", dir, st)
		default:
			addS(dir + st)
		}
		if w, ok := d.Get("warnings").([]any); ok && len(w) > 0 {
			add("%d %s", len(w), plural(len(w), "warning", "warnings"))
		}
	case lctl.TypeModelRouting:
		subject = s("decision")
		if r := s("reason"); r != "" {
			addS(r)
		}
		if c, ok := numberAt(d, "confidence"); ok {
			addS("confidence: " + strconv.FormatFloat(c, 'f', 2, 64))
		}
	case lctl.TypeStreamStart:
		if v, ok := d.Lookup("expected_chunks"); ok {
			add("expected chunks: %s", compact(v, 20))
		}
	case lctl.TypeStreamChunk:
		if n, ok := intAt(d, "index"); ok {
			add("#%d", n)
		}
		if n, ok := intAt(d, "tokens"); ok {
			add("%d tokens", n)
		}
	case lctl.TypeStreamEnd:
		if n, ok := intAt(d, "total_chunks"); ok {
			add("%d chunks", n)
		}
		if n, ok := intAt(d, "total_tokens"); ok {
			add("%d tokens", n)
		}
		if ms, ok := numberAt(d, "duration_ms"); ok {
			addS(FormatDuration(ms))
		}
	case lctl.TypeRunStarted:
		if g := s("goal"); g != "" {
			add("goal: %s", clip(oneLine(g), 60))
		}
		if m := modelOf(d); m != "" {
			add("model %s", m)
		}
		if p := s("principal"); p != "" {
			add("by %s", p)
		}
	case lctl.TypeVerdict:
		subject = s("tool")
		dec := s("decision")
		rules := eventRules(d)
		switch {
		case dec != "" && len(rules) > 0:
			addS(dec + " by " + strings.Join(rules, ", "))
		case dec != "":
			addS(dec)
		}
		if n, ok := intAt(d, "step"); ok {
			addS("step " + strconv.FormatInt(n, 10))
		}
	case lctl.TypeRunFinished:
		st := s("status")
		if m := s("message"); m != "" {
			add("%s: %s", st, clip(oneLine(m), 60))
		} else if st != "" {
			addS(st)
		}
		if n, ok := intAt(d, "steps"); ok {
			add("%d %s", n, plural(int(n), "step", "steps"))
		}
	case checkpoint.EventType:
		// What it claims; lctl verify --key checks it.
		if n, ok := intAt(d, "seq"); ok {
			add("signs seq 1 to %d", n)
		}
		if k := s("key"); k != "" {
			add("key %s", k)
		}
	case xctevent.TypeApprovalRequested, xctevent.TypeApprovalDecided, xctevent.TypeStepInDoubt,
		xctevent.TypeRunReleased, xctevent.TypeRunResumed, xctevent.TypeRollbackStarted, xctevent.TypeRollbackFinished:
		subject, parts = summarizeXCT(e, parts)
	case lctl.TypeHandoff:
		subject, parts = summarizeHandoff(e, parts)
	default:
		// A type this reader does not know: kept, and shown as it is.
		if d.DataLen() > 0 {
			add("unknown type; data %s", compact(d.DataMap(), 80))
		} else {
			add("unknown type")
		}
	}
	return subject, strings.Join(parts, ", ")
}

// summarizeHandoff describes a handoff (spec part 4; what XCT's crews, the
// v3 conversion and the OTel conversion record): "planner → coder" and
// why, the facts handed over and the depth. from is the event's agent when
// the data does not name one.
func summarizeHandoff(e *lctl.Event, parts []string) (string, []string) {
	d := e
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	from, _ := d.Get("from").(string)
	if from == "" {
		from = e.Agent
	}
	to, _ := d.Get("to").(string)
	subject := ""
	switch {
	case to != "" && from != "":
		subject = from + " → " + to
	case to != "":
		subject = "→ " + to
	}
	summary, _ := d.Get("summary").(string)
	if summary == "" {
		summary, _ = d.Get("reason").(string)
	}
	if summary != "" {
		add("%s", clip(oneLine(summary), 60))
	}
	switch f := d.Get("facts").(type) {
	case []any:
		ids := make([]string, 0, len(f))
		for _, x := range f {
			if id, ok := x.(string); ok {
				ids = append(ids, id)
			}
		}
		switch {
		case len(ids) == 0 && len(f) == 0:
			add("no facts")
		case len(ids) > 0 && len(ids) <= 4:
			add("%s %s", plural(len(ids), "fact", "facts"), strings.Join(ids, ", "))
		default:
			add("%d %s", len(f), plural(len(f), "fact", "facts"))
		}
	default:
		if n, ok := intOf(f); ok {
			add("%d %s", n, plural(int(n), "fact", "facts"))
		}
	}
	if q, ok := d.Get("suggested_queries").([]any); ok && len(q) > 0 {
		add("%d suggested %s", len(q), plural(len(q), "query", "queries"))
	}
	if n, ok := intAt(d, "depth"); ok && n > 0 {
		add("depth %d", n)
	}
	if subject == "" && len(parts) == 0 && d.DataLen() > 0 {
		add("data %s", compact(d.DataMap(), 80))
	}
	return subject, parts
}

// summarizeXCT describes XCT's own extension events (lctl/xctevent), which
// are not LCTL core types but not unknown either.
func summarizeXCT(e *lctl.Event, parts []string) (string, []string) {
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	subject := ""
	switch x := xctevent.Parse(e).(type) {
	case xctevent.ApprovalRequested:
		subject = x.Tool
		add("step %d waits for a human", x.Step)
		if x.ExpiresAt != "" {
			add("expires %s", x.ExpiresAt)
		}
	case xctevent.ApprovalDecided:
		subject = x.Decision
		if x.By != "" {
			add("by %s", x.By)
		}
		if x.Reason != "" {
			add("%s", clip(oneLine(x.Reason), 60))
		}
		add("step %d", x.Step)
	case xctevent.StepInDoubt:
		subject = x.Tool
		add("step %d in doubt", x.Step)
		if x.Reason != "" {
			add("%s", clip(oneLine(x.Reason), 60))
		}
	case xctevent.RunReleased:
		subject = x.Instance
		add("released at step %d", x.Step)
		if x.Reason != "" {
			add("%s", clip(oneLine(x.Reason), 60))
		}
	case xctevent.RunResumed:
		subject = x.Instance
		add("resumed at step %d", x.Step)
		if x.PreviousOwner != "" {
			add("from %s", x.PreviousOwner)
		}
		if x.Reason != "" {
			add("%s", x.Reason)
		}
	case xctevent.RollbackStarted:
		add("%d %s to undo", len(x.Steps), plural(len(x.Steps), "step", "steps"))
		if x.Principal != "" {
			add("by %s", x.Principal)
		}
	case xctevent.RollbackFinished:
		subject = x.Status
		add("%d undone", len(x.Undone))
		if x.Message != "" {
			add("%s", clip(oneLine(x.Message), 60))
		}
	}
	return subject, parts
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// eventRules returns the rule ids of a verdict's reasons (rule_id of each
// {rule_id, message}), read without decoding them when the event was
// streamed.
func eventRules(e *lctl.Event) []string {
	var out []string
	e.EachObject("reasons", func(o lctl.Object) {
		if id, ok := o.Str("rule_id"); ok && id != "" {
			out = append(out, id)
		}
	})
	return out
}

// modelOf reads data.model as a name or the spec's {id, role}, or
// data.agent_profile.model.
func modelOf(d *lctl.Event) string {
	switch m := d.Get("model").(type) {
	case string:
		return m
	case map[string]any:
		if id, ok := m["id"].(string); ok {
			return id
		}
	}
	if p, ok := d.Get("agent_profile").(map[string]any); ok {
		if m, ok := p["model"].(string); ok {
			return m
		}
	}
	return ""
}

// numberOf returns v as a finite number.
func numberOf(v any) (float64, bool) {
	f, ok := v.(float64)
	if !ok {
		switch x := v.(type) {
		case int:
			f, ok = float64(x), true
		case int64:
			f, ok = float64(x), true
		case json.Number:
			var err error
			f, err = x.Float64()
			ok = err == nil
		}
	}
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// numberAt is numberOf of the event's data member key, reading a streamed
// number without boxing it.
func numberAt(e *lctl.Event, key string) (float64, bool) {
	if f, ok := e.Float(key); ok {
		return f, true
	}
	return numberOf(e.Get(key))
}

// intAt is intOf of the event's data member key.
func intAt(e *lctl.Event, key string) (int64, bool) {
	f, ok := numberAt(e, key)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// intOf returns v as a whole number.
func intOf(v any) (int64, bool) {
	f, ok := numberOf(v)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// tokensOf reads {input, output} or the aliases other implementations use.
func tokensOf(t lctl.Object) (in, out int64) {
	if in, out, ok := t.TokenPair(); ok {
		return in, out
	}
	m := t.Members(tokenNames[:]) // the names in one pass
	for i := range 4 {
		if n, ok := memberInt(&m, i); ok && n >= 0 {
			in = n
			break
		}
	}
	for i := 4; i < 8; i++ {
		if n, ok := memberInt(&m, i); ok && n >= 0 {
			out = n
			break
		}
	}
	return in, out
}

// memberTokens is tokensOf of the members found (tokensOf has its loops
// itself: a call more per line costs replay more than the copy).
func memberTokens(m *lctl.Members) (in, out int64) {
	for i := range 4 {
		if n, ok := memberInt(m, i); ok && n >= 0 {
			in = n
			break
		}
	}
	for i := 4; i < 8; i++ {
		if n, ok := memberInt(m, i); ok && n >= 0 {
			out = n
			break
		}
	}
	return in, out
}

// tokenNames are the names a tokens object gives its counts by, input's
// then output's, each group in the order they are looked for.
var tokenNames = [8]string{"input", "in", "input_tokens", "prompt_tokens", "output", "out", "output_tokens", "completion_tokens"}

// memberInt is intOf of the object's member names[i], reading a streamed
// number without boxing it.
func memberInt(m *lctl.Members, i int) (int64, bool) {
	f, ok := m.Float(i)
	if !ok {
		return intOf(m.Get(i))
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// compact renders a JSON value on one line, cut to max characters.
func compact(v any, max int) string {
	raw, err := lctl.Canonical(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return clip(string(raw), max)
}

// clip cuts s to max characters, marking the cut with "…".
func clip(s string, n int) string { return text.TruncateRunes(s, n) }

// appendClip appends clip(oneLine(s), n) without making a string for it
// when s is on one line: the characters are counted as they are copied.
func appendClip(dst []byte, s string, n int) []byte {
	n = max(n, 1)
	if plainASCII(s) {
		// A character a byte, no line break nor tab.
		if len(s) <= n {
			return append(dst, s...)
		}
		dst = append(dst, s[:n-1]...)
		return append(dst, text.Ellipsis...)
	}
	if len(s) <= n {
		if !hasLineBreakOrTab(s) {
			return append(dst, s...)
		}
		return append(dst, clip(oneLine(s), n)...)
	}
	if hasLineBreakOrTab(s) {
		return append(dst, clip(oneLine(s), n)...)
	}
	// cut is where the first n-1 characters end; more than n characters
	// are cut there, n or fewer kept whole.
	i, cut := 0, 0
	for kept := 0; kept < n; kept++ {
		if i == len(s) {
			return append(dst, s...)
		}
		if kept == n-1 {
			cut = i
		}
		if s[i] < utf8.RuneSelf {
			i++
		} else {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
		}
	}
	if i == len(s) {
		return append(dst, s...)
	}
	dst = append(dst, s[:cut]...)
	return append(dst, text.Ellipsis...)
}

// clipHash shortens a state hash for a line: its prefix and 11 hex digits
// ("sha256:b0dbbafad41…", "v2:sha256:742c89937c1…").
func clipHash(h string) string {
	if lctl.StateHashVersion(h) == 2 {
		return clip(h, len(lctl.StateHashV2Prefix)+12)
	}
	return clip(h, 19)
}

func oneLine(s string) string {
	if !hasLineBreakOrTab(s) {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// plainASCII says every byte of s is from 0x20 to 0x7e (text.ShownASCII:
// sixteen bytes at a time). A DEL (0x7f) goes the general way, which
// clips it as one character too.
func plainASCII(s string) bool { return text.ShownASCII(s) }

// hasLineBreakOrTab is strings.ContainsAny(s, "\n\r\t").
func hasLineBreakOrTab(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= '\r' && (c == '\n' || c == '\r' || c == '\t') {
			return true
		}
	}
	return false
}

// FormatDuration renders milliseconds for people: "50ms", "12.6ms",
// "1.5s", "45.2s", "2m05.0s", "1h02m".
func FormatDuration(ms float64) string {
	switch {
	case ms < 0:
		return "-" + FormatDuration(-ms)
	case ms < 10:
		return strconv.FormatFloat(math.Round(ms*100)/100, 'f', -1, 64) + "ms"
	case ms < 1000:
		return strconv.FormatFloat(math.Round(ms*10)/10, 'f', -1, 64) + "ms"
	case ms < 60_000:
		return fmt.Sprintf("%.1fs", ms/1000)
	case ms < 3_600_000:
		m := math.Floor(ms / 60_000)
		return fmt.Sprintf("%dm%04.1fs", int64(m), (ms-m*60_000)/1000)
	}
	h := math.Floor(ms / 3_600_000)
	return fmt.Sprintf("%dh%02dm", int64(h), int64((ms-h*3_600_000)/60_000))
}

// FormatCount renders an integer with thousands separators: 2,340.
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// naturalLess orders ids the way people number them: F2 before F10.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		ra, sa := utf8.DecodeRuneInString(a)
		rb, sb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return ra < rb
		}
		a, b = a[sa:], b[sb:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// sortNatural sorts ids in natural order.
func sortNatural(ids []string) {
	sort.SliceStable(ids, func(i, j int) bool { return naturalLess(ids[i], ids[j]) })
}
