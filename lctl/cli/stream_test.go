package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/cli"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// writeChain writes events as lctltest does (one event per line) after
// edit has had its way with them.
func writeChain(t *testing.T, dir, name string, n int, opts lctltest.WorkflowOptions, edit func([]lctl.Event) []lctl.Event) string {
	t.Helper()
	events := lctltest.Workflow("wf", n, opts)
	if edit != nil {
		events = edit(events)
	}
	var buf bytes.Buffer
	buf.WriteString(`{"lctl":"4.0","chain":{"id":"wf"},"events":[`)
	for i := range events {
		if i > 0 {
			buf.WriteByte(',')
		}
		raw, err := events[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
		buf.Write(raw)
	}
	buf.WriteString("\n]}\n")
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every command that reads a chain file as a stream prints exactly what the
// full read prints (LCTL_NO_STREAM turns the stream off): on an intact
// chain, where the stream does the work, and on broken or unusual ones,
// where it gives way to the full read.
func TestStreamedCommandsMatchFullRead(t *testing.T) {
	dir := t.TempDir()
	opts := lctltest.WorkflowOptions{Seal: true, StateHashes: true, CheckpointEvery: 150}
	files := []string{
		writeChain(t, dir, "clean.lctl.json", 600, opts, nil),
		writeChain(t, dir, "edited.lctl.json", 600, opts, func(es []lctl.Event) []lctl.Event {
			es[400].Data["text"] = "changed after sealing"
			es[400].Agent = "mallory"
			return es
		}),
		writeChain(t, dir, "reordered.lctl.json", 600, opts, func(es []lctl.Event) []lctl.Event {
			es[200], es[201] = es[201], es[200]
			return es
		}),
		writeChain(t, dir, "resealed.lctl.json", 600, opts, func(es []lctl.Event) []lctl.Event {
			es[350].Data["text"] = "resealed"
			_ = es[350].Seal(es[350].PrevHash)
			return es
		}),
		writeChain(t, dir, "unsealed.lctl.json", 500, lctltest.WorkflowOptions{}, nil),
		writeChain(t, dir, "sealed-then-not.lctl.json", 600, opts, unsealFrom(400)),
		writeChain(t, dir, "not-then-sealed.lctl.json", 600, lctltest.WorkflowOptions{StateHashes: true, CheckpointEvery: 150}, sealFrom(250)),
		writeChain(t, dir, "bad-checkpoint.lctl.json", 500, opts, func(es []lctl.Event) []lctl.Event {
			for i := range es {
				if es[i].Type == lctl.TypeCheckpoint {
					es[i].Data["state_hash"] = "sha256:" + strings.Repeat("0", 64)
					prev := ""
					for j := range es {
						_ = es[j].Seal(prev)
						prev = es[j].Hash
					}
					break
				}
			}
			return es
		}),
		writeChain(t, dir, "after-end.lctl.json", 500, opts, func(es []lctl.Event) []lctl.Event {
			for _, typ := range []string{"signed_checkpoint", "note", "signed_checkpoint"} {
				last := es[len(es)-1]
				e := lctl.Event{ChainID: last.ChainID, Seq: last.Seq + 1, Type: typ, Timestamp: last.Timestamp, Agent: "system", Data: map[string]any{}}
				_ = e.Seal(last.Hash)
				es = append(es, e)
			}
			return es
		}),
		"testdata/chains/review-v1.lctl.json", "testdata/chains/xct-run.lctl.json", "testdata/chains/other-implementation.lctl.json",
		// What the reference implementation writes: the spec's key order,
		// no hashes, Python's separators, indented or on one line.
		writeShaped(t, dir, "spec-lines.lctl.json", 600, opts, lctltest.Shape{Spec: true}),
		writeShaped(t, dir, "spec-indent.lctl.json", 600, opts, lctltest.Shape{Spec: true, Layout: lctltest.LayoutIndent}),
		writeShaped(t, dir, "spec-oneline.lctl.json", 600, opts, lctltest.Shape{Spec: true, Layout: lctltest.LayoutOneLine}),
		writeShaped(t, dir, "sealed-indent.lctl.json", 600, opts, lctltest.Shape{Layout: lctltest.LayoutIndent}),
	}
	// A chain whose seq is a string (a warning) and one cut short.
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	warn := filepath.Join(dir, "warning.lctl.json")
	if err := os.WriteFile(warn, bytes.Replace(raw, []byte(`"seq":2,`), []byte(`"seq":"2",`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.lctl.json")
	if err := os.WriteFile(cut, raw[:len(raw)*9/10], 0o644); err != nil {
		t.Fatal(err)
	}
	files = append(files, warn, cut)
	// The reference's shape going bad midway: two events out of order,
	// an event that is not JSON, a file cut inside an event.
	specLines := files[slices.IndexFunc(files, func(f string) bool { return strings.HasSuffix(f, "spec-lines.lctl.json") })]
	specRaw, err := os.ReadFile(specLines)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(specRaw, []byte("\n"))
	swapped := slices.Clone(lines)
	swapped[500], swapped[501] = swapped[501], swapped[500]
	broken := slices.Clone(lines)
	broken[520] = bytes.Replace(broken[520], []byte(`"data": {`), []byte(`"data": {"`), 1)
	// Each file that goes bad after seq 450 and the one it was made from:
	// --to-seq stops reading at its seq, so up to it such a file replays
	// as the whole file does (problems after it are verify's to report).
	cleanOf := map[string]string{cut: files[0]}
	for name, b := range map[string][]byte{
		"spec-reordered.lctl.json": bytes.Join(swapped, []byte("\n")),
		"spec-broken.lctl.json":    bytes.Join(broken, []byte("\n")),
		"spec-cut.lctl.json":       specRaw[:len(specRaw)*8/10],
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
		cleanOf[path] = specLines
	}
	commands := [][]string{
		{"replay"}, {"replay", "--to-seq", "300"}, {"replay", "--to-seq", "250", "--events", "--hash"}, {"replay", "--to-seq", "99999"},
		{"replay", "--json"}, {"replay", "--to-seq", "450", "--json"},
		{"stats"}, {"stats", "--json"}, {"bottleneck"}, {"bottleneck", "--json", "--top", "3"},
		{"confidence"}, {"confidence", "--json"}, {"verify"}, {"verify", "--json"},
		{"query", "SELECT * WHERE confidence >= 0.8"}, {"query", "SELECT id, text", "--to-seq", "200", "--json"},
	}
	// Under the race detector each file runs a third of the commands, in
	// turn, so that each command still runs on a third of the files: the
	// stream's goroutines are the same for every pair, and all 700 runs
	// took six minutes there at load 25.
	for i, f := range files {
		for j, cmd := range commands {
			if raceDetector && (i+j)%3 != 0 {
				continue
			}
			args := append(append([]string{}, cmd...), f)
			// Every other run maps the file, as lctl does (Env.MapFiles).
			code, stdout, stderr := runMapped(t, (i+j)%2 == 0, args...)
			full := args
			if clean, ok := cleanOf[f]; ok && (cmd[0] == "replay" || cmd[0] == "query") && slices.ContainsFunc(cmd, func(a string) bool { return a == "300" || a == "250" || a == "200" || a == "450" }) {
				full = append(append([]string{}, cmd...), clean)
			}
			fcode, fstdout, fstderr := run(t, map[string]string{"LCTL_NO_STREAM": "1"}, full...)
			if code != fcode || stdout != fstdout || stderr != fstderr {
				t.Errorf("lctl %s: the stream and the full read differ:\nstream: exit %d\n%s\n%s\nfull: exit %d\n%s\n%s",
					strings.Join(args, " "), code, clipOut(stdout), stderr, fcode, clipOut(fstdout), fstderr)
			}
		}
	}
}

// runMapped is run with Env.MapFiles set as mapped says.
func runMapped(t testing.TB, mapped bool, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), args, cli.Env{Stdout: &stdout, Stderr: &stderr, MapFiles: mapped})
	return code, stdout.String(), stderr.String()
}

// writeShaped writes lctltest's chain in shape.
func writeShaped(t *testing.T, dir, name string, n int, opts lctltest.WorkflowOptions, shape lctltest.Shape) string {
	t.Helper()
	var buf bytes.Buffer
	if err := lctltest.WriteWorkflowShaped(&buf, "wf", n, opts, shape); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// unsealFrom takes the hashes off the events from the k-th on.
func unsealFrom(k int) func([]lctl.Event) []lctl.Event {
	return func(es []lctl.Event) []lctl.Event {
		for i := k; i < len(es); i++ {
			es[i].Hash, es[i].PrevHash = "", ""
		}
		return es
	}
}

// sealFrom links the events from the k-th on with hashes (the first of
// them links to nothing).
func sealFrom(k int) func([]lctl.Event) []lctl.Event {
	return func(es []lctl.Event) []lctl.Event {
		prev := ""
		for i := k; i < len(es); i++ {
			_ = es[i].Seal(prev)
			prev = es[i].Hash
		}
		return es
	}
}

// verify streams a chain without hashes, or with hashes on some of its
// events only (what other implementations write, and a chain extended by
// one): never the full read, with its report and exit code, in one pass,
// or two when events without a hash come before the first with one (the
// first pass cannot know it must keep a problem for each). A chain that
// is broken where it has hashes is still read in full.
func TestVerifyStreamsChainsWithoutHashes(t *testing.T) {
	dir := t.TempDir()
	opts := lctltest.WorkflowOptions{StateHashes: true, CheckpointEvery: 150}
	sealed := opts
	sealed.Seal = true
	for _, c := range []struct {
		path         string
		passes, full int64
		problems     string
	}{
		{writeChain(t, dir, "unsealed.lctl.json", 700, lctltest.WorkflowOptions{}, nil), 1, 0, "FAILED: no event carries a hash"},
		{writeChain(t, dir, "unsealed-state.lctl.json", 700, opts, nil), 2, 0, "FAILED: no event carries a hash"},
		{writeChain(t, dir, "tail.lctl.json", 700, sealed, unsealFrom(650)), 2, 0, "50 problems"},
		{writeChain(t, dir, "head.lctl.json", 700, lctltest.WorkflowOptions{}, sealFrom(30)), 2, 0, "30 problems"},
		{writeChain(t, dir, "head-state.lctl.json", 700, opts, sealFrom(30)), 3, 0, "30 problems"},
		{writeChain(t, dir, "middle.lctl.json", 700, lctltest.WorkflowOptions{Seal: true}, unsealFrom(300)), 1, 0, "400 problems"},
		{writeChain(t, dir, "head-broken.lctl.json", 700, lctltest.WorkflowOptions{}, func(es []lctl.Event) []lctl.Event {
			es = sealFrom(30)(es)
			es[500].Data["text"] = "edited"
			return es
		}), 2, 1, "31 problems"},
	} {
		for _, args := range [][]string{{"verify", c.path}, {"verify", "--json", c.path}} {
			s0, f0 := cli.Reads()
			code, stdout, stderr := run(t, nil, args...)
			s1, f1 := cli.Reads()
			fcode, fstdout, fstderr := run(t, map[string]string{"LCTL_NO_STREAM": "1"}, args...)
			if code != fcode || stdout != fstdout || stderr != fstderr {
				t.Errorf("lctl %s: the stream and the full read differ:\nstream: exit %d\n%s\n%s\nfull: exit %d\n%s\n%s",
					strings.Join(args, " "), code, clipOut(stdout), stderr, fcode, clipOut(fstdout), fstderr)
			}
			if s1-s0 != c.passes || f1-f0 != c.full {
				t.Errorf("lctl %s: %d streamed and %d full reads, want %d and %d", strings.Join(args, " "), s1-s0, f1-f0, c.passes, c.full)
			}
			if code != 1 {
				t.Errorf("lctl %s: exit %d, want 1 (a chain without hashes cannot be verified)", strings.Join(args, " "), code)
			}
			if len(args) == 2 && !strings.Contains(stdout, c.problems) {
				t.Errorf("lctl %s: no %q in\n%s", strings.Join(args, " "), c.problems, clipOut(stdout))
			}
		}
	}
}

func clipOut(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// shortWriter takes n bytes, then fails every write.
type shortWriter struct {
	n   int
	got bytes.Buffer
}

func (w *shortWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		w.got.Write(p[:w.n])
		k := w.n
		w.n = 0
		return k, errShort
	}
	w.n -= len(p)
	w.got.Write(p)
	return len(p), nil
}

var errShort = errors.New("no space left on the output")

// replay's lines, written straight to the output a batch at a time (not
// through its buffer), stop at the first write that fails, and the
// command fails with that error, as it did when they went through the
// buffer; what reached the output is the start of the whole output.
func TestStreamedReplayWriteFails(t *testing.T) {
	dir := t.TempDir()
	path := writeChain(t, dir, "w.lctl.json", 3000, lctltest.WorkflowOptions{Seal: true}, nil)
	code, whole, _ := run(t, nil, "replay", path)
	if code != 0 || len(whole) < 150000 {
		t.Fatalf("replay: exit %d, %d bytes", code, len(whole))
	}
	for _, n := range []int{10, 5000, 100000, len(whole) - 10} {
		w := &shortWriter{n: n}
		var stderr bytes.Buffer
		code := cli.Run(context.Background(), []string{"replay", path}, cli.Env{
			Stdout: w, Stderr: &stderr, Getenv: func(string) string { return "" },
		})
		if code == 0 || !strings.Contains(stderr.String(), errShort.Error()) {
			t.Errorf("output cut at %d bytes: exit %d, stderr %q", n, code, stderr.String())
		}
		if w.got.String() != whole[:n] {
			t.Errorf("output cut at %d bytes: %d bytes written, not the output's first %d", n, w.got.Len(), n)
		}
	}
}

// Every command whose output could not be written says so and does not
// exit 0, whichever way it read its input: streamed from a file, read
// whole (stdin), or printed as JSON. Output cut short and a success exit
// would let a script take half a report for the whole.
func TestOutputThatFailsIsAnError(t *testing.T) {
	dir := t.TempDir()
	path := writeChain(t, dir, "w.lctl.json", 2000, lctltest.WorkflowOptions{Seal: true}, nil)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", path}, {"replay", "-"}, {"replay", "--json", path}, {"replay", "--to-seq", "100", "-"},
		{"stats", path}, {"stats", "-"}, {"bottleneck", path}, {"confidence", path},
		{"verify", path}, {"verify", "-"}, {"query", "SELECT *", path}, {"query", "SELECT *", "-"},
	} {
		runTo := func(w io.Writer) (int, string) {
			var stderr bytes.Buffer
			code := cli.Run(context.Background(), args, cli.Env{
				Stdout: w, Stderr: &stderr, Stdin: bytes.NewReader(raw), Getenv: func(string) string { return "" },
			})
			return code, stderr.String()
		}
		var whole bytes.Buffer
		if code, stderr := runTo(&whole); code != 0 || whole.Len() < 20 {
			t.Fatalf("%q: exit %d, %d bytes, stderr %q", args, code, whole.Len(), stderr)
		}
		code, stderr := runTo(&shortWriter{n: 10})
		if code == 0 || !strings.Contains(stderr, errShort.Error()) {
			t.Errorf("%q with its output cut at 10 bytes: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// TestReplayCurrentStepAtEverySeq: text replay's streamed state keeps no
// current step as it goes and sets it from the last step_start at the
// end; at every seq of chains with steps that end, steps that never end,
// steps without a number, intent or tool, and step_ends of other agents,
// replay --to-seq prints what the full read prints. Both reads are
// counted, so the stream did take the path.
func TestReplayCurrentStepAtEverySeq(t *testing.T) {
	dir := t.TempDir()
	odd := func(es []lctl.Event) []lctl.Event {
		var out []lctl.Event
		for i, e := range es {
			switch {
			case e.Type == lctl.TypeStepEnd && i%3 == 0:
				continue // a step that never ends
			case e.Type == lctl.TypeStepStart && i%4 == 1:
				e.Data = map[string]any{"model": "m-" + e.Agent} // no number, intent or tool
			case e.Type == lctl.TypeStepEnd && i%5 == 2:
				e.Agent = "someone-else"
			}
			e.Seq = uint64(len(out) + 1)
			out = append(out, e)
		}
		return out
	}
	files := []string{
		writeChain(t, dir, "plain.lctl.json", 160, lctltest.WorkflowOptions{}, nil),
		writeChain(t, dir, "odd.lctl.json", 200, lctltest.WorkflowOptions{}, odd),
		writeShaped(t, dir, "spec.lctl.json", 160, lctltest.WorkflowOptions{}, lctltest.Shape{Spec: true}),
	}
	for _, f := range files {
		streams, fulls := cli.Reads()
		n := 0
		for seq := 1; ; seq++ {
			args := []string{"replay", "--to-seq", fmt.Sprint(seq), f}
			code, stdout, stderr := run(t, nil, args...)
			if code != 0 {
				if !strings.Contains(stderr, "ends at seq") {
					t.Fatalf("lctl %s: exit %d: %s", strings.Join(args, " "), code, stderr)
				}
				break
			}
			fcode, fstdout, fstderr := run(t, map[string]string{"LCTL_NO_STREAM": "1"}, args...)
			if code != fcode || stdout != fstdout || stderr != fstderr {
				t.Fatalf("lctl %s: the stream and the full read differ:\nstream: exit %d\n%s\n%s\nfull: exit %d\n%s\n%s",
					strings.Join(args, " "), code, stdout, stderr, fcode, fstdout, fstderr)
			}
			n++
		}
		s, fl := cli.Reads()
		if n < 150 || s-streams != int64(n+1) || fl-fulls != int64(n) {
			t.Fatalf("%s: %d seqs, %d streamed and %d full reads", f, n, s-streams, fl-fulls)
		}
	}
}
