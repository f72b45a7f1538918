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

// HashedUnknown is the list State.Hash writes as "unknown_types".
func HashedUnknown(s *State) []uint64 { return s.hashedUnknown() }

// DigestForm is the canonical JSON State.Hash hashes (version 2).
func DigestForm(s *State) ([]byte, error) { return s.digestForm() }
