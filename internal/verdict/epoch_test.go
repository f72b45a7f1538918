package verdict_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/verdict"
)

// TestEpochReplaces: an epoch is read only when a trusted key signed it,
// whole; it replaces a grant of its key signed under another policy at or
// before its installation, and nothing else; Epochs keeps the newest.
func TestEpochReplaces(t *testing.T) {
	s, v, err := verdict.NewPair(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := verdict.NewPair(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 5)
	raw, err := s.SignEpoch("sha256:new", at)
	if err != nil {
		t.Fatal(err)
	}
	e, err := v.VerifyEpoch(raw)
	if err != nil || e.PolicyVersion != "sha256:new" || !e.InstalledAt.Equal(at) || e.KeyID != s.KeyID() {
		t.Fatalf("epoch %+v, %v", e, err)
	}
	// Changed in any field, or signed by a key not trusted: refused.
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	for field, val := range map[string]any{"policy_version": "sha256:old", "installed_at_unix_nano": float64(at.UnixNano() + 1), "key_id": other.KeyID()} {
		m := map[string]any{}
		for k, x := range rec {
			m[k] = x
		}
		m[field] = val
		b, _ := json.Marshal(m)
		if _, err := v.VerifyEpoch(b); err == nil {
			t.Errorf("an epoch with %s changed verified", field)
		}
	}
	foreign, _ := other.SignEpoch("sha256:new", at)
	if _, err := v.VerifyEpoch(foreign); !errors.Is(err, verdict.ErrUnknownKey) {
		t.Errorf("an epoch of an untrusted key: %v", err)
	}
	grant := func(version string, issued time.Time) *xctv1.VerdictGrant {
		return &xctv1.VerdictGrant{PolicyVersion: version, IssuedAt: timestamppb.New(issued)}
	}
	for _, c := range []struct {
		name  string
		key   string
		g     *xctv1.VerdictGrant
		wants bool
	}{
		{"old policy, before", s.KeyID(), grant("sha256:old", at.Add(-time.Second)), true},
		{"old policy, same instant", s.KeyID(), grant("sha256:old", at), true},
		{"old policy, after (a replica not reloaded yet)", s.KeyID(), grant("sha256:old", at.Add(time.Nanosecond)), false},
		{"the epoch's policy, before", s.KeyID(), grant("sha256:new", at.Add(-time.Hour)), false},
		{"another key's grant", other.KeyID(), grant("sha256:old", at.Add(-time.Second)), false},
	} {
		if got := e.Replaces(c.key, c.g); got != c.wants {
			t.Errorf("%s: replaces %v, want %v", c.name, got, c.wants)
		}
	}
	var seen verdict.Epochs
	for range 2 { // the second from the bytes verified
		if got, err := seen.Verify(v, raw); err != nil || got != e {
			t.Fatalf("Epochs.Verify: %+v %v, want %+v", got, err, e)
		}
	}
	if _, err := seen.Verify(v, foreign); err == nil {
		t.Errorf("Epochs.Verify took an untrusted key's epoch")
	}
	seen.Observe(e)
	older := verdict.Epoch{KeyID: s.KeyID(), PolicyVersion: "sha256:old", InstalledAt: at.Add(-time.Minute)}
	if got := seen.Observe(older); got.PolicyVersion != "sha256:new" {
		t.Errorf("an older epoch read later brought back %s", got.PolicyVersion)
	}
	if got, ok := seen.Newest(s.KeyID()); !ok || got.PolicyVersion != "sha256:new" {
		t.Errorf("newest %+v %v", got, ok)
	}
}

// TestVerifyEpochRemembered: a record that verified is remembered by its
// exact bytes (the executor reads its key's record at every Execute), so
// reading it again decodes and verifies nothing; any other bytes are
// checked in full (a forged signature after the genuine record is still
// refused), each remembered record answers its own epoch past the
// memory's bound, and what one verifier remembers does not make another,
// which trusts other keys, accept the record.
func TestVerifyEpochRemembered(t *testing.T) {
	s, v, err := verdict.NewPair(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 5)
	raw, err := s.SignEpoch("sha256:v0", at)
	if err != nil {
		t.Fatal(err)
	}
	first, err := v.VerifyEpoch(raw)
	if err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(50, func() {
		if e, err := v.VerifyEpoch(raw); err != nil || e != first {
			t.Fatalf("again: %+v, %v", e, err)
		}
	}); allocs != 0 {
		t.Errorf("a record verified before cost %v allocations: it was decoded again", allocs)
	}
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(rec["signature"].(string))
	if err != nil {
		t.Fatal(err)
	}
	sig[len(sig)-1] ^= 1
	rec["signature"] = sig
	forged, _ := json.Marshal(rec)
	if _, err := v.VerifyEpoch(forged); !errors.Is(err, verdict.ErrBadSignature) {
		t.Fatalf("a forged signature after the genuine record: %v, want ErrBadSignature", err)
	}
	records := [][]byte{raw}
	for i := 1; i < 150; i++ {
		r, err := s.SignEpoch(fmt.Sprintf("sha256:v%d", i), at.Add(time.Duration(i)))
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, r)
	}
	for round := range 2 {
		for i, r := range records {
			e, err := v.VerifyEpoch(r)
			if err != nil || e.PolicyVersion != fmt.Sprintf("sha256:v%d", i) || !e.InstalledAt.Equal(at.Add(time.Duration(i))) {
				t.Fatalf("round %d, record %d: %+v, %v", round, i, e, err)
			}
		}
	}
	_, stranger, err := verdict.NewPair(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.VerifyEpoch(raw); !errors.Is(err, verdict.ErrUnknownKey) {
		t.Fatalf("a verifier that does not trust the key: %v, want ErrUnknownKey", err)
	}
}
