// Package debugger is LCTL's visual debugger: one http.Handler that serves
// the page (built into dist/ and embedded) and the JSON API it reads —
// chains, their events, a flowchart model, the state at any seq, stats,
// bottlenecks, confidence, diffs, live updates over server-sent events and,
// in a cluster, pending approvals. `lctl debug FILE` serves it over chain
// files; the tracer serves it over every chain it materialized.
//
// The contract between this server and the page is docs/debugger.md.
// Everything a chain says is returned as JSON data, never as HTML, and every
// response carries a strict Content-Security-Policy.
package debugger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// Options configure a Handler.
type Options struct {
	// Source holds the chains. Required.
	Source Source
	// Title names what is served (shown by the page).
	Title string
	// LoadErrors are chain files that could not be read; the first is
	// reported by /api/info.
	LoadErrors []LoadError
	// Prices price tokens for costs; nil leaves costs unknown.
	Prices *analysis.Prices
	// Approvals lists and decides approvals; nil: none (file mode, or a
	// tracer without a validator).
	Approvals Approvals
	// Runs cancels runs; nil: no Cancel (file mode, or a tracer without
	// an orchestrator).
	Runs Runs
	// Authorize, when set, is asked before every API call with the action
	// ("read" or "approve"); an error refuses the request (ErrUnauthenticated
	// → 401, anything else → 403). nil lets everyone in.
	Authorize func(r *http.Request, action string) error
	// Log receives errors; nil discards them.
	Log *slog.Logger
	// PingEvery is the live stream's heartbeat (0: 15 s).
	PingEvery time.Duration
}

// Authorization errors an Authorize hook returns.
var (
	ErrUnauthenticated  = errors.New("unauthenticated")
	ErrPermissionDenied = errors.New("permission denied")
)

// Actions an Authorize hook is asked about.
const (
	ActionRead    = "read"
	ActionApprove = "approve"
)

// Limits of the API.
const (
	maxBodyBytes     = 64 << 10
	defaultPage      = 200
	maxPage          = 1000
	defaultListLimit = 100
	maxListLimit     = 500
	defaultTail      = 100
	defaultPing      = 15 * time.Second
	// maxStepScan bounds how far back the state endpoint looks for the
	// start of the selected event's step.
	maxStepScan = 20000
)

// ContentSecurityPolicy is set on every response.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// Handler serves the debugger. Build it with New; Close ends its live
// streams (call it when the server shuts down, e.g. from
// http.Server.RegisterOnShutdown).
type Handler struct {
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	done      chan struct{}
	closeOnce sync.Once
	streams   sync.WaitGroup
	active    atomic.Int64 // live streams open now

	mu    sync.Mutex // guards cache, and stream starts against Close
	cache map[string]*chainCache
}

// New builds a Handler.
func New(opts Options) (*Handler, error) {
	if opts.Source == nil {
		return nil, errors.New("debugger: a source of chains is required")
	}
	if opts.PingEvery <= 0 {
		opts.PingEvery = defaultPing
	}
	h := &Handler{opts: opts, log: opts.Log, done: make(chan struct{}), cache: map[string]*chainCache{}}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	page, err := newPage()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	h.api(mux, http.MethodGet, "/api/info", ActionRead, h.info)
	h.api(mux, http.MethodGet, "/api/chains", ActionRead, h.chains)
	h.api(mux, http.MethodGet, "/api/chains/{id}", ActionRead, h.chain)
	h.api(mux, http.MethodGet, "/api/chains/{id}/events", ActionRead, h.events)
	h.api(mux, http.MethodGet, "/api/chains/{id}/flow", ActionRead, h.flow)
	h.api(mux, http.MethodGet, "/api/chains/{id}/state", ActionRead, h.state)
	h.api(mux, http.MethodGet, "/api/chains/{id}/confidence", ActionRead, h.confidence)
	h.api(mux, http.MethodGet, "/api/chains/{id}/live", ActionRead, h.live)
	h.api(mux, http.MethodGet, "/api/diff", ActionRead, h.diff)
	h.api(mux, http.MethodGet, "/api/approvals", ActionRead, h.approvals)
	h.api(mux, http.MethodPost, "/api/approvals/decide", ActionApprove, h.decide)
	h.api(mux, http.MethodPost, "/api/runs/cancel", ActionCancel, h.cancelRun)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such API: "+r.URL.Path)
	})
	mux.Handle("/", page)
	h.mux = mux
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// Close ends every live stream and waits for them to return. Requests
// after Close get no live updates.
func (h *Handler) Close() {
	h.mu.Lock()
	h.closeOnce.Do(func() { close(h.done) })
	h.mu.Unlock()
	h.streams.Wait()
}

// beginStream counts a live stream in, unless the handler is closed.
func (h *Handler) beginStream() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.done:
		return false
	default:
	}
	h.streams.Add(1)
	h.active.Add(1)
	return true
}

func (h *Handler) endStream() {
	h.active.Add(-1)
	h.streams.Done()
}

// ActiveStreams is how many live streams are open.
func (h *Handler) ActiveStreams() int { return int(h.active.Load()) }

// Error codes of the API.
const (
	codeNotFound           = "NOT_FOUND"
	codeInvalidArgument    = "INVALID_ARGUMENT"
	codeMethodNotAllowed   = "METHOD_NOT_ALLOWED"
	codeTooLarge           = "PAYLOAD_TOO_LARGE"
	codeUnauthenticated    = "UNAUTHENTICATED"
	codePermissionDenied   = "PERMISSION_DENIED"
	codeFailedPrecondition = "FAILED_PRECONDITION"
	codeUnavailable        = "UNAVAILABLE"
	codeInternal           = "INTERNAL"
)

// apiError is an error with its HTTP status and API code.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func badArg(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, codeInvalidArgument, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, codeNotFound, fmt.Sprintf(format, args...)}
}

// api registers an API route: method checked (405 otherwise, GET allows
// HEAD), the caller authorized, errors written as JSON.
func (h *Handler) api(mux *http.ServeMux, method, pattern, action string, fn func(http.ResponseWriter, *http.Request) (any, error)) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			allow := method
			if method == http.MethodGet {
				allow = "GET, HEAD"
			}
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, r.Method+" is not allowed here (use "+allow+")")
			return
		}
		if h.opts.Authorize != nil {
			if err := h.opts.Authorize(authRequest(r), action); err != nil {
				if errors.Is(err, ErrUnauthenticated) {
					w.Header().Set("WWW-Authenticate", `Bearer realm="xct"`)
					writeError(w, http.StatusUnauthorized, codeUnauthenticated, err.Error())
				} else {
					writeError(w, http.StatusForbidden, codePermissionDenied, err.Error())
				}
				return
			}
		}
		v, err := fn(w, r)
		if err != nil {
			h.writeErr(w, err)
			return
		}
		if v != nil {
			writeJSON(w, http.StatusOK, v)
		}
	})
}

// authRequest is the request an Authorize hook sees: on the live stream a
// token may come as ?access_token= (EventSource cannot set headers).
func authRequest(r *http.Request) *http.Request {
	if r.Header.Get("Authorization") != "" || !strings.HasSuffix(r.URL.Path, "/live") {
		return r
	}
	tok := r.URL.Query().Get("access_token")
	if tok == "" {
		return r
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+tok)
	return r2
}

func (h *Handler) writeErr(w http.ResponseWriter, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae.status, ae.code, ae.message)
	case errors.Is(err, ErrChainNotFound):
		writeError(w, http.StatusNotFound, codeNotFound, err.Error())
	case errors.Is(err, lctl.ErrInvalidChainID):
		writeError(w, http.StatusBadRequest, codeInvalidArgument, err.Error())
	case errors.Is(err, ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, err.Error())
	default:
		h.log.Error("debugger request failed", "err", err)
		writeError(w, http.StatusInternalServerError, codeInternal, "internal error")
	}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	writeJSON(w, status, b)
}

// writeJSON writes v; encoding/json escapes <, > and & in strings, so no
// data can be read as markup.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	raw, err := json.Marshal(v)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"code":"INTERNAL","message":"encode response"}}`))
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(raw)
	_, _ = w.Write([]byte("\n"))
}

// Query parameters.

func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badArg("%s must be a whole number from %d to %d, got %q", name, lo, hi, s)
	}
	return n, nil
}

func seqParam(r *http.Request, name string, def uint64) (uint64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, badArg("%s must be a seq (a whole number), got %q", name, s)
	}
	return n, nil
}

func timeParam(r *http.Request, name string) (time.Time, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badArg("%s must be an RFC 3339 time, got %q", name, s)
	}
	return t, nil
}

// getChain reads the {id} path value and the chain.
func (h *Handler) getChain(r *http.Request) (*Chain, error) {
	id := r.PathValue("id")
	if err := lctl.ValidateChainID(id); err != nil {
		return nil, badArg("%v", err)
	}
	c, err := h.opts.Source.Chain(r.Context(), id)
	if err != nil {
		if errors.Is(err, ErrChainNotFound) {
			return nil, notFound("no chain %s", id)
		}
		return nil, err
	}
	return c, nil
}

// chainCache keeps what the handler derived from a chain, for the number of
// events it was derived from.
type chainCache struct {
	mu      sync.Mutex
	flow    *flow
	summary *ChainSummary
	sumN    int
	detail  *chainDetail
	detN    int
	conf    *analysis.ConfidenceReport
	confN   int
	costs   *analysis.CostTrack // tokens per model along the chain
	facts   *factTrack          // facts' confidence along the chain (facttrack.go)
}

func (h *Handler) cacheOf(id string) *chainCache {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.cache[id]
	if c == nil {
		c = &chainCache{}
		h.cache[id] = c
	}
	return c
}
