package redact

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrBadConfig marks an unusable redaction configuration.
var ErrBadConfig = errors.New("redaction config")

// Rules say what is a secret and how markers are made.
type Rules struct {
	// Keys are object keys whose values are secrets, in addition to
	// BuiltinKeys. A key matches when its words end with the rule's words
	// (words are split at punctuation and camelCase, compared lower-case):
	// the rule "api_key" matches "X-Api-Key" and "openaiApiKey" but not
	// "api_key_id". The same keys are looked for as "key: value" or
	// "key=value" inside strings (configuration files, headers).
	Keys []string `yaml:"keys"`
	// Patterns are regular expressions (RE2 syntax) of secrets inside
	// strings, in addition to the built-in ones. When a pattern has capture
	// groups, the first group that matched is the secret; otherwise the
	// whole match is.
	Patterns []Pattern `yaml:"patterns"`
	// NoBuiltins drops the built-in keys and patterns: only Keys and
	// Patterns apply.
	NoBuiltins bool `yaml:"no_builtins"`
	// Hash is HashHMAC (default) or HashSHA256.
	Hash Hash `yaml:"hash"`
	// MinKnownLength is the shortest secret found by key that is also
	// replaced wherever it recurs in the same step (default 6; shorter
	// secrets would turn ordinary words into markers).
	MinKnownLength int `yaml:"min_known_length"`
}

// Pattern is one configured value pattern.
type Pattern struct {
	Name  string `yaml:"name"`
	Regex string `yaml:"regex"`
}

// BuiltinKeys are the object keys whose values are always secrets (unless
// Rules.NoBuiltins). "key" alone is not one: too many keys are named so.
var BuiltinKeys = []string{
	"password", "passwd", "passphrase", "secret", "token", "api_key", "apikey",
	"access_key", "secret_key", "private_key", "client_secret", "authorization",
	"cookie", "set_cookie", "credential", "credentials",
}

// matcher finds secrets inside a string.
type matcher struct {
	name string
	re   *regexp.Regexp
	// hints: the regexp runs only when one of them occurs in the string
	// (ASCII case-insensitively when fold); none means always.
	hints []string
	fold  bool
	// perLine: matches never span lines, so the regexp runs only on the
	// lines that have a hint.
	perLine bool
	// accept, when set, must approve a secret before it is replaced.
	accept func(string) bool
	// need, when set (perLine only), is what a line with a hint must also
	// have for the regexp to match it; a line without it is not searched.
	need func(line string) bool
}

// apply replaces what m finds in s. The caller checked the hints.
func (m *matcher) apply(s string, r *Redactor) (string, bool) {
	var locs [][]int
	if !m.perLine {
		locs = m.re.FindAllStringSubmatchIndex(s, -1)
	} else {
		// Only lines with a hint can match: the regexp never runs over a
		// whole long text.
		for off := 0; off < len(s); {
			end := strings.IndexByte(s[off:], '\n')
			if end < 0 {
				end = len(s)
			} else {
				end += off
			}
			if line := s[off:end]; m.hinted(line) && (m.need == nil || m.need(line)) {
				for _, loc := range m.re.FindAllStringSubmatchIndex(line, -1) {
					for i := range loc {
						if loc[i] >= 0 {
							loc[i] += off
						}
					}
					locs = append(locs, loc)
				}
			}
			off = end + 1
		}
	}
	if locs == nil {
		return s, false
	}
	var spans [][2]int
	if strings.Contains(s, MarkerPrefix) {
		spans = markerSpans(s)
	}
	var b strings.Builder
	last := 0
	for _, loc := range locs {
		start, end := loc[0], loc[1]
		for g := 2; g+1 < len(loc); g += 2 {
			if loc[g] >= 0 {
				start, end = loc[g], loc[g+1]
				break
			}
		}
		secret := s[start:end]
		if secret == "" || overlaps(spans, start, end) || strings.HasPrefix(secret, "[REDACTED") || (m.accept != nil && !m.accept(secret)) {
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(r.Marker(secret))
		last = end
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

func (m *matcher) hinted(s string) bool {
	for _, h := range m.hints {
		if m.fold {
			if containsFold(s, h) {
				return true
			}
		} else if strings.Contains(s, h) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains the lower-case ASCII word h,
// ignoring ASCII case, without allocating.
func containsFold(s, h string) bool {
	n := len(h)
	if n == 0 {
		return true
	}
	first := h[0]
	for i := 0; i+n <= len(s); i++ {
		if s[i]|0x20 != first {
			continue
		}
		j := 1
		for ; j < n; j++ {
			if s[i+j]|0x20 != h[j] {
				break
			}
		}
		if j == n {
			return true
		}
	}
	return false
}

// tokenLike accepts a credential-shaped word: it has a digit or one of
// + / = _ -, which prose after "Bearer" or "Basic" rarely has.
func tokenLike(s string) bool {
	return strings.ContainsAny(s, "0123456789+/=_-")
}

// builtinMatchers are the value patterns that always apply (unless
// Rules.NoBuiltins). Order matters: specific shapes first, then the
// key/value form, which skips what was already replaced.
func builtinMatchers() []matcher {
	return []matcher{
		{name: "pem-private-key", re: regexp.MustCompile(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|$)`), hints: []string{"PRIVATE KEY-----"}},
		{name: "url-password", re: regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@"']*:([^/\s@"']+)@`), hints: []string{"://"}},
		{name: "bearer", re: regexp.MustCompile(`(?i)\b(?:bearer|basic)[ \t]+([A-Za-z0-9._~+/-]{8,}=*)`), hints: []string{"bearer", "basic"}, fold: true, perLine: true, accept: tokenLike},
		{name: "aws-access-key-id", re: regexp.MustCompile(`\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b`), hints: []string{"AKIA", "ASIA", "ABIA", "ACCA"}},
		{name: "github-token", re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})`), hints: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}},
		{name: "slack-token", re: regexp.MustCompile(`\bxox[abeprs]-[A-Za-z0-9-]{10,}`), hints: []string{"xox"}},
		{name: "sk-key", re: regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{20,}`), hints: []string{"sk-"}},
		{name: "stripe-key", re: regexp.MustCompile(`\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}`), hints: []string{"k_live_", "k_test_"}},
		{name: "google-api-key", re: regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`), hints: []string{"AIza"}},
		{name: "jwt", re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`), hints: []string{"eyJ"}},
	}
}

// keyValueMatcher finds "KEY: value" and "KEY=value" for the key rules,
// with any prefix on the key (DB_PASSWORD=, spring.datasource.password:,
// "api-key": "..."). The value is a quoted string or a run of characters
// up to white space, a quote, a comma or a semicolon. "Authorization:
// Bearer x" keeps the scheme and takes the credential.
func keyValueMatcher(rules [][]string) matcher {
	alts := make([]string, 0, len(rules))
	hints := map[string]bool{}
	for _, w := range rules {
		q := make([]string, len(w))
		for i, x := range w {
			q[i] = regexp.QuoteMeta(x)
		}
		alts = append(alts, strings.Join(q, `[_.\- ]?`))
		hints[w[len(w)-1]] = true
	}
	re := regexp.MustCompile(`(?i)[A-Za-z0-9_.\-]*(?:` + strings.Join(alts, "|") + `)["']?[ \t]*[:=][ \t]*(?:(?:bearer|basic|token)[ \t]+)?(?:"([^"\n]+)"|'([^'\n]+)'|([^\s"',;]+))`)
	m := matcher{name: "key-value", re: re, fold: true, perLine: true}
	for h := range hints {
		m.hints = append(m.hints, h)
	}
	m.need = func(line string) bool { return assignedHint(line, m.hints) }
	return m
}

// assignedHint reports whether one of hints (a key rule's last word, lower
// case) occurs in line, ASCII case-insensitively, followed by an optional
// quote, spaces or tabs, and ':' or '=': what the key-value expression
// needs right after a key. A line without it cannot match, and is not
// searched: the expression's leading run of key characters and its
// alternation of every rule cost ~1 µs a byte, so a file of lines such as
// "max_tokens: 4096 # the token budget" (a hint, never assigned) took
// seconds per MiB to scan (session 19's BenchmarkShownSum).
func assignedHint(line string, hints []string) bool {
	for _, h := range hints {
		n := len(h)
		for i := 0; i+n <= len(line); i++ {
			if line[i]|0x20 != h[0] {
				continue
			}
			j := 1
			for ; j < n && line[i+j]|0x20 == h[j]; j++ {
			}
			if j < n {
				continue
			}
			k := i + n
			if k < len(line) && (line[k] == '"' || line[k] == '\'') {
				k++
			}
			for k < len(line) && (line[k] == ' ' || line[k] == '\t') {
				k++
			}
			if k < len(line) && (line[k] == ':' || line[k] == '=') {
				return true
			}
		}
	}
	return false
}

// patternMatcher compiles a configured pattern.
func patternMatcher(p Pattern) (matcher, error) {
	if p.Regex == "" {
		return matcher{}, fmt.Errorf("%w: pattern %q has no regex", ErrBadConfig, p.Name)
	}
	re, err := regexp.Compile(p.Regex)
	if err != nil {
		return matcher{}, fmt.Errorf("%w: pattern %q: %w", ErrBadConfig, p.Name, err)
	}
	if re.MatchString("") {
		return matcher{}, fmt.Errorf("%w: pattern %q matches the empty string", ErrBadConfig, p.Name)
	}
	return matcher{name: p.Name, re: re}, nil
}
