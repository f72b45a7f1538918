package cli_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/lctl/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files and the example chains under testdata")

// run runs lctl in-process and returns its exit code, stdout and stderr.
func run(t testing.TB, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), args, cli.Env{
		Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return env[k] },
		Live:   lctllive.Live{},
	})
	return code, stdout.String(), stderr.String()
}

// golden compares a command's exit code and output with
// testdata/golden/NAME.txt (-update rewrites it).
func golden(t *testing.T, name string, args ...string) {
	t.Helper()
	code, stdout, stderr := run(t, nil, args...)
	got := fmt.Sprintf("$ lctl %s\nexit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), code, stdout, stderr)
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("lctl %s: output differs from %s (run with -update after checking the change)\n--- got\n%s\n--- want\n%s",
			strings.Join(args, " "), path, got, want)
	}
}

const (
	v1     = "testdata/chains/review-v1.lctl.json"
	v1yaml = "testdata/chains/review-v1.lctl.yaml"
	v2     = "testdata/chains/review-v2.lctl.json"
	xctRun = "testdata/chains/xct-run.lctl.json"
	// legacy was written, its checkpoints' state hashes included, by the
	// reducer before it knew handoff and XCT's extension types (frozen:
	// no generator rewrites it).
	legacy = "testdata/chains/legacy-state-hashes.lctl.json"
	other  = "testdata/chains/other-implementation.lctl.json"
	// hashV1 is review-v1 as the generator wrote it before session 5,
	// its checkpoints' state hashes of version 1 (frozen, as is
	// bad/checkpoint-state-hash-v1: an event changed, the chain re-sealed).
	hashV1  = "testdata/chains/state-hash-v1.lctl.json"
	bad     = "testdata/chains/bad/"
	spec    = "../testdata/spec/"
	prices  = "testdata/prices.yaml"
	contrac = "testdata/contracts"
)

// TestGolden runs every command, in text and JSON, on the example chains
// and on bad input, and compares with the golden files.
func TestGolden(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		// replay
		{"replay", []string{"replay", v1}},
		{"replay-json", []string{"replay", "--json", v1}},
		{"replay-to-seq", []string{"replay", "--to-seq", "10", v1}},
		{"replay-to-seq-events", []string{"replay", "--to-seq", "5", "--events", v1}},
		{"replay-to-seq-json", []string{"replay", "--json", "--to-seq", "10", v1}},
		{"replay-to-seq-hash", []string{"replay", "--to-seq", "13", "--hash", v1}},
		{"replay-to-seq-hash-v1", []string{"replay", "--to-seq", "13", "--hash", "--hash-version", "1", hashV1}},
		{"replay-hash-version-bad", []string{"replay", "--to-seq", "13", "--hash", "--hash-version", "3", v1}},
		{"replay-yaml", []string{"replay", v1yaml}},
		{"replay-xct", []string{"replay", xctRun}},
		{"replay-legacy-state-hashes", []string{"replay", legacy}},
		{"replay-legacy-state-hashes-json", []string{"replay", "--json", "--to-seq", "21", legacy}},
		{"replay-other-implementation", []string{"replay", other}},
		{"replay-spec-event-stream", []string{"replay", spec + "event-stream.lctl.yaml"}},
		{"replay-spec-streaming", []string{"replay", spec + "streaming.lctl.yaml"}},
		{"replay-spec-multi-model", []string{"replay", spec + "multi-model.lctl.yaml"}},
		{"replay-spec-fragments", []string{"replay", spec + "fragments.lctl.yaml"}},
		{"replay-spec-minimal", []string{"replay", spec + "minimal.lctl.yaml"}},
		{"replay-to-seq-past-end", []string{"replay", "--to-seq", "99", v1}},
		// diff
		{"diff", []string{"diff", v1, v2}},
		{"diff-json", []string{"diff", "--json", v1, v2}},
		{"diff-identical", []string{"diff", v1, v1yaml}},
		{"diff-strict", []string{"diff", "--strict", v1, v2}},
		// stats
		{"stats", []string{"stats", "--prices", prices, v1}},
		{"stats-json", []string{"stats", "--json", "--prices", prices, v1}},
		{"stats-no-prices", []string{"stats", v1}},
		{"stats-xct", []string{"stats", "--prices", prices, xctRun}},
		{"stats-legacy-state-hashes", []string{"stats", legacy}},
		{"stats-other-implementation", []string{"stats", other}},
		// bottleneck
		{"bottleneck", []string{"bottleneck", v1}},
		{"bottleneck-json", []string{"bottleneck", "--json", v1}},
		{"bottleneck-xct", []string{"bottleneck", xctRun}},
		{"bottleneck-unfinished", []string{"bottleneck", spec + "event-stream.lctl.yaml"}},
		// confidence
		{"confidence", []string{"confidence", v1}},
		{"confidence-json", []string{"confidence", "--json", v1}},
		{"confidence-no-decay", []string{"confidence", "--decay", "1", v1}},
		{"confidence-none", []string{"confidence", xctRun}},
		// validate
		{"validate", []string{"validate", v1, "--contracts", contrac}},
		{"validate-json", []string{"validate", "--json", "--contracts", contrac, v1}},
		{"validate-violations", []string{"validate", "--contracts", contrac, v2}},
		{"validate-spec-contracts", []string{"validate", "--contracts", spec + "../contracts/spec.yaml", v1}},
		{"validate-bad-contracts", []string{"validate", "--contracts", "testdata/contracts-bad", v1}},
		// verify
		{"verify", []string{"verify", v1}},
		{"verify-json", []string{"verify", "--json", v1}},
		{"verify-yaml", []string{"verify", v1yaml}},
		{"verify-xct", []string{"verify", xctRun}},
		{"verify-legacy-state-hashes", []string{"verify", legacy}},
		{"verify-state-hash-v1", []string{"verify", hashV1}},
		{"verify-checkpoint-state-hash-v1", []string{"verify", bad + "checkpoint-state-hash-v1.lctl.json"}},
		{"verify-edited", []string{"verify", bad + "edited.lctl.json"}},
		{"verify-edited-json", []string{"verify", "--json", bad + "edited.lctl.json"}},
		{"verify-removed", []string{"verify", bad + "removed.lctl.json"}},
		{"verify-reordered", []string{"verify", bad + "reordered.lctl.json"}},
		{"verify-resealed", []string{"verify", bad + "resealed.lctl.json"}},
		{"verify-duplicate-seq", []string{"verify", bad + "duplicate-seq.lctl.json"}},
		{"verify-time-backwards", []string{"verify", bad + "time-backwards.lctl.json"}},
		{"verify-checkpoint", []string{"verify", bad + "checkpoint.lctl.json"}},
		{"verify-truncated", []string{"verify", bad + "truncated.lctl.json"}},
		{"verify-wrong-version", []string{"verify", bad + "wrong-version.lctl.json"}},
		{"verify-other-implementation", []string{"verify", other}},
		{"verify-spec-event-stream", []string{"verify", spec + "event-stream.lctl.yaml"}},
		{"replay-truncated", []string{"replay", bad + "truncated.lctl.json"}},
		{"replay-duplicate-seq", []string{"replay", bad + "duplicate-seq.lctl.json"}},
		// query
		{"query", []string{"query", "SELECT * WHERE confidence >= 0.8 ORDER BY confidence DESC LIMIT 10", v1}},
		{"query-json", []string{"query", "--json", "SELECT id, confidence, severity WHERE severity IN ('high', 'critical') ORDER BY id", v1}},
		{"query-spec", []string{"query", "SELECT * WHERE confidence >= 0.8 AND source = 'static-analysis' AND tag = 'critical' AND text LIKE '%SQL%' ORDER BY confidence DESC LIMIT 10", v1}},
		{"query-to-seq", []string{"query", "--to-seq", "5", "SELECT *", v1}},
		{"query-relevance", []string{"query", "SELECT id, text WHERE relevance('SQL injection') > 0.5", v1}},
		{"query-none", []string{"query", "SELECT * WHERE confidence > 0.99", v1}},
		{"query-syntax-error", []string{"query", "SELECT * WHERE confidence >= AND source = 'x'", v1}},
		{"query-unknown-field", []string{"query", "SELECT * WHERE confidnce >= 0.8", v1}},
		{"query-type-error", []string{"query", "SELECT * WHERE confidence >= 'high'", v1}},
		// convert
		{"convert-to-yaml", []string{"convert", v1, "--to", "yaml"}},
		{"convert-spec-to-json", []string{"convert", spec + "event-stream.lctl.yaml", "--to", "json"}},
		// usage
		{"usage", []string{}},
		{"unknown-command", []string{"frobnicate"}},
		{"replay-no-input", []string{"replay"}},
		{"replay-missing-file", []string{"replay", "testdata/chains/nope.lctl.json"}},
		{"diff-one-operand", []string{"diff", v1}},
		{"export-no-chain", []string{"export", v1}},
		{"tail-no-chain", []string{"tail"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { golden(t, tt.name, tt.args...) })
	}
}

// TestConvertRoundTrip converts JSON to YAML to JSON through files: the
// bytes come back the same and the chain still verifies.
func TestConvertRoundTrip(t *testing.T) {
	dir := t.TempDir()
	y, j := filepath.Join(dir, "c.lctl.yaml"), filepath.Join(dir, "c.lctl.json")
	for _, step := range [][]string{{"convert", v1, y}, {"convert", y, j}, {"verify", j}, {"verify", y}} {
		if code, out, errOut := run(t, nil, step...); code != 0 {
			t.Fatalf("lctl %v: exit %d\n%s%s", step, code, out, errOut)
		}
	}
	a, _ := os.ReadFile(v1)
	b, _ := os.ReadFile(j)
	if !bytes.Equal(a, b) {
		t.Errorf("JSON -> YAML -> JSON changed the file")
	}
}

// TestExitCodes pins the exit codes the scripts rely on.
func TestExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		code int
	}{
		{[]string{"verify", v1}, 0},
		{[]string{"verify", bad + "edited.lctl.json"}, 1},
		{[]string{"verify", bad + "truncated.lctl.json"}, 2},
		{[]string{"validate", "--contracts", contrac, v1}, 0},
		{[]string{"validate", "--contracts", contrac, v2}, 1},
		{[]string{"validate", v1}, 2},
		{[]string{"diff", v1, v1yaml}, 0},
		{[]string{"diff", v1, v2}, 1},
		{[]string{"replay", "--to-seq", "99", v1}, 2},
		{[]string{"query", "SELECT", v1}, 2},
		{[]string{"stats", "--prices", "testdata/nope.yaml", v1}, 2},
		{[]string{"replay", "--bogus", v1}, 2},
		{[]string{"replay", "-h"}, 0},
		{[]string{"help"}, 0},
	}
	for _, tt := range tests {
		if code, _, stderr := run(t, nil, tt.args...); code != tt.code {
			t.Errorf("lctl %s: exit %d, want %d\n%s", strings.Join(tt.args, " "), code, tt.code, stderr)
		}
	}
}

// TestPricesFromEnv reads the price table from LCTL_PRICES.
func TestPricesFromEnv(t *testing.T) {
	_, out, _ := run(t, map[string]string{"LCTL_PRICES": prices}, "stats", v1)
	if !strings.Contains(out, "Cost: $0.0") {
		t.Errorf("LCTL_PRICES was not used:\n%s", out)
	}
}

// TestStdin reads a chain from standard input.
func TestStdin(t *testing.T) {
	raw, err := os.ReadFile(v1yaml)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), []string{"verify", "-"}, cli.Env{Stdin: bytes.NewReader(raw), Stdout: &stdout, Stderr: &stderr})
	if code != 0 || !strings.Contains(stdout.String(), "Chain verified.") {
		t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// FuzzCommands feeds arbitrary chain files to the commands that read
// them: none may panic, and each exits 0, 1 or 2.
func FuzzCommands(f *testing.F) {
	for _, p := range []string{v1, other, bad + "truncated.lctl.json", bad + "reordered.lctl.json"} {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte("lctl: '4.0'\nchain: {id: x}\nevents:\n  - {seq: 2, type: step_end, data: {duration_ms: -1}}\n  - {seq: 1, type: checkpoint, data: {state_hash: 'sha256:00', facts_snapshot: {F: 1}}}\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, args := range [][]string{{"replay", "-"}, {"replay", "--to-seq", "2", "--hash", "-"}, {"verify", "-"}, {"stats", "-"},
			{"bottleneck", "-"}, {"confidence", "-"}, {"query", "SELECT * ORDER BY confidence DESC", "-"}, {"diff", "-", v1}, {"convert", "-", "--to", "yaml"}} {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), args, cli.Env{Stdin: bytes.NewReader(raw), Stdout: &stdout, Stderr: &stderr})
			if code < 0 || code > 2 {
				t.Fatalf("lctl %v: exit %d", args, code)
			}
		}
	})
}

// runEnv runs lctl with no live source (files only).
func runEnv(args []string, stdout, stderr io.Writer) int {
	return cli.Run(context.Background(), args, cli.Env{Stdout: stdout, Stderr: stderr})
}

// A bad flag is the problem and one line of usage; -h lists the flags.
func TestBadFlagIsShort(t *testing.T) {
	for _, args := range [][]string{{"replay", "--to-seq", "abc", "x.json"}, {"stats", "--nope", "x.json"}, {"query", "--to-seq"}} {
		code, stdout, stderr := run(t, nil, args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != cli.ExitUsage || len(lines) != 2 || !strings.HasPrefix(lines[0], "lctl "+args[0]+": ") ||
			!strings.Contains(lines[1], "lctl "+args[0]+" -h for flags") || stdout != "" {
			t.Errorf("lctl %v: exit %d, stdout %q, stderr %q; want 2 and two lines: the problem, the usage", args, code, stdout, stderr)
		}
	}
	code, _, stderr := run(t, nil, "replay", "-h")
	if code != cli.ExitOK || !strings.Contains(stderr, "-to-seq") || !strings.Contains(stderr, "Flags:") {
		t.Errorf("lctl replay -h: exit %d, stderr %q", code, stderr)
	}
}
