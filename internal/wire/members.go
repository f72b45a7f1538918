package wire

import (
	"encoding/json"
)

// objectMembers splits raw into the members of the one JSON object it is,
// when it is exactly that: valid JSON (json.Valid, which allocates nothing),
// an object, no key twice. Otherwise ok is false and strictObjectDecoded
// says what is wrong. The values are raw's own bytes, not copies, each
// with its capacity cut at its end.
//
// The walk below trusts json.Valid: every index it reads exists and every
// token is where the grammar puts it.
func objectMembers(raw []byte) (members map[string]json.RawMessage, ok bool) {
	if !json.Valid(raw) {
		return nil, false
	}
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, false
	}
	out := make(map[string]json.RawMessage, 4)
	i = skipSpace(raw, i+1)
	if raw[i] == '}' {
		return out, true
	}
	for {
		end := stringEnd(raw, i)
		key, ok := keyOf(raw[i:end])
		if !ok {
			return nil, false
		}
		i = skipSpace(raw, end) // at ':'
		i = skipSpace(raw, i+1) // at the value
		end = valueEnd(raw, i)
		if _, dup := out[key]; dup {
			return nil, false
		}
		out[key] = raw[i:end:end]
		i = skipSpace(raw, end)
		if raw[i] == '}' {
			return out, true
		}
		i = skipSpace(raw, i+1) // past ',', at the next key
	}
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the string starting at raw[i].
func stringEnd(raw []byte, i int) int {
	for i++; raw[i] != '"'; i++ {
		if raw[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// valueEnd returns the index just past the value starting at raw[i].
func valueEnd(raw []byte, i int) int {
	switch raw[i] {
	case '"':
		return stringEnd(raw, i)
	case '{', '[':
		depth := 0
		for {
			switch raw[i] {
			case '"':
				i = stringEnd(raw, i)
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
	}
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r', ',', '}', ']':
			return i
		}
		i++
	}
	return i
}

// keyOf is a quoted key's text as the decoder gives it: read directly when
// it is plain ASCII without escapes, decoded otherwise (escapes, and
// invalid UTF-8, which the decoder replaces).
func keyOf(quoted []byte) (string, bool) {
	inner := quoted[1 : len(quoted)-1]
	for _, c := range inner {
		if c == '\\' || c >= 0x80 {
			var s string
			if err := json.Unmarshal(quoted, &s); err != nil {
				return "", false
			}
			return s, true
		}
	}
	return string(inner), true
}
