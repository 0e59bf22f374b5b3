package brokertest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLP is an OTLP/HTTP traces receiver on loopback, as a collector would
// run it: POST /v1/traces with a protobuf ExportTraceServiceRequest. Point
// OTEL_EXPORTER_OTLP_ENDPOINT at URL (the exporter adds /v1/traces).
type OTLP struct {
	URL string

	mu    sync.Mutex
	raw   [][]byte // every request's body, decoded from gzip: for canary scans
	spans []Span
}

// Span is a received span, its ids in W3C hex and its attribute values as
// strings.
type Span struct {
	Name     string
	Kind     string // server, client, internal...
	TraceID  string
	SpanID   string
	ParentID string // "" for a root
	Attrs    map[string]string
	Links    []SpanLink
	Status   string // unset, ok, error
	Service  string // the resource's service.name
}

// SpanLink is a received span's link.
type SpanLink struct{ TraceID, SpanID string }

// StartOTLP starts a receiver, closed when the test ends.
func StartOTLP(tb testing.TB) *OTLP {
	tb.Helper()
	r := &OTLP{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *OTLP) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, "bad gzip", http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	var ex coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &ex); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest", http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range ex.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, spanOf(s, service))
			}
		}
	}
	r.mu.Lock()
	r.raw = append(r.raw, data)
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func spanOf(s *tracepb.Span, service string) Span {
	sp := Span{
		Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
		ParentID: hex.EncodeToString(s.GetParentSpanId()), Attrs: attrs(s.GetAttributes()), Service: service,
	}
	switch s.GetKind() {
	case tracepb.Span_SPAN_KIND_SERVER:
		sp.Kind = "server"
	case tracepb.Span_SPAN_KIND_CLIENT:
		sp.Kind = "client"
	case tracepb.Span_SPAN_KIND_INTERNAL:
		sp.Kind = "internal"
	default:
		sp.Kind = s.GetKind().String()
	}
	switch s.GetStatus().GetCode() {
	case tracepb.Status_STATUS_CODE_ERROR:
		sp.Status = "error"
	case tracepb.Status_STATUS_CODE_OK:
		sp.Status = "ok"
	default:
		sp.Status = "unset"
	}
	for _, l := range s.GetLinks() {
		sp.Links = append(sp.Links, SpanLink{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	return sp
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans is every span received so far.
func (r *OTLP) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Raw is every export request's protobuf body received so far, joined.
func (r *OTLP) Raw() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Join(r.raw, nil)
}

// WaitSpan waits up to d for a span that match accepts and returns it.
func (r *OTLP) WaitSpan(tb testing.TB, d time.Duration, what string, match func(Span) bool) Span {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, s := range r.Spans() {
			if match(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no span %s received in %s (got %d spans)", what, d, len(r.Spans()))
		}
		<-time.After(10 * time.Millisecond)
	}
}

// Children are the received spans whose parent is span id.
func (r *OTLP) Children(id string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.ParentID == id {
			out = append(out, s)
		}
	}
	return out
}
