// Package telemetry builds the broker's OpenTelemetry tracer provider from
// the standard environment variables, as the OpenTelemetry SDK reads them:
//
//   - OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (and
//     the other OTEL_EXPORTER_OTLP_* variables: headers, certificate,
//     timeout, compression) configure the OTLP/HTTP exporter
//     (otlptracehttp.New reads them);
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG the sampler
//     (sdktrace.NewTracerProvider reads them; default parentbased_always_on);
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES the resource
//     (resource.WithFromEnv; the service name defaults to airlock-broker).
//
// With neither endpoint variable set (or OTEL_SDK_DISABLED=true) tracing is
// off: the provider is OpenTelemetry's no-op one, and the broker, seeing its
// no-op tracer, starts no span at all (zero cost on the call path).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) names another.
const ServiceName = "airlock-broker"

// InstrumentationName names the broker's tracer.
const InstrumentationName = "github.com/airlock-broker/airlock"

// Tracing is the broker's tracer provider: the SDK's, exporting over
// OTLP/HTTP through a batch span processor, or the no-op one.
type Tracing struct {
	provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider // nil when off
}

// Enabled reports whether getenv configures an OTLP traces endpoint (and
// does not disable the SDK).
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != "" ||
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != ""
}

// New returns the tracer provider the environment configures (see the
// package comment). getenv decides whether tracing is on; the SDK then reads
// the rest of its configuration from the process environment itself, so
// getenv should be os.Getenv's view. Extra options (a test's in-memory
// exporter: sdktrace.WithSyncer) are added to the SDK provider's.
func New(ctx context.Context, getenv func(string) string, opts ...sdktrace.TracerProviderOption) (*Tracing, error) {
	if !Enabled(getenv) {
		return Off(), nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(ServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: after, so they win
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	all := append([]sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}, opts...)
	return NewSDK(all...), nil
}

// NewSDK is tracing with the SDK's provider built from opts (the sampler
// from OTEL_TRACES_SAMPLER unless opts set one): for tests and benchmarks
// with their own exporter.
func NewSDK(opts ...sdktrace.TracerProviderOption) *Tracing {
	tp := sdktrace.NewTracerProvider(opts...)
	return &Tracing{provider: tp, sdk: tp}
}

// Off is tracing off: the no-op provider.
func Off() *Tracing { return &Tracing{provider: noop.NewTracerProvider()} }

// On reports whether spans are recorded and exported.
func (t *Tracing) On() bool { return t.sdk != nil }

// Tracer is the broker's tracer (a noop.Tracer when off).
func (t *Tracing) Tracer() trace.Tracer { return t.provider.Tracer(InstrumentationName) }

// Shutdown flushes the spans not yet exported and stops the exporter,
// within ctx (it bounds the flush: 5s when ctx has no deadline).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	return t.sdk.Shutdown(ctx)
}
