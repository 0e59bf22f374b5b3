package telemetry_test

import (
	"context"
	"os"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/telemetry"
)

func TestEnabled(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{name: "nothing set", env: nil, want: false},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, want: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, want: true},
		{name: "blank endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, want: false},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, want: false},
		{name: "service name alone", env: map[string]string{"OTEL_SERVICE_NAME": "x"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := telemetry.Enabled(func(k string) string { return tt.env[k] }); got != tt.want {
				t.Errorf("Enabled = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOffIsNoop: without an endpoint the tracer is OpenTelemetry's no-op
// one (the broker then starts no span at all).
func TestOffIsNoop(t *testing.T) {
	tr, err := telemetry.New(context.Background(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if tr.On() {
		t.Fatal("tracing on without an endpoint")
	}
	if _, ok := tr.Tracer().(noop.Tracer); !ok {
		t.Fatalf("tracer %T, want noop.Tracer", tr.Tracer())
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownFlushes: spans the batch processor still holds (its delay is
// long) reach the collector at Shutdown, with the resource the environment
// names, sampled as OTEL_TRACES_SAMPLER says.
func TestShutdownFlushes(t *testing.T) {
	recv := brokertest.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000") // 10 minutes: only Shutdown exports
	t.Setenv("OTEL_SERVICE_NAME", "airlock-flush")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tr, err := telemetry.New(context.Background(), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer().Start(context.Background(), "pending")
	span.End()
	if n := len(recv.Spans()); n != 0 {
		t.Fatalf("%d spans exported before Shutdown", n)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	if len(spans) != 1 || spans[0].Name != "pending" || spans[0].Service != "airlock-flush" {
		t.Fatalf("after Shutdown: %+v", spans)
	}
}

// TestSamplerFromEnv: OTEL_TRACES_SAMPLER=always_off records nothing.
func TestSamplerFromEnv(t *testing.T) {
	recv := brokertest.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	tr, err := telemetry.New(context.Background(), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer().Start(context.Background(), "dropped")
	if span.SpanContext().IsSampled() {
		t.Error("sampled under always_off")
	}
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(recv.Spans()); n != 0 {
		t.Fatalf("%d spans exported under always_off", n)
	}
}
