package text

import "golang.org/x/sys/cpu"

// hiddenAVX2 lets hiddenIndex read 32 bytes at a time (AVX2) in slices
// of 32 bytes or more; a variable for the tests, which run both ways.
var hiddenAVX2 = cpu.X86.HasAVX2

// hiddenIndex returns the index of the first byte of b below 0x20 or
// above 0x7e (a byte that is not printable ASCII), len(b) when there is
// none. In assembly (hidden_amd64.s): 32 bytes at a time with AVX2, else
// sixteen.
//
//go:noescape
func hiddenIndex(b []byte) int
