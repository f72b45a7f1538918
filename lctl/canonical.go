package lctl

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Canonical returns the canonical JSON encoding of v, as defined by RFC 8785
// (JSON Canonicalization Scheme): object keys sorted by UTF-16 code units, no
// insignificant white space, numbers in their shortest ECMAScript form and
// strings with only the escapes JSON requires.
//
// v may be any value encoding/json can marshal. Numbers are treated as IEEE
// 754 doubles, as RFC 8785 requires, so integers beyond 2^53 lose precision.
func Canonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := appendCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func appendCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case string:
		writeString(buf, x)
	case float64:
		return writeNumber(buf, x)
	case int:
		return writeNumber(buf, float64(x))
	case int64:
		return writeNumber(buf, float64(x))
	case uint64:
		return writeNumber(buf, float64(x))
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return fmt.Errorf("canonical json: number %q: %w", x, err)
		}
		return writeNumber(buf, f)
	case map[string]any:
		var small [16]string // the keys of most payloads' maps, without an allocation
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			if err := appendCanonical(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := appendCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	default:
		// Any other Go value: go through its JSON form once.
		raw, err := json.Marshal(x)
		if err != nil {
			return fmt.Errorf("canonical json: %w", err)
		}
		generic, err := decodeGeneric(raw)
		if err != nil {
			return err
		}
		return appendCanonical(buf, generic)
	}
	return nil
}

// decodeGeneric decodes JSON into maps, slices, strings, float64, bool, nil.
func decodeGeneric(raw []byte) (any, error) {
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return out, nil
}

func writeNumber(buf *bytes.Buffer, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("canonical json: %v is not a JSON number", f)
	}
	if f == 0 {
		buf.WriteByte('0') // also for -0
		return nil
	}
	// ECMAScript Number.prototype.toString: plain notation for
	// 1e-6 <= |f| < 1e21, exponent notation otherwise.
	abs := math.Abs(f)
	if abs >= 1e-6 && abs < 1e21 {
		buf.WriteString(strconv.FormatFloat(f, 'f', -1, 64))
		return nil
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	// Go writes e-07 / e+21; ECMAScript writes e-7 / e+21.
	if i := bytes.IndexByte([]byte(s), 'e'); i >= 0 {
		mant, exp := s[:i], s[i+1:]
		sign := exp[0]
		digits := exp[1:]
		for len(digits) > 1 && digits[0] == '0' {
			digits = digits[1:]
		}
		s = mant + "e" + string(sign) + digits
	}
	buf.WriteString(s)
	return nil
}

const hexDigits = "0123456789abcdef"

func writeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	start := 0 // s[start:i] needs no escaping and is written in one go
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			buf.WriteString(s[start:i])
			buf.WriteString("\ufffd")
			i++
			start = i
			continue
		}
		buf.WriteString(s[start:i])
		switch c {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		default:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xf])
		}
		i++
		start = i
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// requires. UTF-8 byte order is the same except where a character above
// U+FFFF meets one in U+E000–U+FFFF, so plain comparison serves unless both
// strings have bytes that can start such characters.
func compareUTF16(a, b string) int {
	if !hasHighRunes(a) || !hasHighRunes(b) {
		return strings.Compare(a, b)
	}
	ra, rb := []rune(a), []rune(b)
	for i := 0; i < len(ra) && i < len(rb); i++ {
		ua, ub := utf16Units(ra[i]), utf16Units(rb[i])
		for j := 0; j < len(ua) && j < len(ub); j++ {
			if ua[j] != ub[j] {
				return cmp.Compare(ua[j], ub[j])
			}
		}
		if len(ua) != len(ub) {
			return cmp.Compare(len(ua), len(ub))
		}
	}
	return cmp.Compare(len(ra), len(rb))
}

// hasHighRunes reports whether s may hold a character at or above U+E000.
func hasHighRunes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0xee {
			return true
		}
	}
	return false
}

func utf16Units(r rune) []uint16 {
	if r < 0x10000 {
		return []uint16{uint16(r)}
	}
	r -= 0x10000
	return []uint16{uint16(0xd800 + (r >> 10)), uint16(0xdc00 + (r & 0x3ff))}
}
