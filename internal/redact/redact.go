// Package redact replaces secrets in tool arguments and results with stable
// markers before they reach the event log, the executor's step records or
// spans. A secret is found two ways: by the key it is stored under in a
// JSON object ("password", "X-Api-Key", "clientSecret", ...) and by its
// shape inside any string (a PEM private key, a bearer token, a cloud API
// key, the password of a URL, "password: ..." in a configuration file).
//
// A redacted value becomes "[REDACTED hmac-sha256:<16 hex>]": the first 64
// bits of an HMAC-SHA256 of the secret under a per-cluster key (or a plain
// SHA-256 when configured). Equal secrets give equal markers, so "was the
// same token used in both steps?" stays answerable from the log, while a
// short secret cannot be recovered by hashing guesses without the key.
package redact

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Hash names how markers are computed.
type Hash string

const (
	// HashHMAC keys the hash with the cluster's redaction key: equality is
	// checkable inside one cluster, guessing is not possible without the key.
	HashHMAC Hash = "hmac-sha256"
	// HashSHA256 is a plain hash: equality is checkable across clusters and
	// by anyone holding a candidate secret, which is also what makes short
	// secrets open to guessing.
	HashSHA256 Hash = "sha256"
)

// MarkerPrefix starts every marker.
const MarkerPrefix = "[REDACTED "

// hexLen is how many hex digits of the hash a marker keeps (64 bits).
const hexLen = 16

// DefaultMinKnownLength is the shortest secret found by its key that is
// also replaced where it recurs in other strings of the same step.
const DefaultMinKnownLength = 6

// Redactor applies one set of rules. It is safe for concurrent use.
type Redactor struct {
	hash     Hash
	key      []byte
	keyRules [][]string // each rule's words
	matchers []matcher
	hints    *hintIndex
	minKnown int
	cacheMu  sync.RWMutex
	keyCache map[string]bool // object key → secret?, at most maxCachedKeys
}

// maxCachedKeys bounds the cache of key decisions (keys come from tool
// results, so their variety is not ours to choose).
const maxCachedKeys = 4096

// New builds a Redactor from rules. key is the HMAC key (at least 16
// bytes) for HashHMAC and is ignored for HashSHA256.
func New(rules Rules, key []byte) (*Redactor, error) {
	h := rules.Hash
	if h == "" {
		h = HashHMAC
	}
	switch h {
	case HashHMAC:
		if len(key) < 16 {
			return nil, fmt.Errorf("%w: the HMAC key has %d bytes, want at least 16", ErrBadConfig, len(key))
		}
	case HashSHA256:
		key = nil
	default:
		return nil, fmt.Errorf("%w: hash %q (want %s or %s)", ErrBadConfig, h, HashHMAC, HashSHA256)
	}
	r := &Redactor{hash: h, key: append([]byte(nil), key...), minKnown: rules.MinKnownLength, keyCache: map[string]bool{}}
	if r.minKnown <= 0 {
		r.minKnown = DefaultMinKnownLength
	}
	keys := rules.Keys
	if !rules.NoBuiltins {
		keys = append(append([]string(nil), BuiltinKeys...), keys...)
	}
	for _, k := range keys {
		if w := words(k); len(w) > 0 {
			r.keyRules = append(r.keyRules, w)
		}
	}
	if !rules.NoBuiltins {
		r.matchers = append(r.matchers, builtinMatchers()...)
	}
	for _, p := range rules.Patterns {
		m, err := patternMatcher(p)
		if err != nil {
			return nil, err
		}
		r.matchers = append(r.matchers, m)
	}
	if len(r.keyRules) > 0 {
		r.matchers = append(r.matchers, keyValueMatcher(r.keyRules))
	}
	r.hints = newHintIndex(r.matchers)
	return r, nil
}

// Marker returns the marker that stands in for secret.
func (r *Redactor) Marker(secret string) string {
	var sum []byte
	if r.hash == HashHMAC {
		m := hmac.New(sha256.New, r.key)
		m.Write([]byte(secret))
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256([]byte(secret))
		sum = s[:]
	}
	var b strings.Builder
	b.Grow(len(MarkerPrefix) + len(r.hash) + 1 + hexLen + 1)
	b.WriteString(MarkerPrefix)
	b.WriteString(string(r.hash))
	b.WriteByte(':')
	b.WriteString(hex.EncodeToString(sum[:hexLen/2]))
	b.WriteByte(']')
	return b.String()
}

// IsMarker reports whether s is exactly a marker (of any hash).
func IsMarker(s string) bool {
	if !strings.HasPrefix(s, MarkerPrefix) || !strings.HasSuffix(s, "]") {
		return false
	}
	body := s[len(MarkerPrefix) : len(s)-1]
	name, digest, ok := strings.Cut(body, ":")
	if !ok || len(digest) != hexLen || (name != string(HashHMAC) && name != string(HashSHA256)) {
		return false
	}
	for i := 0; i < len(digest); i++ {
		c := digest[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Value returns v with its secrets replaced. v is a JSON value as
// encoding/json or structpb's AsMap produce it (maps, slices, strings,
// numbers, bools, nil); other types pass through. v is never modified:
// what changes is copied, what does not is shared.
func (r *Redactor) Value(v any) any { return r.Scope().Value(v) }

// Text returns s with the secrets its patterns find replaced.
func (r *Redactor) Text(s string) string { return r.Scope().Text(s) }

// Scope redacts the values of one step: secrets found by their key (in
// the arguments, say) are remembered and replaced wherever they recur in
// later values of the scope (the result, an error message that echoes an
// argument, a preview). A Scope is not safe for concurrent use.
type Scope struct {
	r     *Redactor
	known map[string]string // secret → marker
	order []string          // known secrets, longest first
}

// Scope starts a scope. A nil Redactor gives a nil Scope, which redacts
// nothing.
func (r *Redactor) Scope() *Scope {
	if r == nil {
		return nil
	}
	return &Scope{r: r}
}

// Value is Redactor.Value, remembering secrets found by key.
func (s *Scope) Value(v any) any {
	if s == nil {
		return v
	}
	out, _ := s.value(v)
	return out
}

// Redact is Value that also says whether anything was replaced.
func (s *Scope) Redact(v any) (any, bool) {
	if s == nil {
		return v, false
	}
	return s.value(v)
}

// Map is Value for an object; nil stays nil.
func (s *Scope) Map(m map[string]any) map[string]any {
	if s == nil || m == nil {
		return m
	}
	out, _ := s.value(m)
	return out.(map[string]any)
}

// Text is Redactor.Text, also replacing the secrets the scope knows.
func (s *Scope) Text(text string) string {
	if s == nil {
		return text
	}
	out, _ := s.text(text)
	return out
}

// value returns the redacted v and whether it differs from v.
func (s *Scope) value(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		if nt, changed := s.text(x); changed {
			return nt, true
		}
		return v, false // no new interface value: no allocation
	case map[string]any:
		var out map[string]any
		if enc := s.encoded(x); enc != nil {
			out = enc
		}
		for k, e := range x {
			if out != nil {
				if _, done := out[encodedDone+k]; done {
					continue
				}
			}
			ne, changed := s.entry(k, e)
			if !changed {
				continue
			}
			if out == nil {
				out = make(map[string]any, len(x))
				for k2, e2 := range x {
					out[k2] = e2
				}
			}
			out[k] = ne
		}
		if out == nil {
			return x, false
		}
		for k := range out {
			if strings.HasPrefix(k, encodedDone) {
				delete(out, k)
			}
		}
		return out, true
	case []any:
		var out []any
		for i, e := range x {
			ne, changed := s.value(e)
			if !changed {
				continue
			}
			if out == nil {
				out = append([]any(nil), x...)
			}
			out[i] = ne
		}
		if out == nil {
			return v, false // v itself: x as an any would be a new interface value
		}
		return out, true
	}
	return v, false
}

// entry redacts one object member.
func (s *Scope) entry(key string, v any) (any, bool) {
	if !s.r.secretKey(key) {
		return s.value(v)
	}
	switch x := v.(type) {
	case nil, bool:
		return v, false // says nothing about a secret
	case string:
		if x == "" || IsMarker(x) {
			return v, false
		}
		m := s.r.Marker(x)
		s.remember(x, m)
		return m, true
	}
	// A number, object or array under a secret key goes as a whole.
	raw, err := json.Marshal(v)
	if err != nil {
		raw = []byte(fmt.Sprint(v))
	}
	return s.r.Marker(string(raw)), true
}

// Keep makes value a secret of the scope: it is replaced by its marker
// wherever it recurs in the scope's later values. It returns the marker
// ("" for a nil scope, which redacts nothing).
func (s *Scope) Keep(value string) string {
	if s == nil {
		return ""
	}
	m := s.r.Marker(value)
	s.remember(value, m)
	return m
}

func (s *Scope) remember(secret, marker string) {
	if len(secret) < s.r.minKnown {
		return
	}
	if s.known == nil {
		s.known = map[string]string{}
	}
	if _, ok := s.known[secret]; ok {
		return
	}
	s.known[secret] = marker
	s.order = append(s.order, secret)
	sort.Slice(s.order, func(i, j int) bool { return len(s.order[i]) > len(s.order[j]) })
}

// text replaces known secrets, then what the matchers find.
func (s *Scope) text(t string) (string, bool) {
	if t == "" || IsMarker(t) {
		return t, false
	}
	changed := false
	for _, secret := range s.order {
		if strings.Contains(t, secret) {
			if nt, ok := replaceOutsideMarkers(t, secret, s.known[secret]); ok {
				t, changed = nt, true
			}
		}
	}
	mask := s.r.hints.scan(t)
	for i := range s.r.matchers {
		if i < maxIndexed && mask&(1<<i) == 0 {
			continue
		}
		if nt, ok := s.r.matchers[i].apply(t, s.r); ok {
			t, changed = nt, true
		}
	}
	return t, changed
}

// secretKey reports whether an object key names a secret: its words end
// with the words of a key rule.
func (r *Redactor) secretKey(key string) bool {
	r.cacheMu.RLock()
	secret, ok := r.keyCache[key]
	r.cacheMu.RUnlock()
	if ok {
		return secret
	}
	w := words(normalizeKey(key))
	for _, rule := range r.keyRules {
		if endsWith(w, rule) {
			secret = true
			break
		}
	}
	r.cacheMu.Lock()
	if len(r.keyCache) < maxCachedKeys {
		r.keyCache[key] = secret
	}
	r.cacheMu.Unlock()
	return secret
}

func endsWith(w, suffix []string) bool {
	if len(suffix) > len(w) {
		return false
	}
	off := len(w) - len(suffix)
	for i, s := range suffix {
		if w[off+i] != s {
			return false
		}
	}
	return true
}

// words splits a key into lower-case words at every character that is not
// a letter or digit and at camelCase boundaries: "X-Api-Key", "x_api_key",
// "xApiKey" are all [x api key], and "APIKey" is [api key].
func words(key string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	rs := []rune(key)
	for i, c := range rs {
		isUpper := c >= 'A' && c <= 'Z'
		isLower := c >= 'a' && c <= 'z'
		isDigit := c >= '0' && c <= '9'
		if !isUpper && !isLower && !isDigit && c < 0x80 {
			flush()
			continue
		}
		if isUpper && len(cur) > 0 {
			prev := cur[len(cur)-1]
			prevLower := (prev >= 'a' && prev <= 'z') || (prev >= '0' && prev <= '9')
			nextLower := i+1 < len(rs) && rs[i+1] >= 'a' && rs[i+1] <= 'z'
			prevUpper := prev >= 'A' && prev <= 'Z'
			if prevLower || (prevUpper && nextLower) {
				flush()
			}
		}
		cur = append(cur, c)
	}
	flush()
	return out
}

// markerSpans returns the [start, end) of every marker in t.
func markerSpans(t string) [][2]int {
	var spans [][2]int
	for off := 0; ; {
		i := strings.Index(t[off:], MarkerPrefix)
		if i < 0 {
			return spans
		}
		start := off + i
		j := strings.IndexByte(t[start:], ']')
		if j < 0 {
			return spans
		}
		end := start + j + 1
		if IsMarker(t[start:end]) {
			spans = append(spans, [2]int{start, end})
		}
		off = start + len(MarkerPrefix)
	}
}

// overlaps reports whether [start, end) overlaps one of spans.
func overlaps(spans [][2]int, start, end int) bool {
	for _, sp := range spans {
		if start < sp[1] && sp[0] < end {
			return true
		}
	}
	return false
}

// replaceOutsideMarkers replaces secret by marker in t, except inside
// markers already there (a short secret could occur in a marker's hex).
func replaceOutsideMarkers(t, secret, marker string) (string, bool) {
	spans := markerSpans(t)
	if len(spans) == 0 {
		return strings.ReplaceAll(t, secret, marker), true
	}
	var b strings.Builder
	last, changed := 0, false
	for off := 0; ; {
		i := strings.Index(t[off:], secret)
		if i < 0 {
			break
		}
		start, end := off+i, off+i+len(secret)
		if overlaps(spans, start, end) {
			off = start + 1
			continue
		}
		b.WriteString(t[last:start])
		b.WriteString(marker)
		last, off, changed = end, end, true
	}
	if !changed {
		return t, false
	}
	b.WriteString(t[last:])
	return b.String(), true
}
