package tracer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/lctl/debugger"
)

// mountUI registers the visual debugger's routes (the page and its JSON
// API, docs/debugger.md) on mux, over every chain of the store. With
// Config.ValidatorAddr set, approvals are listed and decided through that
// validator.
func (s *Service) mountUI(mux *http.ServeMux) error {
	opts := debugger.Options{
		Source:    uiSource{s.store},
		Title:     "XCT tracer",
		Log:       s.log,
		Authorize: s.cfg.UIAuthorize,
	}
	if s.cfg.ValidatorAddr != "" {
		conn, err := grpcx.Dial(s.cfg.ValidatorAddr, s.cfg.ValidatorDial...)
		if err != nil {
			return fmt.Errorf("debugger: validator: %w", err)
		}
		s.validator = conn
		opts.Approvals = validatorApprovals{client: xctv1.NewValidatorServiceClient(conn)}
	}
	if s.cfg.OrchestratorAddr != "" {
		conn, err := grpcx.Dial(s.cfg.OrchestratorAddr, s.cfg.ValidatorDial...)
		if err != nil {
			return fmt.Errorf("debugger: orchestrator: %w", err)
		}
		s.orchestrator = conn
		opts.Runs = orchestratorRuns{client: xctv1.NewOrchestratorServiceClient(conn)}
	}
	h, err := debugger.New(opts)
	if err != nil {
		return err
	}
	s.ui = h
	if s.cfg.UIAuthorize != nil {
		// One-time links (ui_session.go): only where callers authenticate.
		mux.Handle("/", newUISessions(s.cfg.UIIdentify).mount(mux, s.cfg.UIAuthorize, h))
		return nil
	}
	mux.Handle("/", h)
	return nil
}

// closeUI ends the debugger's live streams and its validator connection.
func (s *Service) closeUI() {
	if s.ui != nil {
		s.ui.Close()
	}
	if s.validator != nil {
		_ = s.validator.Close()
		s.validator = nil
	}
	if s.orchestrator != nil {
		_ = s.orchestrator.Close()
		s.orchestrator = nil
	}
}

// uiSource serves the store's chains to the debugger.
type uiSource struct{ st *store }

var _ debugger.Source = uiSource{}

func (u uiSource) Mode() string { return "cluster" }

func (u uiSource) Chains(context.Context) ([]debugger.ChainInfo, error) {
	sums, err := u.st.list(math.MaxInt)
	if err != nil {
		return nil, uiErr(err)
	}
	out := make([]debugger.ChainInfo, len(sums))
	for i, sum := range sums {
		out[i] = sum.info()
	}
	return out, nil
}

func (u uiSource) Chain(_ context.Context, id string) (*debugger.Chain, error) {
	v, err := u.st.get(id)
	if err != nil {
		return nil, uiErr(err)
	}
	return &debugger.Chain{ChainInfo: v.summary.info(), Events: v.events, Timeline: v.timeline, Sorted: true}, nil
}

func (u uiSource) Watch(id string) (uint64, <-chan struct{}, bool) { return u.st.watch(id) }

func (sum chainSummary) info() debugger.ChainInfo {
	return debugger.ChainInfo{
		ID: sum.id, Events: sum.events, FirstTimestamp: sum.firstTimestamp, LastTimestamp: sum.lastTimestamp,
		Agents: sum.agents, VerifyError: sum.verifyErr, VerifyKnown: true, Live: true,
	}
}

// uiErr maps the store's errors to the debugger's.
func uiErr(err error) error {
	switch {
	case errors.Is(err, ErrChainNotFound):
		return fmt.Errorf("%w: %w", debugger.ErrChainNotFound, err)
	case errors.Is(err, ErrNotReady):
		return fmt.Errorf("%w: %w", debugger.ErrUnavailable, err)
	}
	return err
}
