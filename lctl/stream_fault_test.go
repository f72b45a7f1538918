package lctl_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// A mapped file (StreamOptions.Map) cut shorter while it is streamed: the
// pages past its new end are gone, and reading one faults (SIGBUS). The
// goroutines decoding the chunks ahead turn that into ErrFileChanged; the
// caller's goroutine, which reads the events' strings, recovers it with
// MappedFault as lctl's commands do (cli's runGuarded). Before, the
// decoders' fault ended the process with a stack dump.
func TestStreamMappedFileCutShorter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("files are mapped on Linux only")
	}
	var b bytes.Buffer
	if err := lctltest.WriteWorkflowShaped(&b, "wf", 1500, lctltest.WorkflowOptions{Detail: 12}, lctltest.Shape{Spec: true}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cut.json")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	defer lctl.SetChunks(5000, 64, 100, 512)()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	before := lctl.MappedChunks()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	seen, faulted := 0, false
	func() {
		defer func() {
			if r := recover(); r != nil {
				if !lctl.MappedFault(r) {
					panic(r)
				}
				faulted = true
			}
		}()
		err = lctl.Stream(f, lctl.StreamOptions{Workers: 2, Fields: true, SkipHashes: true, Map: true}, func(*lctl.StreamHeader) error { return nil },
			func(e *lctl.StreamEvent) error {
				seen++
				if seen == 1 {
					if err := os.Truncate(path, 4096); err != nil {
						t.Fatal(err)
					}
				}
				_ = strings.Clone(e.Agent + e.Timestamp) // the strings point into the mapping
				return nil
			})
	}()
	if lctl.MappedChunks() == before {
		t.Fatal("the file was not read through a mapping")
	}
	switch {
	case faulted:
		// The caller's own read of a string past the cut.
	case err == nil:
		t.Fatalf("a file cut to 4 KiB after its first event streamed %d events without an error", seen)
	case !errors.Is(err, lctl.ErrFileChanged) && !strings.Contains(err.Error(), "truncated"):
		t.Fatalf("a file cut shorter: %v; want %v or a truncated chain", err, lctl.ErrFileChanged)
	}
	if seen >= 1500 {
		t.Fatalf("all %d events streamed from a file cut to 4 KiB", seen)
	}
	// A fault anywhere else is not the mapping's.
	if lctl.MappedFault(errors.New("not a fault")) {
		t.Fatal("MappedFault took an ordinary error for a fault")
	}
}
