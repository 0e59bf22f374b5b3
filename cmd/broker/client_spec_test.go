package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/client"
	"github.com/airlock-broker/airlock/internal/brokertest"
)

// TestClientSpecOperationsEndToEnd drives the Go client's operations of
// api/openapi.yaml (TestClientsCoverEveryOperation checks that it has them
// all) against a real broker: the orchestrator's, a reviewer's and the
// sandbox's side (the REST door, a gated call approved and waited for).
func TestClientSpecOperationsEndToEnd(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	c := client.New(b.Control, brokertest.ProcAdminToken)

	gated := map[string]any{"task_id": "t-go", "ttl": "10m", "isolation": "microvm", "grants": []any{brokertest.APIGrant(
		map[string]any{"method": "GET", "path": "/items"},
		map[string]any{"method": "POST", "path": "/items", "constraints": map[string]any{"body.to": map[string]any{"pin": "acme"}}},
	)}}
	s, err := c.CreateSession(ctx, gated)
	if err != nil {
		t.Fatal(err)
	}
	if !s.RuleOfTwo.Gated {
		t.Fatalf("session not gated: %+v", s.RuleOfTwo)
	}
	sb := client.NewSandbox(b.Sandbox, s.Token)
	resp, action, err := sb.Call(ctx, "api", http.MethodGet, "/items", nil, nil, 0)
	if err != nil || action != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /items: %v %v %v", resp, action, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	brokertest.AssertNoCanary(t, "the upstream's answer", body)

	post := func(v string) (*http.Response, *client.ActionStatus, error) {
		return sb.Call(ctx, "api", http.MethodPost, "/items", strings.NewReader(v), http.Header{"Content-Type": {"application/json"}}, 0)
	}
	var p *client.Problem
	if _, _, err := post(`{"to":"mallory"}`); !errors.As(err, &p) || p.Code != "constraint_violated" || p.Param != "body.to" || p.Constraint != "pin" {
		t.Fatalf("a pinned value: %v", err)
	}
	_, action, err = post(`{"n":1}`)
	if err != nil || action == nil || action.Status != "pending" {
		t.Fatalf("the gated call: %+v %v", action, err)
	}

	rt, err := c.CreateToken(ctx, "reviewer", "go-reviewer", "")
	if err != nil {
		t.Fatal(err)
	}
	reviewer := client.New(b.Control, rt.Secret)
	pending, err := reviewer.Approvals(ctx, "pending", 10)
	if err != nil || len(pending) != 1 || !bytes.Contains(pending[0], []byte(action.ID)) {
		t.Fatalf("pending approvals: %s %v", pending, err)
	}
	if a, err := reviewer.Approval(ctx, action.ID); err != nil || !bytes.Contains(a, []byte(`\"to\":\"acme\"`)) {
		t.Fatalf("the approval: %s %v", a, err)
	}
	if _, err := reviewer.Approve(ctx, action.ID, "ok"); err != nil {
		t.Fatal(err)
	}
	done, err := sb.WaitAction(ctx, action.ID)
	if err != nil || done.Status != "executed" {
		t.Fatalf("waited: %+v %v", done, err)
	}
	res, err := sb.ActionResult(ctx, action.ID)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("result: %v %v", res, err)
	}
	res.Body.Close()
	if got := up.Last(t); !strings.Contains(string(got.Body), `"to":"acme"`) {
		t.Fatalf("the upstream received %s", got.Body)
	}
	_, denied, err := post(`{"n":2}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reviewer.Deny(ctx, denied.ID, "no"); err != nil {
		t.Fatal(err)
	}
	if a, err := sb.WaitAction(ctx, denied.ID); err != nil || a.Status != "denied" {
		t.Fatalf("denied: %+v %v", a, err)
	}

	if k, err := c.EngageKillswitch(ctx, "go client"); err != nil || !k.Engaged {
		t.Fatalf("engage: %+v %v", k, err)
	}
	if _, _, err := sb.Call(ctx, "api", http.MethodGet, "/items", nil, nil, 0); !errors.As(err, &p) || p.Code != "killswitch_engaged" {
		t.Fatalf("while engaged: %v", err)
	}
	if k, err := c.KillswitchStatus(ctx); err != nil || k.Reason != "go client" {
		t.Fatalf("status: %+v %v", k, err)
	}
	if k, err := c.ReleaseKillswitch(ctx); err != nil || k.Engaged {
		t.Fatalf("release: %+v %v", k, err)
	}

	page, err := c.ListSessions(ctx, "", 1)
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("sessions: %+v %v", page, err)
	}
	if g, err := c.Grant(ctx, s.Grants[0].ID); err != nil || g.Uses < 2 {
		t.Fatalf("grant: %+v %v", g, err)
	}
	if ts, err := c.Tokens(ctx); err != nil || len(ts) != 1 || ts[0].Role != "reviewer" {
		t.Fatalf("tokens: %+v %v", ts, err)
	}
	if err := c.RevokeToken(ctx, rt.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := reviewer.Approvals(ctx, "", 0); !errors.As(err, &p) || p.Code != "invalid_token" {
		t.Fatalf("a revoked token: %v", err)
	}
	var audit bytes.Buffer
	if err := c.ExportAudit(ctx, url.Values{"session_id": {s.ID}}, &audit); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{`"session.created"`, `"action.approved"`, `"action.executed"`, `"action.denied"`} {
		if !bytes.Contains(audit.Bytes(), []byte(typ)) {
			t.Errorf("the audit export has no %s", typ)
		}
	}
	brokertest.AssertNoCanary(t, "the audit export", audit.Bytes())
	var report struct{ OK bool }
	if v, err := c.VerifyAudit(ctx); err != nil || json.Unmarshal(v, &report) != nil || !report.OK {
		t.Fatalf("verify: %s %v", v, err)
	}
	if k, err := c.AuditPublicKey(ctx); err != nil || k == "" {
		t.Fatalf("public key: %q %v", k, err)
	}
	if _, err := c.Checkpoints(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Ready(ctx); err != nil || r.Status != "ready" {
		t.Fatalf("ready: %+v %v", r, err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Metrics(ctx); err != nil || !bytes.Contains(m, []byte("airlock_calls_total")) {
		t.Fatalf("metrics: %v", err)
	}
	if _, err := c.KillSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sb.Call(ctx, "api", http.MethodGet, "/items", nil, nil, 0); !errors.As(err, &p) || p.Code != "session_revoked" {
		t.Fatalf("after the kill: %v", err)
	}
}
