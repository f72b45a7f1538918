package otlp

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/xct-dev/xct/lctl/text"
)

// DecodeProto reads an ExportTraceServiceRequest in the protobuf encoding
// (OTLP/gRPC and OTLP/HTTP with Content-Type application/x-protobuf).
func DecodeProto(b []byte) (*coltracepb.ExportTraceServiceRequest, error) {
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("OTLP protobuf: %w", err)
	}
	return req, nil
}

// DecodeJSON reads an ExportTraceServiceRequest in the OTLP/JSON encoding.
// OTLP/JSON differs from the generic protobuf JSON mapping in one way that
// matters: trace and span ids are hex strings, not base64. Field names may
// be lowerCamelCase or the proto names, enums names or numbers, 64-bit
// integers strings or numbers; unknown fields are ignored, as OTLP asks of
// receivers.
func DecodeJSON(b []byte) (*coltracepb.ExportTraceServiceRequest, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("OTLP JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("OTLP JSON: data after the request object")
	}
	if _, ok := tree.(map[string]any); !ok {
		return nil, errors.New("OTLP JSON: the request must be an object")
	}
	if err := hexIDsToBase64(tree, "$"); err != nil {
		return nil, fmt.Errorf("OTLP JSON: %w", err)
	}
	raw, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("OTLP JSON: %w", err)
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, req); err != nil {
		return nil, fmt.Errorf("OTLP JSON: %w", err)
	}
	return req, nil
}

// idFields are the OTLP/JSON keys whose values are hex-encoded bytes.
var idFields = map[string]bool{
	"traceId": true, "trace_id": true,
	"spanId": true, "span_id": true,
	"parentSpanId": true, "parent_span_id": true,
}

// hexIDsToBase64 rewrites, anywhere in the tree, the values of id fields
// from hex to the base64 protojson expects. path names the tree; an error
// names where in it a bad id is.
func hexIDsToBase64(v any, path string) error {
	bad := hexIDs(v)
	if bad == nil {
		return nil
	}
	var b strings.Builder
	b.WriteString(path)
	for i := len(bad.where) - 1; i >= 0; i-- {
		b.WriteString(bad.where[i])
	}
	return fmt.Errorf("%s: %q is not a hex id", cutMiddle(b.String(), 512), truncate(bad.value, 64))
}

// badID is an id that is not hex: its value and the steps to it, the
// innermost first. The path is made only for the error: made for every
// member walked, each level's alive while the levels below were walked,
// it cost the square of the depth times the keys' length (half a
// gigabyte for 512 KiB of nested objects under 256-byte keys, session 16).
type badID struct {
	where []string
	value string
}

func hexIDs(v any) *badID {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && idFields[k] {
				b, err := hex.DecodeString(s)
				if err != nil {
					return &badID{where: []string{"." + k}, value: s}
				}
				x[k] = base64.StdEncoding.EncodeToString(b)
				continue
			}
			if bad := hexIDs(e); bad != nil {
				bad.where = append(bad.where, "."+k)
				return bad
			}
		}
	case []any:
		for i, e := range x {
			if bad := hexIDs(e); bad != nil {
				bad.where = append(bad.where, "["+strconv.Itoa(i)+"]")
				return bad
			}
		}
	}
	return nil
}

// cutMiddle keeps the start and the end of s, about n bytes, with an
// ellipsis between them (a path through thousands of levels names the
// bad id by its end).
func cutMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := len(s) - n/2
	for end < len(s) && !utf8.RuneStart(s[end]) {
		end++
	}
	return text.Truncate(s, n/2) + s[end:]
}

// maxLine bounds one line of an OTLP JSON lines file.
const maxLine = 64 << 20

// ReadJSONFile reads what the OpenTelemetry collector's file exporter
// writes: one ExportTraceServiceRequest JSON object per line, or a single
// (possibly indented) object. Blank lines are skipped. An error names the
// line it is on.
func ReadJSONFile(r io.Reader) ([]*coltracepb.ExportTraceServiceRequest, error) {
	br := bufio.NewReader(r)
	data, err := io.ReadAll(io.LimitReader(br, maxLine+1))
	if err != nil {
		return nil, fmt.Errorf("read OTLP JSON: %w", err)
	}
	if len(data) > maxLine {
		return nil, fmt.Errorf("read OTLP JSON: larger than %d bytes", maxLine)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("OTLP JSON: the file is empty")
	}
	// A single object (indented or not) decodes whole.
	if req, err := DecodeJSON(trimmed); err == nil {
		return []*coltracepb.ExportTraceServiceRequest{req}, nil
	} else if !bytes.Contains(trimmed, []byte("\n")) {
		return nil, err
	}
	var out []*coltracepb.ExportTraceServiceRequest
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		req, err := DecodeJSON([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, req)
	}
	return out, nil
}
