package lctl

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFlatSkipMatchesSkipValue: what flatSkip (canonSkip's way past a flat
// object or an array of them) takes is valid JSON that ends where
// skipValue, the careful check, says it ends, on flat shapes, shapes that
// are nearly flat (a fraction, an exponent, a sign, a leading zero, an
// escape, a control byte, a byte past ASCII, a nested value, a literal),
// every cut of them and white space anywhere; and it takes the shapes
// events carry (a tokens object, a verdict's reasons), so that it is the
// way taken.
func TestFlatSkipMatchesSkipValue(t *testing.T) {
	t.Parallel()
	// One parser, put back in the state newFastParser gives for every
	// shape: a new one per shape (~25 KB) cost milliseconds each under the
	// race detector, most of the test's time there.
	p := newFastParser()
	check := func(b []byte) (taken bool) {
		t.Helper()
		end, ok := flatSkip(b, 0)
		if !ok {
			return false
		}
		keys, values := p.keys, p.values
		clear(keys)
		clear(values)
		*p = fastParser{keys: keys, values: values} // what newFastParser gives
		p.b = b
		if valid := p.skipValue(); !valid || p.i != end {
			t.Fatalf("%q: flatSkip ends at %d, skipValue: %v at %d", b, end, valid, p.i)
		}
		// canonSkip gives the same (flatSkip first).
		if got, ok := p.canonSkip(0); !ok || got != end {
			t.Fatalf("%q: canonSkip %d %v, flatSkip %d", b, got, ok, end)
		}
		return true
	}
	for _, s := range []string{
		`{"input": 301, "output": 41}`, `{"input":301,"output":41}`, `[{"rule_id": "allow-fs.read"}]`,
		`[{"rule_id":"a"},{"rule_id":"b"}]`, `{}`, `[]`, "{ \t\r\n}", "[ \n]", `{"a":0}`, `{"":""}`,
		"{\n  \"input\" :\t301 ,\r\n  \"output\": 41\n}", `{"k": "v with spaces, colons: and ] braces }"}`,
		`{"a": 1234567890123456789012345678901234567890}`, "{\"a\": \"\x7f~\"}",
	} {
		if !check([]byte(s)) {
			t.Errorf("%q: not taken", s)
		}
		// Its every cut, and the whole followed by more.
		for n := range len(s) {
			check([]byte(s[:n]))
		}
		if !check([]byte(s + `, "x": 1}`)) {
			t.Errorf("%q with more after it: not taken", s)
		}
	}
	// Shapes flatSkip leaves to canonSkip.
	for _, s := range []string{
		`{"a": 1.5}`, `{"a": 1e3}`, `{"a": -1}`, `{"a": 01}`, `{"a": 0.5}`, `{"a": true}`, `{"a": null}`,
		`{"a": {}}`, `{"a": []}`, `{"a\"b": 1}`, `{"a": "b\\c"}`, `{"é": 1}`, "{\"a\x01\": 1}", `{"a": 1,}`,
		`{"a" 1}`, `{"a": 1 "b": 2}`, `[{"a": 1},]`, `[1]`, `["a"]`, `[{"a": 1} {"b": 2}]`, `{a: 1}`, `{"a": +1}`,
		`{"a": 1]`, `[{"a": 1}}`, `{"a": 1`, `"a"`, `1`, `{"a": -}`, `{"a": "\}`, "{\"a\": \"\x01}", `{"a": "é}`,
		`{"a": "\", "b": 1}`,
	} {
		if check([]byte(s)) {
			t.Errorf("%q: taken", s)
		}
	}
	// Random flat and nearly flat shapes.
	r := rand.New(rand.NewPCG(15, 10))
	parts := []string{`"input"`, `"k"`, `""`, `"a b"`, `"é"`, `"a\"b"`, `"a\\n"`, "\"\x1f\"", `"0123456789abcdefghij"`,
		`0`, `7`, `301`, `01`, `-1`, `1.5`, `2e3`, `0.`, `true`, `null`, `{}`, `[]`, `{"x": 1}`,
		`:`, `,`, `{`, `}`, `[`, `]`, ` `, "\t", "\n", `x`, `-`, `"\`, "\"\x01", `"é`}
	var b strings.Builder
	taken := 0
	for range 60000 {
		b.Reset()
		if r.IntN(4) == 0 {
			b.WriteByte('[')
		}
		b.WriteByte('{')
		for m := r.IntN(4); m > 0; m-- {
			// Mostly well formed members, with a part anywhere at times.
			for _, q := range []string{parts[r.IntN(9)], ": ", parts[r.IntN(22)], ", "} {
				if r.IntN(12) == 0 {
					q = parts[r.IntN(len(parts))]
				}
				if r.IntN(6) == 0 {
					q = strings.TrimSpace(q)
				}
				b.WriteString(q)
			}
		}
		s := strings.TrimSuffix(b.String(), ", ")
		switch r.IntN(4) {
		case 0:
			s += "}"
		case 1:
			s += "}]"
		case 2:
			s += `}, {"a": 1}]`
		}
		if check([]byte(s)) {
			taken++
		}
	}
	if taken < 3000 {
		t.Errorf("flatSkip took %d of the random shapes", taken)
	}
}
