package lctl

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestDataSkipMatchesSkipValue: what dataSkip (the check of a data object
// not decoded, StreamOptions.Data) takes is valid JSON that ends where
// skipValue, the careful check, says it ends: on the data events carry,
// every cut of it, shapes near them (escapes, bytes past ASCII, numbers of
// every form, literals, nesting, white space) and random ones; and it
// takes the data events carry, so that it is the way taken. With a type's
// guesses of its keys and string values (dataShape.skipKeys, skipVals),
// learned from every object checked before (strings of one byte more or
// less, escaped, past ASCII, cut), it takes and ends exactly as without.
func TestDataSkipMatchesSkipValue(t *testing.T) {
	t.Parallel()
	p := newFastParser()
	shape := new(dataShape)
	hits := 0
	check := func(s string) (taken bool) {
		t.Helper()
		b := []byte(s)
		p.b, p.i = b, 0
		end, ok := p.dataSkip(0, nil)
		p.b, p.i = b, 0
		before := *shape
		gEnd, gOK := p.dataSkip(0, shape)
		for m := range shapeMembers {
			if before.skipKeys[m].misses != 0 && shape.skipKeys[m].misses == 0 {
				hits++
			}
		}
		p.b, p.i = b, 0
		valid := p.skipValue()
		if ok && (!valid || p.i != end) {
			t.Fatalf("%q: dataSkip ends at %d, skipValue: %v at %d", s, end, valid, p.i)
		}
		if gOK != ok || gEnd != end {
			t.Fatalf("%q: dataSkip with guesses: %v at %d, without: %v at %d", s, gOK, gEnd, ok, end)
		}
		return ok
	}
	for _, s := range []string{
		`{"intent": "work on part 1", "model": "model-planner", "step": 1, "step_id": "s0000001", "tool": "fs.read"}`,
		`{"decision": "allow", "reasons": [{"rule_id": "allow-fs.read"}], "step": 1, "step_id": "s0000001", "tool": "fs.read"}`,
		`{"duration_ms": 21, "outcome": "success", "step": 1, "step_id": "s0000001", "tokens": {"input": 301, "output": 41}}`,
		`{"category": "execution_error", "code": "TIMEOUT", "message": "shell.run timed out", "recoverable": true, "step": 207, "step_id": "s0000207", "type": "tool_failure"}`,
		`{"confidence": 0.62, "id": "F1", "reason": "observed", "source": "planner", "text": "finding F1 rev 2"}`,
		`{"facts_snapshot": {"F0": {"confidence": 0.6, "text": "finding F0 rev 0"}, "F1": {"confidence": 0.62, "text": "x"}}}`,
		`{"agent":"a","n":-1.5e3,"x":null,"y":false,"z":[1,"2",{"3":[]}]}`, `{}`, "{ \n}", `{"a": 0}`, `{"a": "é\n"}`,
		"{\n  \"a\" :\t1 ,\r\n  \"b\": [ ]\n}", `{"a": 1234567890123456789012345678901234567890}`,
	} {
		if !check(s) {
			t.Errorf("%q: not taken", s)
		}
		for n := range len(s) {
			check(s[:n])
		}
		if !check(s + `, "x": 1}`) {
			t.Errorf("%q with more after it: not taken", s)
		}
	}
	// A guess learned, then strings of one byte more or less, another
	// last byte, escaped, past ASCII, cut before their quote.
	for _, s := range []string{
		`{"step": 1, "decision": "allow"}`, `{"steps": 1, "decision": "allowed"}`, `{"step": 1, "decision": "allow"}`,
		`{"ste": 1, "decision": "allo"}`, `{"step": 1, "decision": "allow"}`, `{"stes": 1, "decision": "allox"}`,
		`{"step": 1, "decision": "allow"}`, `{"st\"p": 1, "decision": "all\\ow"}`, `{"step": 1, "decision": "allow"}`,
		`{"stép": 1, "decision": "allöw"}`, `{"step": 1, "decision": "allow"}`, `{"step": 1, "decision": "allow`,
		`{"step": 1, "decision": "allow"}`, `{"step`, `{"step": 1, "decision": "allow"}`, "{\"step\x01\": 1}",
		`{"duration_ms": 1, "status": "success"}`, `{"duration_ms": 1, "status": "success"}`,
		`{"duration_ms"`, `{"duration_ms": 1, "status": "successful"}`, `{"duration_m": 1, "status": "succes"}`,
	} {
		check(s)
	}
	r := rand.New(rand.NewPCG(11, 15))
	keys := []string{`"step"`, `"k"`, `""`, `"a b"`, `"é"`, `"a\"b"`, `"a\\n"`, "\"\x1f\"", `"0123456789abcdefghijklmnop"`}
	values := []string{`0`, `7`, `301`, `01`, `-1`, `1.5`, `2e3`, `0.`, `-`, `1e999`, `12345678901234567`, `true`, `tru`, `null`, `false`,
		`{}`, `[]`, `{"x": 1}`, `[{"rule_id": "r"}]`, `[1, [2, {"a": null}]]`, `{"a": {"b": [}}`, `"s"`, `"é"`, `"\u00e9"`, `"\x"`,
		"\"\xff\"", "\"\x01\""}
	junk := []string{`:`, `,`, `{`, `}`, `[`, `]`, ` `, "\t", "\n", `x`, `"\`, "\"\x01", `"é`}
	var b strings.Builder
	taken := 0
	for range 60000 {
		b.Reset()
		b.WriteByte('{')
		for m := r.IntN(5); m > 0; m-- {
			for k, q := range []string{keys[r.IntN(len(keys))], ": ", values[r.IntN(len(values))], ", "} {
				if r.IntN(14) == 0 {
					q = junk[r.IntN(len(junk))]
				}
				if k%2 == 1 && r.IntN(5) == 0 {
					q = strings.TrimSpace(q)
				}
				b.WriteString(q)
			}
		}
		s := strings.TrimSuffix(b.String(), ", ")
		if r.IntN(8) != 0 {
			s += "}"
		}
		if check(s) {
			taken++
		}
	}
	if taken < 5000 {
		t.Errorf("dataSkip took %d of the random shapes", taken)
	}
	if hits < 1000 {
		t.Errorf("the guesses of keys were taken %d times", hits)
	}
}
