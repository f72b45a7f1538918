package lctl

import (
	"strings"
	"testing"
)

// TestFieldFindsEqualKeys: a data member is found by a key of equal
// bytes wherever its bytes lie (the literal a caller names it by, or a
// copy), never by another key of its length (same first byte or not),
// and the last of repeated members wins, as a look at each key's bytes
// finds.
func TestFieldFindsEqualKeys(t *testing.T) {
	t.Parallel()
	keys := []string{"step", "tool", strings.Clone("status"), "source", "", "tokens", "s", strings.Clone("step"), "stop", "x"}
	e := &Event{}
	for i, k := range keys {
		e.fields = append(e.fields, dataField{key: k, v: numberField, n: float64(i)})
	}
	asked := append([]string{}, keys...)
	for _, k := range keys {
		asked = append(asked, strings.Clone(k), k+"x", strings.ToUpper(k))
	}
	asked = append(asked, "stat", "statue", "t", "sx", "intent", "tooL")
	for _, k := range asked {
		want := -1
		for i := range keys {
			if keys[i] == k {
				want = i
			}
		}
		f := e.field(k)
		switch {
		case want < 0 && f != nil:
			t.Errorf("%q: found %q", k, f.key)
		case want >= 0 && (f == nil || f.n != float64(want)):
			t.Errorf("%q: found %v, want member %d", k, f, want)
		}
	}
}
