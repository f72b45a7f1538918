package lctl_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// plainReader hides everything but Read: the stream reads it with its
// scanner alone, as before chunks.
type plainReader struct{ r io.Reader }

func (p plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

// streamResult is what a stream gave: its events (kept), their hashes and
// lines, and its error.
type streamResult struct {
	events []lctl.StreamEvent
	err    error
}

func streamKeep(r io.Reader, opts lctl.StreamOptions, stopAt int) streamResult {
	var res streamResult
	res.err = lctl.Stream(r, opts, func(*lctl.StreamHeader) error { return nil }, func(e *lctl.StreamEvent) error {
		c := *e
		c.Event = e.Own()
		c.Line = append([]byte(nil), e.Line...)
		res.events = append(res.events, c)
		if stopAt > 0 && len(res.events) == stopAt {
			return lctl.ErrStop
		}
		return nil
	})
	return res
}

// sameStream fails unless the two streams gave the same events, hashes,
// lines and error. On a file with an error both say so; the events
// handed over before it may differ in number (each way hands over what
// it decoded before its batch with the error), never in what they are.
// A stream stopped early on such a file may stop before it reaches the
// error's batch one way and not the other: bad says the file has one.
func sameStream(t *testing.T, name string, got, want streamResult, bad bool) {
	t.Helper()
	sameErr := errors.Is(got.err, want.err) || (got.err != nil && want.err != nil && got.err.Error() == want.err.Error())
	if !sameErr && !bad {
		t.Errorf("%s: error %v, the scanner alone %v", name, got.err, want.err)
		return
	}
	if sameErr && got.err == nil && len(got.events) != len(want.events) {
		t.Errorf("%s: %d events, the scanner alone %d", name, len(got.events), len(want.events))
		return
	}
	for i := range min(len(got.events), len(want.events)) {
		g, w := got.events[i], want.events[i]
		if !reflect.DeepEqual(g.Event, w.Event) || g.Computed != w.Computed || !bytes.Equal(g.Line, w.Line) || g.TimeOK != w.TimeOK || !g.Time.Equal(w.Time) {
			t.Errorf("%s: event %d differs:\n%+v\n%+v", name, i+1, g, w)
			return
		}
	}
}

// A file of one event per line read in chunks on every core gives what
// the scanner alone gives (the same events, hashes, rendered lines,
// errors and stops), whatever the chunks' size and wherever their ends
// fall: inside lines, on newlines, inside lines longer than a chunk; with
// lines of other shapes (blank, indented, CRLF, an event over several
// lines, two on a line, garbage, bytes that are not UTF-8) before, at
// and after the chunks' start; cut short; stopped early.
func TestStreamChunksMatchScanner(t *testing.T) {
	// n events; the edits below fall at the same fractions of them
	// whatever n is. Under the race detector a quarter: each file is
	// streamed 30 times, most of them in tiny chunks, and the workers'
	// sharing of the chunks is as much exercised by 150 events as by 600.
	n := 600
	if lctl.RaceDetector {
		n = 150
	}
	var gen bytes.Buffer
	if err := lctltest.WriteWorkflow(&gen, "wf", n, lctltest.WorkflowOptions{Seal: true}); err != nil {
		t.Fatal(err)
	}
	base := gen.String()
	head, rest, ok := strings.Cut(base, "\n")
	if !ok {
		t.Fatal("no newline after the header")
	}
	lines := strings.Split(strings.TrimRight(rest, "\n"), "\n")
	// lines: "{event}," ... "{event}" and "]}" (or the bracket on the last
	// event's line).
	body := func(edit func(i int, l string) string) string {
		var b strings.Builder
		b.WriteString(head + "\n")
		for i, l := range lines {
			b.WriteString(edit(i, l))
			b.WriteString("\n")
		}
		return b.String()
	}
	same := func(i int, l string) string { return l }
	long := strings.Repeat("é long text ", 700)
	files := map[string]string{
		"as written": base,
		"blank lines and indents": body(func(i int, l string) string {
			switch i % 7 {
			case 1:
				return "\n  \t" + l
			case 2:
				return strings.Replace(l, "},", "} ,  ", 1)
			case 3:
				return l + "\r"
			}
			return l
		}),
		"an event over lines in the middle": body(func(i int, l string) string {
			if i == n/2 {
				return strings.Replace(l, `,"data":`, ",\n\"data\":\n", 1)
			}
			return l
		}),
		"an event over lines early": body(func(i int, l string) string {
			if i == 6 {
				return strings.Replace(l, `,"data":`, ",\n\"data\":", 1)
			}
			return l
		}),
		"two on a line": body(func(i int, l string) string {
			if i == n*2/3 {
				return l + " " + lines[n*2/3+1]
			}
			if i == n*2/3+1 {
				return ""
			}
			return l
		}),
		"two on a line where the first batch ends": body(func(i int, l string) string {
			if i == 3 {
				return l + " " + lines[4]
			}
			if i == 4 {
				return ""
			}
			return l
		}),
		"garbage line": body(func(i int, l string) string { return map[bool]string{true: "xyz,", false: l}[i == n*3/4] }),
		"not UTF-8": body(func(i int, l string) string {
			return map[bool]string{true: strings.Replace(l, `"agent":"`, "\"agent\":\"\xff", 1), false: l}[i == n*5/6]
		}),
		"comma at end":        body(func(i int, l string) string { return map[bool]string{true: l + ",", false: l}[i == len(lines)-2] }),
		"bracket on its line": strings.Replace(base, "}]}", "}\n]}", 1),
		"long lines": body(func(i int, l string) string {
			if i%41 == 5 {
				return strings.Replace(l, `"data":{`, `"data":{"note":"`+long+`",`, 1)
			}
			return l
		}),
		"a long line before the last": body(func(i int, l string) string {
			if i == len(lines)-3 {
				return strings.Replace(l, `"data":{`, `"data":{"note":"`+long+long+`",`, 1)
			}
			return l
		}),
		"array last": body(func(i int, l string) string {
			if i == n*7/12 {
				return strings.TrimSuffix(l, "},") + `,"zz":[1,"\ud83d\ude00"]},`
			}
			return l
		}),
		"same":           body(same),
		"cut mid-line":   base[:len(base)*2/3],
		"cut after line": base[:strings.LastIndex(base[:len(base)*2/3], "\n")+1],
	}
	type setting struct {
		n, slack     int64
		first, batch int
	}
	settings := []setting{{97, 0, 4, 5}, {1000, 16, 4, 3}, {20000, 2000, 100, 512}}
	before := lctl.ChunksRead()
	for name, raw := range files {
		for _, opts := range []lctl.StreamOptions{{Workers: 3, Fields: true, SkipHashes: true}, {Workers: 1, Hash: true, Line: func(dst []byte, e *lctl.Event) []byte {
			return fmt.Appendf(dst, "%d %s %s", e.Seq, e.Type, e.Agent)
		}}} {
			want := streamKeep(plainReader{strings.NewReader(raw)}, opts, 0)
			for _, s := range settings {
				restore := lctl.SetChunks(s.n, s.slack, s.first, s.batch)
				label := fmt.Sprintf("%s, chunks of %d+%d after %d, workers %d", name, s.n, s.slack, s.first, opts.Workers)
				sameStream(t, label, streamKeep(strings.NewReader(raw), opts, 0), want, false)
				for _, stop := range []int{3, n * 11 / 20} {
					w := streamKeep(plainReader{strings.NewReader(raw)}, opts, stop)
					sameStream(t, fmt.Sprintf("%s, stopped at %d", label, stop), streamKeep(strings.NewReader(raw), opts, stop), w, want.err != nil)
				}
				restore()
			}
			if name == "as written" && (want.err != nil || len(want.events) != n) {
				t.Fatalf("the workflow streams %d events, %v", len(want.events), want.err)
			}
		}
	}
	if lctl.ChunksRead() == before {
		t.Fatal("no file was read in chunks")
	}
}

// A file indented as Python's json.dump(indent=2) writes it, or all on
// one line as json.dump writes it without indent, read in chunks of
// records on every core, gives what the scanner alone gives, whatever the
// chunks' size: as written (the spec's order and XCT's), with CRLF, with
// events whose lines are indented unlike the others (a nested object
// whose lines look like an event's first and last, an event whose last
// line is indented otherwise: cut wrongly, the scanner reads on from
// there), an event on one line among them; on one line, a string or an
// object in the data that holds what lies between events, another joint;
// a long event, garbage, cut short, stopped early.
func TestStreamRecordsMatchScanner(t *testing.T) {
	write := func(shape lctltest.Shape) string {
		var b bytes.Buffer
		if err := lctltest.WriteWorkflowShaped(&b, "wf", 600, lctltest.WorkflowOptions{Seal: true}, shape); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	spec := write(lctltest.Shape{Spec: true, Layout: lctltest.LayoutIndent})
	sealed := write(lctltest.Shape{Layout: lctltest.LayoutIndent})
	// nth replaces the n-th occurrence of old in s.
	nth := func(s, old, repl string, n int) string {
		at := 0
		for range n {
			k := strings.Index(s[at:], old)
			if k < 0 {
				t.Fatalf("no %d-th %q", n, old)
			}
			at += k + len(old)
		}
		return s[:at-len(old)] + repl + s[at:]
	}
	long := strings.Repeat("é long text ", 700)
	oneline := write(lctltest.Shape{Spec: true, Layout: lctltest.LayoutOneLine})
	files := map[string]string{
		"spec":                          spec,
		"sealed":                        sealed,
		"crlf":                          strings.ReplaceAll(spec, "\n", "\r\n"),
		"a nested object like an event": nth(spec, "      \"data\": {\n", "      \"data\": {\n        \"x\":\n    {\n    \"seq\": 1,\n    \"type\": \"t\"\n    },\n", 300),
		"an event's last line indented otherwise": nth(spec, "\n    },\n    {\n", "\n      },\n    {\n", 200),
		"an event on one line":                    nth(spec, "\n    },\n    {\n", "},\n    {\"seq\": 0, \"type\": \"x\"},\n    {\n", 250),
		"a long event":                            nth(spec, "      \"data\": {\n", "      \"data\": {\n        \"note\": \""+long+long+"\",\n", 320),
		"garbage":                                 nth(spec, "\n    },\n    {\n", "\n    },\n    xyz\n    {\n", 350),
		"cut":                                     spec[:len(spec)*2/3],
		// The whole file on one line, as json.dump writes it without
		// indent.
		"one line":        oneline,
		"one line sealed": write(lctltest.Shape{Layout: lctltest.LayoutOneLine}),
		"one line, a string that holds the joint":              nth(oneline, `"text": "`, `"text": "a}, {\"seq\": 7, `, 100),
		"one line, an object in data that starts as events do": nth(oneline, `"data": {`, `"data": {"x": [{"seq": 1}, {"seq": 2}], `, 280),
		"one line, another joint":                              nth(oneline, `}}, {"seq": `, `}},{"seq": `, 260),
		"one line, a long event":                               nth(oneline, `"data": {`, `"data": {"note": "`+long+long+`", `, 240),
		"one line, garbage":                                    nth(oneline, `}}, {"seq": `, `}}, x, {"seq": `, 350),
		"one line, cut":                                        oneline[:len(oneline)*2/3],
	}
	wellFormed := map[string]bool{"spec": true, "sealed": true, "crlf": true, "one line": true, "one line sealed": true}
	type setting struct {
		n, slack     int64
		first, batch int
	}
	settings := []setting{{97, 0, 4, 5}, {1000, 16, 4, 3}, {20000, 2000, 100, 512}}
	before := lctl.ChunksRead()
	for name, raw := range files {
		for _, opts := range []lctl.StreamOptions{{Workers: 3, Fields: true, SkipHashes: true}, {Workers: 1, Hash: true, Line: func(dst []byte, e *lctl.Event) []byte {
			return fmt.Appendf(dst, "%d %s %s", e.Seq, e.Type, e.Agent)
		}}} {
			want := streamKeep(plainReader{strings.NewReader(raw)}, opts, 0)
			if (name == "spec" || name == "sealed" || name == "crlf" || name == "one line") && (want.err != nil || len(want.events) != 600) {
				t.Fatalf("%s: the workflow streams %d events, %v", name, len(want.events), want.err)
			}
			for _, s := range settings {
				restore := lctl.SetChunks(s.n, s.slack, s.first, s.batch)
				label := fmt.Sprintf("%s, chunks of %d+%d after %d, workers %d", name, s.n, s.slack, s.first, opts.Workers)
				chunks := lctl.ChunksRead()
				sameStream(t, label, streamKeep(strings.NewReader(raw), opts, 0), want, false)
				if whole := int64(len(raw)) / s.n; wellFormed[name] && lctl.ChunksRead()-chunks < whole*9/10 {
					// Chunks that ended early still give the scanner's
					// events: count them.
					t.Errorf("%s: %d chunks read, want some %d", label, lctl.ChunksRead()-chunks, whole)
				}
				for _, stop := range []int{3, 330} {
					w := streamKeep(plainReader{strings.NewReader(raw)}, opts, stop)
					sameStream(t, fmt.Sprintf("%s, stopped at %d", label, stop), streamKeep(strings.NewReader(raw), opts, stop), w, want.err != nil)
				}
				restore()
			}
		}
	}
	if lctl.ChunksRead() == before {
		t.Fatal("no file was read in chunks")
	}
}
