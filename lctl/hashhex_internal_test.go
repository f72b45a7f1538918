package lctl

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// hashHex is hex.EncodeToString of the sum, in one allocation.
func TestHashHexIsHexEncode(t *testing.T) {
	sums := [][sha256.Size]byte{{}, sha256.Sum256(nil), sha256.Sum256([]byte(`{"seq":1}`))}
	var all [sha256.Size]byte
	for i := range all {
		all[i] = byte(0xff - i*7)
	}
	sums = append(sums, all)
	for _, s := range sums {
		if got, want := hashHex(s), hex.EncodeToString(s[:]); got != want {
			t.Errorf("hashHex = %s, want %s", got, want)
		}
	}
	if raceDetector {
		return
	}
	if n := testing.AllocsPerRun(100, func() { _ = hashHex(all) }); n != 1 {
		t.Errorf("hashHex makes %v allocations, want 1 (the string)", n)
	}
}
