package redact

import "testing"

// Keep makes a value found outside the rules (a file's digest whose
// preview was redacted, session 18) a secret of the scope.
func TestScopeKeep(t *testing.T) {
	t.Parallel()
	r := newTest(t, Rules{})
	s := r.Scope()
	const digest = "sha256:54d048ab0699bcf1fff66455775c49a538241b098d9aad8b9ae35eba96528201"
	m := s.Keep(digest)
	if m != r.Marker(digest) || !IsMarker(m) {
		t.Fatalf("Keep gave %q", m)
	}
	out := s.Map(map[string]any{"previous_checksum": digest, "note": "was " + digest})
	if out["previous_checksum"] != m || out["note"] != "was "+m {
		t.Errorf("a kept value recurring: %v", out)
	}
	if got := r.Scope().Text(digest); got != digest {
		t.Errorf("another scope replaced it: %q", got)
	}
	var none *Scope
	if none.Keep(digest) != "" {
		t.Error("a nil scope kept a value")
	}
}
