package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/telemetry"
)

// Traces of the call pipeline through each door, received by an OTLP/HTTP
// receiver on loopback as a collector would: the tracer provider comes
// from the OTEL_* environment (telemetry.New), the broker and its doors
// are real, and so is the upstream.

// The operator's trace (given at the session's creation) and a hostile
// sandbox's (sent with every call, with tracestate and baggage).
const (
	opTraceID   = "0af7651916cd43dd8448eb211c80319c"
	opSpanID    = "b7ad6b7169203331"
	opTrace     = "00-" + opTraceID + "-" + opSpanID + "-01"
	sandTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	sandSpanID  = "00f067aa0ba902b7"
	sandTrace   = "00-" + sandTraceID + "-" + sandSpanID + "-01"
)

// sandboxTraceHeaders are what a sandbox could send to be parented, to
// force sampling downstream or to smuggle baggage to the upstream.
func sandboxTraceHeaders(h http.Header) {
	h.Set("Traceparent", sandTrace)
	h.Set("Tracestate", "evil=forced")
	h.Set("Baggage", "user=attacker")
}

// tracedPipe is the pipeline's test broker tracing to an OTLP receiver
// through the environment, as an operator configures it.
func tracedPipe(t *testing.T) (*pipeEnv, *brokertest.OTLP) {
	t.Helper()
	recv := brokertest.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: the batch processor exports soon
	t.Setenv("OTEL_SERVICE_NAME", "airlock-test")
	tr, err := telemetry.New(context.Background(), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !tr.On() {
		t.Fatal("tracing is off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return pipeStart(t, func(o *broker.Options) { o.Tracer = tr.Tracer() }), recv
}

// tracedSession is e.session created with the operator's traceparent.
func (e *pipeEnv) tracedSession(t *testing.T, gated bool) pipeSession {
	t.Helper()
	approval := ""
	if gated {
		approval = `"approval": "always",`
	}
	body := `{"task_id": "t", "untrusted_input": false, "grants": [
		{"upstream": "api", "max_uses": 100, ` + approval + ` "rules": [{"method": "POST", "path": "/Ok"}, {"method": "POST", "path": "/Broken"}]},
		{"upstream": "ddb", "max_uses": 100, ` + approval + ` "rules": [{"action": "dynamodb:Ok", "resource": "*"}]}]}`
	req, _ := http.NewRequest("POST", e.control.URL+"/v1/sessions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+pipeAdmin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", opTrace)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s pipeSession
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != 201 || len(s.Grants) != 2 {
		t.Fatalf("create session: %d %v %+v", resp.StatusCode, err, s)
	}
	return s
}

// The doors, each sending the sandbox's trace headers.

func (e *pipeEnv) restTraced(t *testing.T, s pipeSession, op string) pipeAnswer {
	t.Helper()
	req, _ := http.NewRequest("POST", e.sandbox.URL+"/v1/proxy/api/"+op, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Prefer", "wait=0")
	sandboxTraceHeaders(req.Header)
	return e.answer(t, req)
}

func (e *pipeEnv) awsTraced(t *testing.T, s pipeSession, op string) pipeAnswer {
	t.Helper()
	body := `{}`
	req, _ := http.NewRequest("POST", e.sandbox.URL+"/v1/aws/ddb/", strings.NewReader(body))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	sandboxTraceHeaders(req.Header) // signed too: the SDK's own tracing middleware would send them so
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: s.AWS.AccessKeyID, SecretAccessKey: s.AWS.SecretAccessKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "dynamodb", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return e.answer(t, req)
}

// proxyTraced calls op through the proxy door with the sandbox's trace
// headers on the CONNECT and on the request inside the tunnel.
func (e *pipeEnv) proxyTraced(t *testing.T, s pipeSession, op string) pipeAnswer {
	t.Helper()
	return e.proxyDoorWith(t, s, op, "Traceparent: "+sandTrace+"\r\n", sandboxTraceHeaders)
}

// tracedRecord is an audit record as the trace checks read it.
type tracedRecord struct {
	Seq       uint64 `json:"seq"`
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	ActionID  string `json:"action_id"`
	Code      string `json:"code"`
	TraceID   string `json:"trace_id"`
	SpanID    string `json:"span_id"`
}

// auditOfTrace is GET /v1/audit?trace_id=id.
func (e *pipeEnv) auditOfTrace(t *testing.T, id string) []tracedRecord {
	t.Helper()
	req, _ := http.NewRequest("GET", e.control.URL+"/v1/audit?trace_id="+id, nil)
	req.Header.Set("Authorization", "Bearer "+pipeAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("audit export by trace: %d %s", resp.StatusCode, data)
	}
	var out []tracedRecord
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r tracedRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// waitRecords waits for the records of trace id to be types (in order).
func (e *pipeEnv) waitRecords(t *testing.T, id string, types ...string) []tracedRecord {
	t.Helper()
	var got []tracedRecord
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = e.auditOfTrace(t, id)
		var have []string
		for _, r := range got {
			have = append(have, r.Type)
		}
		if cmp.Equal(have, types) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("records of trace %s: %v, want %v", id, have, types)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// checkCallSpan checks a call's server span: a root of the broker's own
// (never the sandbox's), linked to the operator's trace, with want's
// attributes.
func checkCallSpan(t *testing.T, s brokertest.Span, name string, want map[string]string) {
	t.Helper()
	if s.Name != name || s.Kind != "server" {
		t.Errorf("span %q (%s), want %q (server)", s.Name, s.Kind, name)
	}
	if s.ParentID != "" || s.TraceID == sandTraceID {
		t.Errorf("span %q is parented by %s/%s: the sandbox's trace must never parent a span", s.Name, s.TraceID, s.ParentID)
	}
	if s.Service != "airlock-test" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", s.Service)
	}
	if !cmp.Equal(s.Links, []brokertest.SpanLink{{TraceID: opTraceID, SpanID: opSpanID}}) {
		t.Errorf("span %q links %v, want the operator's trace only", s.Name, s.Links)
	}
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("span %q: %s = %q, want %q (all: %v)", s.Name, k, s.Attrs[k], v, s.Attrs)
		}
	}
}

// checkSent checks the children of a sent call's span: the credential, the
// durable record (its seq the span's), and the upstream attempt, whose URL
// is the checked one; and that no trace header reached the upstream.
func checkSent(t *testing.T, e *pipeEnv, recv *brokertest.OTLP, call brokertest.Span, method, path string, status int) {
	t.Helper()
	client := recv.WaitSpan(t, 10*time.Second, "upstream attempt", func(s brokertest.Span) bool { return s.ParentID == call.SpanID && s.Kind == "client" })
	if client.Name != method || client.Attrs["url.path"] != path || client.Attrs["http.response.status_code"] != strconv.Itoa(status) ||
		!strings.HasPrefix(client.Attrs["url.full"], "http://127.0.0.1:") || client.Attrs["server.address"] != "127.0.0.1" {
		t.Errorf("upstream span %q: %v", client.Name, client.Attrs)
	}
	if (status >= 500) != (client.Status == "error") {
		t.Errorf("upstream span status %s for %d", client.Status, status)
	}
	recv.WaitSpan(t, 10*time.Second, "credential", func(s brokertest.Span) bool {
		return s.ParentID == call.SpanID && s.Name == "airlock.credential"
	})
	rec := recv.WaitSpan(t, 10*time.Second, "audit append", func(s brokertest.Span) bool {
		return s.ParentID == call.SpanID && s.Name == "airlock.audit.append"
	})
	if rec.Attrs["airlock.audit.seq"] == "" || rec.Attrs["airlock.audit.seq"] != call.Attrs["airlock.audit.seq"] {
		t.Errorf("audit append seq %q, call's %q", rec.Attrs["airlock.audit.seq"], call.Attrs["airlock.audit.seq"])
	}
	h := e.header.Load()
	if h == nil {
		t.Fatal("the upstream got nothing")
	}
	for _, name := range []string{"Traceparent", "Tracestate", "Baggage"} {
		if v := h.Get(name); v != "" {
			t.Errorf("the upstream got the sandbox's %s: %q", name, v)
		}
	}
}

// checkRecords checks that the call's records carry its span's ids, and
// the allowed one the span's seq.
func checkRecords(t *testing.T, recs []tracedRecord, call brokertest.Span, requestID string) {
	t.Helper()
	for _, r := range recs {
		if r.TraceID != call.TraceID || r.SpanID != call.SpanID || r.RequestID != requestID {
			t.Errorf("record %d %s: trace %s span %s request %s; want the span's %s %s and request %s",
				r.Seq, r.Type, r.TraceID, r.SpanID, r.RequestID, call.TraceID, call.SpanID, requestID)
		}
		if r.Type == "call.allowed" && strconv.FormatUint(r.Seq, 10) != call.Attrs["airlock.audit.seq"] {
			t.Errorf("allowed record seq %d, span's airlock.audit.seq %q", r.Seq, call.Attrs["airlock.audit.seq"])
		}
	}
}

func TestTracesThroughEachDoor(t *testing.T) {
	e, recv := tracedPipe(t)
	var secrets []string // every session's token and SigV4 secret: never in a span
	byRequest := func(id string) func(brokertest.Span) bool {
		return func(s brokertest.Span) bool { return s.Kind == "server" && s.Attrs["airlock.request_id"] == id }
	}

	doors := []struct {
		name     string
		call     func(*pipeEnv, *testing.T, pipeSession, string) pipeAnswer
		span     string // the call span's name
		upstream string
		grant    int
		path     string // url.path as checked
	}{
		{name: "REST", call: (*pipeEnv).restTraced, span: "POST /Ok", upstream: "api", path: "/Ok"},
		{name: "AWS", call: (*pipeEnv).awsTraced, span: "dynamodb:Ok", upstream: "ddb", grant: 1, path: "/"},
		{name: "proxy door", call: (*pipeEnv).proxyTraced, span: "POST /Ok", upstream: "api", path: "/Ok"},
	}
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			s := e.tracedSession(t, false)
			secrets = append(secrets, s.Token, s.AWS.SecretAccessKey)
			a := d.call(e, t, s, "Ok")
			if a.status != 200 {
				t.Fatalf("call: %+v", a)
			}
			call := recv.WaitSpan(t, 10*time.Second, "of the call", byRequest(a.requestID))
			checkCallSpan(t, call, d.span, map[string]string{
				"airlock.session_id": s.ID, "airlock.task_id": "t", "airlock.grant_id": s.Grants[d.grant].ID,
				"airlock.upstream": d.upstream, "airlock.decision": "allow", "http.request.method": "POST",
				"http.response.status_code": "200", "url.path": d.path, "server.address": "127.0.0.1",
			})
			checkSent(t, e, recv, call, "POST", d.path, 200)
			checkRecords(t, e.waitRecords(t, call.TraceID, "call.allowed", "call.completed"), call, a.requestID)
			if d.name == "proxy door" {
				tunnel := recv.WaitSpan(t, 10*time.Second, "of the tunnel", func(x brokertest.Span) bool {
					return x.Kind == "server" && x.Name == "CONNECT api" && x.Attrs["airlock.session_id"] == s.ID
				})
				checkCallSpan(t, tunnel, "CONNECT api", map[string]string{"airlock.upstream": "api", "airlock.decision": "allow"})
			}
		})
	}

	t.Run("approved action's execution", func(t *testing.T) {
		s := e.tracedSession(t, true)
		secrets = append(secrets, s.Token, s.AWS.SecretAccessKey)
		a := e.restTraced(t, s, "Ok")
		if a.status != http.StatusAccepted || a.actionID == "" {
			t.Fatalf("gated call: %+v", a)
		}
		held := recv.WaitSpan(t, 10*time.Second, "of the held call", byRequest(a.requestID))
		checkCallSpan(t, held, "POST /Ok", map[string]string{"airlock.decision": "hold", "http.response.status_code": "202",
			"airlock.grant_id": s.Grants[0].ID})
		if status := e.json(t, "POST", e.control.URL+"/v1/approvals/"+a.actionID+"/approve", e.reviewer, "", nil); status != 200 {
			t.Fatalf("approve: %d", status)
		}
		exec := recv.WaitSpan(t, 10*time.Second, "of the execution", func(x brokertest.Span) bool {
			return x.Kind == "server" && x.Attrs["airlock.action_id"] == a.actionID
		})
		checkCallSpan(t, exec, "execute POST api", map[string]string{
			"airlock.session_id": s.ID, "airlock.grant_id": s.Grants[0].ID, "airlock.request_id": a.requestID,
			"airlock.decision": "allow", "http.response.status_code": "200", "url.path": "/Ok",
		})
		if exec.TraceID == held.TraceID {
			t.Error("the execution shares the held call's trace: it is a call of its own")
		}
		checkSent(t, e, recv, exec, "POST", "/Ok", 200)
		recs := e.waitRecords(t, exec.TraceID, "call.allowed", "call.completed")
		checkRecords(t, recs, exec, a.requestID)
		for _, r := range recs {
			if r.ActionID != a.actionID {
				t.Errorf("record %d of the execution names action %q", r.Seq, r.ActionID)
			}
		}
	})

	t.Run("refused before a rule matched", func(t *testing.T) {
		s := e.tracedSession(t, false)
		secrets = append(secrets, s.Token, s.AWS.SecretAccessKey)
		a := e.restTraced(t, s, "Nope/acct-123") // the raw path names nothing: never the span's name
		if a.status != http.StatusForbidden || a.code != "no_matching_grant" {
			t.Fatalf("call: %+v", a)
		}
		call := recv.WaitSpan(t, 10*time.Second, "of the refusal", byRequest(a.requestID))
		checkCallSpan(t, call, "POST api", map[string]string{"airlock.decision": "deny", "airlock.code": "no_matching_grant",
			"http.response.status_code": "403", "airlock.session_id": s.ID})
		if _, ok := call.Attrs["url.path"]; ok || call.Status == "error" {
			t.Errorf("a refused call's span: %v (status %s)", call.Attrs, call.Status)
		}
		checkRecords(t, e.waitRecords(t, call.TraceID, "call.denied"), call, a.requestID)
	})

	t.Run("upstream failure is an error span", func(t *testing.T) {
		s := e.tracedSession(t, false)
		secrets = append(secrets, s.Token, s.AWS.SecretAccessKey)
		a := e.restTraced(t, s, "Broken")
		if a.status != http.StatusBadGateway {
			t.Fatalf("call: %+v", a)
		}
		call := recv.WaitSpan(t, 10*time.Second, "of the failure", byRequest(a.requestID))
		checkCallSpan(t, call, "POST /Broken", map[string]string{"airlock.decision": "error", "airlock.code": "upstream_error",
			"http.response.status_code": "502"})
		if call.Status != "error" {
			t.Errorf("a 502's span status %s, want error", call.Status)
		}
		client := recv.WaitSpan(t, 10*time.Second, "upstream attempt", func(x brokertest.Span) bool { return x.ParentID == call.SpanID && x.Kind == "client" })
		if client.Status != "error" {
			t.Errorf("the failed attempt's span status %s", client.Status)
		}
		checkRecords(t, e.waitRecords(t, call.TraceID, "call.allowed", "call.completed"), call, a.requestID)
	})

	// No secret in any span: the canary credential, the sessions' tokens and
	// SigV4 secrets, scanned over the raw protobuf the receiver got.
	raw := recv.Raw()
	if len(raw) == 0 {
		t.Fatal("nothing exported")
	}
	if bytes.Contains(raw, []byte("CANARY")) {
		t.Error("a span carries the upstream credential")
	}
	for _, s := range secrets {
		if s != "" && bytes.Contains(raw, []byte(s)) {
			t.Error("a span carries a session's token or signing secret")
		}
	}
	for _, s := range recv.Spans() {
		if s.TraceID == sandTraceID || s.ParentID == sandSpanID {
			t.Errorf("span %q joined the sandbox's trace", s.Name)
		}
		for _, l := range s.Links {
			if l.TraceID == sandTraceID {
				t.Errorf("span %q links the sandbox's trace", s.Name)
			}
		}
	}
}

// TestAuditByTraceIDRefusesBadIDs: the filter takes a W3C trace id only.
func TestAuditByTraceIDRefusesBadIDs(t *testing.T) {
	e := pipeStart(t)
	for _, id := range []string{"xyz", strings.Repeat("0", 32), strings.ToUpper(opTraceID), opTraceID + "00"} {
		req, _ := http.NewRequest("GET", e.control.URL+"/v1/audit?trace_id="+id, nil)
		req.Header.Set("Authorization", "Bearer "+pipeAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("trace_id=%s: %d, want 400", id, resp.StatusCode)
		}
	}
}

// TestUntracedRecordsHaveNoTraceFields: with tracing off the records are
// as they always were (no trace_id, span_id), and the chain verifies.
func TestUntracedRecordsHaveNoTraceFields(t *testing.T) {
	e := pipeStart(t)
	s := e.tracedSession(t, false)
	if a := e.restTraced(t, s, "Ok"); a.status != 200 {
		t.Fatalf("call: %+v", a)
	}
	req, _ := http.NewRequest("GET", e.control.URL+"/v1/audit", nil)
	req.Header.Set("Authorization", "Bearer "+pipeAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(data, []byte(`"trace_id"`)) || bytes.Contains(data, []byte(`"span_id"`)) || bytes.Contains(data, []byte(sandTraceID)) {
		t.Errorf("untraced records carry trace fields:\n%s", data)
	}
	var rep struct {
		OK bool `json:"ok"`
	}
	if status := e.json(t, "GET", e.control.URL+"/v1/audit/verify", pipeAdmin, "", &rep); status != 200 {
		t.Fatalf("verify: %d", status)
	}
}

// TestTraceOfAHumanWait: a gated call that holds its connection for the
// reviewers' decision has a child span for the wait, which ends with the
// action's status; the execution the approval starts is a span of its own.
func TestTraceOfAHumanWait(t *testing.T) {
	e, recv := tracedPipe(t)
	s := e.tracedSession(t, true)
	answered := make(chan pipeAnswer, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.sandbox.URL+"/v1/proxy/api/Ok", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		req.Header.Set("Prefer", "wait=20")
		sandboxTraceHeaders(req.Header)
		answered <- e.answer(t, req)
	}()
	var list struct {
		Items []struct {
			ID        string `json:"id"`
			SessionID string `json:"session_id"`
		} `json:"items"`
	}
	id := ""
	brokertest.Eventually(t, 10*time.Second, func() bool {
		if status := e.json(t, "GET", e.control.URL+"/v1/approvals", e.reviewer, "", &list); status != 200 {
			t.Fatalf("approvals: %d", status)
		}
		for _, a := range list.Items {
			if a.SessionID == s.ID {
				id = a.ID
			}
		}
		return id != ""
	})
	if status := e.json(t, "POST", e.control.URL+"/v1/approvals/"+id+"/approve", e.reviewer, "", nil); status != 200 {
		t.Fatalf("approve: %d", status)
	}
	a := <-answered
	if a.status != 200 {
		t.Fatalf("the waiting call: %+v, want the executed answer", a)
	}
	held := recv.WaitSpan(t, 10*time.Second, "of the held call", func(x brokertest.Span) bool {
		return x.Kind == "server" && x.Attrs["airlock.request_id"] == a.requestID && x.Attrs["airlock.action_id"] == ""
	})
	checkCallSpan(t, held, "POST /Ok", map[string]string{"airlock.decision": "hold", "http.response.status_code": "200"})
	wait := recv.WaitSpan(t, 10*time.Second, "of the wait", func(x brokertest.Span) bool {
		return x.ParentID == held.SpanID && x.Name == "airlock.await_decision"
	})
	if wait.Attrs["airlock.action_id"] != id || wait.Attrs["airlock.action.status"] != "executed" || wait.Status == "error" {
		t.Errorf("wait span %v (%s)", wait.Attrs, wait.Status)
	}
	exec := recv.WaitSpan(t, 10*time.Second, "of the execution", func(x brokertest.Span) bool {
		return x.Kind == "server" && x.Attrs["airlock.action_id"] == id
	})
	checkCallSpan(t, exec, "execute POST api", map[string]string{"airlock.decision": "allow", "http.response.status_code": "200"})
	if exec.TraceID == held.TraceID {
		t.Error("the execution shares the held call's trace")
	}
}
