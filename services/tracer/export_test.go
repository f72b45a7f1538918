package tracer

import lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"

// DebuggerStreams is how many live streams the tracer's debugger has open.
func DebuggerStreams(s *Service) int {
	if s.ui == nil {
		return 0
	}
	return s.ui.ActiveStreams()
}

// ResidentEvents is how many events the tracer keeps in memory.
func ResidentEvents(s *Service) int {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	return s.store.resident
}

// ColdChains is how many chains the tracer keeps only the summary of.
func ColdChains(s *Service) int {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	n := 0
	for _, c := range s.store.chains {
		if c.cold() {
			n++
		}
	}
	return n
}

// IsCold reports whether the tracer keeps only the chain's summary.
func IsCold(s *Service, id string) bool { return s.store.isCold(id) }

// EvictWrittenChains lets the tracer evict chains however recently they
// were written (by default it keeps the ones written in the last minute).
func EvictWrittenChains(s *Service) {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	s.store.hot = 0
}

// Handler is the tracer's gRPC handler, called without a server (a
// context a client never could send: one already cancelled).
func Handler(s *Service) lctlv1.TracerServiceServer { return &handler{svc: s} }
