package broker

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// TestUpstreamSecondsByClassWithExemplars: airlock_upstream_seconds is
// labelled by upstream (configured names only) and status class, and an
// observation made under a sampled span carries its trace id as the
// exemplar; an unsampled one carries none.
func TestUpstreamSecondsByClassWithExemplars(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newCallMetrics(reg, map[string]*upstream.Upstream{"api": {Name: "api"}})
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled}))
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 9}}))
	m.upstream(sampled, "api", 200, 3*time.Millisecond)
	m.upstream(unsampled, "api", 404, time.Millisecond)
	m.upstream(context.Background(), "api", 503, time.Millisecond)
	m.upstream(sampled, "api", 0, time.Millisecond)
	m.upstream(context.Background(), "forged-by-a-caller", 999, time.Millisecond)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // "upstream class" → the exemplar's trace id ("-": none)
	for _, mf := range mfs {
		if mf.GetName() != "airlock_upstream_seconds" {
			continue
		}
		for _, met := range mf.GetMetric() {
			if met.GetHistogram().GetSampleCount() == 0 {
				continue
			}
			labels := map[string]string{}
			for _, l := range met.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["upstream"]+" "+labels["class"]] = exemplarTrace(met.GetHistogram())
		}
	}
	want := map[string]string{
		"api 2xx": tid.String(), "api 4xx": "-", "api 5xx": "-", "api error": tid.String(), "unknown error": "-",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("series (-want +got):\n%s", d)
	}
}

func exemplarTrace(h *dto.Histogram) string {
	for _, b := range h.GetBucket() {
		if e := b.GetExemplar(); e != nil {
			for _, l := range e.GetLabel() {
				if l.GetName() == "trace_id" {
					return l.GetValue()
				}
			}
		}
	}
	return "-"
}
