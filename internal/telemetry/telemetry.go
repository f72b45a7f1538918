// Package telemetry sets up OpenTelemetry tracing for an XCT process. It is
// configured only through the standard OTEL_* environment variables: the
// OTLP exporter reads OTEL_EXPORTER_OTLP_*, the resource OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES (which win over the built-in service name).
// Without an endpoint, tracing is off and costs nothing.
package telemetry

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Enabled reports whether an OTLP endpoint is configured.
func Enabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs a global TracerProvider that exports spans over OTLP gRPC,
// and the W3C trace-context propagator. When no endpoint is configured it
// installs nothing and returns a no-op shutdown. shutdown flushes what is
// buffered and turns tracing off again.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // later detectors win: the environment overrides
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(idGenerator{}))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func(ctx context.Context) error {
		if otel.GetTracerProvider() == tp {
			otel.SetTracerProvider(noop.NewTracerProvider())
		}
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("otel shutdown: %w", err)
		}
		return nil
	}, nil
}
