package wire

import "fmt"

// MaxDepth bounds how deeply JSON the system takes from outside may nest:
// a model's tool arguments, a tool's result. Deeper values are refused
// before anything is recorded, so nothing the system writes is deeper than
// its own readers (protobuf's recursion limit, lctl, the tracer) accept.
// Depth counts containers: {} is 1, {"a": [1]} is 2.
const MaxDepth = 64

// ErrTooDeep says a JSON value nests deeper than MaxDepth.
type ErrTooDeep struct{ Limit int }

func (e ErrTooDeep) Error() string {
	return fmt.Sprintf("nested deeper than %d levels of objects and arrays", e.Limit)
}

// Depth is the largest nesting of objects and arrays in JSON text, found
// without parsing it (and without recursion): strings are skipped, their
// escapes included. It does not check that raw is JSON.
func Depth(raw []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range raw {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// ValueDepthExceeds reports whether a decoded JSON value (maps, slices,
// scalars as encoding/json makes them) nests deeper than limit. It stops
// as soon as it knows, so its own recursion is bounded by limit.
func ValueDepthExceeds(v any, limit int) bool {
	if limit < 0 {
		return true
	}
	switch x := v.(type) {
	case map[string]any:
		if limit == 0 {
			return true
		}
		for _, e := range x {
			if ValueDepthExceeds(e, limit-1) {
				return true
			}
		}
	case []any:
		if limit == 0 {
			return true
		}
		for _, e := range x {
			if ValueDepthExceeds(e, limit-1) {
				return true
			}
		}
	}
	return false
}
