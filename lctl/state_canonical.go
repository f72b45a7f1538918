package lctl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
)

// HashV1 is the state hash of version 1, what checkpoints carried until
// session 5: "sha256:" and the hex SHA-256 of the state's canonical JSON
// (RFC 8785, exactly Canonical(s)). Two replays of the same events give the
// same hash. The canonical form is written directly, field by field in
// sorted key order, and streamed into the hash. It covers the whole state,
// so it costs time in the state's size (the chain's length) however it is
// kept: verify checks it on old chains; new checkpoints carry Hash's form.
func (s *State) HashV1() (string, error) {
	if s.countCalls || s.factsOnly || s.noHistory || s.noCurrent || s.noFactText {
		return "", fmt.Errorf("hash state: %w", errPartialState)
	}
	h := sha256.New()
	w := canonWriter{h: h, hc: s.hc}
	w.buf.Grow(64 << 10)
	w.state(s)
	if w.err != nil {
		return "", fmt.Errorf("hash state: %w", w.err)
	}
	w.flush()
	if s.hc != nil {
		s.hc.stepsClean = len(s.Steps)
	}
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
	hc    *hashCache // nil: write everything
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
	cachedList(w, w.hc.list(cacheContracts), s.ContractValidations, (*canonWriter).contractValidation)
	w.key("current_step")
	w.currentStep(s.CurrentStep)
	w.key("duration_ms")
	w.num(s.DurationMS)
	w.key("errors")
	cachedList(w, w.hc.list(cacheErrors), s.Errors, (*canonWriter).errorRecord)
	w.key("event_count")
	w.int(int64(s.EventCount))
	w.key("event_types")
	w.eventTypes(s.EventTypes)
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
			w.fact(id, s.Facts[id])
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
	cachedList(w, w.hc.list(cacheRoutings), s.ModelRoutings, (*canonWriter).modelRouting)
	w.key("run")
	w.run(s.Run)
	w.key("seq")
	w.uint(s.Seq)
	w.key("steps")
	cachedList(w, w.hc.stepList(), s.Steps, (*canonWriter).step)
	w.key("stream")
	w.stream(&s.Stream)
	w.key("tokens")
	w.tokens(&s.Tokens)
	w.key("tool_calls")
	cachedList(w, w.hc.list(cacheToolCalls), s.ToolCalls, (*canonWriter).toolCall)
	// unknown_types is the seqs of the events not folded into a field, as
	// it was before the reducer recognized handoff and XCT's extension
	// types: checkpoints written then still verify (docs/lctl.md).
	w.key("unknown_types")
	cachedList(w, w.hc.list(cacheUnknown), s.hashedUnknown(), func(w *canonWriter, seq *uint64) { w.uint(*seq) })
	w.close('}')
}

func (w *canonWriter) currentStep(c *CurrentStep) {
	if c == nil {
		w.null()
		return
	}
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

func (w *canonWriter) eventTypes(m map[string]int) {
	if m == nil {
		w.null()
		return
	}
	w.open('{')
	for _, k := range sortedKeys(m) {
		if w.comma {
			w.buf.WriteByte(',')
		}
		w.comma = true
		w.str(k)
		w.buf.WriteByte(':')
		w.int(int64(m[k]))
	}
	w.close('}')
}

func (w *canonWriter) stream(st *StreamStats) {
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
}

func (w *canonWriter) contractValidation(c *ContractValidation) {
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

func (w *canonWriter) errorRecord(r *ErrorRecord) {
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
}

func (w *canonWriter) modelRouting(r *ModelRouting) {
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

func (w *canonWriter) toolCall(tc *ToolCall) {
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
}

func (w *canonWriter) factChange(h *FactChange) {
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

func (w *canonWriter) tokens(t *Tokens) {
	w.open('{')
	w.key("input")
	w.int(t.Input)
	w.key("output")
	w.int(t.Output)
	w.close('}')
}

func (w *canonWriter) fact(id string, f *Fact) {
	if f == nil {
		w.null()
		return
	}
	w.open('{')
	w.key("confidence")
	w.optFloat(f.Confidence)
	w.key("history")
	cachedList(w, w.hc.history(id), f.History, (*canonWriter).factChange)
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

// CacheHashes makes the state keep what HashV1 writes, for the next HashV1
// (see hashCache): for a state hashed in the old form at every checkpoint
// of a long chain (verify on a chain written before session 5). It costs
// memory about the size of the state's JSON. Hash keeps what it needs
// without being asked.
func (s *State) CacheHashes() {
	if s.hc == nil {
		s.hc = &hashCache{}
	}
}

// The hash cache. A checkpoint's state hash covers the whole state, which
// grows with the chain, so hashing it at every checkpoint is quadratic in
// the chain whatever is done (see docs/performance.md); what can be
// avoided is writing the same JSON again. A State told to (CacheHashes)
// keeps the canonical JSON of its lists' elements: the append-only lists (tool calls, errors, contract checks,
// model routings, the unfolded seqs, each fact's history) only ever get
// new elements, and a step changes in place only through stepFor and
// applyStepStart, which mark it (touchStep). Each hash then writes only
// what is new or changed and feeds the rest to SHA-256 as it is: the same
// bytes, so the same hash.
type hashCache struct {
	lists [numCachedLists]listCache // the append-only lists
	steps listCache
	// stepsClean is how many leading steps are unchanged since the last
	// hash.
	stepsClean int
	facts      map[string]*listCache // by fact id: an add keeps the history
	// v2 keeps Hash's running hashes and trees (state_hash2.go).
	v2 *stateHasher
}

// touchStep notes that Steps[i] changed in place or was appended.
func (c *hashCache) touchStep(i int) {
	if i < c.stepsClean {
		c.stepsClean = i
	}
	if c.v2 != nil {
		c.v2.touchStep(i)
	}
}

// touchFact notes that the fact changed or was added.
func (c *hashCache) touchFact(id string) {
	if c.v2 != nil {
		c.v2.touchFact(id)
	}
}

// listCache is the canonical JSON of a list's first n elements, joined
// by commas; ends[i] is where element i ends (kept for steps only). base
// is the list's first element: another array means another list.
type listCache struct {
	base  any
	n     int
	bytes []byte
	ends  []int
	keep  bool // keep ends
}

// The append-only lists a hashCache keeps.
const (
	cacheContracts = iota
	cacheErrors
	cacheRoutings
	cacheToolCalls
	cacheUnknown
	numCachedLists
)

func (c *hashCache) list(k int) *listCache {
	if c == nil {
		return nil
	}
	return &c.lists[k]
}

func (c *hashCache) stepList() *listCache {
	if c == nil {
		return nil
	}
	c.steps.keep = true
	if c.stepsClean < c.steps.n {
		// Steps changed in place from stepsClean on: their JSON is
		// written again.
		c.steps.n = c.stepsClean
		end := 0
		if c.stepsClean > 0 {
			end = c.steps.ends[c.stepsClean-1]
		}
		c.steps.bytes = c.steps.bytes[:end]
		c.steps.ends = c.steps.ends[:c.stepsClean]
	}
	return &c.steps
}

func (c *hashCache) history(id string) *listCache {
	if c == nil {
		return nil
	}
	if c.facts == nil {
		c.facts = map[string]*listCache{}
	}
	l := c.facts[id]
	if l == nil {
		l = &listCache{}
		c.facts[id] = l
	}
	return l
}

// cachedList writes l as a JSON list (null when nil), from c when it has
// its first elements.
func cachedList[T any](w *canonWriter, c *listCache, l []T, write func(*canonWriter, *T)) {
	if l == nil {
		w.null()
		return
	}
	if c == nil {
		w.open('[')
		for i := range l {
			w.elem()
			write(w, &l[i])
			w.maybeFlush()
		}
		w.close(']')
		return
	}
	if len(l) > 0 {
		if base, _ := c.base.(*T); base != &l[0] || c.n > len(l) {
			c.n, c.bytes, c.ends = 0, c.bytes[:0], c.ends[:0]
		}
		c.base = &l[0]
	} else {
		c.base, c.n, c.bytes, c.ends = nil, 0, c.bytes[:0], c.ends[:0]
	}
	if c.n < len(l) {
		cw := canonWriter{comma: c.n > 0}
		cw.buf = *bytes.NewBuffer(c.bytes)
		for i := c.n; i < len(l); i++ {
			cw.elem()
			write(&cw, &l[i])
			if c.keep {
				c.ends = append(c.ends, cw.buf.Len())
			}
		}
		if cw.err != nil && w.err == nil {
			w.err = cw.err
		}
		c.bytes, c.n = cw.buf.Bytes(), len(l)
	}
	w.open('[')
	w.raw(c.bytes)
	w.close(']')
}

// raw writes bytes that are canonical JSON already.
func (w *canonWriter) raw(b []byte) {
	if w.h != nil && len(b) > 4<<10 {
		w.flush()
		w.h.Write(b)
		return
	}
	w.buf.Write(b)
}
