package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// Pending actions under attack: the kill-switch and a revoked grant held
// across a restart, an action past its expiry. None runs.

// rt2Decided approves or denies an action and waits until it leaves
// approved/executing; it answers the action's final state.
func rt2Decided(t *testing.T, b *brokerProc, reviewer, sandboxToken, id, verdict string) actionView {
	t.Helper()
	if r := b.do("POST", b.control+"/v1/approvals/"+id+"/"+verdict, reviewer, map[string]any{}); r.status != 200 {
		t.Fatalf("%s %s: %d %s", verdict, id, r.status, r.body)
	}
	var a actionView
	eventually(t, 20*time.Second, func() bool {
		a = decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+id, reviewer, nil))
		return a.Status != "pending" && a.Status != "executing" && a.Status != "approved"
	})
	return a
}

// rt2GatedSlow is a gated session (Rule of Two) allowed to POST /slow and
// /payments on the sensitive "api" upstream, created by an operator.
func rt2GatedSlow(b *brokerProc, op string, extra map[string]any) created {
	b.t.Helper()
	g := map[string]any{"upstream": "api", "rules": []any{
		map[string]any{"method": "POST", "path": "/slow"},
		map[string]any{"method": "POST", "path": "/payments"},
	}}
	for k, v := range extra {
		g[k] = v
	}
	r := b.do("POST", b.control+"/v1/sessions", op, map[string]any{"task_id": "t-rt2", "isolation": "microvm", "grants": []any{g}})
	if r.status != 201 {
		b.t.Fatalf("gated session: %d %s", r.status, r.body)
	}
	var c created
	_ = json.Unmarshal(r.body, &c)
	return c
}

// The engaged kill-switch survives a restart: after it, both doors refuse,
// nothing can be approved, and a pending action held across the restart
// does not run until an admin releases the switch and a reviewer approves.
func TestKillswitchSurvivesRestartWithPending(t *testing.T) {
	up := newUpstream(t)
	data := t.TempDir()
	b := startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	op := b.newToken("operator", "orchestrator")
	rev := b.newToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, map[string]any{"max_uses": 1})
	id := limQueued(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	if r := b.do("POST", b.control+"/v1/killswitch", adminToken, map[string]any{"reason": "incident"}); r.status != 200 {
		t.Fatalf("engage: %d %s", r.status, r.body)
	}
	b.stop()
	b = startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).wantProblem(t, 503, "killswitch_engaged")
	if r := b.do("POST", b.control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.status < 400 {
		t.Fatalf("approve under the kill-switch after a restart: %d %s", r.status, r.body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream received %d requests under the kill-switch", n)
	}
	if r := b.do("DELETE", b.control+"/v1/killswitch", adminToken, nil); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	// The pending action still holds the grant's one use.
	b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).wantProblem(t, 403, "grant_exhausted")
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
	up := newUpstream(t)
	data := t.TempDir()
	b := startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	op := b.newToken("operator", "orchestrator")
	rev := b.newToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, nil)
	id := limQueued(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	if r := b.do("DELETE", b.control+"/v1/grants/"+s.Grants[0].ID, adminToken, nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	b.stop()
	b = startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	r := b.do("POST", b.control+"/v1/approvals/"+id+"/approve", rev, map[string]any{})
	if r.status == 200 {
		var a actionView
		eventually(t, 20*time.Second, func() bool {
			a = decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+id, rev, nil))
			return a.Status != "executing" && a.Status != "approved"
		})
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("an action of a revoked grant ran after a restart (%d requests)", n)
	}
}

// An action past its expiry cannot be approved into running, whether the
// expiry timer fired or not.
func TestExpiredActionNeverRuns(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL, extraYAML: "approval: {timeout: 1s}\n"})
	op := b.newToken("operator", "orchestrator")
	rev := b.newToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, map[string]any{"max_uses": 1})
	id := limQueued(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	eventually(t, 20*time.Second, func() bool {
		return decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+id, rev, nil)).Status == "expired"
	})
	r := b.do("POST", b.control+"/v1/approvals/"+id+"/approve", rev, map[string]any{})
	if r.status != 409 {
		t.Fatalf("approve an expired action: %d %s", r.status, r.body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("an expired action ran")
	}
	// Its use comes back (just after the stored state turns expired): a new
	// call is held again, not refused.
	eventually(t, 10*time.Second, func() bool {
		return b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).status == http.StatusAccepted
	})
}
