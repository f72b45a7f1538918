package lctl

import "golang.org/x/sys/cpu"

// specialAVX2 lets specialIndex read 32 bytes at a time (AVX2) in slices
// of 32 bytes or more; a variable for the tests, which run both ways.
var specialAVX2 = cpu.X86.HasAVX2

// specialIndex returns the index of the first byte of b that is a quote,
// a backslash, below 0x20 or past ASCII (the bytes that end a plain
// string), len(b) when there is none. In assembly (special_amd64.s):
// 32 bytes at a time with AVX2, else sixteen.
//
//go:noescape
func specialIndex(b []byte) int
