package cli_test

import (
	"bytes"
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
	return benchChainWith(b, dir, n, "", lctltest.WorkflowOptions{Seal: true})
}

// benchChainWith is benchChain for a chain written with opts, its file
// name told apart by suffix.
func benchChainWith(b *testing.B, dir string, n int, suffix string, opts lctltest.WorkflowOptions) string {
	b.Helper()
	if env := os.Getenv("LCTL_BENCH_DIR"); env != "" {
		dir = env
	}
	key := fmt.Sprintf("%s/%d%s", dir, n, suffix)
	if p, ok := benchChains.Load(key); ok {
		if _, err := os.Stat(p.(string)); err == nil {
			return p.(string)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("workflow-%d%s.lctl.json", n, suffix))
	if _, err := os.Stat(path); err != nil {
		f, err := os.Create(path + ".tmp")
		if err != nil {
			b.Fatal(err)
		}
		if err := lctltest.WriteWorkflow(f, "workflow", n, opts); err != nil {
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

// BenchmarkVerifyStateHashes is lctl verify on chains with a state hash in
// every checkpoint (one every 500 events), of version 2 (what XCT writes
// since session 5: kept up to date, linear) and of version 1 (chains
// written before: the whole state hashed at each checkpoint, quadratic;
// 1M is left out, it takes minutes). events/s stays flat when the cost is
// linear:
//
//	go test ./lctl/cli/ -run XXX -bench VerifyStateHashes -benchtime 3x
func BenchmarkVerifyStateHashes(b *testing.B) {
	dir := b.TempDir()
	for _, version := range []int{2, 1} {
		for _, n := range []int{10_000, 100_000, 300_000, 1_000_000} {
			if version == 1 && n > 300_000 {
				continue
			}
			b.Run(fmt.Sprintf("v%d/%dk", version, n/1000), func(b *testing.B) {
				path := benchChainWith(b, dir, n, fmt.Sprintf("-state-hash-v%d", version),
					lctltest.WorkflowOptions{Seal: true, StateHashes: true, StateHashVersion: version})
				info, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(info.Size())
				b.ResetTimer()
				for b.Loop() {
					var out bytes.Buffer
					if code := cli.Run(context.Background(), []string{"verify", path}, cli.Env{Stdout: &out, Stderr: io.Discard}); code != cli.ExitOK ||
						!bytes.Contains(out.Bytes(), []byte("state hashes and fact snapshots match")) {
						b.Fatalf("lctl verify %s: exit %d\n%s", path, code, out.Bytes())
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
