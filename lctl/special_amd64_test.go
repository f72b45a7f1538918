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

// TestSpecialIndexWideTaken: on a machine with AVX2, specialIndex reads
// 32 bytes at a time (the setting is on by default).
func TestSpecialIndexWideTaken(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		t.Skip("no AVX2 on this machine")
	}
	if !specialAVX2 {
		t.Fatal("specialIndex does not use AVX2 on a machine that has it")
	}
}
