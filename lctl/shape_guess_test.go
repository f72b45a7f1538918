package lctl_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// The spec-ordered reader guesses each type's keys, string values, agent
// and the next event's type from the last events (dataShape), the
// canonical reader the data's keys and values from the type it peeks at
// the event's end: what it
// reads is exactly what the general way reads, whether a guess holds, is
// a prefix of the bytes there or has them as its prefix, is followed by
// an escaped quote, or would hold only with the bytes after the event
// (which the stream's events have: the next events' bytes); and it
// refuses what the general way refuses.
func TestShapeGuessesMatchGeneral(t *testing.T) {
	pair := lctl.LoopPair()
	rng := rand.New(rand.NewPCG(15, 15))
	// Strings that share prefixes, at the lengths where a guess's words
	// change (7, 8, 14, 15, 16 bytes: a guess holds at most 14), with
	// escapes and bytes past ASCII.
	strs := []string{"", "a", "ab", "abc", "abcdefg", "abcdefgh", "abcdefghi", "abcdefghijklm", "abcdefghijklmn",
		"abcdefghijklmno", "abcdefghijklmnop", "abcdefghijklmnopqrstuvw", "abcdefghijklmnopqrstuvwx",
		`ab\"`, `ab\\`, `ab\\\"c`, `\u0061b`, `é`, `aé`, `a\nb`, "allow", "success", "s0000001", "s0000002", "fs.read"}
	keys := []string{"k", "ke", "key", "keys", "step", "step_id", "stepidentifier", "stepidentifiers", "stepidentifierxx", "tool", `k\"`, `\u006b`}
	types := []string{"t", "ty", "step_start", "step_startx", "verdict", `t\"`, "abcdefghijklmn", "abcdefghijklmno"}
	agents := []string{"a", "ab", "planner", "validator", "executor", "abcdefghijklmn", "abcdefghijklmno", `a\\`}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	// event is in the spec's order or, canonical, in XCT's (agent,
	// chain_id, data, seq, timestamp, type: the type peeked from the end).
	event := func(seq int, typ string, stable map[string]string, canonical bool) []byte {
		var b strings.Builder
		if canonical {
			fmt.Fprintf(&b, `{"agent":"%s","chain_id":"c","data":{`, pick(agents))
		} else {
			fmt.Fprintf(&b, `{"seq":%d,"type":"%s","timestamp":"2026-01-01T00:00:00.%03dZ","agent":"%s","data":{`, seq, typ, seq%1000, pick(agents))
		}
		n := rng.IntN(7)
		for j := range n {
			if j > 0 {
				b.WriteByte(',')
			}
			k := stable[fmt.Sprint(typ, j)]
			if k == "" || rng.IntN(8) == 0 {
				k = pick(keys)
			}
			switch rng.IntN(6) {
			case 0:
				fmt.Fprintf(&b, `"%s":%d`, k, rng.IntN(1000))
			case 1:
				fmt.Fprintf(&b, `"%s":["%s"]`, k, pick(strs))
			default:
				v := stable[fmt.Sprint(typ, j, "v")]
				if v == "" || rng.IntN(4) == 0 {
					v = pick(strs)
				}
				fmt.Fprintf(&b, `"%s":"%s"`, k, v)
			}
		}
		b.WriteString("}")
		if canonical {
			fmt.Fprintf(&b, `,"seq":%d,"timestamp":"2026-01-01T00:00:00.%03dZ","type":"%s"`, seq, seq%1000, typ)
		}
		b.WriteString("}")
		return []byte(b.String())
	}
	// Keys and values mostly the same per type and place, as in a run.
	stable := map[string]string{}
	for _, typ := range types {
		for j := range 8 {
			stable[fmt.Sprint(typ, j)] = pick(keys)
			stable[fmt.Sprint(typ, j, "v")] = pick(strs)
		}
	}
	check := func(name string, raw []byte, decided bool) {
		t.Helper()
		tab, gen, errT, errG := pair(raw)
		if (errT == nil) != (errG == nil) || errT == nil && !reflect.DeepEqual(tab, gen) {
			t.Fatalf("%s: %s\ntables %v %+v\ngeneral %v %+v", name, raw, errT, tab, errG, gen)
		}
		if decided && errT != nil {
			t.Fatalf("%s: %s: not decided: %v", name, raw, errT)
		}
	}
	n := 20000
	if lctl.RaceDetector {
		n = 3000
	}
	typ := types[0]
	for seq := 1; seq <= n; seq++ {
		if rng.IntN(3) > 0 {
			typ = pick(types)
		}
		canonical := rng.IntN(3) == 0
		raw := event(seq, typ, stable, canonical)
		if !canonical && rng.IntN(2) == 0 {
			raw = pySpaces(raw)
		}
		check(fmt.Sprint("event ", seq), raw, true)
		// The same event with bytes after it (the stream's events have
		// the next events' after them), which may complete a guess that
		// the event's own bytes do not: an event cut anywhere after its
		// type, its cut bytes after it, is refused both ways.
		buf := append(append([]byte{}, raw...), raw...)
		check(fmt.Sprint("event ", seq, " with bytes after"), buf[:len(raw):len(buf)], true)
		if cut := 30 + rng.IntN(len(raw)-30); cut < len(raw) {
			check(fmt.Sprint("event ", seq, " cut at ", cut), buf[:cut:len(buf)], false)
		}
	}
}
