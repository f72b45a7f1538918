package executor

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// kvKeyValid accepts exactly the keys the generic KV client accepts.
func TestKVKeyValidMatchesTheKVClient(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)
	client := func(k string) bool {
		return k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && re.MatchString(k)
	}
	keys := []string{"", ".", "..", "a", "a.b", "a..b", ".a", "a.", "s-1_2=3/4", "run-1-step-2", "a b", "a*", "a>", "ä",
		"ABC.def.GHI", "x\x00", "a.b.c.", strings.Repeat("k", 128), "$KV", "a\n"}
	for _, k := range keys {
		if got, want := kvKeyValid(k), client(k); got != want {
			t.Errorf("kvKeyValid(%q) = %v, the KV client says %v", k, got, want)
		}
	}
}

func FuzzKVKeyValid(f *testing.F) {
	re := regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)
	for _, k := range []string{"a", "a..b", ".a", "s-1"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		want := k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && re.MatchString(k)
		if got := kvKeyValid(k); got != want {
			t.Fatalf("kvKeyValid(%q) = %v, want %v", k, got, want)
		}
	})
}

// A key the KV client would refuse is refused before anything is sent.
func TestKVPutRefusesInvalidKeys(t *testing.T) {
	t.Parallel()
	p := &kvPut{prefix: "$KV.XCT_STEPS."} // no publisher: nothing may be sent
	for _, k := range []string{"", "a b", "a.>", "*", "a..b"} {
		if _, err := p.write(t.Context(), k, []byte("x"), 0); !errors.Is(err, jetstream.ErrInvalidKey) {
			t.Errorf("write(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}
