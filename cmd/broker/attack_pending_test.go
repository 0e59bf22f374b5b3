package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Pending actions under attack: the kill-switch and a revoked grant held
// across a restart, an action past its expiry. None runs.

// rt2Decided approves or denies an action and waits until it leaves
// approved/executing; it answers the action's final state.
func rt2Decided(t *testing.T, b *brokertest.Proc, reviewer, sandboxToken, id, verdict string) brokertest.ActionView {
	t.Helper()
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/"+verdict, reviewer, map[string]any{}); r.Status != 200 {
		t.Fatalf("%s %s: %d %s", verdict, id, r.Status, r.Body)
	}
	var a brokertest.ActionView
	brokertest.Eventually(t, 20*time.Second, func() bool {
		a = brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+id, reviewer, nil))
		return a.Status != "pending" && a.Status != "executing" && a.Status != "approved"
	})
	return a
}

// rt2GatedSlow is a gated session (Rule of Two) allowed to POST /slow and
// /payments on the sensitive "api" upstream, created by an operator.
func rt2GatedSlow(b *brokertest.Proc, op string, extra map[string]any) brokertest.Created {
	b.T.Helper()
	g := map[string]any{"upstream": "api", "rules": []any{
		map[string]any{"method": "POST", "path": "/slow"},
		map[string]any{"method": "POST", "path": "/payments"},
	}}
	for k, v := range extra {
		g[k] = v
	}
	r := b.Do("POST", b.Control+"/v1/sessions", op, map[string]any{"task_id": "t-rt2", "isolation": "microvm", "grants": []any{g}})
	if r.Status != 201 {
		b.T.Fatalf("gated session: %d %s", r.Status, r.Body)
	}
	var c brokertest.Created
	_ = json.Unmarshal(r.Body, &c)
	return c
}

// The engaged kill-switch survives a restart: after it, both doors refuse,
// nothing can be approved, and a pending action held across the restart
// does not run until an admin releases the switch and a reviewer approves.
func TestKillswitchSurvivesRestartWithPending(t *testing.T) {
	up := brokertest.NewUpstream(t)
	data := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, map[string]any{"max_uses": 1})
	id := limQueued(t, b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	if r := b.Do("POST", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage: %d %s", r.Status, r.Body)
	}
	b.Stop()
	b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).WantProblem(t, 503, "killswitch_engaged")
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.Status < 400 {
		t.Fatalf("approve under the kill-switch after a restart: %d %s", r.Status, r.Body)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("the upstream received %d requests under the kill-switch", n)
	}
	if r := b.Do("DELETE", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("release: %d %s", r.Status, r.Body)
	}
	// The pending action still holds the grant's one use.
	b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).WantProblem(t, 403, "grant_exhausted")
	if a := rt2Decided(t, b, rev, s.Token, id, "approve"); a.Status != "executed" {
		t.Fatalf("approved after release: %s", a.Status)
	}
	if n := limUpstreamCount(up, "/base/payments"); n != 1 {
		t.Fatalf("the upstream received %d payments, want 1", n)
	}
}

// A pending action whose own grant is revoked, then the broker restarted,
// never runs when approved afterwards.
func TestRevokedGrantPendingAcrossRestart(t *testing.T) {
	up := brokertest.NewUpstream(t)
	data := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, nil)
	id := limQueued(t, b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	if r := b.Do("DELETE", b.Control+"/v1/grants/"+s.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	b.Stop()
	b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{})
	if r.Status == 200 {
		var a brokertest.ActionView
		brokertest.Eventually(t, 20*time.Second, func() bool {
			a = brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+id, rev, nil))
			return a.Status != "executing" && a.Status != "approved"
		})
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("an action of a revoked grant ran after a restart (%d requests)", n)
	}
}

// An action past its expiry cannot be approved into running, whether the
// expiry timer fired or not.
func TestExpiredActionNeverRuns(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: "approval: {timeout: 1s}\n"})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, map[string]any{"max_uses": 1})
	id := limQueued(t, b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	brokertest.Eventually(t, 20*time.Second, func() bool {
		return brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+id, rev, nil)).Status == "expired"
	})
	r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{})
	if r.Status != 409 {
		t.Fatalf("approve an expired action: %d %s", r.Status, r.Body)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("an expired action ran")
	}
	// Its use comes back (just after the stored state turns expired): a new
	// call is held again, not refused.
	brokertest.Eventually(t, 10*time.Second, func() bool {
		return b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).Status == http.StatusAccepted
	})
}
