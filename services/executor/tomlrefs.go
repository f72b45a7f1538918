package executor

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// parseTOML reads the TOML document b into the maps ([]any for arrays
// and arrays of tables, map[string]any for tables) a YAML document
// decodes to, so lefthook's TOML configuration is read as its YAML one
// is (lefthookRefs). Strings are decoded; other scalars (numbers,
// booleans, dates) are kept as their text. It is as much of TOML as a
// configuration's commands need: a document it cannot read is not taken
// (ok false), and then names nothing.
func parseTOML(b []byte) (doc map[string]any, ok bool) {
	if !utf8.Valid(b) {
		return nil, false
	}
	p := &tomlParser{s: string(b)}
	root := map[string]any{}
	cur := root
	for {
		p.skipBlank(true)
		if p.i >= len(p.s) {
			return root, true
		}
		if p.s[p.i] == '[' {
			array := strings.HasPrefix(p.s[p.i:], "[[")
			if array {
				p.i += 2
			} else {
				p.i++
			}
			keys, ok := p.key()
			if !ok {
				return nil, false
			}
			p.skipBlank(false)
			closing := "]"
			if array {
				closing = "]]"
			}
			if !strings.HasPrefix(p.s[p.i:], closing) {
				return nil, false
			}
			p.i += len(closing)
			if cur = tomlTable(root, keys, array); cur == nil {
				return nil, false
			}
		} else {
			if !p.keyValue(cur) {
				return nil, false
			}
		}
		p.skipBlank(false)
		if p.i < len(p.s) && p.s[p.i] != '\n' && p.s[p.i] != '\r' {
			return nil, false
		}
	}
}

// tomlParser is parseTOML's position in its text.
type tomlParser struct {
	s     string
	i     int
	depth int
}

// tomlMaxDepth bounds how deep arrays and inline tables nest.
const tomlMaxDepth = 32

// skipBlank skips spaces, tabs and a comment; with newlines, line ends
// too (and the comments of the lines it skips).
func (p *tomlParser) skipBlank(newlines bool) {
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == ' ' || c == '\t':
			p.i++
		case c == '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		case newlines && (c == '\n' || c == '\r'):
			p.i++
		default:
			return
		}
	}
}

// key reads a dotted key: bare and quoted parts separated by dots.
func (p *tomlParser) key() ([]string, bool) {
	var keys []string
	for {
		p.skipBlank(false)
		if p.i >= len(p.s) {
			return nil, false
		}
		var k string
		switch p.s[p.i] {
		case '"', '\'':
			s, ok := p.str()
			if !ok {
				return nil, false
			}
			k = s
		default:
			j := p.i
			for j < len(p.s) && (p.s[j] == '_' || p.s[j] == '-' || p.s[j] >= 'a' && p.s[j] <= 'z' ||
				p.s[j] >= 'A' && p.s[j] <= 'Z' || p.s[j] >= '0' && p.s[j] <= '9') {
				j++
			}
			if j == p.i {
				return nil, false
			}
			k, p.i = p.s[p.i:j], j
		}
		keys = append(keys, k)
		p.skipBlank(false)
		if p.i < len(p.s) && p.s[p.i] == '.' {
			p.i++
			continue
		}
		return keys, true
	}
}

// keyValue reads "key = value" into t.
func (p *tomlParser) keyValue(t map[string]any) bool {
	keys, ok := p.key()
	if !ok || p.i >= len(p.s) || p.s[p.i] != '=' {
		return false
	}
	p.i++
	p.skipBlank(false)
	v, ok := p.value()
	if !ok {
		return false
	}
	if t = tomlTable(t, keys[:len(keys)-1], false); t == nil {
		return false
	}
	t[keys[len(keys)-1]] = v
	return true
}

// value reads a string, an array, an inline table, or another scalar
// (kept as its text).
func (p *tomlParser) value() (any, bool) {
	if p.i >= len(p.s) {
		return nil, false
	}
	switch p.s[p.i] {
	case '"', '\'':
		return p.str()
	case '[', '{':
		if p.depth++; p.depth > tomlMaxDepth {
			return nil, false
		}
		defer func() { p.depth-- }()
		if p.s[p.i] == '[' {
			p.i++
			var out []any
			for {
				p.skipBlank(true)
				if p.i < len(p.s) && p.s[p.i] == ']' {
					p.i++
					return out, true
				}
				v, ok := p.value()
				if !ok {
					return nil, false
				}
				out = append(out, v)
				p.skipBlank(true)
				if p.i < len(p.s) && p.s[p.i] == ',' {
					p.i++
				} else if p.i >= len(p.s) || p.s[p.i] != ']' {
					return nil, false
				}
			}
		}
		p.i++
		t := map[string]any{}
		for {
			p.skipBlank(true)
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return t, true
			}
			if !p.keyValue(t) {
				return nil, false
			}
			p.skipBlank(true)
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
			} else if p.i >= len(p.s) || p.s[p.i] != '}' {
				return nil, false
			}
		}
	}
	j := p.i
	for j < len(p.s) && !strings.ContainsRune(" \t\r\n,]}#", rune(p.s[j])) {
		j++
	}
	if j == p.i {
		return nil, false
	}
	v := p.s[p.i:j]
	p.i = j
	return v, true
}

// str reads a basic ("..."), literal ('...') or multi-line string.
func (p *tomlParser) str() (string, bool) {
	q := p.s[p.i]
	multi := strings.HasPrefix(p.s[p.i:], strings.Repeat(string(q), 3))
	if multi {
		p.i += 3
		// A newline right after the opening quotes is not part of it.
		if strings.HasPrefix(p.s[p.i:], "\r\n") {
			p.i += 2
		} else if p.i < len(p.s) && p.s[p.i] == '\n' {
			p.i++
		}
	} else {
		p.i++
	}
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case multi && strings.HasPrefix(p.s[p.i:], strings.Repeat(string(q), 3)):
			p.i += 3
			// Up to two more quotes end the string's content.
			for n := 0; n < 2 && p.i < len(p.s) && p.s[p.i] == q; n++ {
				b.WriteByte(q)
				p.i++
			}
			return b.String(), true
		case !multi && c == q:
			p.i++
			return b.String(), true
		case !multi && c == '\n':
			return "", false
		case q == '"' && c == '\\':
			if !p.escape(&b, multi) {
				return "", false
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", false
}

// escape reads the escape sequence at p.i (a backslash) of a basic
// string into b.
func (p *tomlParser) escape(b *strings.Builder, multi bool) bool {
	p.i++
	if p.i >= len(p.s) {
		return false
	}
	c := p.s[p.i]
	p.i++
	switch c {
	case 'b':
		b.WriteByte('\b')
	case 't':
		b.WriteByte('\t')
	case 'n':
		b.WriteByte('\n')
	case 'f':
		b.WriteByte('\f')
	case 'r':
		b.WriteByte('\r')
	case 'e':
		b.WriteByte(0x1b)
	case '"', '\\':
		b.WriteByte(c)
	case 'u', 'U', 'x':
		n := map[byte]int{'u': 4, 'U': 8, 'x': 2}[c]
		if p.i+n > len(p.s) {
			return false
		}
		r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
		if err != nil || !utf8.ValidRune(rune(r)) {
			return false
		}
		b.WriteRune(rune(r))
		p.i += n
	case ' ', '\t', '\r', '\n':
		// A line-ending backslash of a multi-line string: the line
		// end and the blanks after it go.
		if !multi {
			return false
		}
		p.i--
		for p.i < len(p.s) && strings.ContainsRune(" \t\r\n", rune(p.s[p.i])) {
			p.i++
		}
	default:
		return false
	}
	return true
}

// tomlTable returns the table keys names under t, made where missing;
// with array, a new table appended to the array of tables there. A key
// holding a scalar gives nil.
func tomlTable(t map[string]any, keys []string, array bool) map[string]any {
	for n, k := range keys {
		last := n == len(keys)-1
		switch v := t[k].(type) {
		case nil:
			if last && array {
				nt := map[string]any{}
				t[k] = []any{nt}
				return nt
			}
			nt := map[string]any{}
			t[k] = nt
			t = nt
		case map[string]any:
			if last && array {
				return nil
			}
			t = v
		case []any:
			if last && array {
				nt := map[string]any{}
				t[k] = append(v, nt)
				return nt
			}
			if len(v) == 0 {
				return nil
			}
			m, ok := v[len(v)-1].(map[string]any)
			if !ok {
				return nil
			}
			t = m
		default:
			return nil
		}
	}
	return t
}
