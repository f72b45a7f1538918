package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Session 18 (ops18), issue 17: two `xct dev` on one data directory (the
// second given other ports) both served: two NATS servers on one
// JetStream store, two tracers on one set of chain files, the addresses
// file of the one started last. The data directory is now locked while
// an xct dev uses it; the second is refused, naming the first.
func TestDataDirIsOneDevsAtATime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	want := fmt.Sprintf("data directory %s is in use by another xct dev (pid %d)", dir, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a second xct dev on the data directory: %v; want %q", err, want)
	}
	release()
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("once the first let go: %v", err)
	}
	again()
}
