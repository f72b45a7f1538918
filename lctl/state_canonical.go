package lctl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
)

// Hash identifies the state: "sha256:" and the hex SHA-256 of its canonical
// JSON (RFC 8785, exactly Canonical(s)). Two replays of the same events give
// the same hash. The canonical form is written directly, field by field in
// sorted key order, and streamed into the hash.
func (s *State) Hash() (string, error) {
	h := sha256.New()
	w := canonWriter{h: h}
	w.buf.Grow(64 << 10)
	w.state(s)
	if w.err != nil {
		return "", fmt.Errorf("hash state: %w", w.err)
	}
	w.flush()
	return StateHashPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// canonicalJSON returns the canonical JSON of the state the direct way; the
// tests check it against Canonical(s).
func (s *State) canonicalJSON() ([]byte, error) {
	var w canonWriter
	w.state(s)
	return w.buf.Bytes(), w.err
}

// canonWriter writes canonical JSON into buf, handing full buffers to h
// when it is set.
type canonWriter struct {
	buf   bytes.Buffer
	h     hash.Hash
	err   error
	comma bool // an object or list member was written at this level
}

func (w *canonWriter) flush() {
	if w.h != nil {
		w.h.Write(w.buf.Bytes())
		w.buf.Reset()
	}
}

func (w *canonWriter) maybeFlush() {
	if w.h != nil && w.buf.Len() >= 60<<10 {
		w.flush()
	}
}

// key starts an object member.
func (w *canonWriter) key(k string) {
	if w.comma {
		w.buf.WriteByte(',')
	}
	w.comma = true
	w.buf.WriteByte('"')
	w.buf.WriteString(k) // field names are plain ASCII
	w.buf.WriteString(`":`)
}

func (w *canonWriter) open(c byte) {
	w.buf.WriteByte(c)
	w.comma = false
}

func (w *canonWriter) close(c byte) {
	w.buf.WriteByte(c)
	w.comma = true
}

// elem starts a list element.
func (w *canonWriter) elem() {
	if w.comma {
		w.buf.WriteByte(',')
	}
	w.comma = true
}

func (w *canonWriter) str(s string) { writeString(&w.buf, s) }

func (w *canonWriter) num(f float64) {
	if err := writeNumber(&w.buf, f); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *canonWriter) uint(n uint64) {
	if n < 1<<53 {
		w.buf.WriteString(strconv.FormatUint(n, 10))
		return
	}
	w.num(float64(n))
}

func (w *canonWriter) int(n int64) {
	if n > -(1<<53) && n < 1<<53 {
		w.buf.WriteString(strconv.FormatInt(n, 10))
		return
	}
	w.num(float64(n))
}

func (w *canonWriter) bool(b bool) {
	if b {
		w.buf.WriteString("true")
	} else {
		w.buf.WriteString("false")
	}
}

func (w *canonWriter) null() { w.buf.WriteString("null") }

func (w *canonWriter) strings(l []string) {
	if l == nil {
		w.null()
		return
	}
	w.open('[')
	for _, s := range l {
		w.elem()
		w.str(s)
	}
	w.close(']')
}

func (w *canonWriter) optFloat(f *float64) {
	if f == nil {
		w.null()
		return
	}
	w.num(*f)
}

// state writes the fields of State in sorted key order; omitempty fields
// are left out when empty, exactly as encoding/json does.
func (w *canonWriter) state(s *State) {
	w.open('{')
	w.key("agents")
	w.strings(s.Agents)
	w.key("chain_id")
	w.str(s.ChainID)
	w.key("contract_validations")
	if s.ContractValidations == nil {
		w.null()
	} else {
		w.open('[')
		for i := range s.ContractValidations {
			w.elem()
			c := &s.ContractValidations[i]
			w.open('{')
			w.key("agent")
			w.str(c.Agent)
			w.key("contract")
			w.str(c.Contract)
			w.key("direction")
			w.str(c.Direction)
			w.key("seq")
			w.uint(c.Seq)
			w.key("status")
			w.str(c.Status)
			if len(c.Warnings) > 0 {
				w.key("warnings")
				w.strings(c.Warnings)
			}
			w.close('}')
		}
		w.close(']')
	}
	w.key("current_step")
	if c := s.CurrentStep; c == nil {
		w.null()
	} else {
		w.open('{')
		w.key("agent")
		w.str(c.Agent)
		w.key("intent")
		w.str(c.Intent)
		if c.Model != "" {
			w.key("model")
			w.str(c.Model)
		}
		w.key("seq")
		w.uint(c.Seq)
		if c.Step != nil {
			w.key("step")
			w.int(*c.Step)
		}
		if c.Tool != "" {
			w.key("tool")
			w.str(c.Tool)
		}
		w.close('}')
	}
	w.key("duration_ms")
	w.num(s.DurationMS)
	w.key("errors")
	if s.Errors == nil {
		w.null()
	} else {
		w.open('[')
		for i := range s.Errors {
			w.elem()
			r := &s.Errors[i]
			w.open('{')
			w.key("agent")
			w.str(r.Agent)
			w.key("category")
			w.str(r.Category)
			w.key("code")
			w.str(r.Code)
			w.key("message")
			w.str(r.Message)
			w.key("recoverable")
			w.bool(r.Recoverable)
			w.key("seq")
			w.uint(r.Seq)
			if r.Step != nil {
				w.key("step")
				w.int(*r.Step)
			}
			if r.StepID != "" {
				w.key("step_id")
				w.str(r.StepID)
			}
			w.key("type")
			w.str(r.Type)
			w.close('}')
			w.maybeFlush()
		}
		w.close(']')
	}
	w.key("event_count")
	w.int(int64(s.EventCount))
	w.key("event_types")
	if s.EventTypes == nil {
		w.null()
	} else {
		w.open('{')
		for _, k := range sortedKeys(s.EventTypes) {
			if w.comma {
				w.buf.WriteByte(',')
			}
			w.comma = true
			w.str(k)
			w.buf.WriteByte(':')
			w.int(int64(s.EventTypes[k]))
		}
		w.close('}')
	}
	w.key("facts")
	if s.Facts == nil {
		w.null()
	} else {
		w.open('{')
		for _, id := range sortedKeys(s.Facts) {
			if w.comma {
				w.buf.WriteByte(',')
			}
			w.comma = true
			w.str(id)
			w.buf.WriteByte(':')
			w.fact(s.Facts[id])
			w.maybeFlush()
		}
		w.close('}')
	}
	if s.LastCheckpointHash != "" {
		w.key("last_checkpoint_hash")
		w.str(s.LastCheckpointHash)
	}
	w.key("last_checkpoint_seq")
	w.uint(s.LastCheckpointSeq)
	w.key("last_timestamp")
	w.str(s.LastTimestamp)
	w.key("model_routings")
	if s.ModelRoutings == nil {
		w.null()
	} else {
		w.open('[')
		for i := range s.ModelRoutings {
			w.elem()
			r := &s.ModelRoutings[i]
			w.open('{')
			w.key("agent")
			w.str(r.Agent)
			if len(r.Alternatives) > 0 {
				w.key("alternatives")
				w.strings(r.Alternatives)
			}
			if r.Confidence != nil {
				w.key("confidence")
				w.num(*r.Confidence)
			}
			w.key("decision")
			w.str(r.Decision)
			w.key("reason")
			w.str(r.Reason)
			w.key("seq")
			w.uint(r.Seq)
			w.close('}')
		}
		w.close(']')
	}
	w.key("run")
	w.run(s.Run)
	w.key("seq")
	w.uint(s.Seq)
	w.key("steps")
	if s.Steps == nil {
		w.null()
	} else {
		w.open('[')
		for i := range s.Steps {
			w.elem()
			w.step(&s.Steps[i])
			w.maybeFlush()
		}
		w.close(']')
	}
	w.key("stream")
	st := &s.Stream
	w.open('{')
	w.key("active")
	w.bool(st.Active)
	w.key("chunks")
	w.int(st.Chunks)
	w.key("duration_ms")
	w.num(st.DurationMS)
	w.key("reported_chunks")
	w.int(st.ReportedChunks)
	w.key("reported_tokens")
	w.int(st.ReportedTokens)
	w.key("streams")
	w.int(st.Streams)
	w.key("tokens")
	w.int(st.Tokens)
	w.close('}')
	w.key("tokens")
	w.tokens(&s.Tokens)
	w.key("tool_calls")
	if s.ToolCalls == nil {
		w.null()
	} else {
		w.open('[')
		for i := range s.ToolCalls {
			w.elem()
			tc := &s.ToolCalls[i]
			w.open('{')
			w.key("agent")
			w.str(tc.Agent)
			w.key("duration_ms")
			w.num(tc.DurationMS)
			w.key("seq")
			w.uint(tc.Seq)
			if tc.Status != "" {
				w.key("status")
				w.str(tc.Status)
			}
			if tc.Step != nil {
				w.key("step")
				w.int(*tc.Step)
			}
			if tc.StepID != "" {
				w.key("step_id")
				w.str(tc.StepID)
			}
			w.key("tool")
			w.str(tc.Tool)
			w.close('}')
			w.maybeFlush()
		}
		w.close(']')
	}
	// unknown_types is the seqs of the events not folded into a field, as
	// it was before the reducer recognized handoff and XCT's extension
	// types: checkpoints written then still verify (docs/lctl.md).
	w.key("unknown_types")
	if unknown := s.hashedUnknown(); unknown == nil {
		w.null()
	} else {
		w.open('[')
		for _, seq := range unknown {
			w.elem()
			w.uint(seq)
		}
		w.close(']')
	}
	w.close('}')
}

func (w *canonWriter) tokens(t *Tokens) {
	w.open('{')
	w.key("input")
	w.int(t.Input)
	w.key("output")
	w.int(t.Output)
	w.close('}')
}

func (w *canonWriter) fact(f *Fact) {
	if f == nil {
		w.null()
		return
	}
	w.open('{')
	w.key("confidence")
	w.optFloat(f.Confidence)
	w.key("history")
	if f.History == nil {
		w.null()
	} else {
		w.open('[')
		for i := range f.History {
			w.elem()
			h := &f.History[i]
			w.open('{')
			w.key("agent")
			w.str(h.Agent)
			w.key("confidence")
			w.optFloat(h.Confidence)
			w.key("reason")
			w.str(h.Reason)
			w.key("seq")
			w.uint(h.Seq)
			w.key("text")
			w.str(h.Text)
			w.close('}')
		}
		w.close(']')
	}
	w.key("source")
	w.str(f.Source)
	if len(f.Tags) > 0 {
		w.key("tags")
		w.strings(f.Tags)
	}
	w.key("text")
	w.str(f.Text)
	w.close('}')
}

func (w *canonWriter) run(r *Run) {
	if r == nil {
		w.null()
		return
	}
	w.open('{')
	if r.FinishedSeq != 0 {
		w.key("finished_seq")
		w.uint(r.FinishedSeq)
	}
	w.key("goal")
	w.str(r.Goal)
	if len(r.Labels) > 0 {
		w.key("labels")
		w.open('{')
		for _, k := range sortedKeys(r.Labels) {
			if w.comma {
				w.buf.WriteByte(',')
			}
			w.comma = true
			w.str(k)
			w.buf.WriteByte(':')
			w.str(r.Labels[k])
		}
		w.close('}')
	}
	if r.MaxSteps != 0 {
		w.key("max_steps")
		w.int(r.MaxSteps)
	}
	w.key("message")
	w.str(r.Message)
	w.key("model")
	w.str(r.Model)
	w.key("principal")
	w.str(r.Principal)
	w.key("run_id")
	w.str(r.RunID)
	if r.StartedSeq != 0 {
		w.key("started_seq")
		w.uint(r.StartedSeq)
	}
	w.key("status")
	w.str(r.Status)
	w.key("steps")
	w.int(r.Steps)
	if r.Tokens != nil {
		w.key("tokens")
		w.tokens(r.Tokens)
	}
	w.close('}')
}

func (w *canonWriter) step(st *Step) {
	w.open('{')
	w.key("decision")
	w.str(st.Decision)
	if st.DurationMS != 0 {
		w.key("duration_ms")
		w.num(st.DurationMS)
	}
	if st.EndSeq != 0 {
		w.key("end_seq")
		w.uint(st.EndSeq)
	}
	if st.ErrorCode != "" {
		w.key("error_code")
		w.str(st.ErrorCode)
	}
	if st.Intent != "" {
		w.key("intent")
		w.str(st.Intent)
	}
	w.key("outcome")
	w.str(st.Outcome)
	if len(st.Reasons) > 0 {
		w.key("reasons")
		w.strings(st.Reasons)
	}
	if st.StartSeq != 0 {
		w.key("start_seq")
		w.uint(st.StartSeq)
	}
	if st.Status != "" {
		w.key("status")
		w.str(st.Status)
	}
	w.key("step")
	w.int(st.Step)
	w.key("step_id")
	w.str(st.StepID)
	w.key("tool")
	w.str(st.Tool)
	w.close('}')
}
