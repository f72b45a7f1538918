package tracer

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl/otlp"
)

// OTLPTracesPath is where OTLP/HTTP trace exports are posted.
const OTLPTracesPath = "/v1/traces"

// mountOTLP registers OTLP/HTTP trace ingestion (POST /v1/traces) on mux.
func (s *Service) mountOTLP(mux *http.ServeMux) {
	h := &otlpHTTP{in: s.otlp, maxBody: s.cfg.OTLP.maxBody(), authorize: s.cfg.OTLPAuthorize}
	mux.Handle(OTLPTracesPath, h)
}

// otlpHTTP serves OTLP/HTTP: a protobuf (application/x-protobuf) or JSON
// (application/json) ExportTraceServiceRequest, optionally gzip-encoded.
// The answer is in the request's encoding: an ExportTraceServiceResponse
// (200), or a google.rpc.Status for 400 (undecodable body), 413 (body over
// the limit, compressed or not), 415 (other content type or encoding) and
// 503 (cannot write now; retry).
type otlpHTTP struct {
	in      *ingester
	maxBody int64
	// authorize, when set, is asked before the body is read (401/403);
	// it names the exporter.
	authorize func(*http.Request) (string, error)
}

const (
	ctProto = "application/x-protobuf"
	ctJSON  = "application/json"
)

func (h *otlpHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "OTLP/HTTP: POST a trace export to "+OTLPTracesPath, http.StatusMethodNotAllowed)
		return
	}
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (ct != ctProto && ct != ctJSON) {
		http.Error(w, fmt.Sprintf("OTLP/HTTP: Content-Type must be %s or %s, got %q", ctProto, ctJSON, r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return
	}
	var exporter string
	if h.authorize != nil {
		var err error
		if exporter, err = h.authorize(r); err != nil {
			code := http.StatusForbidden
			if errors.Is(err, auth.ErrUnauthenticated) {
				code = http.StatusUnauthorized
				w.Header().Set("WWW-Authenticate", `Bearer realm="xct"`)
			}
			writeStatus(w, ct, code, err.Error())
			return
		}
	}
	body, code, err := h.readBody(w, r)
	if err != nil {
		writeStatus(w, ct, code, err.Error())
		return
	}
	var req *coltracepb.ExportTraceServiceRequest
	if ct == ctProto {
		req, err = otlp.DecodeProto(body)
	} else {
		req, err = otlp.DecodeJSON(body)
	}
	if err != nil {
		writeStatus(w, ct, http.StatusBadRequest, err.Error())
		return
	}
	res, err := h.in.export(r.Context(), exporter, req.GetResourceSpans())
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return
		}
		w.Header().Set("Retry-After", "1")
		writeStatus(w, ct, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeMessage(w, ct, http.StatusOK, exportResponse(res))
}

// readBody reads the body within maxBody, before and after gzip.
func (h *otlpHTTP) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	if r.ContentLength > h.maxBody {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("OTLP/HTTP: body of %d bytes is over the limit of %d", r.ContentLength, h.maxBody)
	}
	var src io.Reader = http.MaxBytesReader(w, r.Body, h.maxBody)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("OTLP/HTTP: gzip body: %w", err)
		}
		defer func() { _ = zr.Close() }()
		src = zr
	default:
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("OTLP/HTTP: Content-Encoding %q is not supported (gzip or none)", enc)
	}
	body, err := io.ReadAll(io.LimitReader(src, h.maxBody+1))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("OTLP/HTTP: body is over the limit of %d bytes", h.maxBody)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Errorf("OTLP/HTTP: read body: %w", err)
	case int64(len(body)) > h.maxBody:
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("OTLP/HTTP: decompressed body is over the limit of %d bytes", h.maxBody)
	}
	return body, 0, nil
}

// writeStatus answers with a google.rpc.Status, as OTLP/HTTP asks.
func writeStatus(w http.ResponseWriter, ct string, httpCode int, msg string) {
	code := codes.InvalidArgument
	switch httpCode {
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
	case http.StatusRequestEntityTooLarge:
		code = codes.ResourceExhausted
	case http.StatusUnauthorized:
		code = codes.Unauthenticated
	case http.StatusForbidden:
		code = codes.PermissionDenied
	}
	writeMessage(w, ct, httpCode, status.New(code, msg).Proto())
}

func writeMessage(w http.ResponseWriter, ct string, httpCode int, m proto.Message) {
	var b []byte
	var err error
	if ct == ctJSON {
		b, err = protojson.Marshal(m)
	} else {
		b, err = proto.Marshal(m)
	}
	if err != nil {
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}
