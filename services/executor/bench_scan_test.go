package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// benchScanTree makes (once: kept in the temporary directory for the
// next run) a node_modules-like tree of 1,000,072 names, 97,572
// directories: packages of 4 files and 7 directories of 10 files each.
func benchScanTree(b *testing.B) string {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "xct-scan-bench-1m")
	done := filepath.Join(dir, ".xct-bench-done")
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	must(b, os.RemoveAll(dir))
	nm := filepath.Join(dir, "node_modules")
	must(b, os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755))
	for n, p := 0, 0; n < 1_000_000; p++ {
		pk := filepath.Join(nm, fmt.Sprintf("pkg%05d", p))
		must(b, os.MkdirAll(pk, 0o755))
		n++
		for _, f := range []string{"package.json", "README.md", "LICENSE", "index.js"} {
			must(b, os.WriteFile(filepath.Join(pk, f), nil, 0o644))
			n++
		}
		for _, d := range []string{"lib", "dist", "src", "types", "test", "esm", "cjs"} {
			must(b, os.Mkdir(filepath.Join(pk, d), 0o755))
			n++
			for i := range 10 {
				must(b, os.WriteFile(filepath.Join(pk, d, fmt.Sprintf("f%d.js", i)), nil, 0o644))
				n++
			}
		}
	}
	must(b, os.WriteFile(done, nil, 0o644))
	return dir
}

// BenchmarkScanWorkspace scans a tree of 1M names (benchScanTree; run
// with XCT_SCAN_BENCH=1, the first run makes it, about a minute) for
// protected entries, unbounded: first (a new workspace each time) and
// repeat (the same one, unchanged; kept-B is what its cache holds).
func BenchmarkScanWorkspace(b *testing.B) {
	if os.Getenv("XCT_SCAN_BENCH") != "1" {
		b.Skip("XCT_SCAN_BENCH=1 is not set")
	}
	dir := benchScanTree(b)
	scan := func(b *testing.B, w *workspace) {
		if _, cut := w.protectedNames(-1); cut != "" {
			b.Fatal(cut)
		}
	}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			w, err := openWorkspace(dir)
			must(b, err)
			scan(b, w)
			_ = w.close()
		}
	})
	b.Run("repeat", func(b *testing.B) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		w, err := openWorkspace(dir)
		must(b, err)
		defer func() { _ = w.close() }()
		scan(b, w)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		for b.Loop() {
			scan(b, w)
		}
		b.ReportMetric(float64(m1.HeapAlloc)-float64(m0.HeapAlloc), "kept-B")
	})
}
