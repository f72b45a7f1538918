package tracer

import "net/http"

// mountUI registers the visual debugger's routes (the page and its JSON
// API) on mux.
func (s *Service) mountUI(mux *http.ServeMux) {}
