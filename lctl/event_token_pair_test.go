package lctl_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// Event.TokenPair, read on the decoding cores, is exactly Object("tokens")
// and its TokenPair whenever it answers, and it answers for the plain
// pairs: for tokens objects of every shape (the pair in both layouts, in
// the other order, with other members, fractions, long numbers, not an
// object), a tokens member given twice (the last counts: a pair after a
// number, a number after a pair), an escaped key, in the spec's order
// and as XCT writes events, read from bytes and from a mapped file, and
// after DataMap. A state the events are applied to counts the same
// tokens as one given the events read in full.
func TestEventTokenPairMatchesObject(t *testing.T) {
	t.Parallel()
	tokens := []string{
		`{"input": 301, "output": 41}`, `{"input":301,"output":41}`, `{"input": 0, "output": 0}`,
		`{"output": 41, "input": 301}`, `{"input": 3, "output": 4, "x": 1}`, `{"input": 1.5, "output": 4}`,
		`{"input": 123456789012345, "output": 7}`, `{"input": 1234567890123456, "output": 7}`, `{"input": 3}`,
		`{"in": 3, "out": 4}`, `{}`, `[1, 2]`, `7`, `"x"`, `{"input": {"a": 1}, "output": 2}`, `{"input": 3, "output": 4 }`,
	}
	rng := rand.New(rand.NewPCG(3, 18))
	var lines []string
	pairs := 0
	for i := range 3000 {
		tk := tokens[rng.IntN(len(tokens))]
		if tk[0] == '{' && tk[1] == '"' && tk[2] == 'i' && tk[len(tk)-2] != ' ' && !bytes.Contains([]byte(tk), []byte("x")) {
			pairs++
		}
		data := fmt.Sprintf(`{"duration_ms": %d, "outcome": "success", "tokens": %s}`, i%50, tk)
		switch i % 9 {
		case 1: // twice: the last counts
			data = fmt.Sprintf(`{"tokens": 5, "tokens": %s}`, tk)
		case 2:
			data = fmt.Sprintf(`{"tokens": %s, "tokens": 5}`, tk)
		case 3:
			data = fmt.Sprintf(`{"tokens": {"input": 1, "output": 2}, "tokens": %s}`, tk)
		case 4:
			data = fmt.Sprintf(`{"tok\u0065ns": %s, "step": 4}`, tk)
		}
		if i%2 == 0 {
			lines = append(lines, fmt.Sprintf(`{"seq": %d, "type": "step_end", "timestamp": "2026-11-21T09:00:%02d.5Z", "agent": "a", "data": %s}`, i+1, i%60, data))
		} else {
			lines = append(lines, fmt.Sprintf(`{"agent":"a","chain_id":"c","data":%s,"seq":%d,"timestamp":"2026-11-21T09:00:%02d.5Z","type":"step_end"}`, bytes.ReplaceAll([]byte(data), []byte(": "), []byte(":")), i+1, i%60))
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"lctl": "4.1", "chain": {"id": "c"}, "events": [` + "\n")
	for i, l := range lines {
		b.WriteString(l)
		if i < len(lines)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]}\n")
	path := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	full, err := lctl.Decode(bytes.NewReader(b.Bytes()), lctl.FormatJSON, lctl.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := lctl.Replay("c", full.Events, 0).Tokens
	for _, mapped := range []bool{false, true} {
		var r interface {
			Read([]byte) (int, error)
		} = bytes.NewReader(b.Bytes())
		if mapped {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			r = f
		}
		s := lctl.NewSummaryState("c")
		answered, n := 0, 0
		err := lctl.Stream(r, lctl.StreamOptions{Workers: 2, Fields: true, SkipHashes: true, Map: mapped}, func(*lctl.StreamHeader) error { return nil }, func(e *lctl.StreamEvent) error {
			n++
			in, out, ok := e.TokenPair()
			o, has := e.Object("tokens")
			var win, wout int64
			var wok bool
			if has {
				win, wout, wok = o.TokenPair()
			}
			if ok && (!wok || in != win || out != wout) {
				t.Fatalf("mapped=%v: event %d: TokenPair %d %d, Object's %v %d %d (%v)", mapped, e.Seq, in, out, wok, win, wout, has)
			}
			if ok {
				answered++
				c := e.Own()
				c.DataMap() // read from the map now: no answer
				if _, _, ok := c.TokenPair(); ok {
					t.Fatalf("mapped=%v: event %d: TokenPair after DataMap", mapped, e.Seq)
				}
			}
			s.Apply(&e.Event)
			return nil
		})
		if err != nil || n != len(lines) {
			t.Fatalf("mapped=%v: %d events, %v", mapped, n, err)
		}
		// The plain pairs of the members named once or last.
		if answered < pairs/3 {
			t.Errorf("mapped=%v: TokenPair answered %d times (%d plain pairs)", mapped, answered, pairs)
		}
		if s.Tokens != want {
			t.Errorf("mapped=%v: tokens %+v, read in full %+v", mapped, s.Tokens, want)
		}
	}
}
