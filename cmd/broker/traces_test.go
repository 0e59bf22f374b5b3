package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// TestTracesEndToEnd runs the broker as its own process with nothing but
// the standard OpenTelemetry environment pointing at an OTLP/HTTP receiver
// on loopback, as an operator would set it: the spans of its calls reach
// the receiver, flushed at shutdown (the batch delay is longer than the
// test), each linked to the operator's trace given at the session's
// creation and none parented by the sandbox's; the upstream client span's
// URL is the checked one (a query credential is the placeholder); the
// audit records carry the span's trace id; no secret is in any span.
func TestTracesEndToEnd(t *testing.T) {
	const (
		opTraceID   = "0af7651916cd43dd8448eb211c80319c"
		opSpanID    = "b7ad6b7169203331"
		sandTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		sandTrace   = "00-" + sandTraceID + "-00f067aa0ba902b7-01"
	)
	up := brokertest.NewUpstream(t)
	tb := startTraced(t, fmt.Sprintf(`  - name: api
    base_url: %s
    credential: {source: env, name: CANARY_TOKEN}
  - name: q
    base_url: %s
    credential: {source: env, name: CANARY_TOKEN}
    inject: {query: api_key}
  - name: prop
    base_url: %s
    credential: {source: env, name: CANARY_TOKEN}
    propagate_trace: true
`, up.URL, up.URL, up.URL))
	p, recv := tb.child, tb.recv
	b := &brokertest.Proc{T: t, Sandbox: p.Sandbox, Control: p.Control, HTTP: &http.Client{Timeout: 10 * time.Second}}
	r := b.Do("POST", p.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{
		"task_id": "traced", "ttl": "1h", "untrusted_input": false, "isolation": "microvm",
		"grants": []any{
			brokertest.APIGrant(map[string]any{"method": "GET", "path": "/items/{id}"}),
			map[string]any{"upstream": "q", "rules": []any{map[string]any{"method": "GET", "path": "/search"}}},
			map[string]any{"upstream": "prop", "rules": []any{map[string]any{"method": "GET", "path": "/propagated"}}},
		},
	}, "Traceparent", "00-"+opTraceID+"-"+opSpanID+"-01")
	if r.Status != http.StatusCreated {
		t.Fatalf("create session: %d %s", r.Status, r.Body)
	}
	var s brokertest.Created
	if err := json.Unmarshal(r.Body, &s); err != nil {
		t.Fatal(err)
	}
	type sent struct{ requestID, span, upstream, traceID, spanID string }
	var calls []sent
	for _, c := range []struct{ url, span, upstream string }{
		{p.Sandbox + "/v1/proxy/api/items/42", "GET /items/{id}", "api"},
		{p.Sandbox + "/v1/proxy/q/search?term=x", "GET /search", "q"},
		{p.Sandbox + "/v1/proxy/prop/propagated", "GET /propagated", "prop"},
	} {
		a := b.Do("GET", c.url, s.Token, nil, "Traceparent", sandTrace, "Tracestate", "evil=1", "Baggage", "user=attacker")
		if a.Status != 200 {
			t.Fatalf("%s: %d %s", c.url, a.Status, a.Body)
		}
		calls = append(calls, sent{requestID: a.Header.Get("X-Airlock-Request-Id"), span: c.span, upstream: c.upstream})
	}
	propagated := "" // the traceparent the propagate_trace upstream got: the broker's own
	for _, rec := range up.Requests() {
		if rec.RawPath == "/propagated" {
			propagated = rec.Header.Get("Traceparent")
			rec.Header.Del("Traceparent")
		}
		for _, name := range []string{"Traceparent", "Tracestate", "Baggage"} {
			if v := rec.Header.Get(name); v != "" {
				t.Errorf("the upstream got the sandbox's %s on %s: %q", name, rec.RawPath, v)
			}
		}
	}
	// Each call's records (allowed, then completed, written off the
	// call's path) carry one trace id and span id, and the export finds
	// them by it.
	for i := range calls {
		c := &calls[i]
		var recs []tracedRecord
		brokertest.Eventually(t, 10*time.Second, func() bool {
			recs = recs[:0]
			for _, r := range tracedRecords(t, b.AuditExport()) {
				if r.RequestID == c.requestID {
					recs = append(recs, r)
				}
			}
			return len(recs) == 2
		})
		c.traceID, c.spanID = recs[0].TraceID, recs[0].SpanID
		if recs[0].Type != "call.allowed" || recs[1].Type != "call.completed" || c.traceID == "" || c.spanID == "" ||
			recs[1].TraceID != c.traceID || recs[1].SpanID != c.spanID {
			t.Fatalf("records of %s: %+v", c.requestID, recs)
		}
		byTrace := tracedRecords(t, b.Do("GET", p.Control+"/v1/audit?trace_id="+c.traceID, brokertest.ProcAdminToken, nil).Body)
		if len(byTrace) != 2 || byTrace[0].Seq != recs[0].Seq || byTrace[1].Seq != recs[1].Seq {
			t.Errorf("?trace_id=%s: %+v, want %+v", c.traceID, byTrace, recs)
		}
	}
	if n := len(recv.Spans()); n != 0 {
		t.Fatalf("%d spans exported before shutdown with a 10-minute batch delay", n)
	}

	// Shutdown flushes.
	if err := tb.stop(); err != nil {
		t.Fatalf("broker exit: %v", err)
	}
	for _, c := range calls {
		call := recv.WaitSpan(t, 5*time.Second, "of "+c.span, func(x brokertest.Span) bool {
			return x.Kind == "server" && x.Attrs["airlock.request_id"] == c.requestID
		})
		if call.TraceID != c.traceID || call.SpanID != c.spanID {
			t.Errorf("span %s/%s, its audit records' %s/%s", call.TraceID, call.SpanID, c.traceID, c.spanID)
		}
		if call.Name != c.span || call.Service != "airlock-broker" || call.ParentID != "" || call.TraceID == sandTraceID ||
			call.Attrs["airlock.upstream"] != c.upstream || call.Attrs["airlock.session_id"] != s.ID || call.Attrs["airlock.decision"] != "allow" {
			t.Errorf("call span %+v", call)
		}
		if len(call.Links) != 1 || call.Links[0].TraceID != opTraceID || call.Links[0].SpanID != opSpanID {
			t.Errorf("call span links %v, want the operator's trace", call.Links)
		}
		client := recv.WaitSpan(t, 5*time.Second, "upstream attempt", func(x brokertest.Span) bool {
			return x.ParentID == call.SpanID && x.Kind == "client"
		})
		full := client.Attrs["url.full"]
		if !strings.HasPrefix(full, up.URL+"/") || client.Attrs["http.response.status_code"] != "200" {
			t.Errorf("upstream span %v", client.Attrs)
		}
		if want := "00-" + call.TraceID + "-" + client.SpanID + "-01"; c.upstream == "prop" && propagated != want {
			t.Errorf("propagate_trace: the upstream got traceparent %q, want the attempt's %q", propagated, want)
		}
		if c.upstream == "q" && !strings.Contains(full, "api_key={credential}") {
			t.Errorf("the query credential's place in url.full: %q", full)
		}
	}
	brokertest.AssertNoCanary(t, "the exported spans", recv.Raw())
	if strings.Contains(string(recv.Raw()), s.Token) {
		t.Error("a span carries the session token")
	}
}

// tracedRecord is an audit record with its trace fields.
type tracedRecord struct {
	Seq       uint64 `json:"seq"`
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	TraceID   string `json:"trace_id"`
	SpanID    string `json:"span_id"`
}

func tracedRecords(t *testing.T, data []byte) []tracedRecord {
	t.Helper()
	var out []tracedRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r tracedRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// tracedBroker is a broker process traced to an OTLP receiver of the
// test's, its batches held until it stops (Shutdown flushes them).
type tracedBroker struct {
	child   *brokertest.Child
	recv    *brokertest.OTLP
	stopped bool
}

// startTraced starts a broker process with upstreams (a YAML list's
// items), configured for traces by the OTEL_* environment alone.
func startTraced(t *testing.T, upstreams string) *tracedBroker {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: %s
enforce_isolation: false
log_level: error
upstreams:
%s`, filepath.Join(dir, "data"), brokertest.ProcAdminToken, upstreams)), 0o600); err != nil {
		t.Fatal(err)
	}
	tb := &tracedBroker{recv: brokertest.StartOTLP(t)}
	tb.child = brokertest.StartChild(t, cfg, []string{"CANARY_TOKEN=" + brokertest.Canary,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + tb.recv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=600000", // 10 minutes: what arrives, Shutdown flushed
		"OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=", "OTEL_TRACES_SAMPLER=", "OTEL_SDK_DISABLED=",
	})
	t.Cleanup(func() {
		if !tb.stopped {
			tb.child.Kill()
		}
	})
	return tb
}

// stop interrupts the broker and waits for it: its spans are flushed.
func (tb *tracedBroker) stop() error {
	if err := tb.child.Cmd.Process.Signal(os.Interrupt); err != nil {
		return err
	}
	tb.stopped = true
	return tb.child.Cmd.Wait()
}
