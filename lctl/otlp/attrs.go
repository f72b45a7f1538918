package otlp

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"

	"github.com/xct-dev/xct/lctl/text"
)

// Limits on what a span's attributes contribute to an event, so one span
// with a megabyte prompt does not make a megabyte event.
const (
	// maxValue bounds a string value kept in event data (in bytes).
	maxValue = 2048
	// maxAttrs bounds the attributes kept per span.
	maxAttrs = 64
	// maxDepth bounds nesting of array and kvlist values.
	maxDepth = 4
)

// attrs is a span's (or resource's) attributes by key. The first value of a
// repeated key wins, as the OTLP specification leaves duplicates undefined.
type attrs map[string]*commonpb.AnyValue

func attrMap(kvs []*commonpb.KeyValue) attrs {
	m := make(attrs, len(kvs))
	for _, kv := range kvs {
		if kv == nil || kv.GetValue() == nil {
			continue
		}
		if _, dup := m[kv.GetKey()]; !dup {
			m[kv.GetKey()] = kv.GetValue()
		}
	}
	return m
}

// str returns the first of keys that holds a non-empty string (numbers and
// booleans are rendered as text).
func (a attrs) str(keys ...string) string {
	for _, k := range keys {
		v, ok := a[k]
		if !ok {
			continue
		}
		var s string
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			s = x.StringValue
		case *commonpb.AnyValue_IntValue:
			s = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			s = strconv.FormatBool(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			s = strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		}
		if s = strings.TrimSpace(s); s != "" {
			return sanitize(s)
		}
	}
	return ""
}

// key returns the first of keys present.
func (a attrs) key(keys ...string) (string, bool) {
	for _, k := range keys {
		if _, ok := a[k]; ok {
			return k, true
		}
	}
	return "", false
}

// count returns the first of keys that holds a whole number >= 0 (an int, a
// whole double, or a string of digits). bad names a key that was present
// but not a count.
func (a attrs) count(keys ...string) (n int64, key string, ok bool, bad string) {
	for _, k := range keys {
		v, present := a[k]
		if !present {
			continue
		}
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			if x.IntValue >= 0 {
				return x.IntValue, k, true, ""
			}
		case *commonpb.AnyValue_DoubleValue:
			d := x.DoubleValue
			if d >= 0 && d <= 1<<53 && d == math.Trunc(d) {
				return int64(d), k, true, ""
			}
		case *commonpb.AnyValue_StringValue:
			if i, err := strconv.ParseInt(strings.TrimSpace(x.StringValue), 10, 64); err == nil && i >= 0 {
				return i, k, true, ""
			}
		}
		if bad == "" {
			bad = k
		}
	}
	return 0, "", false, bad
}

// number returns the first of keys that holds a finite number >= 0.
func (a attrs) number(keys ...string) (float64, bool) {
	for _, k := range keys {
		v, ok := a[k]
		if !ok {
			continue
		}
		var f float64
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			f = float64(x.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			f = x.DoubleValue
		case *commonpb.AnyValue_StringValue:
			p, err := strconv.ParseFloat(strings.TrimSpace(x.StringValue), 64)
			if err != nil {
				continue
			}
			f = p
		default:
			continue
		}
		if !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0 {
			return f, true
		}
	}
	return 0, false
}

// jsonValues renders attributes as JSON values for event data: at most
// maxAttrs of them (sorted keys kept first), long strings cut. It reports
// whether anything was left out or cut.
func jsonValues(kvs []*commonpb.KeyValue) (map[string]any, bool) {
	out := map[string]any{}
	cut := false
	for _, kv := range kvs {
		if kv == nil {
			continue
		}
		k := sanitize(kv.GetKey())
		if _, dup := out[k]; dup || k == "" {
			continue
		}
		if len(out) >= maxAttrs {
			cut = true
			break
		}
		v, c := jsonValue(kv.GetValue(), 0)
		cut = cut || c
		out[k] = v
	}
	return out, cut
}

// jsonValue converts one attribute value to a JSON value. Numbers that JSON
// cannot carry exactly (NaN, infinities, integers beyond 2^53) become
// strings.
func jsonValue(v *commonpb.AnyValue, depth int) (any, bool) {
	if v == nil {
		return nil, false
	}
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return cut(x.StringValue)
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue, false
	case *commonpb.AnyValue_IntValue:
		if x.IntValue > 1<<53 || x.IntValue < -(1<<53) {
			return strconv.FormatInt(x.IntValue, 10), false
		}
		return float64(x.IntValue), false
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64), false
		}
		return x.DoubleValue, false
	case *commonpb.AnyValue_BytesValue:
		return cut(base64.StdEncoding.EncodeToString(x.BytesValue))
	case *commonpb.AnyValue_ArrayValue:
		if depth >= maxDepth {
			return "[...]", true
		}
		vals := x.ArrayValue.GetValues()
		out := make([]any, 0, min(len(vals), maxAttrs))
		c := false
		for i, e := range vals {
			if i >= maxAttrs {
				c = true
				break
			}
			j, ec := jsonValue(e, depth+1)
			c = c || ec
			out = append(out, j)
		}
		return out, c
	case *commonpb.AnyValue_KvlistValue:
		if depth >= maxDepth {
			return "{...}", true
		}
		out := map[string]any{}
		c := false
		for _, kv := range x.KvlistValue.GetValues() {
			if kv == nil {
				continue
			}
			if len(out) >= maxAttrs {
				c = true
				break
			}
			j, ec := jsonValue(kv.GetValue(), depth+1)
			c = c || ec
			out[sanitize(kv.GetKey())] = j
		}
		return out, c
	}
	return nil, false
}

// cut keeps at most maxValue bytes of s (on a rune boundary), valid UTF-8.
func cut(s string) (string, bool) {
	s = sanitize(s)
	if len(s) <= maxValue {
		return s, false
	}
	return truncate(s, maxValue), true
}

// truncate keeps at most n bytes of s on a rune boundary, marking the cut.
func truncate(s string, n int) string { return text.Truncate(s, n) }

// sanitize makes s valid UTF-8 (protobuf strings from a peer may not be).
func sanitize(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
