package lctl

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestTokenPairMatchesMembers: Object.TokenPair takes the two layouts of
// `{"input": N, "output": M}` it is for, and on every object it takes
// (hand-made, random, every cut of them) it gives exactly what the
// state's walk over the members gives (tokenCounts), and the object is
// JSON with those two members and no other; on anything else, never
// panicking, it says no.
func TestTokenPairMatchesMembers(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`{"input": 301, "output": 41}`, `{"input":301,"output":41}`, `{"input": 0, "output": 0}`,
		`{"input":123456789012345,"output": 7}`, `{"input": 5,"output":6}`} {
		if _, _, ok := (Object{raw: []byte(s)}).TokenPair(); !ok {
			t.Errorf("%s: not taken", s)
		}
	}
	objects := []string{
		`{"input": 301, "output": 41}`, `{"output": 41, "input": 301}`, `{"input": 301, "output": 41, "input": 2}`,
		`{"input": 301, "output": 41 }`, `{ "input": 301, "output": 41}`, `{"input" : 301, "output": 41}`,
		`{"input":  301, "output": 41}`, `{"input": 301,  "output": 41}`, "{\"input\":\t301, \"output\": 41}",
		`{"input": 01, "output": 41}`, `{"input": 00, "output": 4}`, `{"input": 0.5, "output": 4}`, `{"input": 0e1, "output": 4}`,
		`{"input": 1.0, "output": 4}`, `{"input": 1e3, "output": 4}`, `{"input": 1E3, "output": 4}`, `{"input": -1, "output": 4}`,
		`{"input": 1234567890123456, "output": 4}`, `{"input": 9007199254740993, "output": 4}`, `{"input": 4, "output": 123456789012345}`,
		`{"input": "3", "output": 4}`, `{"input": 3, "output": null}`, `{"input": 3, "output": {}}`, `{"input": 3}`, `{"output": 3}`,
		`{"input": 3, "output": 4, "x": 1}`, `{"in": 3, "out": 4}`, `{"input_tokens": 3, "output": 4}`, `{"inputs": 3, "output": 4}`,
		`{"input": 3, "outputs": 4}`, `{"input": 3, "output": 4}}`, `{"input": 3, "output": 4`, `{}`, `{"input": 3, "Output": 4}`,
		`{"input": 3, "output": 4.}`, `{"input": 3, "output": 40000000000000000000}`, `{"input":3 ,"output":4}`,
	}
	pieces := [][]string{
		{`{`}, {`"input"`, `"in"`, `"output"`, `"input "`, `"inpu"`}, {`: `, `:`, ` :`, `:  `},
		{`7`, `0`, `301`, `01`, `-3`, `1.5`, `2e2`, `123456789012345`, `1234567890123456`, `"9"`, `[]`},
		{`, `, `,`, ` ,`, `,  `}, {`"output"`, `"out"`, `"input"`, `"output_tokens"`},
		{`: `, `:`, ` :`}, {`41`, `0`, `999999999999999`, `10000000000000000`, `4.0`, `4e0`, `-0`, `null`},
		{`}`, ` }`, `, "x": 1}`, `}}`, ``},
	}
	rng := rand.New(rand.NewPCG(15, 13))
	for range 20000 {
		var b strings.Builder
		for _, p := range pieces {
			// Mostly the piece the shape has (the first), so that many
			// objects are one piece off it.
			k := 0
			if rng.IntN(4) == 0 {
				k = rng.IntN(len(p))
			}
			b.WriteString(p[k])
		}
		objects = append(objects, b.String())
	}
	taken := 0
	for _, s := range objects {
		for n := len(s); n >= 0; n-- {
			raw := []byte(s[:n])
			in, out, ok := (Object{raw: raw}).TokenPair()
			if !ok {
				continue
			}
			taken++
			var m map[string]json.Number
			d := json.NewDecoder(strings.NewReader(string(raw)))
			d.UseNumber()
			if err := d.Decode(&m); err != nil || d.More() || len(m) != 2 || strings.Count(string(raw), `"`) != 4 {
				t.Fatalf("%q taken (%d, %d), but it is not an object of two members: %v", raw, in, out, err)
			}
			win, wout := tokenCounts(Object{raw: raw})
			if in != win || out != wout || m["input"].String() != itoa(in) || m["output"].String() != itoa(out) {
				t.Fatalf("%q: TokenPair %d, %d; the members' walk %d, %d; JSON %v", raw, in, out, win, wout, m)
			}
		}
	}
	if taken < 3000 {
		t.Fatalf("only %d objects taken", taken)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
