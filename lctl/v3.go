package lctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/xct-dev/xct/lctl/text"
)

// TypeHandoff is the event a v3 handoff object becomes: who handed the
// work to whom, with which facts and queries (v4's pull model records it
// as an event rather than a section); XCT's crews record it too. The
// reducer knows it (IsRecognizedType) and counts it without folding it
// into a field.
const TypeHandoff = "handoff"

// ConvertV3 reads an LCTL v3 chain file (a trace list of steps, a facts
// object, a handoff object) and returns the v4 chain the spec's migration
// table describes; docs/lctl.md has the mapping field by field:
//
//   - each trace entry becomes step_start, one tool_call per tool_calls
//     entry, an error when it has one, and step_end (a trace entry that
//     already has a v4 event type becomes that one event);
//   - each fact of the facts object becomes a fact_added, placed after the
//     step that names it (its step field) or after the trace;
//   - each handoff object becomes a handoff event, placed after the step it
//     names (after_step) or at the end.
//
// Events are numbered from 1 and sealed into a hash chain (which proves
// the file unchanged since the conversion, nothing about the v3 file).
// fallbackID names the chain when the file does not. Warnings say what was
// assumed.
func ConvertV3(r io.Reader, format Format, fallbackID string) (*File, []string, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read v3 chain: %w", err)
	}
	if len(raw) > MaxFileBytes {
		return nil, nil, fmt.Errorf("read v3 chain: file is larger than %d bytes", MaxFileBytes)
	}
	if err := CheckUTF8(raw); err != nil {
		return nil, nil, fmt.Errorf("read v3 chain: %w", err)
	}
	var d *rawDoc
	if format == FormatYAML {
		d, err = splitYAML(raw)
	} else {
		d, err = splitJSON(raw)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("parse v3 chain: %w", err)
	}
	c := &v3conv{}
	f, err := c.convert(d, fallbackID)
	if err != nil {
		return nil, nil, fmt.Errorf("convert v3 chain: %w", err)
	}
	return f, c.warnings, nil
}

type v3conv struct {
	events   []Event
	warnings []string
	lastTime string
}

func (c *v3conv) warn(format string, args ...any) {
	c.warnings = append(c.warnings, fmt.Sprintf(format, args...))
}

func (c *v3conv) add(typ, agent, ts string, data map[string]any) {
	if ts == "" {
		ts = c.lastTime
	} else {
		c.lastTime = ts
	}
	if data == nil {
		data = map[string]any{}
	}
	c.events = append(c.events, Event{Seq: uint64(len(c.events) + 1), Type: typ, Agent: agent, Timestamp: ts, Data: data})
}

func (c *v3conv) convert(d *rawDoc, fallbackID string) (*File, error) {
	if d.hasEvents {
		return nil, errors.New("the file has an events list: it is already LCTL v4 (read it as it is, or convert between JSON and YAML without --from v3)")
	}
	top := map[string]any{}
	for _, k := range d.keys {
		var v any
		if err := json.Unmarshal(d.top[k], &v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		top[k] = v
	}
	if v, ok := top["lctl"]; ok {
		ver := fmt.Sprint(v)
		if f, ok := v.(float64); ok {
			ver = strconv.FormatFloat(f, 'f', -1, 64)
		}
		if major, _, ok := parseVersion(ver); !ok || major != 3 {
			return nil, fmt.Errorf("lctl version %q is not 3.x: --from v3 converts LCTL v3 files", ver)
		}
	} else {
		c.warn(`the file has no lctl version; read as "3.0"`)
	}
	id := ""
	switch ch := top["chain"].(type) {
	case map[string]any:
		id, _ = ch["id"].(string)
	case string:
		id = ch
	}
	if id == "" {
		id, _ = top["chain_id"].(string)
	}
	if id == "" {
		if fallbackID == "" {
			return nil, errors.New("missing chain id (chain.id or chain_id)")
		}
		id = fallbackID
		c.warn("the file names no chain id; using %q", id)
	}
	if err := ValidateChainID(id); err != nil {
		return nil, err
	}
	trace, ok := top["trace"].([]any)
	if _, has := top["trace"]; has && !ok && top["trace"] != nil {
		return nil, fmt.Errorf("trace must be a list, found %s", jsonKind(top["trace"]))
	}
	if !ok && top["facts"] == nil && top["handoff"] == nil {
		return nil, errors.New("nothing to convert: a v3 file has a trace list, a facts object or a handoff object")
	}

	facts, err := v3Facts(top["facts"])
	if err != nil {
		return nil, err
	}
	handoffs, err := v3Handoffs(top["handoff"])
	if err != nil {
		return nil, err
	}
	// Facts and handoffs that name a step go after it; the rest at the end.
	factsAfter := map[string][]v3Fact{}
	handoffsAfter := map[string][]map[string]any{}
	stepKeys := map[string]bool{}
	for i, raw := range trace {
		entry, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("trace entry %d must be an object, found %s", i+1, jsonKind(raw))
		}
		stepKeys[v3StepKey(entry, i)] = true
	}
	var lateFacts []v3Fact
	for _, f := range facts {
		if k := numberKey(f.data["step"]); k != "" && stepKeys[k] {
			factsAfter[k] = append(factsAfter[k], f)
		} else {
			lateFacts = append(lateFacts, f)
		}
	}
	var lateHandoffs []map[string]any
	for _, h := range handoffs {
		k := numberKey(h["after_step"])
		if k == "" {
			k = numberKey(h["step"])
		}
		if k != "" && stepKeys[k] {
			handoffsAfter[k] = append(handoffsAfter[k], h)
		} else {
			lateHandoffs = append(lateHandoffs, h)
		}
	}

	for i, raw := range trace {
		entry := raw.(map[string]any)
		key := v3StepKey(entry, i)
		if err := c.step(entry, i, factsAfter[key]); err != nil {
			return nil, fmt.Errorf("trace entry %d: %w", i+1, err)
		}
		for _, h := range handoffsAfter[key] {
			c.handoff(h)
		}
	}
	for _, f := range lateFacts {
		c.fact(f, "")
	}
	for _, h := range lateHandoffs {
		c.handoff(h)
	}
	if len(c.events) == 0 {
		return nil, errors.New("nothing to convert: the trace, facts and handoff are empty")
	}
	prev := ""
	for i := range c.events {
		c.events[i].ChainID = id
		if err := c.events[i].Seal(prev); err != nil {
			return nil, err
		}
		prev = c.events[i].Hash
	}
	f := NewFile(id, c.events)
	for _, k := range d.keys {
		switch k {
		case "lctl", "chain", "chain_id", "trace", "facts", "handoff":
			continue
		}
		if f.Extra == nil {
			f.Extra = map[string]any{}
		}
		f.Extra[k] = top[k]
	}
	return f, nil
}

// v3StepKey is how facts and handoffs name a trace entry: its step number,
// else its position (1-based).
func v3StepKey(entry map[string]any, i int) string {
	if k := numberKey(entry["step"]); k != "" {
		return k
	}
	return strconv.Itoa(i + 1)
}

func numberKey(v any) string {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && x >= 0 && x < maxExactInt {
			return strconv.FormatInt(int64(x), 10)
		}
	case string:
		if _, err := strconv.ParseUint(x, 10, 53); err == nil {
			return x
		}
	}
	return ""
}

// v3 trace entry fields that map to v4 fields; the others are kept in
// step_start's data.
var v3StepFields = map[string]bool{
	"agent": true, "action": true, "intent": true, "timestamp": true, "started_at": true, "ended_at": true,
	"input_summary": true, "output_summary": true, "outcome": true, "status": true, "duration_ms": true,
	"tokens": true, "tool_calls": true, "error": true, "step": true,
}

// step converts one trace entry.
func (c *v3conv) step(e map[string]any, i int, facts []v3Fact) error {
	agent, _ := e["agent"].(string)
	if t, ok := e["type"].(string); ok && t != "" {
		// Already an event: keep it as one.
		data, _ := e["data"].(map[string]any)
		if data == nil {
			data = map[string]any{}
			for k, v := range e {
				switch k {
				case "type", "agent", "timestamp", "seq":
				default:
					data[k] = v
				}
			}
		}
		ts, _ := e["timestamp"].(string)
		c.add(t, agent, ts, data)
		for _, f := range facts {
			c.fact(f, agent)
		}
		return nil
	}
	if agent == "" {
		c.warn("trace entry %d has no agent", i+1)
	}
	start := map[string]any{}
	for k, v := range e {
		if !v3StepFields[k] {
			start[k] = v
		}
	}
	intent := firstString(e, "intent", "action")
	if intent != "" {
		start["intent"] = intent
	}
	if s, ok := e["input_summary"].(string); ok {
		start["input_summary"] = s
	}
	if n, ok := count(e["step"]); ok {
		start["step"] = float64(n)
	}
	startTS := firstString(e, "started_at", "timestamp")
	endTS, _ := e["ended_at"].(string)
	ms, hasMS := duration(e["duration_ms"])
	if endTS == "" && hasMS && startTS != "" {
		if t, ok := ParseTime(startTS); ok {
			endTS = FormatTime(t.Add(time.Duration(ms * float64(time.Millisecond))))
		}
	}
	c.add(TypeStepStart, agent, startTS, start)

	if calls, ok := e["tool_calls"]; ok && calls != nil {
		list, ok := calls.([]any)
		if !ok {
			return fmt.Errorf("tool_calls must be a list, found %s", jsonKind(calls))
		}
		for j, raw := range list {
			call, ok := raw.(map[string]any)
			if !ok {
				return fmt.Errorf("tool_calls[%d] must be an object, found %s", j, jsonKind(raw))
			}
			data := map[string]any{}
			for k, v := range call {
				if k != "timestamp" {
					data[k] = v
				}
			}
			if _, ok := data["tool"]; !ok {
				if name, ok := call["name"].(string); ok {
					data["tool"] = name
					delete(data, "name")
				}
			}
			ts, _ := call["timestamp"].(string)
			c.add(TypeToolCall, agent, ts, data)
		}
	}
	if er, ok := e["error"]; ok && er != nil {
		switch x := er.(type) {
		case map[string]any:
			c.add(TypeError, agent, "", x)
		case string:
			c.add(TypeError, agent, "", map[string]any{"message": x})
			c.warn("trace entry %d: error %q has no category; recorded as a message", i+1, clipString(x, 40))
		default:
			return fmt.Errorf("error must be an object or a string, found %s", jsonKind(er))
		}
	}
	for _, f := range facts {
		c.fact(f, agent)
	}
	end := map[string]any{}
	if o := firstString(e, "outcome", "status"); o != "" {
		end["outcome"] = o
	}
	if s, ok := e["output_summary"].(string); ok {
		end["output_summary"] = s
	}
	if hasMS {
		end["duration_ms"] = ms
	}
	if t, ok := e["tokens"].(map[string]any); ok {
		in, out := tokenCounts(Object{m: t})
		end["tokens"] = map[string]any{"input": float64(in), "output": float64(out)}
	}
	if n, ok := count(e["step"]); ok {
		end["step"] = float64(n)
	}
	c.add(TypeStepEnd, agent, endTS, end)
	return nil
}

type v3Fact struct {
	id   string
	data map[string]any
}

// v3Facts reads the facts object ({ID: {text, confidence, source, ...}})
// or a list of facts with ids, in id order (F2 before F10).
func v3Facts(v any) ([]v3Fact, error) {
	var out []v3Fact
	switch x := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		for id, raw := range x {
			f, err := v3FactData(id, raw)
			if err != nil {
				return nil, err
			}
			out = append(out, v3Fact{id, f})
		}
	case []any:
		for i, raw := range x {
			m, ok := raw.(map[string]any)
			id, _ := m["id"].(string)
			if !ok || id == "" {
				return nil, fmt.Errorf("facts[%d] must be an object with an id", i)
			}
			f, err := v3FactData(id, raw)
			if err != nil {
				return nil, err
			}
			out = append(out, v3Fact{id, f})
		}
	default:
		return nil, fmt.Errorf("facts must be an object of facts by id, found %s", jsonKind(v))
	}
	sort.SliceStable(out, func(i, j int) bool { return naturalLess(out[i].id, out[j].id) })
	return out, nil
}

func v3FactData(id string, raw any) (map[string]any, error) {
	data := map[string]any{}
	switch f := raw.(type) {
	case map[string]any:
		for k, v := range f {
			data[k] = v
		}
	case string:
		data["text"] = f
	default:
		return nil, fmt.Errorf("fact %s must be an object (text, confidence, source) or its text, found %s", id, jsonKind(raw))
	}
	data["id"] = id
	return data, nil
}

func (c *v3conv) fact(f v3Fact, stepAgent string) {
	agent, _ := f.data["agent"].(string)
	if agent == "" {
		agent = stepAgent
	}
	if agent == "" {
		agent = "system"
	}
	c.add(TypeFactAdded, agent, "", f.data)
}

// v3Handoffs reads the handoff object, or a list of them.
func v3Handoffs(v any) ([]map[string]any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return []map[string]any{x}, nil
	case []any:
		out := make([]map[string]any, 0, len(x))
		for i, raw := range x {
			m, ok := raw.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("handoff[%d] must be an object, found %s", i, jsonKind(raw))
			}
			out = append(out, m)
		}
		return out, nil
	}
	return nil, fmt.Errorf("handoff must be an object, found %s", jsonKind(v))
}

func (c *v3conv) handoff(h map[string]any) {
	agent := firstString(h, "from", "agent")
	if agent == "" {
		agent = "system"
	}
	ts, _ := h["timestamp"].(string)
	data := make(map[string]any, len(h))
	for k, v := range h {
		if k != "timestamp" {
			data[k] = v
		}
	}
	c.add(TypeHandoff, agent, ts, data)
}

func firstString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := m[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

func clipString(s string, n int) string { return text.Truncate(s, n) }

// naturalLess orders ids with numbers by value: F2 before F10.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitsPrefix(a), digitsPrefix(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitsPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
