package tracer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// The tracer's HTTP listener (Config.HTTPListen) serves, on one port, what
// is not gRPC: the visual debugger (mountUI) and OTLP over HTTP (mountOTLP).
// Each part registers its routes on the shared mux; nothing else listens.

// httpServer is the running HTTP listener, nil when HTTPListen is empty.
type httpServer struct {
	srv *http.Server
	lis net.Listener
	err chan error
}

// newMux builds the routes of every HTTP part of the tracer.
func (s *Service) newMux() (*http.ServeMux, error) {
	mux := http.NewServeMux()
	s.mountOTLP(mux)
	if err := s.mountUI(mux); err != nil {
		return nil, err
	}
	return mux, nil
}

// startHTTP binds cfg.HTTPListen and serves the tracer's HTTP routes.
func (s *Service) startHTTP(ctx context.Context) (*httpServer, error) {
	if s.cfg.HTTPListen == "" {
		return nil, nil
	}
	mux, err := s.newMux()
	if err != nil {
		return nil, err
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.HTTPListen)
	if err != nil {
		s.closeUI()
		return nil, fmt.Errorf("http listen on %s: %w", s.cfg.HTTPListen, err)
	}
	h := &httpServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			MaxHeaderBytes:    64 << 10,
		},
		lis: lis,
		err: make(chan error, 1),
	}
	if s.ui != nil {
		// Live streams never go idle: end them when shutdown starts.
		h.srv.RegisterOnShutdown(s.ui.Close)
	}
	go func() {
		if err := h.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server failed", "err", err)
			h.err <- err
		}
	}()
	s.log.Info("tracer http serving", "addr", lis.Addr().String())
	return h, nil
}

// stop ends the HTTP server: in-flight requests finish until ctx ends,
// long-lived streams (live updates) are cut.
func (h *httpServer) stop(ctx context.Context) {
	if h == nil {
		return
	}
	if err := h.srv.Shutdown(ctx); err != nil {
		_ = h.srv.Close()
	}
}

// HTTPAddr is the address the HTTP listener is bound to ("" when it does not
// run), after Start.
func (s *Service) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.http == nil {
		return ""
	}
	return s.http.lis.Addr().String()
}
