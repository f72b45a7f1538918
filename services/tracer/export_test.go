package tracer

// DebuggerStreams is how many live streams the tracer's debugger has open.
func DebuggerStreams(s *Service) int {
	if s.ui == nil {
		return 0
	}
	return s.ui.ActiveStreams()
}
