package lctl

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// specialIndexWide returns a function that sets whether specialIndex may
// read 32 bytes at a time and returns the setting before; false when this
// machine has no AVX2 (only the sixteen-byte way runs).
func specialIndexWide() (func(bool) bool, bool) {
	return func(on bool) bool {
		before := specialAVX2
		specialAVX2 = on
		return before
	}, cpu.X86.HasAVX2
}

// TestSpecialIndexWideTaken: specialIndex reads 32 bytes at a time exactly where the
// machine has AVX2 (the setting's default).
func TestSpecialIndexWideTaken(t *testing.T) {
	if specialAVX2 != cpu.X86.HasAVX2 {
		t.Fatalf("specialIndex uses AVX2: %v; the machine has it: %v", specialAVX2, cpu.X86.HasAVX2)
	}
}
