package broker

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/airlock-broker/airlock/internal/telemetry"
)

func TestParseTraceparent(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tests := []struct {
		name    string
		in      string
		ok      bool
		sampled bool
		want    string // normalized (operatorTrace)
	}{
		{name: "ok-sampled", in: "00-" + tid + "-" + sid + "-01", ok: true, sampled: true, want: "00-" + tid + "-" + sid + "-01"},
		{name: "ok-not sampled", in: "00-" + tid + "-" + sid + "-00", ok: true, want: "00-" + tid + "-" + sid + "-00"},
		{name: "ok-other flags kept as sampled or not", in: "00-" + tid + "-" + sid + "-03", ok: true, sampled: true, want: "00-" + tid + "-" + sid + "-01"},
		{name: "ok-later version with more fields", in: "01-" + tid + "-" + sid + "-01-extra", ok: true, sampled: true, want: "00-" + tid + "-" + sid + "-01"},
		{name: "ok-surrounding blanks", in: " 00-" + tid + "-" + sid + "-01 ", ok: true, sampled: true, want: "00-" + tid + "-" + sid + "-01"},
		{name: "fail-empty", in: ""},
		{name: "fail-version ff", in: "ff-" + tid + "-" + sid + "-01"},
		{name: "fail-version 00 with more fields", in: "00-" + tid + "-" + sid + "-01-extra"},
		{name: "fail-upper case", in: "00-4BF92F3577B34DA6A3CE929D0E0E4736-" + sid + "-01"},
		{name: "fail-zero trace id", in: "00-00000000000000000000000000000000-" + sid + "-01"},
		{name: "fail-zero span id", in: "00-" + tid + "-0000000000000000-01"},
		{name: "fail-short", in: "00-" + tid[:30] + "-" + sid + "-01"},
		{name: "fail-bad separator", in: "00_" + tid + "-" + sid + "-01"},
		{name: "fail-not hex", in: "00-" + tid + "-" + sid + "-zz"},
		{name: "fail-header injection", in: "00-" + tid + "-" + sid + "-01\r\nX: y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, ok := ParseTraceparent(tt.in)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if got := operatorTrace(tt.in); got != tt.want {
				t.Errorf("operatorTrace = %q, want %q", got, tt.want)
			}
			if !ok {
				return
			}
			if sc.TraceID().String() != tid || sc.SpanID().String() != sid || sc.IsSampled() != tt.sampled || !sc.IsRemote() {
				t.Errorf("span context %+v", sc)
			}
		})
	}
}

// TestTracerOfNoop: tracing off (nil, OpenTelemetry's no-op tracer, the
// telemetry package's off provider) is no tracer at all for the pipeline.
func TestTracerOfNoop(t *testing.T) {
	for name, tr := range map[string]trace.Tracer{
		"nil": nil, "noop": noop.NewTracerProvider().Tracer(""), "telemetry off": telemetry.Off().Tracer(),
	} {
		if tracerOf(tr) != nil {
			t.Errorf("%s: the pipeline traces", name)
		}
	}
	if tracerOf(telemetry.NewSDK().Tracer()) == nil {
		t.Error("an SDK tracer is dropped")
	}
}
