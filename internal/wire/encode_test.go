package wire

import (
	"encoding/json"
	"math"
	"testing"
)

// EncodeNextStep and EncodeSuccess write what json.Marshal writes for the
// maps they stand for, byte for byte: the model's context does not change.
func TestEncodersAsMarshal(t *testing.T) {
	conf := func(f float64) *float64 { return &f }
	strs := []string{"", "bench", "fs.write", `a"b\c`, "<script>&", "é ü \u2028 \u2029", "\x00\x1f\x7f", "\xff\xfe", "tab\tnew\nline"}
	argsCases := []map[string]any{
		nil, {}, {"i": 7.0}, {"path": "a<b>", "n": []any{1.0, "x", nil, true, map[string]any{"z": "é"}}},
		{"f": 1e21, "g": 1e-7, "h": math.Copysign(0, -1)}, {"bad": math.NaN()}, {"fn": func() {}},
	}
	for _, tool := range strs {
		for _, goal := range strs {
			for _, args := range argsCases {
				for _, c := range []*float64{nil, conf(0), conf(0.5), conf(1), conf(1e-9), conf(math.Inf(1))} {
					want, err := json.Marshal(nextStepJSON(tool, args, goal, c))
					if err != nil {
						want = nil
					}
					if got := EncodeNextStep(tool, args, goal, c); string(got) != string(want) {
						t.Fatalf("EncodeNextStep(%q, %v, %q, %v) = %s, json.Marshal %s", tool, args, goal, c, got, want)
					}
				}
			}
		}
	}
	for _, r := range []any{nil, true, 1.5, "x<y>", map[string]any{"ok": true}, []any{"a", 2.0}, math.NaN(), map[string]any{"b": func() {}}, struct{ A int }{3}} {
		want, err := json.Marshal(successJSON(r))
		if err != nil {
			want = nil
		}
		if got := EncodeSuccess(r); string(got) != string(want) {
			t.Fatalf("EncodeSuccess(%v) = %s, json.Marshal %s", r, got, want)
		}
	}
}
