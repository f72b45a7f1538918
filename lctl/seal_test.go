package lctl

import (
	"bytes"
	"testing"
)

// SealEncoded gives the hash Seal gives and the bytes MarshalJSON gives,
// for every shape of event: with and without chain id, previous hash and
// fields beyond the spec's.
func TestSealEncodedEqualsSealAndMarshal(t *testing.T) {
	t.Parallel()
	events := []Event{
		{Seq: 1, Type: "run_started", Timestamp: "2026-11-25T12:00:00Z", Agent: "o", ChainID: "c", Data: map[string]any{"goal": "g <&> \u2028", "n": 1.5}},
		{Seq: 2, Type: "step_start", Timestamp: "2026-11-25T12:00:01Z", Agent: "a", Data: map[string]any{}},
		{Seq: 3, Type: "x", Timestamp: "2026-11-25T12:00:02Z", Agent: "a", ChainID: "c", Data: nil},
		{Seq: 4, Type: "x", Timestamp: "2026-11-25T12:00:03Z", Agent: "a", ChainID: "c", Data: map[string]any{"k": []any{"v"}}, Extra: map[string]any{"zz": "extra"}},
	}
	for i, prev := range []string{"", "abc", "def", "0123"} {
		a, b := events[i], events[i]
		if err := a.Seal(prev); err != nil {
			t.Fatal(err)
		}
		want, err := a.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.SealEncoded(prev)
		if err != nil {
			t.Fatal(err)
		}
		if b.Hash != a.Hash || b.PrevHash != prev || !bytes.Equal(got, want) {
			t.Errorf("event %d:\n got %s (hash %s)\nwant %s (hash %s)", i, got, b.Hash, want, a.Hash)
		}
	}
}
