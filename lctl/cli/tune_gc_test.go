package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/xct-dev/xct/lctl/cli"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// A streamed command collects only near its memory limit (no GOGC
// collections on the way there), and puts the settings back after.
func TestTuneGCOnlyAtTheLimit(t *testing.T) {
	before := debug.SetGCPercent(73)
	defer debug.SetGCPercent(before)
	limit := debug.SetMemoryLimit(-1)
	restore := cli.TuneGC()
	percent := debug.SetGCPercent(-1)
	streamLimit := debug.SetMemoryLimit(-1)
	restore()
	if percent != -1 || streamLimit != 240<<20 {
		t.Errorf("while streaming: GOGC %d, limit %d; want off and 240 MiB", percent, streamLimit)
	}
	if p, l := debug.SetGCPercent(before), debug.SetMemoryLimit(-1); p != 73 || l != limit {
		t.Errorf("after: GOGC %d, limit %d; want 73 and %d", p, l, limit)
	}
}

// A command that streamed its chain (lctl: Env.TuneGC) keeps the
// stream's settings for what is left of it, which starts no collection
// over what it keeps; one whose stream gave way to the full read has them
// put back first, the full read needing the collector.
func TestTuneGCKeptAfterAStream(t *testing.T) {
	before := debug.SetGCPercent(73)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(before)
		debug.SetMemoryLimit(limit)
	})
	dir := t.TempDir()
	good := writeChain(t, dir, "good.lctl.json", 300, lctltest.WorkflowOptions{Seal: true}, nil)
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.lctl.json")
	if err := os.WriteFile(bad, bytes.Replace(raw, []byte(`"seq":2,`), []byte(`"seq":"2",`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file    string
		percent int64
		limit   int64
	}{{good, -1, 240 << 20}, {bad, 73, limit}} {
		for _, cmd := range []string{"stats", "confidence", "replay"} {
			debug.SetGCPercent(73)
			debug.SetMemoryLimit(limit)
			var out, errOut bytes.Buffer
			if code := cli.Run(context.Background(), []string{cmd, c.file}, cli.Env{Stdout: &out, Stderr: &errOut, TuneGC: true}); code != 0 {
				t.Fatalf("lctl %s %s: exit %d, %s", cmd, c.file, code, errOut.String())
			}
			p := debug.SetGCPercent(73)
			l := debug.SetMemoryLimit(limit)
			if int64(p) != c.percent || l != c.limit {
				t.Errorf("after lctl %s %s: GOGC %d, limit %d; want %d and %d", cmd, filepath.Base(c.file), p, l, c.percent, c.limit)
			}
		}
	}
}
