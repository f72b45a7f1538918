package debugger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/lctl"
)

// Approval is one approval as the page shows it: the run it belongs to and
// its JSON as the approvals' owner renders it (in XCT, the validator's
// xct.v1.Approval in protojson; the tracer wires it).
type Approval struct {
	RunID string
	JSON  json.RawMessage
}

// Decision is a decision on one pending approval.
type Decision struct {
	RunID string
	// Step is the step number or the step id.
	Step     string
	Approve  bool
	Approver string
	Reason   string
}

// Approvals lists and decides approvals: the validator's, in a cluster.
// The context carries the caller's credentials as outgoing gRPC metadata;
// errors are gRPC statuses (grpcError maps them to the API's).
type Approvals interface {
	List(ctx context.Context, runID string, all bool) ([]Approval, error)
	Decide(ctx context.Context, d Decision) (Approval, error)
}

// csrfHeader must be on every POST: a cross-site form cannot set it.
const csrfHeader = "X-XCT-CSRF"

// validatorTimeout bounds a call to the validator.
const validatorTimeout = 10 * time.Second

// outgoing forwards the caller's Authorization header to the validator as
// gRPC authorization metadata, so the validator decides with the caller's
// identity, and bounds the call.
func outgoing(r *http.Request) (context.Context, context.CancelFunc) {
	ctx := r.Context()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	return context.WithTimeout(ctx, validatorTimeout)
}

// approvalList renders approvals as a JSON array of their own JSON.
type approvalList []Approval

func (l approvalList) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, a := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		if !json.Valid(a.JSON) {
			return nil, fmt.Errorf("encode approval of run %s: not JSON", a.RunID)
		}
		b.Write(a.JSON)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// approvalOne renders one approval (null when it has no JSON).
type approvalOne struct{ a Approval }

func (p approvalOne) MarshalJSON() ([]byte, error) {
	if len(p.a.JSON) == 0 {
		return []byte("null"), nil
	}
	if !json.Valid(p.a.JSON) {
		return nil, fmt.Errorf("encode approval of run %s: not JSON", p.a.RunID)
	}
	return p.a.JSON, nil
}

func (h *Handler) noApprovals() error {
	return notFound("approvals are not available here (the tracer needs --validator-addr; files have none)")
}

func (h *Handler) approvals(_ http.ResponseWriter, r *http.Request) (any, error) {
	if h.opts.Approvals == nil {
		return nil, h.noApprovals()
	}
	q := r.URL.Query()
	run := q.Get("run")
	if run != "" {
		if err := lctl.ValidateChainID(run); err != nil {
			return nil, badArg("run: %v", err)
		}
	}
	all := false
	switch q.Get("all") {
	case "", "0", "false":
	case "1", "true":
		all = true
	default:
		return nil, badArg("all must be 1 or 0, got %q", q.Get("all"))
	}
	ctx, cancel := outgoing(r)
	defer cancel()
	list, err := h.opts.Approvals.List(ctx, run, all)
	if err != nil {
		return nil, grpcError(err)
	}
	return map[string]any{"approvals": approvalList(list)}, nil
}

// pendingByRun counts pending approvals per run (none without approvals,
// or when the validator cannot be asked: the list still answers).
func (h *Handler) pendingByRun(r *http.Request) map[string]int {
	out := map[string]int{}
	if h.opts.Approvals == nil {
		return out
	}
	ctx, cancel := outgoing(r)
	defer cancel()
	list, err := h.opts.Approvals.List(ctx, "", false)
	if err != nil {
		h.log.Warn("debugger: list pending approvals", "err", err)
		return out
	}
	for _, a := range list {
		out[a.RunID]++
	}
	return out
}

// decideRequest is the body of POST /api/approvals/decide.
type decideRequest struct {
	RunID    string          `json:"run_id"`
	Step     json.RawMessage `json:"step"`
	Approve  *bool           `json:"approve"`
	Reason   string          `json:"reason"`
	Approver string          `json:"approver"`
}

// decodeBody reads a JSON request body of at most maxBodyBytes into v,
// strictly (unknown fields refused); what names it in the error.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, what string) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return badArg("the body must be application/json, got %q", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the body is larger than %d bytes", maxBodyBytes)}
		}
		return badArg("read body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badArg("the body is not a %s: %v", what, err)
	}
	return nil
}

func (h *Handler) decide(w http.ResponseWriter, r *http.Request) (any, error) {
	if r.Header.Get(csrfHeader) != "1" {
		return nil, &apiError{http.StatusForbidden, codePermissionDenied, "missing header " + csrfHeader + ": 1"}
	}
	if h.opts.Approvals == nil {
		return nil, h.noApprovals()
	}
	var req decideRequest
	if err := decodeBody(w, r, &req, "decision"); err != nil {
		return nil, err
	}
	if err := lctl.ValidateChainID(req.RunID); err != nil {
		return nil, badArg("run_id: %v", err)
	}
	step, err := stepArg(req.Step)
	if err != nil {
		return nil, err
	}
	if req.Approve == nil {
		return nil, badArg("approve (true or false) is required")
	}
	if !*req.Approve && strings.TrimSpace(req.Reason) == "" {
		return nil, badArg("a reason is required to deny")
	}
	ctx, cancel := outgoing(r)
	defer cancel()
	a, err := h.opts.Approvals.Decide(ctx, Decision{
		RunID: req.RunID, Step: step, Approve: *req.Approve, Approver: req.Approver, Reason: req.Reason,
	})
	if err != nil {
		return nil, decideError(err)
	}
	return map[string]any{"approval": approvalOne{a}}, nil
}

// stepArg reads a step given as a number or a string (number or step id).
func stepArg(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", badArg("step (the step number or its step id) is required")
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil && n > 0 {
		return strconv.FormatInt(n, 10), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && s != "" && len(s) <= 256 {
		return s, nil
	}
	return "", badArg("step must be a positive step number or a step id")
}

// decideError is grpcError for a decision, saying what an approver does
// when the validator cannot decide (it is unreachable, or cannot read its
// approvals: NATS is down): try again. A decision the validator may have
// recorded before the answer was lost is never taken twice (a second one
// is refused as already decided), and the approvals list shows it.
func decideError(err error) error {
	e := grpcError(err)
	var ae *apiError
	if errors.As(e, &ae) && ae.code == codeUnavailable {
		ae.message = "the validator cannot decide now (" + ae.message + "): try again once it is back; the pending approvals show whether this decision was recorded"
	}
	return e
}

// grpcError maps a validator error to the API's.
func grpcError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return &apiError{http.StatusBadGateway, codeUnavailable, "validator: " + err.Error()}
	}
	m := map[codes.Code]struct {
		status int
		code   string
	}{
		codes.InvalidArgument:    {http.StatusBadRequest, codeInvalidArgument},
		codes.NotFound:           {http.StatusNotFound, codeNotFound},
		codes.FailedPrecondition: {http.StatusConflict, codeFailedPrecondition},
		codes.AlreadyExists:      {http.StatusConflict, codeFailedPrecondition},
		codes.PermissionDenied:   {http.StatusForbidden, codePermissionDenied},
		codes.Unauthenticated:    {http.StatusUnauthorized, codeUnauthenticated},
		codes.Unavailable:        {http.StatusServiceUnavailable, codeUnavailable},
		codes.DeadlineExceeded:   {http.StatusServiceUnavailable, codeUnavailable},
	}
	if x, ok := m[st.Code()]; ok {
		return &apiError{x.status, x.code, st.Message()}
	}
	return &apiError{http.StatusBadGateway, codeInternal, "validator: " + st.Code().String() + ": " + st.Message()}
}
