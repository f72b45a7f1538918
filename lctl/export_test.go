package lctl

// CanonicalStateJSON exposes the direct canonical encoder of State to the
// external tests, which compare it with Canonical.
func CanonicalStateJSON(s *State) ([]byte, error) { return s.canonicalJSON() }
