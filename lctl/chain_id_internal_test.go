package lctl

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestValidChainIDMatchesPattern: validChainID takes exactly the ids the
// pattern it replaced takes: every byte value alone and inside an id,
// lengths 0-130 at the bound, and random ids of bytes near the allowed
// ranges' edges.
func TestValidChainIDMatchesPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	check := func(id string) {
		t.Helper()
		if got, want := validChainID(id), pattern.MatchString(id); got != want {
			t.Fatalf("validChainID(%q) = %v, the pattern says %v", id, got, want)
		}
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("run-" + string([]byte{byte(c)}) + "_1")
	}
	for n := range 131 {
		check(strings.Repeat("a", n))
		check(strings.Repeat("Z9", n)[:n])
	}
	check("run\n")
	check("run\x00")
	edges := []byte("@AZ[`az{/09:_-.\n\x7f\x80\xff")
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(140))
		for i := range b {
			if r.IntN(8) == 0 {
				b[i] = edges[r.IntN(len(edges))]
			} else {
				b[i] = "abcXYZ019_-"[r.IntN(11)]
			}
		}
		check(string(b))
	}
}
