package lctl_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

func TestZZDecodeOnly(t *testing.T) {
	path := os.Getenv("ZZ_FILE")
	if path == "" {
		t.Skip()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = lctl.Stream(bytes.NewReader(raw), lctl.StreamOptions{SkipHashes: true, Fields: true, Workers: 1}, func(*lctl.StreamHeader) error { return nil },
		func(*lctl.StreamEvent) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Log(n)
}
