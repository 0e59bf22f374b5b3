package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// TestEveryFailureExplained: through the real broker, each kind of failure
// behind a 5xx is answered with a problem whose detail names it in a fixed
// phrase, logged in one error line with the request id and that cause,
// and recorded in the call's audit record with the same reason; the
// upstreams' credential (a query parameter, the canary) and their host
// names are in none of them.
func TestEveryFailureExplained(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	tlsUp := httptest.NewTLSServer(ok)
	t.Cleanup(tlsUp.Close)
	plain := httptest.NewServer(ok)
	t.Cleanup(plain.Close)
	stall := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // no answer's headers until the broker gives up
		case <-r.Context().Done():
		case <-stall:
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(stall) }) // before slow.Close (cleanups run last first)
	issuer := newFakeAuthServer(t, brokertest.Canary, time.Minute)
	issuer.revoked = true // the issuer answers 401 invalid_client

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsUp.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	_, tlsPort, _ := net.SplitHostPort(strings.TrimPrefix(tlsUp.URL, "https://"))

	type row struct {
		name    string
		yaml    string // the upstream's config after its name
		status  int
		code    string
		detail  string
		refusal bool // refused before sending: a call.denied record
	}
	probe := "    credential: {source: env, name: CANARY_TOKEN}\n    inject: {query: api_key}\n"
	rows := []row{
		{name: "dns", yaml: "    base_url: http://airlock-upstream.invalid\n" + probe,
			status: 502, code: "upstream_error", detail: "DNS: the upstream's host name was not found"},
		{name: "refused", yaml: "    base_url: http://" + closedPort(t) + "\n" + probe,
			status: 502, code: "upstream_error", detail: "connection refused by the upstream"},
		{name: "unknown-ca", yaml: "    base_url: " + tlsUp.URL + "\n" + probe,
			status: 502, code: "upstream_error", detail: "TLS: certificate signed by unknown authority"},
		{name: "hostname", yaml: "    base_url: https://localhost:" + tlsPort + "\n    ca_cert: " + ca + "\n" + probe,
			status: 502, code: "upstream_error", detail: "TLS: certificate is not valid for the upstream's host name"},
		{name: "not-tls", yaml: "    base_url: " + strings.Replace(plain.URL, "http://", "https://", 1) + "\n" + probe,
			status: 502, code: "upstream_error", detail: "TLS: the upstream did not answer in TLS"},
		{name: "timeout", yaml: "    base_url: " + slow.URL + "\n    timeout: 300ms\n" + probe,
			status: 504, code: "upstream_timeout", detail: "upstream timed out waiting for the answer's headers"},
		{name: "reset", yaml: "    base_url: http://" + resetting(t) + "\n" + probe,
			status: 502, code: "upstream_error", detail: "connection reset by the upstream"},
		{name: "missing-file", yaml: "    base_url: " + plain.URL + "\n    credential: {source: file, path: " + filepath.Join(dir, "no-such-key") + "}\n",
			status: 503, code: "credential_unavailable", detail: "the credential file does not exist", refusal: true},
		{name: "issuer-401", yaml: "    base_url: " + plain.URL + `
    credential:
      source: oauth2
      token_url: ` + issuer.URL + `/oauth/token
      client_id: airlock-client
      client_secret: {source: env, name: CANARY_TOKEN}
`, status: 503, code: "credential_unavailable", detail: "the issuer answered 401", refusal: true},
	}
	var extra strings.Builder
	var grants []map[string]any
	for _, r := range rows {
		extra.WriteString("  - name: " + r.name + "\n    sensitive: false\n" + r.yaml)
		grants = append(grants, map[string]any{"upstream": r.name, "rules": []any{map[string]any{"method": "GET", "path": "/x"}}})
	}
	b := startBroker(t, brokertest.ProcOptions{Upstream: plain.URL, ExtraYAML: extra.String()})
	s := b.Session(brokertest.TrustedSession(grants...))

	hosts := []string{"airlock-upstream.invalid", "127.0.0.1", "localhost", "api_key"}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			res := b.Do("GET", b.Sandbox+"/v1/proxy/"+r.name+"/x", s.Token, nil)
			p := res.WantProblem(t, r.status, r.code)
			detail, _ := p["detail"].(string)
			if r.name == "dns" && strings.HasPrefix(detail, "DNS: ") {
				r.detail = detail // a resolver that cannot say "not found" (no DNS at all) says another DNS cause
			}
			if detail != r.detail {
				t.Fatalf("detail %q, want %q", detail, r.detail)
			}
			for _, h := range hosts {
				if strings.Contains(string(res.Body), h) {
					t.Errorf("the problem names %q: %s", h, res.Body)
				}
			}
			brokertest.AssertNoCanary(t, "the problem", res.Body)
			id, _ := p["request_id"].(string)

			// One error line, with the request id and the cause.
			var lines []map[string]any
			brokertest.Eventually(t, 5*time.Second, func() bool {
				lines = logLines(t, b.Logs.Bytes(), id)
				return len(lines) > 0
			})
			if len(lines) != 1 {
				t.Fatalf("%d log lines for the call, want 1: %v", len(lines), lines)
			}
			l := lines[0]
			if l["level"] != "ERROR" || l["msg"] != "call failed" || l["cause"] != r.detail || l["code"] != r.code {
				t.Errorf("log line %v, want an ERROR \"call failed\" with cause %q and code %q", l, r.detail, r.code)
			}
			line, _ := json.Marshal(l)
			brokertest.AssertNoCanary(t, "the log line", line)
			for _, h := range hosts[:3] {
				if strings.Contains(string(line), h) {
					t.Errorf("the log line names %q: %s", h, line)
				}
			}

			// The audit record of the call carries the same reason.
			typ := "call.completed"
			if r.refusal {
				typ = "call.denied"
			}
			var rec *brokertest.AuditRecord
			brokertest.Eventually(t, 10*time.Second, func() bool {
				for _, x := range brokertest.ParseAudit(t, b.AuditExport()) {
					if x.Type == typ && x.RequestID == id {
						rec = &x
						return true
					}
				}
				return false
			})
			if rec.Reason != r.detail || rec.Code != r.code {
				t.Errorf("%s record: reason %q code %q, want %q %q", typ, rec.Reason, rec.Code, r.detail, r.code)
			}
		})
	}
	audit := b.AuditExport()
	brokertest.AssertNoCanary(t, "the audit log", audit)
	brokertest.AssertNoCanary(t, "the logs", b.Logs.Bytes())
}

// logLines are the broker's JSON log lines about request id.
func logLines(t *testing.T, logs []byte, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["request_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// resetting is a loopback address whose server reads each request and
// resets the connection (RST) instead of answering.
func resetting(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_ = c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestFailedActionExplained: an approved action whose upstream refuses the
// connection fails with the cause as its reason (the reviewers' view), in
// the sandbox's problem, and in its call's completion record.
func TestFailedActionExplained(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(plain.Close)
	b := startBroker(t, brokertest.ProcOptions{Upstream: plain.URL, ExtraYAML: "  - name: gone\n    base_url: http://" + closedPort(t) +
		"\n    credential: {source: env, name: CANARY_TOKEN}\n    inject: {query: api_key}\n"})
	op, rev := b.NewToken("operator", "orchestrator"), b.NewToken("reviewer", "rita")
	r := b.Do("POST", b.Control+"/v1/sessions", op, map[string]any{"task_id": "t-gated", "isolation": "microvm", "grants": []any{
		map[string]any{"upstream": "gone", "rules": []any{map[string]any{"method": "POST", "path": "/x", "irreversible": true}}}}})
	var s brokertest.Created
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("gated session: %d %s", r.Status, r.Body)
	}
	r = b.Do("POST", b.Sandbox+"/v1/proxy/gone/x", s.Token, map[string]any{"n": 1})
	var held struct {
		ActionID string `json:"action_id"`
	}
	if err := json.Unmarshal(r.Body, &held); err != nil || r.Status != 202 {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	if r := b.Do("POST", b.Control+"/v1/approvals/"+held.ActionID+"/approve", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	const cause = "connection refused by the upstream"
	var a struct{ Status, Reason string }
	brokertest.Eventually(t, 10*time.Second, func() bool {
		_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals/"+held.ActionID, rev, nil).Body, &a)
		return a.Status == "failed"
	})
	if a.Reason != cause {
		t.Errorf("the action's reason %q, want %q", a.Reason, cause)
	}
	res := b.Do("GET", b.Sandbox+"/v1/actions/"+held.ActionID+"/result", s.Token, nil)
	if p := res.WantProblem(t, 502, "upstream_error"); p["detail"] != "the approved action could not be executed: "+cause {
		t.Errorf("the result's problem: %s", res.Body)
	}
	var completed *brokertest.AuditRecord
	brokertest.Eventually(t, 10*time.Second, func() bool {
		for _, x := range brokertest.ParseAudit(t, b.AuditExport()) {
			if x.Type == "call.completed" && x.ActionID == held.ActionID {
				completed = &x
				return true
			}
		}
		return false
	})
	if completed.Reason != cause || completed.Code != "upstream_error" {
		t.Errorf("the completion record: reason %q code %q", completed.Reason, completed.Code)
	}
	brokertest.AssertNoCanary(t, "the audit log", b.AuditExport())
}
