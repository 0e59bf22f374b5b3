package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// TestMetricsServeExemplars: a call made under a sampled span (here a
// hand-made span context on the sandbox request, as the tracing
// middleware will put one) is observed in airlock_upstream_seconds with
// its trace id as the exemplar, which /metrics serves to a scraper asking
// for OpenMetrics (and the text format, without exemplars, otherwise).
func TestMetricsServeExemplars(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	base, _ := url.Parse(up.URL)
	src, err := upstream.NewEnvSource("KEY", func(string) string { return "CANARY-env" })
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream.Upstream{Name: "api", Kind: "http", BaseURL: base, Timeout: 5 * time.Second, MaxBody: 1 << 20,
		ForwardHeaders: map[string]bool{}, Source: src,
		Inject: upstream.Injection{Header: "Authorization", Format: "Bearer {secret}"}}
	u.SetTransport(upstream.NewTransport())
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	k := brokertest.MustOpenBroker(t, brokertest.WithUpstream(u), brokertest.WithNow(time.Now),
		brokertest.WithOptions(func(o *broker.Options) { o.Metrics = reg }))
	api, err := httpapi.New(k.Broker, log, httpapi.UIOptions{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	tid := trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31}, TraceFlags: trace.FlagsSampled})
	sandboxH := api.Handler(httpapi.SandboxPlane)
	sandbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sandboxH.ServeHTTP(w, r.WithContext(trace.ContextWithSpanContext(r.Context(), sc)))
	}))
	t.Cleanup(sandbox.Close)
	control := httptest.NewServer(api.Handler(httpapi.ControlPlane))
	t.Cleanup(control.Close)

	var s struct{ Token string }
	if status := callJSON(t, "POST", control.URL+"/v1/sessions", admin,
		`{"task_id": "t", "untrusted_input": false, "grants": [{"upstream": "api", "rules": [{"method": "GET", "path": "/x"}]}]}`, &s); status != 201 {
		t.Fatalf("create session: %d", status)
	}
	if status := callJSON(t, "GET", sandbox.URL+"/v1/proxy/api/x", s.Token, "", nil); status != 200 {
		t.Fatalf("call: %d", status)
	}
	scrape := func(accept string) string {
		req, _ := http.NewRequest("GET", control.URL+"/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
		}
		return string(body)
	}
	om := scrape("application/openmetrics-text; version=1.0.0; charset=utf-8")
	exemplar := false
	for _, line := range strings.Split(om, "\n") {
		if strings.HasPrefix(line, `airlock_upstream_seconds_bucket{class="2xx",upstream="api"`) && strings.Contains(line, `# {trace_id="`+tid.String()+`"}`) {
			exemplar = true
		}
	}
	if !exemplar {
		t.Errorf("no exemplar with trace id %s on airlock_upstream_seconds in the OpenMetrics scrape:\n%s", tid, grepLines(om, "airlock_upstream_seconds"))
	}
	if text := scrape(""); !strings.Contains(text, `airlock_upstream_seconds_count{class="2xx",upstream="api"} 1`) || strings.Contains(text, "trace_id") {
		t.Errorf("text scrape:\n%s", grepLines(text, "airlock_upstream_seconds"))
	}
}

// TestAuditFailureExplained: a call refused because its allowed record
// cannot be written is answered 503 audit_unavailable saying so, with one
// error line carrying the request id and the same cause.
func TestAuditFailureExplained(t *testing.T) {
	e := newEnv(t)
	tok := e.session(t)
	e.st.failAudit.Store(true)
	status, p := e.call(t, "GET", e.sandbox.URL+"/v1/proxy/api/x", tok, "")
	e.st.failAudit.Store(false)
	const cause = "the audit log's write failed"
	if status != 503 || p["code"] != "audit_unavailable" || p["detail"] != cause {
		t.Fatalf("with a failing audit log: %d %v", status, p)
	}
	var lines []map[string]any
	for _, line := range bytes.Split(e.logs.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["request_id"] == p["request_id"] {
			lines = append(lines, m)
		}
	}
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || lines[0]["cause"] != cause || lines[0]["code"] != "audit_unavailable" {
		t.Fatalf("log lines of the call: %v", lines)
	}
	if _, ok := lines[0]["err"]; ok {
		t.Errorf("the line carries the raw error: %v", lines[0])
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
