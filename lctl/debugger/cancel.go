package debugger

import (
	"context"
	"net/http"
	"strings"

	"github.com/xct-dev/xct/lctl"
)

// ActionCancel is asked of the Authorize hook before a run is cancelled.
const ActionCancel = "cancel"

// Runs cancels runs: the orchestrator's, in a cluster. The context
// carries the caller's credentials as outgoing gRPC metadata, so the
// orchestrator applies its own rule (an operator, or the run's owner).
type Runs interface {
	Cancel(ctx context.Context, runID, reason string) error
}

type cancelRequest struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
}

// canCancel says whether the page should offer Cancel to this caller: a
// cluster with an orchestrator, and a caller whose role may cancel (the
// orchestrator still checks the run's owner).
func (h *Handler) canCancel(r *http.Request) bool {
	if h.opts.Runs == nil {
		return false
	}
	return h.opts.Authorize == nil || h.opts.Authorize(authRequest(r), ActionCancel) == nil
}

// cancelRun answers POST /api/runs/cancel {run_id, reason}: the run is
// cancelled at the orchestrator as the caller. Its end (the open step
// closed, a pending approval withdrawn, run_finished) reaches the page on
// the chain.
func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request) (any, error) {
	if r.Header.Get(csrfHeader) != "1" {
		return nil, &apiError{http.StatusForbidden, codePermissionDenied, "missing header " + csrfHeader + ": 1"}
	}
	if h.opts.Runs == nil {
		return nil, &apiError{http.StatusNotFound, codeNotFound, "this debugger cannot cancel runs (no orchestrator: --tracer-orchestrator-addr)"}
	}
	var req cancelRequest
	if err := decodeBody(w, r, &req, "cancellation"); err != nil {
		return nil, err
	}
	if err := lctl.ValidateChainID(req.RunID); err != nil {
		return nil, badArg("run_id: %v", err)
	}
	ctx, cancel := outgoing(r)
	defer cancel()
	if err := h.opts.Runs.Cancel(ctx, req.RunID, strings.TrimSpace(req.Reason)); err != nil {
		return nil, grpcError(err)
	}
	return map[string]any{"run_id": req.RunID, "cancelled": true}, nil
}
