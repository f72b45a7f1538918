package text

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// hiddenIndexWide returns a function that sets whether hiddenIndex may
// read 32 bytes at a time and returns the setting before; false when this
// machine has no AVX2 (only the sixteen-byte way runs).
func hiddenIndexWide() (func(bool) bool, bool) {
	return func(on bool) bool {
		before := hiddenAVX2
		hiddenAVX2 = on
		return before
	}, cpu.X86.HasAVX2
}

// TestHiddenIndexWideTaken: hiddenIndex reads 32 bytes at a time exactly where the
// machine has AVX2 (the setting's default).
func TestHiddenIndexWideTaken(t *testing.T) {
	if hiddenAVX2 != cpu.X86.HasAVX2 {
		t.Fatalf("hiddenIndex uses AVX2: %v; the machine has it: %v", hiddenAVX2, cpu.X86.HasAVX2)
	}
}
