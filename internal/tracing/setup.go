package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Wanted reports whether the environment asks for traces: an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp is set,
// and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none. With
// no OTEL_* variable set it is false and nothing is traced.
func Wanted(getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup turns tracing on when the environment asks for it (see Wanted):
// an SDK tracer provider batching spans to the standard OTLP exporter,
// configured by the standard OTEL_EXPORTER_OTLP_* variables
// (OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf, the default),
// with service.name from OTEL_SERVICE_NAME, else service. It returns the
// function that flushes and stops the provider (a no-op when tracing
// stayed off). Call it once per process, before any span is started.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Wanted(nil) {
		return func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	proto := cmpEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	switch proto {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(service)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	if v := os.Getenv("OTEL_SERVICE_NAME"); v != "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(v)))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Use(tp)
	return func(ctx context.Context) error {
		Use(nil)
		return tp.Shutdown(ctx)
	}, nil
}

// cmpEnv returns the first of the variables that is set, lower-cased.
func cmpEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return strings.ToLower(v)
		}
	}
	return ""
}
