package tracer

import (
	"context"
	"errors"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/auth"
)

// otlpGRPC is the OTLP TraceService (opentelemetry.proto.collector.trace.v1)
// on the tracer's gRPC server.
type otlpGRPC struct {
	coltracepb.UnimplementedTraceServiceServer
	in *ingester
}

// Export converts and appends the request's spans. Spans without valid ids
// are rejected and counted in partial_success; conversion warnings (spans
// that lacked attributes) are reported in its error_message with zero
// rejected spans, as OTLP allows. A failure to write is UNAVAILABLE, which
// exporters retry.
func (g *otlpGRPC) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var exporter string
	if p, ok := auth.FromContext(ctx); ok {
		exporter = p.Name
	}
	res, err := g.in.export(ctx, exporter, req.GetResourceSpans())
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, status.FromContextError(err).Err()
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return exportResponse(res), nil
}

func exportResponse(res exportResult) *coltracepb.ExportTraceServiceResponse {
	resp := &coltracepb.ExportTraceServiceResponse{}
	if res.rejected > 0 || len(res.warnings) > 0 {
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{RejectedSpans: res.rejected, ErrorMessage: res.message()}
	}
	return resp
}
