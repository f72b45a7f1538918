package lctl

// CanonicalStateJSON exposes the direct canonical encoder of State to the
// external tests, which compare it with Canonical.
func CanonicalStateJSON(s *State) ([]byte, error) { return s.canonicalJSON() }

// FastEventReader returns the stream's event reader (one parser, reused),
// for the benchmarks.
func FastEventReader() func([]byte) (Event, error) {
	p := newFastParser()
	return p.fastEvent
}
