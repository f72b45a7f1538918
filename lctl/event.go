package lctl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Version is the LCTL specification version this package reads and writes.
const Version = "4.0"

// Core event types of LCTL v4.0 (part 1) and its extensions (parts 4, 9, 10).
const (
	TypeStepStart          = "step_start"
	TypeStepEnd            = "step_end"
	TypeFactAdded          = "fact_added"
	TypeFactModified       = "fact_modified"
	TypeToolCall           = "tool_call"
	TypeError              = "error"
	TypeCheckpoint         = "checkpoint"
	TypeContractValidation = "contract_validation"
	TypeModelRouting       = "model_routing"
	TypeStreamStart        = "stream_start"
	TypeStreamChunk        = "stream_chunk"
	TypeStreamEnd          = "stream_end"
)

// XCT's own event types, documented in docs/events.md; lctl/xctevent has
// a Go type for each. The reducer folds the first three; the others it
// knows (they are not "unknown types") and only counts.
const (
	TypeRunStarted  = "run_started"
	TypeVerdict     = "verdict"
	TypeRunFinished = "run_finished"

	TypeApprovalRequested = "approval_requested"
	TypeApprovalDecided   = "approval_decided"
	TypeStepInDoubt       = "step_in_doubt"
	TypeRunReleased       = "run_released"
	TypeRunResumed        = "run_resumed"
	TypeRollbackStarted   = "rollback_started"
	TypeRollbackFinished  = "rollback_finished"
	TypeSignedCheckpoint  = "signed_checkpoint"
)

// IsXCTType reports whether t is one of XCT's own event types.
func IsXCTType(t string) bool {
	switch t {
	case TypeRunStarted, TypeVerdict, TypeRunFinished, TypeApprovalRequested, TypeApprovalDecided,
		TypeStepInDoubt, TypeRunReleased, TypeRunResumed, TypeRollbackStarted, TypeRollbackFinished,
		TypeSignedCheckpoint:
		return true
	}
	return false
}

// Event is one LCTL event. Seq, Type, Timestamp, Agent and Data are the
// spec's fields; ChainID, PrevHash and Hash make the chain tamper-evident.
// Timestamp is kept as the exact text that was hashed.
type Event struct {
	ChainID   string         `json:"chain_id,omitempty"`
	Seq       uint64         `json:"seq"`
	Type      string         `json:"type"`
	Timestamp string         `json:"timestamp"`
	Agent     string         `json:"agent"`
	Data      map[string]any `json:"data"`
	PrevHash  string         `json:"prev_hash,omitempty"`
	Hash      string         `json:"hash,omitempty"`
	// Extra keeps fields other implementations put on an event beyond the
	// spec's, so reading and writing a file loses nothing. They are part of
	// the canonical form, so they are covered by the hash. XCT never writes
	// any.
	Extra map[string]any `json:"-"`
	// fields holds the data's members in file order instead of Data when
	// the event was streamed with StreamOptions.Fields (Data is nil then):
	// no map per event. Get, Lookup, RangeData and DataMap read either.
	fields []dataField
	// raw holds the bytes of the data's objects and arrays (streamed with
	// Fields): they are checked as they are read but decoded only when
	// asked for (compositeField).
	raw []byte
	// when is Timestamp parsed, set by the stream (with Fields) on its
	// decoding cores: whenSet 1 parsed, 2 does not parse, 0 not yet.
	when    time.Time
	whenSet uint8
	// skipped says the stream checked the event's data but did not
	// decode it (StreamOptions.Data): reading it is a caller's mistake.
	skipped bool
	// pairSet says the stream read the data's tokens as TokenPair reads
	// them (pairIn, pairOut), on its decoding core (TokenPair).
	pairSet         bool
	pairIn, pairOut int64
}

// dataField is one member of an event's data. A number is kept typed (n,
// with v numberField), not boxed in an any; Get boxes it on demand, Float
// reads it without. Every other value is v, as encoding/json gives it.
type dataField struct {
	key string
	v   any
	n   float64
}

// numberField marks a dataField whose value is n.
var numberField any = new(numberMark)

// compositeField marks a dataField whose value is an object or an array
// kept as its JSON in the event's raw bytes: n is where (rawAt).
var compositeField any = new(compositeMark)

// textField marks a dataField whose value is a string of plain ASCII
// (no escape) longer than internMax, kept in the event's raw bytes: n is
// where (rawAt). Intents, findings and messages are read once if at all;
// as a string in an any each was two allocations (the bytes, the header).
var textField any = new(textMark)

// unreadField marks a dataField whose value the stream checked but did
// not keep (StreamOptions.Unread): reading it panics.
var unreadField any = new(unreadMark)

// The marks' types: each has one value, the mark, so that a field is
// told to be one by its type alone (a type assertion, where comparing
// two interfaces calls the runtime).
type (
	numberMark    struct{ _ byte }
	compositeMark struct{ _ byte }
	textMark      struct{ _ byte }
	unreadMark    struct{ _ byte }
)

// notUnread panics when f is a member the stream was told is not read.
func (e *Event) notUnread(f *dataField) {
	if _, ok := f.v.(*unreadMark); ok {
		panic("lctl: the " + f.key + " of a " + e.Type + " event was read, but the stream was told it is not (StreamOptions.Unread)")
	}
}

// isNumber says f's value is n (numberField).
func (f *dataField) isNumber() bool {
	_, ok := f.v.(*numberMark)
	return ok
}

// isComposite says f's value is JSON in the event's raw bytes
// (compositeField).
func (f *dataField) isComposite() bool {
	_, ok := f.v.(*compositeMark)
	return ok
}

// isText says f's value is a string in the event's raw bytes
// (textField).
func (f *dataField) isText() bool {
	_, ok := f.v.(*textMark)
	return ok
}

// text returns the string of a textField: over the event's raw bytes,
// which are never written again once kept (keepRaw).
func (e *Event) text(f *dataField) string {
	b := e.rawAt(f)
	return unsafe.String(unsafe.SliceData(b), len(b)) //nolint:gosec // immutable bytes, see above
}

// rawSpan packs where a composite value lies in Event.raw into a
// dataField's n (exact: below 2^53).
func rawSpan(off, n int) float64 { return float64(off)*(1<<24) + float64(n) }

// maxRawSpan bounds what rawSpan packs: a larger value is decoded at once.
const maxRawSpan = 1 << 24

// rawAt returns the JSON of a compositeField.
func (e *Event) rawAt(f *dataField) []byte {
	off := int(f.n / (1 << 24))
	n := int(f.n - float64(off)*(1<<24))
	return e.raw[off : off+n]
}

// noData panics when e's data was checked but not decoded: the caller
// told the stream (StreamOptions.Data) that it reads no data of events of
// e's type, and reads it. It is called where data is read from Data, which
// such an event has none of (its fields are nil too).
func (e *Event) noData() {
	if e.skipped {
		panic("lctl: the data of a " + e.Type + " event was read, but the stream was told it is not (StreamOptions.Data)")
	}
}

// value returns member f's value as encoding/json gives it.
func (e *Event) value(f *dataField) any {
	switch {
	case f.isNumber():
		if !math.Signbit(f.n) && f.n < float64(len(smallNumbers)) && f.n == math.Trunc(f.n) {
			return smallNumbers[int(f.n)]
		}
		return f.n
	case f.isComposite():
		return decodeComposite(e.rawAt(f))
	case f.isText():
		return e.text(f)
	}
	e.notUnread(f)
	return f.v
}

// Get returns the data member key (nil when there is none), whether the
// event's data was decoded into Data or streamed as fields.
func (e *Event) Get(key string) any {
	v, _ := e.Lookup(key)
	return v
}

// field returns the last member named key (a key given twice: the last
// one counts, as in a map decoded by encoding/json), nil when there is
// none.
func (e *Event) field(key string) *dataField {
	// The slice in a local: read through e, its length and address were
	// loaded again at every member (the compiler cannot tell that nothing
	// in the loop writes e), with a bounds check each.
	fs := e.fields
	for i := len(fs) - 1; i >= 0; i-- {
		f := &fs[i]
		if len(f.key) != len(key) {
			continue
		}
		// A known key is the very string a caller names it by (knownKey
		// returns the literal, and the linker keeps one copy of each):
		// equal without comparing bytes. Keys of one length mostly
		// differ in their first byte (step and tool, intent and tokens).
		if unsafe.StringData(f.key) == unsafe.StringData(key) || len(key) == 0 || f.key[0] == key[0] && f.key == key { //nolint:gosec // two addresses compared, nothing read through them
			return f
		}
	}
	return nil
}

// Lookup returns the data member key and whether the data has it.
func (e *Event) Lookup(key string) (any, bool) {
	if e.fields == nil || e.Data != nil {
		e.noData()
		v, ok := e.Data[key]
		return v, ok
	}
	if f := e.field(key); f != nil {
		return e.value(f), true
	}
	return nil, false
}

// Str returns the data member key when it is a string: e.Get(key).(string)
// without boxing a streamed value.
func (e *Event) Str(key string) (string, bool) {
	if e.fields == nil || e.Data != nil {
		e.noData()
		s, ok := e.Data[key].(string)
		return s, ok
	}
	if f := e.field(key); f != nil {
		s, ok := f.v.(string)
		if !ok {
			if f.isText() {
				return e.text(f), true
			}
			e.notUnread(f)
		}
		return s, ok
	}
	return "", false
}

// Float returns the data member key when it is a float64 (every JSON
// number, as encoding/json decodes it) that is finite: e.Get(key).(float64)
// without boxing a streamed value. Data set by Go code may hold other
// number types; callers that accept those fall back to Get.
func (e *Event) Float(key string) (float64, bool) {
	var f float64
	if e.fields == nil || e.Data != nil {
		e.noData()
		x, ok := e.Data[key].(float64)
		if !ok {
			return 0, false
		}
		f = x
	} else {
		m := e.field(key)
		if m == nil {
			return 0, false
		}
		if m.isNumber() {
			f = m.n
		} else {
			x, ok := m.v.(float64)
			if !ok {
				e.notUnread(m)
				return 0, false
			}
			f = x
		}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// TokenPair is Object("tokens") and that object's TokenPair, when the
// stream (StreamOptions.Fields) read them on its decoding core, with the
// object's bytes just read: the goroutine that applies the events read
// them again much later, often on the other core, and waited for memory
// (a tenth of its time in replay). ok false says nothing: ask Object.
func (e *Event) TokenPair() (in, out int64, ok bool) {
	if !e.pairSet || e.fields == nil || e.Data != nil {
		return 0, 0, false
	}
	return e.pairIn, e.pairOut, true
}

// Object is a view of an object in an event's data (Event.Object): its
// members read without making a map when the event was streamed.
type Object struct {
	m   map[string]any
	raw []byte
}

// Object returns the data member key when it is an object.
func (e *Event) Object(key string) (Object, bool) {
	if e.fields == nil || e.Data != nil {
		e.noData()
		m, ok := e.Data[key].(map[string]any)
		return Object{m: m}, ok
	}
	f := e.field(key)
	if f == nil {
		return Object{}, false
	}
	if f.isComposite() {
		raw := e.rawAt(f)
		return Object{raw: raw}, raw[0] == '{'
	}
	m, ok := f.v.(map[string]any)
	if !ok {
		e.notUnread(f)
	}
	return Object{m: m}, ok
}

// EachObject calls fn with each element of the data member key that is
// an object, when the member is an array.
func (e *Event) EachObject(key string, fn func(Object)) {
	if e.fields == nil || e.Data != nil {
		e.noData()
		eachObject(e.Data[key], fn)
		return
	}
	f := e.field(key)
	if f == nil {
		return
	}
	if !f.isComposite() {
		e.notUnread(f)
		eachObject(f.v, fn)
		return
	}
	raw := e.rawAt(f)
	if raw[0] != '[' {
		return
	}
	// The array was checked when it was read: its elements are found
	// without a parser (checkedEnd).
	i := 1
	for {
		i = skipWS(raw, i)
		if i < len(raw) && raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
		if i >= len(raw) || raw[i] == ']' {
			return
		}
		end := checkedEnd(raw, i)
		if raw[i] == '{' {
			fn(Object{raw: raw[i:end]})
		}
		i = end
	}
}

// AppendStrs appends, for each element of the array member key that is an
// object whose member name is a non-empty string, that string after first
// (the first one appended) or sep (each next one), and returns how many
// it appended: what EachObject with Object.AppendStr gives, read in one
// pass over a streamed array of flat objects of plain strings (a
// verdict's reasons and their rule ids, which EachObject, checkedEnd and
// flatAt walked three times: a thousand instructions a verdict line).
// Any other array, or data read into Data, goes through EachObject.
func (e *Event) AppendStrs(dst []byte, key, name, first, sep string) ([]byte, int) {
	if e.fields != nil && e.Data == nil {
		if f := e.field(key); f != nil && f.isComposite() {
			if out, n, ok := appendFlatStrs(dst, e.rawAt(f), name, first, sep); ok {
				return out, n
			}
		}
	}
	n := 0
	e.EachObject(key, func(o Object) {
		at := len(dst)
		with := append(dst, sep...)
		if n == 0 {
			with = append(dst, first...)
		}
		if b, ok := o.AppendStr(with, name); ok && len(b) > len(with) {
			dst = b
			n++
		} else {
			dst = with[:at]
		}
	})
	return dst, n
}

// appendFlatStrs is AppendStrs for raw, an array's checked JSON, whose
// elements are all objects of plain keys and values that are plain strings
// (no escape) or scalars; ok false, having appended nothing, for any
// other (not an array, an element that is not an object, a nested value,
// an escape), which EachObject reads. Like flatAt it takes the last
// member named name, and reads commas and white space alike between
// tokens (the bytes were checked when they were read).
func appendFlatStrs(dst, raw []byte, name, first, sep string) ([]byte, int, bool) {
	if len(raw) < 2 || raw[0] != '[' {
		return dst, 0, false
	}
	if v, ok := onlyMember(raw, name); ok {
		// The array nearly every verdict's reasons are.
		if len(v) == 0 {
			return dst, 0, true
		}
		dst = append(dst, first...)
		return append(dst, v...), 1, true
	}
	start := len(dst)
	n := 0
	i := 1
	for {
		for i < len(raw) && (raw[i] == ',' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
			i++
		}
		if i >= len(raw) || raw[i] != '{' {
			if i < len(raw) && raw[i] == ']' {
				return dst, n, true
			}
			return dst[:start], 0, false
		}
		i++
		from, to := -1, -1 // the last member named name's string
		for {
			for i < len(raw) && (raw[i] == ',' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
				i++
			}
			if i >= len(raw) {
				return dst[:start], 0, false
			}
			if raw[i] == '}' {
				i++
				break
			}
			if raw[i] != '"' {
				return dst[:start], 0, false
			}
			end, ok := plainStringEnd(raw, i+1)
			if !ok {
				return dst[:start], 0, false
			}
			named := end-i-1 == len(name) && string(raw[i+1:end]) == name
			i = end + 1
			for i < len(raw) && (raw[i] == ':' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
				i++
			}
			if i >= len(raw) {
				return dst[:start], 0, false
			}
			switch raw[i] {
			case '"':
				if end, ok = plainStringEnd(raw, i+1); !ok {
					return dst[:start], 0, false
				}
				if named {
					from, to = i+1, end
				}
				i = end + 1
			case '{', '[':
				return dst[:start], 0, false
			default: // a number or a literal: up to the next comma or brace
				if named {
					from, to = -1, -1
				}
				for i < len(raw) && raw[i] != ',' && raw[i] != '}' {
					i++
				}
			}
		}
		if to > from {
			if n == 0 {
				dst = append(dst, first...)
			} else {
				dst = append(dst, sep...)
			}
			dst = append(dst, raw[from:to]...)
			n++
		}
	}
}

// onlyMember returns the string of raw's one member when raw, an
// array's checked JSON, is one object whose one member is name and a
// plain string (no escape), written as json.dumps or canonical JSON
// writes it: [{"NAME": "V"}] or [{"NAME":"V"}], nothing else between
// its tokens. ok false for any other array, which the loop of
// appendFlatStrs reads: a verdict's reasons went through it member by
// member, ~600 instructions a line of replay.
func onlyMember(raw []byte, name string) ([]byte, bool) {
	n := len(name)
	// [{" name ": at least, then a space or not, a quote, "}] at the end.
	if len(raw) < n+10 || raw[1] != '{' || raw[2] != '"' || string(raw[3:3+n]) != name || raw[3+n] != '"' || raw[4+n] != ':' {
		return nil, false
	}
	i := 5 + n
	if raw[i] == ' ' {
		i++
	}
	if raw[i] != '"' {
		return nil, false
	}
	end, ok := plainStringEnd(raw, i+1)
	if !ok || end != len(raw)-3 || raw[end+1] != '}' || raw[end+2] != ']' {
		return nil, false
	}
	return raw[i+1 : end], true
}

// checkedEnd returns where the JSON value that starts at b[i] ends, for
// bytes checked as JSON when they were read (a stream's composite data):
// strings, with their escapes, are stepped over as a whole, brackets
// counted, a number or literal ends at the next delimiter.
func checkedEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return checkedStringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = checkedStringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// checkedStringEnd returns where the checked JSON string at b[i] ends
// (after its closing quote).
func checkedStringEnd(b []byte, i int) int {
	i++
	for {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 {
			return len(b)
		}
		i += k
		// The quote closes the string unless an odd number of
		// backslashes stands before it.
		n := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
}

func eachObject(v any, fn func(Object)) {
	list, _ := v.([]any)
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			fn(Object{m: m})
		}
	}
}

// Len returns how many members the object has, a key given twice counted
// once (as in the map Get answers from): a streamed object's keys are
// read and its values skipped, nothing decoded.
func (o Object) Len() int {
	if o.raw == nil {
		return len(o.m)
	}
	if n, ok := sortedLen(o.raw); ok {
		return n
	}
	p := fastParsers.Get().(*fastParser)
	defer fastParsers.Put(p)
	p.b, p.i = o.raw, 1
	var keys []string
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] == '}' {
			break
		}
		if p.b[p.i] == ',' {
			p.i++
			p.ws()
		}
		k, ok := p.key()
		if !ok {
			break // checked when read: cannot happen
		}
		keys = append(keys, k)
		p.ws()
		p.i++ // :
		p.ws()
		if !p.skipValue() {
			break // checked when read: cannot happen
		}
	}
	slices.Sort(keys)
	return len(slices.Compact(keys))
}

// sortedLen counts the members of an object whose keys have no escapes
// and come in increasing order of their bytes (as canonical JSON and
// Python's sort_keys write them: a checkpoint's facts_snapshot), so that
// none is given twice: its keys found without a parser, its values
// stepped over (checkedEnd: the bytes were checked when they were read).
// false for any other object, which Len reads the general way.
func sortedLen(raw []byte) (int, bool) {
	n := 0
	var prev []byte
	i := 1
	for {
		for i < len(raw) && (raw[i] == ',' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
			i++
		}
		if i >= len(raw) || raw[i] == '}' {
			return n, true
		}
		if raw[i] != '"' {
			return 0, false
		}
		end, ok := plainStringEnd(raw, i+1)
		if !ok {
			return 0, false
		}
		key := raw[i+1 : end]
		if n > 0 && bytes.Compare(prev, key) >= 0 {
			return 0, false
		}
		prev, n = key, n+1
		i = end + 1
		for i < len(raw) && (raw[i] == ':' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
			i++
		}
		if i >= len(raw) {
			return 0, false
		}
		i = checkedEnd(raw, i)
	}
}

// Get returns the object's member name (nil when there is none).
func (o Object) Get(name string) any {
	if o.raw == nil {
		return o.m[name]
	}
	return o.getAt(o.at(name))
}

// getAt is Get of the member whose value starts at off (-1: none) in a
// streamed object.
func (o Object) getAt(off int) any {
	if off < 0 {
		return nil
	}
	p := fastParsers.Get().(*fastParser)
	defer fastParsers.Put(p)
	p.b, p.i = o.raw, off
	v, _ := p.value()
	return v
}

// Float returns the member name when it is a finite float64 (a JSON
// number), without boxing it.
func (o Object) Float(name string) (float64, bool) {
	var f float64
	if o.raw == nil {
		x, ok := o.m[name].(float64)
		if !ok {
			return 0, false
		}
		f = x
	} else {
		return o.floatAt(o.at(name))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// floatAt is Float of the member whose value starts at off (-1: none) in
// a streamed object.
func (o Object) floatAt(off int) (float64, bool) {
	if off < 0 {
		return 0, false
	}
	if c := o.raw[off]; c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	f, _, _, ok := scanNumber(o.raw, off)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// Str returns the member name when it is a string.
func (o Object) Str(name string) (string, bool) {
	if o.raw != nil {
		// A string without escapes (checked when read) is its bytes.
		off := o.at(name)
		if off < 0 || o.raw[off] != '"' {
			return "", false
		}
		if end := bytes.IndexByte(o.raw[off+1:], '"'); end >= 0 {
			if v := o.raw[off+1 : off+1+end]; bytes.IndexByte(v, '\\') < 0 {
				return string(v), true
			}
		}
	}
	s, ok := o.Get(name).(string)
	return s, ok
}

// AppendStr appends the member name to dst when it is a string, and says
// whether it is: Str without making the string (a verdict's rule ids,
// written into replay's lines).
func (o Object) AppendStr(dst []byte, name string) ([]byte, bool) {
	if o.raw != nil {
		off := o.at(name)
		if off < 0 || o.raw[off] != '"' {
			return dst, false
		}
		if end, ok := plainStringEnd(o.raw, off+1); ok {
			return append(dst, o.raw[off+1:end]...), true
		}
	}
	s, ok := o.Str(name)
	return append(dst, s...), ok
}

// at returns where the value of member name lies in the object's JSON
// (the last such member, as a map decoded by encoding/json keeps it), -1
// when there is none.
func (o Object) at(name string) int {
	if off, ok := flatAt(o.raw, name); ok {
		return off
	}
	return parsedAt(o.raw, name)
}

// parsedAt is at read with the parser: for any object.
func parsedAt(raw []byte, name string) int {
	p := fastParsers.Get().(*fastParser)
	defer fastParsers.Put(p)
	p.b, p.i = raw, 1
	found := -1
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] == '}' {
			return found
		}
		if p.b[p.i] == ',' {
			p.i++
			p.ws()
		}
		var match bool
		if raw, ok := p.rawString(); ok {
			match = string(raw) == name
		} else if k, ok := p.str(); ok {
			match = k == name
		} else {
			return -1 // checked when read: cannot happen
		}
		p.ws()
		p.i++ // :
		p.ws()
		if match {
			found = p.i
		}
		if !p.skipValue() {
			return -1
		}
	}
}

// TokenPair reads a streamed tokens object of the shape nearly every
// step_end carries, `{"input": 301, "output": 41}` (no space, or one after
// each colon and comma, as canonical JSON and Python's separators write
// it), each count a whole number of up to 15 digits: its two counts, what
// every reader of a tokens object finds in it (input and output are the
// first names each looks for, and no other member is there). ok is false
// for any other object or layout, which the caller reads its own way
// (Members): on a step_end this saves the walk over the object and the
// look at eight names per member, twice an event for replay and stats.
func (o Object) TokenPair() (in, out int64, ok bool) {
	b := o.raw
	// `{"input":` then, after the first count, `,"output":`; each may
	// have a space after its last byte.
	const inKey, outKey = `{"input":`, `"output":`
	if len(b) < len(inKey)+len(outKey)+4 || string(b[:len(inKey)]) != inKey {
		return 0, 0, false
	}
	i := len(inKey)
	if b[i] == ' ' {
		i++
	}
	if in, i, ok = pairCount(b, i); !ok || i+1+len(outKey) >= len(b) || b[i] != ',' {
		return 0, 0, false
	}
	if i++; b[i] == ' ' {
		i++
	}
	if i+len(outKey) >= len(b) || string(b[i:i+len(outKey)]) != outKey {
		return 0, 0, false
	}
	if i += len(outKey); b[i] == ' ' {
		i++
	}
	if out, i, ok = pairCount(b, i); !ok || i != len(b)-1 || b[i] != '}' {
		return 0, 0, false
	}
	return in, out, true
}

// pairCount reads the whole number of up to 15 digits at b[i] (0, or no
// leading zero), which a byte other than a digit, '.', 'e' or 'E' must
// follow; it returns the number and where that byte is.
func pairCount(b []byte, i int) (int64, int, bool) {
	if i >= len(b) || b[i]-'0' > 9 {
		return 0, 0, false
	}
	if b[i] == '0' {
		if i+1 < len(b) && (b[i+1]-'0' <= 9 || b[i+1] == '.' || b[i+1] == 'e' || b[i+1] == 'E') {
			return 0, 0, false
		}
		return 0, i + 1, true
	}
	var n int64
	j := i
	for ; j < len(b) && j-i < 16 && b[j]-'0' <= 9; j++ {
		n = n*10 + int64(b[j]-'0')
	}
	if j-i > 15 || j >= len(b) || b[j] == '.' || b[j] == 'e' || b[j] == 'E' {
		return 0, 0, false
	}
	return n, j, true
}

// Members is an object with the places of some of its members found in
// one pass over its JSON, for a caller that reads several (a tokens
// object's names for input and output): Float(i) and Get(i) are the
// object's Float(names[i]) and Get(names[i]).
type Members struct {
	o     Object
	names []string
	// at[i] is o.at(names[i]); flat is false when the one pass could not
	// find them (o.at is asked then).
	at   [maxMembers]int
	flat bool
}

// maxMembers bounds the names Members looks for at once.
const maxMembers = 8

// Members finds the members names (at most 8) of a streamed object in one
// pass; for a decoded object it only keeps them.
func (o Object) Members(names []string) Members {
	m := Members{o: o, names: names}
	if o.raw != nil && len(names) <= maxMembers {
		m.flat = flatAtAll(o.raw, names, m.at[:len(names)])
	}
	return m
}

// off is o.at(names[i]).
func (m *Members) off(i int) int {
	if m.flat {
		return m.at[i]
	}
	return m.o.at(m.names[i])
}

// Float is the object's Float(names[i]).
func (m *Members) Float(i int) (float64, bool) {
	if m.o.raw == nil {
		return m.o.Float(m.names[i])
	}
	return m.o.floatAt(m.off(i))
}

// Get is the object's Get(names[i]).
func (m *Members) Get(i int) any {
	if m.o.raw == nil {
		return m.o.m[m.names[i]]
	}
	return m.o.getAt(m.off(i))
}

// flatAtAll is flatAt for several names at once: at[i] is where the value
// of the last member names[i] starts, -1 for none; false when the object
// is not flat (flatAt's false).
func flatAtAll(raw []byte, names []string, at []int) bool {
	for k := range at {
		at[k] = -1
	}
	i := 1
	for {
		for i < len(raw) && (raw[i] == ',' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
			i++
		}
		if i >= len(raw) || raw[i] == '}' {
			return true
		}
		if raw[i] != '"' {
			return false
		}
		end, ok := plainStringEnd(raw, i+1)
		if !ok {
			return false
		}
		key := raw[i+1 : end]
		i = end + 1
		for i < len(raw) && (raw[i] == ':' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
			i++
		}
		if i >= len(raw) {
			return false
		}
		for k, name := range names {
			if len(name) == len(key) && string(key) == name {
				at[k] = i
			}
		}
		switch raw[i] {
		case '"':
			if i, ok = plainStringEnd(raw, i+1); !ok {
				return false
			}
			i++
		case '{', '[':
			return false
		default: // a number or a literal: up to the next comma or brace
			for i < len(raw) && raw[i] != ',' && raw[i] != '}' {
				i++
			}
		}
	}
}

// plainStringEnd returns where the string whose bytes start at raw[i]
// (after its opening quote) ends (its closing quote); false when it holds
// an escape or does not end. Eight bytes at a time (special), stepping
// over bytes past ASCII.
func plainStringEnd(raw []byte, i int) (int, bool) {
	for k := i; k < len(raw); {
		e := k + specialIndex(raw[k:])
		if e == len(raw) {
			break
		}
		switch raw[e] {
		case '"':
			return e, true
		case '\\':
			return 0, false
		}
		k = e + 1 // a byte past ASCII (or below 0x20): read on after it
	}
	return 0, false
}

// flatAt is at for an object of plain keys and scalar values (a tokens
// object), read without a parser; ok false when the object has anything
// else (an escape, a nested value), for at to read it the general way.
// The bytes were checked when they were read.
func flatAt(raw []byte, name string) (int, bool) {
	found := -1
	i := 1
	for {
		for i < len(raw) && (raw[i] == ',' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
			i++
		}
		if i >= len(raw) || raw[i] == '}' {
			return found, true
		}
		if raw[i] != '"' {
			return 0, false
		}
		end, ok := plainStringEnd(raw, i+1)
		if !ok {
			return 0, false
		}
		key := raw[i+1 : end]
		i = end + 1
		for i < len(raw) && (raw[i] == ':' || raw[i] <= ' ' && wsBits>>raw[i]&1 != 0) {
			i++
		}
		if i >= len(raw) {
			return 0, false
		}
		if len(key) == len(name) && string(key) == name {
			found = i
		}
		switch raw[i] {
		case '"':
			if i, ok = plainStringEnd(raw, i+1); !ok {
				return 0, false
			}
			i++
		case '{', '[':
			return 0, false
		default: // a number or a literal: up to the next comma or brace
			for i < len(raw) && raw[i] != ',' && raw[i] != '}' {
				i++
			}
		}
	}
}

// decodeComposite decodes an object or array checked by the stream's
// reader, as the reader would have (its values are encoding/json's).
func decodeComposite(raw []byte) any {
	p := fastParsers.Get().(*fastParser)
	p.b, p.i = raw, 0
	v, ok := p.value()
	fastParsers.Put(p)
	if !ok {
		// Cannot happen (the bytes were checked as they were read);
		// encoding/json decides all the same.
		_ = json.Unmarshal(raw, &v)
	}
	return v
}

// DataLen returns how many members the data has.
func (e *Event) DataLen() int {
	if e.fields == nil || e.Data != nil {
		e.noData()
		return len(e.Data)
	}
	n := 0
	for i := range e.fields {
		if e.lastOf(i) {
			n++
		}
	}
	return n
}

// lastOf reports whether fields[i] is the last member with its key.
func (e *Event) lastOf(i int) bool {
	for j := i + 1; j < len(e.fields); j++ {
		if e.fields[j].key == e.fields[i].key {
			return false
		}
	}
	return true
}

// RangeData calls fn with each member of the data (each key once, with
// its value as Get gives it), in no particular order.
func (e *Event) RangeData(fn func(key string, v any)) {
	if e.fields == nil || e.Data != nil {
		e.noData()
		for k, v := range e.Data {
			fn(k, v)
		}
		return
	}
	for i := range e.fields {
		if e.lastOf(i) {
			fn(e.fields[i].key, e.value(&e.fields[i]))
		}
	}
}

// DataMap returns the data as a map: Data, made from the fields (and kept
// in Data) for a streamed event. Making it writes e.Data, so goroutines
// that share a streamed event call it (or ComputeHash) under one owner.
func (e *Event) DataMap() map[string]any {
	if e.fields == nil {
		e.noData()
	}
	if e.Data == nil && e.fields != nil {
		m := make(map[string]any, len(e.fields))
		for i := range e.fields {
			m[e.fields[i].key] = e.value(&e.fields[i])
		}
		e.Data = m
	}
	return e.Data
}

// DropData forgets the event's data (a copy kept for its seq, agent and
// time only).
func (e *Event) DropData() { e.Data, e.fields, e.raw = nil, nil, nil }

// Own returns a copy of e whose data fields are its own: how a streamed
// event (StreamOptions.Fields) is kept past its callback, whose batch's
// array of fields the stream reuses.
func (e *Event) Own() Event {
	c := *e
	c.fields = append([]dataField(nil), e.fields...)
	if e.fields != nil && c.fields == nil {
		c.fields = []dataField{}
	}
	return c
}

// OwnInto sets *dst to Own's copy of e, reusing dst's array of data
// fields: a caller that keeps the latest of many events copies each
// without allocating.
func (e *Event) OwnInto(dst *Event) {
	fields := dst.fields[:0]
	*dst = *e
	dst.fields = nil
	if e.fields != nil {
		dst.fields = append(fields, e.fields...)
		if dst.fields == nil {
			dst.fields = []dataField{}
		}
	}
}

// timeLayouts are the timestamp forms Time accepts besides RFC 3339: what
// other implementations write (Python's isoformat without a zone, a space
// instead of the T). A timestamp without a zone is taken as UTC.
var timeLayouts = []string{
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
}

// Time parses the event's timestamp; the zero time when it does not parse.
// Besides RFC 3339 it accepts ISO 8601 without a zone (read as UTC) and with
// a space between date and time.
func (e *Event) Time() time.Time {
	t, _ := e.ParsedTime()
	return t
}

// ParsedTime is ParseTime(e.Timestamp), parsed once.
func (e *Event) ParsedTime() (time.Time, bool) {
	switch e.whenSet {
	case 1:
		return e.when, true
	case 2:
		return time.Time{}, false
	}
	return ParseTime(e.Timestamp)
}

// setTime records the parsed timestamp.
func (e *Event) setTime(t time.Time, ok bool) {
	e.when, e.whenSet = t, 2
	if ok {
		e.whenSet = 1
	}
}

// ParseTime parses an event timestamp the way Event.Time does and reports
// whether it could.
func ParseTime(s string) (time.Time, bool) {
	if t, ok := parseTimeFast(s); ok {
		return t, true
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// FormatTime renders t the way events store it: RFC 3339, UTC, nanoseconds.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ComputeHash returns the hash the event should carry: SHA-256 (hex) of the
// canonical JSON of the event without its hash field.
func (e *Event) ComputeHash() (string, error) {
	c, err := e.canonical(false)
	if err != nil {
		return "", fmt.Errorf("hash event %d: %w", e.Seq, err)
	}
	return hashHex(sha256.Sum256(c)), nil
}

// hashHex is sum in lowercase hex, as hex.EncodeToString(sum[:]) in one
// allocation (the string) instead of two.
func hashHex(sum [sha256.Size]byte) string {
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:])
}

// canonical writes the event's canonical JSON, with or without its hash.
// The top-level keys are fixed, so they are written in their sorted order
// (agent, chain_id, data, hash, prev_hash, seq, timestamp, type) directly.
func (e *Event) canonical(withHash bool) ([]byte, error) {
	if len(e.Extra) > 0 {
		return e.canonicalWithExtra(withHash)
	}
	b, _, err := e.canonicalAt(withHash)
	return b, err
}

// canonicalAt is canonical for an event without extra fields, and the
// offset right after "data" where the hash field goes.
func (e *Event) canonicalAt(withHash bool) ([]byte, int, error) {
	var buf bytes.Buffer
	buf.Grow(512)
	at, err := e.canonicalInto(&buf, withHash)
	if err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), at, nil
}

// canonicalInto is canonicalAt writing into buf.
func (e *Event) canonicalInto(buf *bytes.Buffer, withHash bool) (int, error) {
	buf.WriteString(`{"agent":`)
	writeString(buf, e.Agent)
	if e.ChainID != "" {
		buf.WriteString(`,"chain_id":`)
		writeString(buf, e.ChainID)
	}
	buf.WriteString(`,"data":`)
	if err := appendCanonical(buf, dataOrEmpty(e.DataMap())); err != nil {
		return 0, err
	}
	hashAt := buf.Len()
	if withHash && e.Hash != "" {
		buf.WriteString(`,"hash":`)
		writeString(buf, e.Hash)
	}
	if e.PrevHash != "" {
		buf.WriteString(`,"prev_hash":`)
		writeString(buf, e.PrevHash)
	}
	buf.WriteString(`,"seq":`)
	if err := writeNumber(buf, float64(e.Seq)); err != nil {
		return 0, err
	}
	buf.WriteString(`,"timestamp":`)
	writeString(buf, e.Timestamp)
	buf.WriteString(`,"type":`)
	writeString(buf, e.Type)
	buf.WriteByte('}')
	return hashAt, nil
}

// sealBuffers hold the canonical forms SealEncoded hashes; one larger
// than maxPooledSealBuffer (an event with a large payload) is left to the
// collector rather than kept.
var sealBuffers = sync.Pool{New: func() any { b := new(bytes.Buffer); b.Grow(1024); return b }}

const maxPooledSealBuffer = 64 << 10

// SealEncoded seals e after prevHash (as Seal) and returns its canonical
// JSON with the hash (as MarshalJSON), encoding the event once: the hash
// goes into the canonical form it was computed from. A writer that stores
// what it hashed uses it.
func (e *Event) SealEncoded(prevHash string) ([]byte, error) {
	if len(e.Extra) > 0 {
		if err := e.Seal(prevHash); err != nil {
			return nil, err
		}
		return e.canonical(true)
	}
	e.PrevHash, e.Hash = prevHash, ""
	// The form hashed is scratch: encoded into a pooled buffer, it is
	// copied once into the body with the hash.
	buf := sealBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledSealBuffer {
			buf.Reset()
			sealBuffers.Put(buf)
		}
	}()
	buf.Reset()
	at, err := e.canonicalInto(buf, false)
	if err != nil {
		return nil, fmt.Errorf("hash event %d: %w", e.Seq, err)
	}
	c := buf.Bytes()
	e.Hash = hashHex(sha256.Sum256(c))
	const field = `,"hash":"`
	out := make([]byte, 0, len(c)+len(field)+len(e.Hash)+1)
	out = append(out, c[:at]...)
	out = append(out, field...)
	out = append(out, e.Hash...)
	out = append(out, '"')
	return append(out, c[at:]...), nil
}

// canonicalWithExtra is canonical for an event that carries fields beyond
// the spec's: every field goes through the generic canonical encoder, which
// sorts the keys.
func (e *Event) canonicalWithExtra(withHash bool) ([]byte, error) {
	m := make(map[string]any, len(e.Extra)+8)
	for k, v := range e.Extra {
		m[k] = v
	}
	m["agent"] = e.Agent
	if e.ChainID != "" {
		m["chain_id"] = e.ChainID
	}
	m["data"] = dataOrEmpty(e.DataMap())
	if withHash && e.Hash != "" {
		m["hash"] = e.Hash
	}
	if e.PrevHash != "" {
		m["prev_hash"] = e.PrevHash
	}
	m["seq"] = float64(e.Seq)
	m["timestamp"] = e.Timestamp
	m["type"] = e.Type
	return Canonical(m)
}

// Seal sets PrevHash and Hash, linking e after prev (nil for the first event).
func (e *Event) Seal(prevHash string) error {
	e.PrevHash = prevHash
	h, err := e.ComputeHash()
	if err != nil {
		return err
	}
	e.Hash = h
	return nil
}

func dataOrEmpty(d map[string]any) map[string]any {
	if d == nil {
		return map[string]any{}
	}
	return d
}

// DataOf turns a Go value into an event payload that holds only JSON types
// (maps, slices, strings, float64, bool, nil), so it hashes the same after a
// round trip through a file or the stream. Common Go types are converted
// directly; anything else goes through its JSON form.
func DataOf(v any) (map[string]any, error) {
	if m, ok := v.(map[string]any); ok {
		if n, ok := normalize(m); ok {
			return n.(map[string]any), nil
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("event data: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("event data must be a JSON object: %w", err)
	}
	return m, nil
}

// DataShared is DataOf for a payload its caller hands over: what of m
// already holds only JSON values (a map of strings, the decoded arguments
// of a tool) is not copied but shared with the result; only the maps and
// slices on the way to a value that must change (an int, a []string) are
// new. The result equals DataOf(m). Neither m nor the result may be
// changed afterwards.
func DataShared(m map[string]any) (map[string]any, error) {
	if n, _, ok := normalizeShared(m); ok {
		return n.(map[string]any), nil
	}
	return DataOf(m)
}

// normalizeShared is normalize that returns v itself, changed false, where
// v is already JSON values. It accepts and refuses what normalize does.
func normalizeShared(v any) (out any, changed, ok bool) {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return map[string]any{}, true, true // as normalize makes it
		}
		var m map[string]any
		for k, e := range x {
			if !utf8.ValidString(k) {
				return nil, false, false
			}
			n, ch, ok := normalizeShared(e)
			if !ok {
				return nil, false, false
			}
			if !ch {
				continue
			}
			if m == nil {
				m = make(map[string]any, len(x))
				for k2, e2 := range x {
					m[k2] = e2
				}
			}
			m[k] = n
		}
		if m == nil {
			return v, false, true
		}
		return m, true, true
	case []any:
		if x == nil {
			return []any{}, true, true // as normalize makes it
		}
		var l []any
		for i, e := range x {
			n, ch, ok := normalizeShared(e)
			if !ok {
				return nil, false, false
			}
			if !ch {
				continue
			}
			if l == nil {
				l = make([]any, len(x))
				copy(l, x)
			}
			l[i] = n
		}
		if l == nil {
			return v, false, true // v itself: x as an any would be a new interface value
		}
		return l, true, true
	case nil, bool:
		return v, false, true
	case string: // v itself: x as an any would be a new interface value (an allocation)
		return v, false, utf8.ValidString(x)
	case float64:
		return v, false, !math.IsNaN(x) && !math.IsInf(x, 0)
	}
	n, ok := normalize(v)
	return n, ok, ok
}

// normalize copies v into JSON types, or reports false for anything it does
// not convert exactly as encoding/json would.
func normalize(v any) (any, bool) {
	switch x := v.(type) {
	case nil, bool:
		return v, true
	case string: // v itself: x as an any would be a new interface value (an allocation)
		return v, utf8.ValidString(x)
	case float64:
		return v, !math.IsNaN(x) && !math.IsInf(x, 0)
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			n, ok := normalize(e)
			if !ok || !utf8.ValidString(k) {
				return nil, false
			}
			out[k] = n
		}
		return out, true
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if !utf8.ValidString(k) || !utf8.ValidString(e) {
				return nil, false
			}
			out[k] = e
		}
		return out, true
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, ok := normalize(e)
			if !ok {
				return nil, false
			}
			out[i] = n
		}
		return out, true
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			if !utf8.ValidString(e) {
				return nil, false
			}
			out[i] = e
		}
		return out, true
	}
	return nil, false
}

// ErrInvalidChainID is returned for chain ids that are not safe as a NATS
// subject token.
var ErrInvalidChainID = errors.New("chain id must be 1-128 characters of A-Z a-z 0-9 _ -")

// ValidateChainID checks that id is safe in a subject token and a file name.
func ValidateChainID(id string) error {
	if !validChainID(id) {
		return fmt.Errorf("%w: %q", ErrInvalidChainID, id)
	}
	return nil
}

// validChainID says id matches ^[A-Za-z0-9_-]{1,128}$. A loop, not that
// regexp: compiling it (the bound unrolls into 128 states) was ~5 M of
// the ~8 M instructions lctl ran before reading its first byte.
func validChainID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// VerifyError names the first event at which a chain stops checking out.
type VerifyError struct {
	Seq    uint64 // seq of the offending event (or the expected seq when one is missing)
	Index  int    // position in the slice
	Reason string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("event %d (position %d): %s", e.Seq, e.Index+1, e.Reason)
}

// Verify checks a chain: seqs start at 1 and increase by one, each event's
// hash matches its content and each prev_hash links to the previous hash. It
// returns a *VerifyError naming the first event that was edited, removed,
// inserted or reordered. Events without hashes (files from implementations
// that do not hash) fail with a reason that says so.
func Verify(events []Event) error { return VerifyFrom(events, 1) }

// VerifyFrom checks a piece of a chain that starts at event seq from: seqs
// increase by one from it, each event's hash matches its content and each
// prev_hash after the first links to the previous hash. The first event's
// prev_hash is checked only at seq 1 (empty): the events before the piece
// are not there to check it against.
func VerifyFrom(events []Event, from uint64) error {
	if from == 0 {
		from = 1
	}
	prev := ""
	for i := range events {
		e := &events[i]
		want := from + uint64(i)
		if e.Seq != want {
			reason := fmt.Sprintf("seq %d where %d was expected (an event was removed, inserted or reordered)", e.Seq, want)
			return &VerifyError{Seq: e.Seq, Index: i, Reason: reason}
		}
		if e.Hash == "" {
			return &VerifyError{Seq: e.Seq, Index: i, Reason: "event has no hash"}
		}
		if e.PrevHash != prev && (i > 0 || from == 1) {
			return &VerifyError{Seq: e.Seq, Index: i, Reason: "prev_hash does not match the previous event's hash (an event before it was changed, removed or reordered)"}
		}
		h, err := e.ComputeHash()
		if err != nil {
			return &VerifyError{Seq: e.Seq, Index: i, Reason: err.Error()}
		}
		if h != e.Hash {
			return &VerifyError{Seq: e.Seq, Index: i, Reason: "content does not match its hash (the event was edited)"}
		}
		prev = e.Hash
	}
	return nil
}

// MarshalJSON encodes the event as canonical JSON (RFC 8785), the form it is
// stored in on the stream: the same bytes for the same event, always.
func (e Event) MarshalJSON() ([]byte, error) { return e.canonical(true) }
