package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/xct-dev/xct/lctl/cli"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// benchChains caches the generated chain files of the benchmarks, one per
// size and directory, for the life of the test binary.
var benchChains sync.Map // "dir/n" -> path

// benchChain returns the path of a generated workflow chain of n events
// (lctltest.WriteWorkflow: sealed, a checkpoint every 500 events) in dir,
// writing it the first time. LCTL_BENCH_DIR keeps the files between runs
// (a million events take some 370 MB and 8 s to write); otherwise dir is
// the calling benchmark's temporary directory, removed when it ends.
func benchChain(b *testing.B, dir string, n int) string {
	b.Helper()
	if env := os.Getenv("LCTL_BENCH_DIR"); env != "" {
		dir = env
	}
	key := fmt.Sprintf("%s/%d", dir, n)
	if p, ok := benchChains.Load(key); ok {
		if _, err := os.Stat(p.(string)); err == nil {
			return p.(string)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("workflow-%d.lctl.json", n))
	if _, err := os.Stat(path); err != nil {
		f, err := os.Create(path + ".tmp")
		if err != nil {
			b.Fatal(err)
		}
		if err := lctltest.WriteWorkflow(f, "workflow", n, lctltest.WorkflowOptions{Seal: true}); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			b.Fatal(err)
		}
	}
	benchChains.Store(key, path)
	return path
}

// BenchmarkCommand runs each lctl command in-process on generated chains
// of 10k, 100k and 1M events (the whole command: open, read, decode,
// analyze, format; output discarded) and reports events/s and bytes/s
// (MB/s), so the growth of cost with size shows: the rates stay flat when
// the cost is linear. The 1M files are written on first use:
//
//	go test ./lctl/cli/ -run XXX -bench 'Command/.*/1M' -benchtime 3x
func BenchmarkCommand(b *testing.B) {
	sizes := []struct {
		name string
		n    int
	}{{"10k", 10_000}, {"100k", 100_000}, {"1M", 1_000_000}}
	commands := []struct {
		name string
		args func(n int) []string
	}{
		{"replay-to-seq", func(n int) []string { return []string{"replay", "--to-seq", strconv.Itoa(n - 5)} }},
		{"replay", func(int) []string { return []string{"replay"} }},
		{"stats", func(int) []string { return []string{"stats"} }},
		{"bottleneck", func(int) []string { return []string{"bottleneck"} }},
		{"confidence", func(int) []string { return []string{"confidence"} }},
		{"verify", func(int) []string { return []string{"verify"} }},
		{"query", func(int) []string { return []string{"query", "SELECT * WHERE confidence >= 0.8"} }},
	}
	dir := b.TempDir() // the chains of all the sub-benchmarks, removed at the end
	for _, c := range commands {
		for _, s := range sizes {
			b.Run(c.name+"/"+s.name, func(b *testing.B) {
				path := benchChain(b, dir, s.n)
				info, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				args := append(c.args(s.n), path)
				b.SetBytes(info.Size())
				b.ResetTimer()
				for b.Loop() {
					if code := cli.Run(context.Background(), args, cli.Env{Stdout: io.Discard, Stderr: io.Discard}); code != cli.ExitOK {
						b.Fatalf("lctl %v: exit %d", args, code)
					}
				}
				b.ReportMetric(float64(s.n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
