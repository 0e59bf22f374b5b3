package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/client"
	"github.com/airlock-broker/airlock/internal/brokertest"
)

// A task id with terminal escapes, set by an operator token, reaches an
// admin's/reviewer's terminal raw through "-o table".
func TestAttackTableEscapes(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orch")
	evil := "t\x1b]0;owned\x07\x1b[2J\x1b[1;1Hall good\r"
	r := b.Do("POST", b.Control+"/v1/sessions", op, map[string]any{"task_id": evil, "isolation": "microvm",
		"grants": []any{map[string]any{"upstream": "api", "rules": []any{map[string]any{"method": "GET", "path": "/ok"}}}}})
	t.Logf("create: %d %s", r.Status, r.Body)
	out, err := cli(b, brokertest.ProcAdminToken, "", "session", "list", "-o", "table")
	t.Logf("session list -o table: err=%v\n%q", err, out)
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Errorf("raw control characters from a server-provided task id reach the terminal table")
	}
	// gated path
	s := brokertest.GatedSession(b, op, nil)
	rr := b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5, "to":"acme"}`)
	t.Logf("gated: %d", rr.Status)
	rev := b.NewToken("reviewer", "rita\x1b[31m")
	out, err = cli(b, rev, "", "approvals", "list", "-o", "table")
	t.Logf("approvals list: %v\n%q", err, out)
	// An operator engages the kill-switch with a reason; the admin reads it.
	if _, err := cli(b, op, "", "killswitch", "engage", "--reason", "incident\x1b[2J\x1b]0;x\x07"); err != nil {
		t.Fatal(err)
	}
	out, err = cli(b, brokertest.ProcAdminToken, "", "killswitch", "status", "-o", "table")
	t.Logf("killswitch -o table: %v\n%q", err, out)
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("an operator's kill-switch reason reaches the admin's terminal raw")
	}
}

// A reviewer's comment that looks like a flag ("-rf") is recorded as given.
func TestCLIFlagValuesKept(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op, rev := b.NewToken("operator", "orchestrator"), b.NewToken("reviewer", "rita")
	s := brokertest.GatedSession(b, op, nil)
	id := gatedCall(t, b, s, "5")
	out, err := cli(b, rev, "", "approvals", "deny", id, "--comment", "-rf")
	t.Logf("deny: %v\n%s", err, out)
	var a struct {
		Decisions []struct {
			Comment string `json:"comment"`
		} `json:"decisions"`
	}
	_ = json.Unmarshal([]byte(out), &a)
	if strings.Contains(out, `"--rf"`) {
		t.Errorf("--comment -rf was recorded as %q", "--rf")
	}
	_ = http.StatusOK
}

// A sandbox names an upstream with terminal escapes (%1B decodes into the
// path segment the REST door reads as the upstream's name): the refusal's
// audit record holds them raw, and "broker audit export --format csv"
// writes them, unescaped, to the auditor's terminal.
func TestAttackAuditCSVEscapes(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	r := b.Raw("GET /v1/proxy/%1B%5D0;owned%07%1B%5B2J%1B%5B1;1H/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
	t.Logf("sandbox: %d %s", r.Status, r.Body)
	aud := b.NewToken("auditor", "audrey")
	out, err := cli(b, aud, "", "audit", "export", "--format", "csv", "--type", "call.denied")
	t.Logf("audit export --format csv: %v\n%q", err, out)
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("a sandbox-chosen upstream name reaches the auditor's terminal with raw escape sequences (CSV export)")
	}
	out, err = cli(b, aud, "", "audit", "export", "--type", "call.denied")
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("JSONL carries raw escapes too")
	}
}

// An upstream's own 202 with Location: /v1/actions/{id} and a body naming
// that id reaches the sandbox as the broker's "pending" answer would: the
// clients (Go, Python, TypeScript) take the executed call for a held one.
func TestAttackUpstreamForgedPending(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/v1/actions/act_forged")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"id":"act_forged","action_id":"act_forged","status":"pending"}`))
	}))
	defer fake.Close()
	b := startBroker(t, brokertest.ProcOptions{Upstream: fake.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	sb := &client.Sandbox{Addr: b.Sandbox, Token: s.Token, HTTP: http.DefaultClient}
	resp, act, err := sb.Call(context.Background(), "api", "GET", "/ok", nil, nil, 0)
	t.Logf("resp=%v act=%+v err=%v", resp, act, err)
	if act != nil {
		t.Errorf("the upstream's 202 was taken by the Go client for the broker's pending action %q", act.ID)
	}
}
