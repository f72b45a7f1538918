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

// The stream's answers: a stored write's sequence, its errors (a lost
// conditional write among them), and anything else refused.
func TestKVPutAck(t *testing.T) {
	t.Parallel()
	p := &kvPut{stream: "KV_XCT_STEPS"}
	for _, c := range []struct {
		ack     string
		seq     uint64
		err     error // errors.Is
		lost    bool  // wrongRevision
		invalid bool
	}{
		{ack: `{"stream":"KV_XCT_STEPS","seq":42}`, seq: 42},
		{ack: `{"stream":"KV_XCT_STEPS","seq":18446744073709551615}`, seq: 18446744073709551615},
		{ack: `{"stream":"KV_XCT_STEPS", "seq": 7, "domain":"hub"}`, seq: 7},
		{ack: `{"stream":"KV_XCT_STEPS","seq":9,"duplicate":true}`, seq: 9},
		{ack: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_XCT_STEPS","seq":0}`, lost: true},
		{ack: `{"error":{"code":400,"err_code":10164,"description":"wrong last sequence"}}`, lost: true},
		{ack: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, err: &jetstream.APIError{ErrorCode: 10077}},
		{ack: `{"stream":"OTHER","seq":5}`, invalid: true},
		{ack: `{"stream":"KV_XCT_STEPS","seq":0}`, invalid: true},
		{ack: `{"stream":"KV_XCT_STEPS","seq":-1}`, invalid: true},
		{ack: `{"stream":"KV_XCT_STEPS","seq":1`, invalid: true},
		{ack: ``, invalid: true},
		{ack: `not json`, invalid: true},
	} {
		seq, err := p.ack([]byte(c.ack))
		switch {
		case c.invalid:
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Errorf("ack %s = %d, %v; want an invalid acknowledgement", c.ack, seq, err)
			}
		case c.lost:
			if !wrongRevision(err) {
				t.Errorf("ack %s = %d, %v; want a lost conditional write", c.ack, seq, err)
			}
		case c.err != nil:
			if !errors.Is(err, c.err) || wrongRevision(err) {
				t.Errorf("ack %s = %d, %v; want %v", c.ack, seq, err, c.err)
			}
		default:
			if err != nil || seq != c.seq {
				t.Errorf("ack %s = %d, %v; want %d", c.ack, seq, err, c.seq)
			}
		}
	}
}

// A key the KV client would refuse is refused before anything is sent.
func TestKVPutRefusesInvalidKeys(t *testing.T) {
	t.Parallel()
	p := &kvPut{stream: "KV_XCT_STEPS", prefix: "$KV.XCT_STEPS."} // no connection: nothing may be sent
	for _, k := range []string{"", "a b", "a.>", "*", "a..b"} {
		if _, err := p.write(t.Context(), k, []byte("x"), 0); !errors.Is(err, jetstream.ErrInvalidKey) {
			t.Errorf("write(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}
