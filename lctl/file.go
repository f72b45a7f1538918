package lctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// File is an LCTL v4.0 chain file: `lctl: "4.0"`, the chain's id, its events
// and optionally materialized state.
type File struct {
	LCTL   string         `json:"lctl"`
	Chain  ChainRef       `json:"chain"`
	Events []Event        `json:"events"`
	State  map[string]any `json:"state,omitempty"`
	// Extra keeps top-level keys beyond the spec's core (the spec's own
	// examples add streaming and handoff sections), so a file read and
	// written again loses nothing.
	Extra map[string]any `json:"-"`
	// Warnings say what reading the file had to assume or convert: a
	// missing version, a seq written as a string, a numeric timestamp.
	// They are never written.
	Warnings []string `json:"-"`
}

// ChainRef identifies a chain in a file.
type ChainRef struct {
	ID string `json:"id"`
}

// Format is a chain file encoding.
type Format int

// Supported chain file encodings.
const (
	FormatJSON Format = iota
	FormatYAML
)

// String names the format: "json" or "yaml".
func (f Format) String() string {
	if f == FormatYAML {
		return "yaml"
	}
	return "json"
}

// FormatForPath picks the encoding from a file name: .yaml and .yml are YAML,
// everything else JSON.
func FormatForPath(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return FormatYAML
	}
	return FormatJSON
}

// FormatOf picks the encoding of a chain file read from path: by its
// extension, or, when the extension does not say, by its first character
// ('{' or '[' is JSON, anything else YAML).
func FormatOf(path string, raw []byte) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return FormatJSON
	case ".yaml", ".yml":
		return FormatYAML
	}
	if t := bytes.TrimSpace(raw); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return FormatJSON
	}
	return FormatYAML
}

// ChainIDForPath derives a chain id from a file name, for files that do not
// name their chain: the base name without .lctl.json / .lctl.yaml (or any
// extension), with characters that are not allowed in a chain id replaced
// by "-".
func ChainIDForPath(path string) string {
	base := filepath.Base(path)
	for _, suffix := range []string{".lctl.json", ".lctl.yaml", ".lctl.yml"} {
		if strings.HasSuffix(strings.ToLower(base), suffix) {
			base = base[:len(base)-len(suffix)]
			break
		}
	}
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	var b strings.Builder
	for _, r := range base {
		if r < 128 && (r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	id := b.String()
	if len(id) > 128 {
		id = id[:128]
	}
	if id == "" {
		id = "chain"
	}
	return id
}

// NewFile wraps a chain's events in the file format.
func NewFile(chainID string, events []Event) *File {
	return &File{LCTL: Version, Chain: ChainRef{ID: chainID}, Events: events}
}

// MaxFileBytes bounds the size of a chain file read by DecodeFile.
const MaxFileBytes = 1 << 30

// DecodeOptions tune Decode.
type DecodeOptions struct {
	// ChainID names the chain when the file does not (the spec's streaming
	// example has no chain section). Without it such a file is an error.
	ChainID string
}

// DecodeFile reads a chain file. Unknown event types are kept. The file must
// be UTF-8 and have a chain id and events; a version other than 4.x is an
// error (CheckVersion). See
// Decode for what else is accepted.
func DecodeFile(r io.Reader, format Format) (*File, error) {
	return Decode(r, format, DecodeOptions{})
}

// Decode reads a chain file written by XCT or by any other LCTL v4.0
// implementation. It accepts, and notes in File.Warnings: a missing lctl
// version (read as 4.0), a chain given as a plain string, a missing chain id
// when opts.ChainID is set, a seq written as a string, and a timestamp given
// as a Unix time number. Events without hashes are fine here (Verify
// reports them). Keys beyond the spec's are kept in Extra.
//
// Errors name the event by its position in the file, its seq when known and
// its line: "parse chain: event at position 3 (seq 3, line 25): data must be
// an object". A truncated file says so.
func Decode(r io.Reader, format Format, opts DecodeOptions) (*File, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read chain: %w", err)
	}
	if len(raw) > MaxFileBytes {
		return nil, fmt.Errorf("read chain: file is larger than %d bytes", MaxFileBytes)
	}
	if err := CheckUTF8(raw); err != nil {
		return nil, fmt.Errorf("read chain: %w", err)
	}
	var doc *rawDoc
	if format == FormatYAML {
		doc, err = splitYAML(raw)
	} else {
		doc, err = splitJSON(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("parse chain: %w", err)
	}
	f, err := doc.file(opts)
	if err != nil {
		return nil, fmt.Errorf("parse chain: %w", err)
	}
	return f, nil
}

// rawDoc is a chain file split into its top-level values, with each event
// still encoded and the line it starts on.
type rawDoc struct {
	top        map[string]json.RawMessage
	keys       []string // top-level keys in file order
	events     []json.RawMessage
	eventLines []int
	hasEvents  bool
}

// file turns the split document into a File.
func (d *rawDoc) file(opts DecodeOptions) (*File, error) {
	f := &File{}
	if v, ok := d.top["lctl"]; ok {
		var s any
		_ = json.Unmarshal(v, &s)
		switch x := s.(type) {
		case string:
			f.LCTL = x
		case float64:
			f.LCTL = strconv.FormatFloat(x, 'f', -1, 64)
		default:
			f.LCTL = string(v)
		}
		version, warning, err := CheckVersion(f.LCTL)
		if err != nil {
			return nil, err
		}
		f.LCTL = version
		if warning != "" {
			f.Warnings = append(f.Warnings, warning)
		}
	} else {
		f.LCTL = Version
		f.Warnings = append(f.Warnings, `the file has no lctl version; read as "4.0"`)
	}
	if v, ok := d.top["chain"]; ok {
		var c any
		_ = json.Unmarshal(v, &c)
		switch x := c.(type) {
		case map[string]any:
			if id, ok := x["id"].(string); ok {
				f.Chain.ID = id
			} else if id, ok := x["id"]; ok && id != nil {
				return nil, fmt.Errorf("chain.id must be a string, got %s", jsonKind(id))
			}
		case string:
			f.Chain.ID = x
			f.Warnings = append(f.Warnings, "chain is a plain string; read as the chain id")
		}
	}
	if f.Chain.ID == "" {
		if opts.ChainID == "" {
			return nil, errors.New("missing chain.id")
		}
		f.Chain.ID = opts.ChainID
		f.Warnings = append(f.Warnings, fmt.Sprintf("the file names no chain id; using %q", opts.ChainID))
	}
	if !d.hasEvents {
		if _, v3 := d.top["trace"]; v3 {
			return nil, errors.New("missing events: this looks like an LCTL v3 file (it has a trace list); convert it first: lctl convert --from v3 --to v4 FILE OUT")
		}
		return nil, errors.New("missing events")
	}
	decoded := decodeEvents(d.events)
	f.Events = make([]Event, 0, len(d.events))
	for i, r := range decoded {
		e := r.event
		// "line 25: event at position 3 (seq 3)": the line first, so the
		// message reads like a compiler's.
		where := fmt.Sprintf("event at position %d", i+1)
		if e.Seq != 0 {
			where += fmt.Sprintf(" (seq %d)", e.Seq)
		}
		if i < len(d.eventLines) && d.eventLines[i] > 0 {
			where = fmt.Sprintf("line %d: %s", d.eventLines[i], where)
		}
		if r.err != nil {
			return nil, fmt.Errorf("%s: %w", where, r.err)
		}
		for _, w := range r.warnings {
			f.Warnings = append(f.Warnings, where+": "+w)
		}
		f.Events = append(f.Events, e)
	}
	if s, ok := d.top["state"]; ok && string(s) != "null" {
		if err := json.Unmarshal(s, &f.State); err != nil {
			return nil, fmt.Errorf("state must be an object: %w", err)
		}
	}
	for _, k := range d.keys {
		switch k {
		case "lctl", "chain", "events", "state":
			continue
		}
		var v any
		if err := json.Unmarshal(d.top[k], &v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if f.Extra == nil {
			f.Extra = map[string]any{}
		}
		f.Extra[k] = v
	}
	return f, nil
}

// splitJSON reads the top-level object of a JSON chain file, keeping each
// event encoded along with the line it starts on.
func splitJSON(raw []byte) (*rawDoc, error) {
	d := &rawDoc{top: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	fail := func(err error, inside string) error {
		return describeJSONError(raw, dec.InputOffset(), err, inside)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fail(err, "")
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("a chain file is a JSON object, found %s", tokenKind(tok))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(err, "")
		}
		key, _ := tok.(string)
		if _, dup := d.top[key]; dup || (key == "events" && d.hasEvents) {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		if key != "events" {
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, fail(err, "")
			}
			d.top[key] = v
			d.keys = append(d.keys, key)
			continue
		}
		d.hasEvents = true
		d.keys = append(d.keys, key)
		tok, err = dec.Token()
		if err != nil {
			return nil, fail(err, "")
		}
		if tok != json.Delim('[') {
			if tok == nil {
				return nil, errors.New("events must be a list, found null")
			}
			return nil, fmt.Errorf("events must be a list, found %s", tokenKind(tok))
		}
		// Lines are counted as the events go by, not from the start each
		// time: a file of a million events is read in one pass.
		line, counted := 1, int64(0)
		for dec.More() {
			start := dec.InputOffset()
			// InputOffset is before the separating comma and white space.
			for start < int64(len(raw)) && (raw[start] == ',' || raw[start] == ' ' || raw[start] == '\n' || raw[start] == '\r' || raw[start] == '\t') {
				start++
			}
			line += bytes.Count(raw[counted:start], []byte("\n"))
			counted = start
			var ev json.RawMessage
			if err := dec.Decode(&ev); err != nil {
				return nil, fail(err, fmt.Sprintf("event at position %d, which starts on line %d", len(d.events)+1, line))
			}
			d.events = append(d.events, ev)
			d.eventLines = append(d.eventLines, line)
		}
		if _, err := dec.Token(); err != nil { // ]
			return nil, fail(err, "")
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, fail(err, "")
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := lineCol(raw, dec.InputOffset())
		return nil, fmt.Errorf("line %d, column %d: unexpected data after the chain object", line, col)
	}
	return d, nil
}

func tokenKind(tok json.Token) string {
	switch x := tok.(type) {
	case json.Delim:
		if x == '[' {
			return "a list"
		}
		return "an object"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

type decodedEvent struct {
	event    Event
	warnings []string
	err      error
}

// parallelDecodeMin is the number of events from which a file's events are
// decoded on every core: JSON decoding is most of the cost of reading a
// chain, and events decode independently.
const parallelDecodeMin = 2048

// decodeEvents decodes every event, in parallel for large files; the
// results are in file order.
func decodeEvents(raws []json.RawMessage) []decodedEvent {
	out := make([]decodedEvent, len(raws))
	workers := runtime.GOMAXPROCS(0)
	if len(raws) < parallelDecodeMin || workers < 2 {
		for i, raw := range raws {
			out[i].event, out[i].warnings, out[i].err = decodeFileEvent(raw)
		}
		return out
	}
	var wg sync.WaitGroup
	chunk := (len(raws) + workers - 1) / workers
	for lo := 0; lo < len(raws); lo += chunk {
		hi := min(lo+chunk, len(raws))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				out[i].event, out[i].warnings, out[i].err = decodeFileEvent(raws[i])
			}
		})
	}
	wg.Wait()
	return out
}

// fileEvent is an event in the form XCT writes it: decoded in one pass.
type fileEvent struct {
	ChainID   string          `json:"chain_id"`
	Seq       json.RawMessage `json:"seq"`
	Type      string          `json:"type"`
	Timestamp *string         `json:"timestamp"`
	Agent     *string         `json:"agent"`
	Data      map[string]any  `json:"data"`
	PrevHash  string          `json:"prev_hash"`
	Hash      string          `json:"hash"`
}

// decodeFileEvent parses one event of a file, accepting what other
// implementations write; the warnings say what was converted. Events in
// the spec's form take one decoding pass; anything else (extra fields, a
// seq as a string, a numeric timestamp, an error) goes field by field.
func decodeFileEvent(raw []byte) (Event, []string, error) {
	var w fileEvent
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err == nil && len(w.Seq) > 0 && w.Seq[0] != '"' && w.Seq[0] != 'n' && w.Type != "" {
		if seq, _, err := parseSeq(w.Seq); err == nil {
			e := Event{ChainID: w.ChainID, Seq: seq, Type: w.Type, Data: w.Data, PrevHash: w.PrevHash, Hash: w.Hash}
			if w.Timestamp != nil {
				e.Timestamp = *w.Timestamp
			}
			if w.Agent != nil {
				e.Agent = *w.Agent
			}
			return e, nil, nil
		}
	}
	return decodeFileEventSlow(raw)
}

func decodeFileEventSlow(raw []byte) (Event, []string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return Event{}, nil, errors.New("an event must be an object")
		}
		return Event{}, nil, err
	}
	if fields == nil {
		return Event{}, nil, errors.New("an event must be an object, found null")
	}
	var e Event
	var warns []string
	seqRaw, ok := fields["seq"]
	if !ok || string(seqRaw) == "null" {
		return Event{}, nil, errors.New("missing seq")
	}
	seq, seqWarn, err := parseSeq(seqRaw)
	if err != nil {
		return Event{}, nil, err
	}
	e.Seq = seq
	if seqWarn != "" {
		warns = append(warns, seqWarn)
	}
	str := func(key string) (string, error) {
		v, ok := fields[key]
		if !ok || string(v) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			var x any
			_ = json.Unmarshal(v, &x)
			return "", fmt.Errorf("%s must be a string, got %s", key, jsonKind(x))
		}
		return s, nil
	}
	if e.Type, err = str("type"); err != nil {
		return e, nil, err
	}
	if e.Type == "" {
		return e, nil, errors.New("missing type")
	}
	if e.Agent, err = str("agent"); err != nil {
		return e, nil, err
	}
	if e.ChainID, err = str("chain_id"); err != nil {
		return e, nil, err
	}
	if e.PrevHash, err = str("prev_hash"); err != nil {
		return e, nil, err
	}
	if e.Hash, err = str("hash"); err != nil {
		return e, nil, err
	}
	if ts, ok := fields["timestamp"]; ok && string(ts) != "null" {
		var x any
		if err := json.Unmarshal(ts, &x); err != nil {
			return e, nil, fmt.Errorf("timestamp: %w", err)
		}
		switch v := x.(type) {
		case string:
			e.Timestamp = v
		case float64:
			t, ok := unixTime(v)
			if !ok {
				return e, nil, fmt.Errorf("timestamp %v is not a time", v)
			}
			e.Timestamp = FormatTime(t)
			warns = append(warns, fmt.Sprintf("timestamp %s is a number; read as Unix time %s", ts, e.Timestamp))
		default:
			return e, nil, fmt.Errorf("timestamp must be a string, got %s", jsonKind(x))
		}
	}
	if d, ok := fields["data"]; ok && string(d) != "null" {
		if err := json.Unmarshal(d, &e.Data); err != nil {
			var x any
			_ = json.Unmarshal(d, &x)
			return e, nil, fmt.Errorf("data must be an object, got %s", jsonKind(x))
		}
	}
	for k, v := range fields {
		switch k {
		case "seq", "type", "timestamp", "agent", "data", "chain_id", "prev_hash", "hash":
			continue
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return e, nil, fmt.Errorf("%s: %w", k, err)
		}
		if e.Extra == nil {
			e.Extra = map[string]any{}
		}
		e.Extra[k] = x
	}
	return e, warns, nil
}

// parseSeq reads a seq given as a number or as a string holding one.
func parseSeq(raw json.RawMessage) (uint64, string, error) {
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		return 0, "", fmt.Errorf("seq: %w", err)
	}
	switch v := x.(type) {
	case float64:
		if v < 1 || v > maxExactInt || v != math.Trunc(v) {
			return 0, "", fmt.Errorf("seq %v is not a positive integer", v)
		}
		return uint64(v), "", nil
	case string:
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 || n > maxExactInt {
			return 0, "", fmt.Errorf("seq %q is not a positive integer", v)
		}
		return n, fmt.Sprintf("seq %q is a string; read as %d", v, n), nil
	}
	return 0, "", fmt.Errorf("seq must be a positive integer, got %s", jsonKind(x))
}

// unixTime reads a numeric timestamp as Unix time in seconds, milliseconds,
// microseconds or nanoseconds, whichever puts it after 1973.
func unixTime(v float64) (time.Time, bool) {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return time.Time{}, false
	}
	switch {
	case v < 1e11:
		sec, frac := math.Modf(v)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true
	case v < 1e14:
		return time.UnixMilli(int64(v)).UTC(), true
	case v < 1e17:
		return time.UnixMicro(int64(v)).UTC(), true
	case v < 9e18:
		return time.Unix(0, int64(v)).UTC(), true
	}
	return time.Time{}, false
}

// DecodeEvent parses one event as stored on the stream. Events in the form
// XCT stores them take the stream's fast reader (fastjson.go); anything
// else is decoded as it always was, with the same result.
func DecodeEvent(raw []byte) (Event, error) {
	p := fastParsers.Get().(*fastParser)
	e, err := p.fastEvent(raw)
	p.b = nil
	fastParsers.Put(p)
	if err == nil {
		return e, nil
	}
	return decodeEvent(raw)
}

// DecodeEventHashed is DecodeEvent that also returns what e.ComputeHash()
// returns, in a fraction of the time for an event stored as its canonical
// JSON (the tracer checks every event it ingests).
func DecodeEventHashed(raw []byte) (Event, string, error) {
	p := fastParsers.Get().(*fastParser)
	defer func() {
		p.b = nil
		fastParsers.Put(p)
	}()
	e, err := p.fastEvent(raw)
	if err != nil {
		if e, err = decodeEvent(raw); err != nil {
			return e, "", err
		}
		h, herr := e.ComputeHash()
		if herr != nil {
			return e, "", nil
		}
		return e, h, nil
	}
	h, herr := p.computedHash(&e)
	if herr != nil {
		return e, "", nil
	}
	return e, h, nil
}

func decodeEvent(raw []byte) (Event, error) {
	var w struct {
		ChainID   string          `json:"chain_id"`
		Seq       json.RawMessage `json:"seq"`
		Type      string          `json:"type"`
		Timestamp json.RawMessage `json:"timestamp"`
		Agent     string          `json:"agent"`
		Data      json.RawMessage `json:"data"`
		PrevHash  string          `json:"prev_hash"`
		Hash      string          `json:"hash"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Event{}, err
	}
	if len(w.Seq) == 0 || string(w.Seq) == "null" {
		return Event{}, errors.New("missing seq")
	}
	seq, _, err := parseSeq(w.Seq)
	if err != nil {
		return Event{}, err
	}
	if w.Type == "" {
		return Event{}, fmt.Errorf("event %d: missing type", seq)
	}
	e := Event{ChainID: w.ChainID, Seq: seq, Type: w.Type, Agent: w.Agent, PrevHash: w.PrevHash, Hash: w.Hash}
	if len(w.Timestamp) > 0 && string(w.Timestamp) != "null" {
		if err := json.Unmarshal(w.Timestamp, &e.Timestamp); err != nil {
			return Event{}, fmt.Errorf("event %d: timestamp must be a string", e.Seq)
		}
	}
	if len(w.Data) > 0 && string(w.Data) != "null" {
		if err := json.Unmarshal(w.Data, &e.Data); err != nil {
			return Event{}, fmt.Errorf("event %d: data must be an object", e.Seq)
		}
	}
	return e, nil
}

// describeJSONError says where a JSON error is, and that the file is
// truncated when it ends too early.
func describeJSONError(raw []byte, offset int64, err error, inside string) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		offset = se.Offset
	}
	line, col := lineCol(raw, offset)
	where := fmt.Sprintf("line %d, column %d", line, col)
	if inside != "" {
		where += ", in the " + inside
	}
	rest := bytes.TrimSpace(raw[min(offset, int64(len(raw))):])
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || (se != nil && len(rest) == 0) {
		line, col = lineCol(raw, int64(len(raw)))
		where = fmt.Sprintf("line %d, column %d", line, col)
		if inside != "" {
			where += ", in the " + inside
		}
		return fmt.Errorf("%s: the file is truncated (it ends before the chain is complete)", where)
	}
	return fmt.Errorf("%s: %w", where, err)
}

func lineCol(raw []byte, offset int64) (int, int) {
	if offset > int64(len(raw)) {
		offset = int64(len(raw))
	}
	if offset < 0 {
		offset = 0
	}
	before := raw[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// Encode writes f in the given format, keys in the spec's order (lctl,
// chain, events; each event seq, type, timestamp, agent, data, then
// chain_id, prev_hash, hash). JSON is indented for people; hashes do not
// depend on layout, so a file converted between JSON and YAML still
// verifies.
func (f *File) Encode(w io.Writer, format Format) error {
	var err error
	if format == FormatYAML {
		err = f.encodeYAML(w)
	} else {
		err = f.encodeJSON(w)
	}
	if err != nil {
		return fmt.Errorf("encode chain as %s: %w", format, err)
	}
	return nil
}

func (f *File) encodeJSON(w io.Writer) error {
	var buf bytes.Buffer
	buf.Grow(256 + 512*len(f.Events))
	version := f.LCTL
	if version == "" {
		version = Version
	}
	buf.WriteString("{\n  \"lctl\": ")
	writeString(&buf, version)
	buf.WriteString(",\n  \"chain\": {\n    \"id\": ")
	writeString(&buf, f.Chain.ID)
	buf.WriteString("\n  },\n  \"events\": [")
	for i := range f.Events {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n    ")
		if err := writeEventJSON(&buf, &f.Events[i], "    "); err != nil {
			return err
		}
		if buf.Len() > 1<<20 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return err
			}
			buf.Reset()
		}
	}
	if len(f.Events) > 0 {
		buf.WriteString("\n  ")
	}
	buf.WriteByte(']')
	if f.State != nil {
		buf.WriteString(",\n  \"state\": ")
		if err := writeIndented(&buf, f.State, "  "); err != nil {
			return err
		}
	}
	for _, k := range sortedKeys(f.Extra) {
		buf.WriteString(",\n  ")
		writeString(&buf, k)
		buf.WriteString(": ")
		if err := writeIndented(&buf, f.Extra[k], "  "); err != nil {
			return err
		}
	}
	buf.WriteString("\n}\n")
	_, err := w.Write(buf.Bytes())
	return err
}

// writeEventJSON writes one event as an indented JSON object in the spec's
// key order.
func writeEventJSON(buf *bytes.Buffer, e *Event, indent string) error {
	in := indent + "  "
	buf.WriteString("{\n" + in + `"seq": `)
	buf.WriteString(strconv.FormatUint(e.Seq, 10))
	buf.WriteString(",\n" + in + `"type": `)
	writeString(buf, e.Type)
	buf.WriteString(",\n" + in + `"timestamp": `)
	writeString(buf, e.Timestamp)
	buf.WriteString(",\n" + in + `"agent": `)
	writeString(buf, e.Agent)
	buf.WriteString(",\n" + in + `"data": `)
	if err := writeIndented(buf, dataOrEmpty(e.Data), in); err != nil {
		return fmt.Errorf("event %d: %w", e.Seq, err)
	}
	for _, kv := range [][2]string{{"chain_id", e.ChainID}, {"prev_hash", e.PrevHash}, {"hash", e.Hash}} {
		if kv[1] == "" {
			continue
		}
		buf.WriteString(",\n" + in)
		writeString(buf, kv[0])
		buf.WriteString(": ")
		writeString(buf, kv[1])
	}
	for _, k := range sortedKeys(e.Extra) {
		buf.WriteString(",\n" + in)
		writeString(buf, k)
		buf.WriteString(": ")
		if err := writeIndented(buf, e.Extra[k], in); err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
	}
	buf.WriteString("\n" + indent + "}")
	return nil
}

// writeIndented writes v as indented JSON with sorted keys, continuing at
// the given indentation. Empty objects and lists stay on one line.
func writeIndented(buf *bytes.Buffer, v any, indent string) error {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			buf.WriteString("{}")
			return nil
		}
		buf.WriteByte('{')
		keys := sortedKeys(x)
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString("\n" + indent + "  ")
			writeString(buf, k)
			buf.WriteString(": ")
			if err := writeIndented(buf, x[k], indent+"  "); err != nil {
				return err
			}
		}
		buf.WriteString("\n" + indent + "}")
	case []any:
		if len(x) == 0 {
			buf.WriteString("[]")
			return nil
		}
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString("\n" + indent + "  ")
			if err := writeIndented(buf, e, indent+"  "); err != nil {
				return err
			}
		}
		buf.WriteString("\n" + indent + "]")
	default:
		return appendCanonical(buf, v)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	return keys
}
