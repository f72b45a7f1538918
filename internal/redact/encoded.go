package redact

import (
	"encoding/base64"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Bytes that are not UTF-8 travel in tool results as standard base64,
// next to a member that says so: {"content": "...", "encoding": "base64"}
// (fs.read; "body" for http.request), {"stdout": "...", "stdout_encoding":
// "base64"} (shell.exec). Scanning the encoded text would find nothing, so
// the bytes are decoded, scanned as bytes, and encoded again when a secret
// was replaced: what is stored never holds the secret in any encoding the
// result declares.

// encodedDone prefixes, in a map value returns while it is being built,
// the members already redacted as encoded bytes (removed before it is
// returned; a JSON key cannot start with a NUL in XCT's results).
const encodedDone = "\x00redact-encoded:"

// dataMembers are the members a bare "encoding" member describes.
var dataMembers = []string{"content", "body", "data", "output"}

// encoded redacts the base64 members of m. It returns nil when none
// changed, or a copy of m with them replaced and marked done.
func (s *Scope) encoded(m map[string]any) map[string]any {
	var out map[string]any
	set := func(member string, v any) {
		if out == nil {
			out = make(map[string]any, len(m)+2)
			for k, e := range m {
				out[k] = e
			}
		}
		out[member] = v
		out[encodedDone+member] = true
	}
	for k, e := range m {
		if enc, ok := e.(string); !ok || !strings.EqualFold(enc, "base64") {
			continue
		}
		var members []string
		switch {
		case k == "encoding":
			members = dataMembers
		case strings.HasSuffix(k, "_encoding"):
			members = []string{strings.TrimSuffix(k, "_encoding")}
		default:
			continue
		}
		for _, member := range members {
			text, ok := m[member].(string)
			if !ok || text == "" {
				continue
			}
			raw, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				continue // not what it says it is: scanned as text below
			}
			// A Go string holds any bytes: the matchers see the secret's
			// ASCII wherever it sits among bytes that are not UTF-8.
			if red, changed := s.text(string(raw)); changed {
				set(member, base64.StdEncoding.EncodeToString([]byte(red)))
			}
		}
	}
	return out
}

// normalizeKey is how a key is read before it is matched: format
// characters (zero-width spaces and joiners, the byte order mark, bidi
// controls: Unicode category Cf) are dropped, then the key is put in NFKC
// form, so "pass\u200bword" and fullwidth "ｐａｓｓｗｏｒｄ" are "password".
func normalizeKey(key string) string {
	ascii := true
	for i := 0; i < len(key); i++ {
		if key[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return key
	}
	stripped := strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, key)
	return norm.NFKC.String(stripped)
}
