package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/pgtest"
)

// Seams between the replica phases (issue 13's review), each through real
// brokers on one PostgreSQL.

// limitedGatedSession is a session whose one grant gates POST /payments
// (untrusted input, sensitive upstream, irreversible) and allows GET /ok
// ungated, both counting against max_uses.
func limitedGatedSession(b *brokerProc, token string, maxUses int) created {
	b.t.Helper()
	g := map[string]any{"upstream": "api", "max_uses": maxUses, "rules": []any{
		map[string]any{"method": "POST", "path": "/payments", "constraints": map[string]any{
			"body.to": map[string]any{"pin": "acme"}, "body.amount": map[string]any{"max": 100}}},
		map[string]any{"method": "GET", "path": "/ok"},
	}}
	r := b.do("POST", b.control+"/v1/sessions", token, map[string]any{"task_id": "t-limit", "isolation": "microvm", "grants": []any{g}})
	if r.status != http.StatusCreated {
		b.t.Fatalf("limited gated session: %d %s", r.status, r.body)
	}
	var c created
	_ = json.Unmarshal(r.body, &c)
	return c
}

// held makes a gated call on p and returns its pending action's id.
func held(t *testing.T, p *brokerProc, token string) string {
	t.Helper()
	r := p.do("POST", p.sandbox+"/v1/proxy/api/payments", token, `{"amount": 1}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("gated call: %d %s", r.status, r.body)
	}
	return decodeAction(t, r).ID
}

// okHits counts the upstream's GET /ok requests.
func okHits(up *upstreamServer) int {
	n := 0
	for _, r := range up.requests() {
		if strings.HasSuffix(r.RawPath, "/ok") {
			n++
		}
	}
	return n
}

// feedBarrier waits until to's change feed applied every change made so
// far: a sandbox waits on to for a gated call of session gated (a session
// of gatedSession), which a reviewer denies on from; only to's feed wakes
// that waiter (within its 30 s wait), and the feed applies in order.
func feedBarrier(t *testing.T, from, to *brokerProc, reviewer string, gated created) {
	t.Helper()
	res := make(chan response, 1)
	go func() {
		res <- to.do("POST", to.sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 1}`, "Prefer", "wait=30")
	}()
	id := from.pendingAction(t, reviewer)
	if r := from.do("POST", from.control+"/v1/approvals/"+id+"/deny", reviewer, map[string]any{}); r.status != 200 {
		t.Fatalf("barrier deny: %d %s", r.status, r.body)
	}
	select {
	case r := <-res:
		if r.status == http.StatusAccepted {
			t.Fatalf("barrier: the waiter was not woken by the decision: %d %s", r.status, r.body)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("barrier: the waiter was not woken by the decision")
	}
}

// TestReplicasPendingReleasedOnce: a pending action's reservation on a
// shared count is given back exactly once, by the replica that moves it out
// of pending, whoever created it and whoever restarted meanwhile.
//
// 1. max_uses 3: an action held on A, B restarted (it counts the stored
// pending action too), two calls take the rest, the action is denied on B:
// exactly one more call is allowed (3 uses in all), not two.
// 2. max_uses 2: an action held on A, A stopped, denied on B (which never
// counted it): its use comes back, two calls are allowed.
func TestReplicasPendingReleasedOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := newUpstream(t)
	a := pgBroker(t, up, dsn, "")
	op := a.newToken("operator", "orchestrator")
	alice := a.newToken("reviewer", "alice")
	b := pgBroker(t, up, dsn, "")
	s := limitedGatedSession(a, op, 3)
	barrier := gatedSession(a, op, nil)
	base := okHits(up)

	id := held(t, a, s.Token)
	b.stop()
	b = pgBroker(t, up, dsn, "") // restarted: it loads the pending action
	for range 2 {
		if r := a.do("GET", a.sandbox+"/v1/proxy/api/ok", s.Token, nil); r.status != 200 {
			t.Fatalf("call within max_uses: %d %s", r.status, r.body)
		}
	}
	a.do("GET", a.sandbox+"/v1/proxy/api/ok", s.Token, nil).wantProblem(t, 403, "grant_exhausted")
	if r := b.do("POST", b.control+"/v1/approvals/"+id+"/deny", alice, map[string]any{}); r.status != 200 {
		t.Fatalf("deny on B: %d %s", r.status, r.body)
	}
	feedBarrier(t, b, a, alice, barrier) // A applied the denial
	allowed := 0
	for i := range 6 {
		p := []*brokerProc{a, b}[i%2]
		if p.do("GET", p.sandbox+"/v1/proxy/api/ok", s.Token, nil).status == 200 {
			allowed++
		}
	}
	if allowed != 1 || okHits(up)-base != 3 {
		t.Errorf("after the denial %d more calls were allowed (want 1); the upstream saw %d uses of max_uses 3", allowed, okHits(up)-base)
	}

	// 2. The creator is gone: the replica that denies gives the use back.
	s2 := limitedGatedSession(b, op, 2)
	id2 := held(t, a, s2.Token)
	a.stop()
	if r := b.do("POST", b.control+"/v1/approvals/"+id2+"/deny", alice, map[string]any{}); r.status != 200 {
		t.Fatalf("deny on B: %d %s", r.status, r.body)
	}
	base = okHits(up)
	allowed = 0
	for range 4 {
		if b.do("GET", b.sandbox+"/v1/proxy/api/ok", s2.Token, nil).status == 200 {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("max_uses 2 with its one pending action denied on another replica: %d calls allowed, want 2 (the use was lost)", allowed)
	}
	if okHits(up)-base != allowed {
		t.Errorf("upstream hits %d, allowed %d", okHits(up)-base, allowed)
	}
}

// TestReplicasKillswitchCutsInFlightElsewhere: the kill-switch engaged on
// A cuts a call in flight on B (killswitch_engaged, not the upstream's
// timeout), and a grant revoked on A is refused by B on its next call with
// the code a single broker gives, never forwarded.
func TestReplicasKillswitchCutsInFlightElsewhere(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := newUpstream(t)
	a := pgBroker(t, up, dsn, "")
	grant := apiGrant(map[string]any{"method": "GET", "path": "/ok"}, map[string]any{"method": "GET", "path": "/slow"})
	s := a.session(trustedSession(grant))
	b := pgBroker(t, up, dsn, "")
	if r := b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil); r.status != 200 {
		t.Fatalf("call on B: %d %s", r.status, r.body)
	}
	inflight := make(chan response, 1)
	go func() { inflight <- b.do("GET", b.sandbox+"/v1/proxy/api/slow", s.Token, nil) }()
	<-up.started
	if r := a.do("POST", a.control+"/v1/killswitch", adminToken, map[string]any{"reason": "incident"}); r.status != 200 {
		t.Fatalf("engage on A: %d %s", r.status, r.body)
	}
	hits := len(up.requests())
	select {
	case r := <-inflight:
		r.wantProblem(t, 503, "killswitch_engaged")
	case <-time.After(20 * time.Second): // the upstream holds it 30 s
		t.Fatal("B's in-flight call was not cut by the kill-switch engaged on A")
	}
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).wantProblem(t, 503, "killswitch_engaged")
	if got := len(up.requests()); got != hits {
		t.Errorf("the upstream saw %d requests after the kill-switch was engaged", got-hits)
	}
	if r := a.do("DELETE", a.control+"/v1/killswitch", adminToken, nil); r.status != 200 {
		t.Fatalf("release on A: %d %s", r.status, r.body)
	}
	eventually(t, 5*time.Second, func() bool {
		return b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).status == 200
	})

	// A grant revoked on A: B's next call is refused as on one broker.
	one := a.session(trustedSession(apiGrant(map[string]any{"method": "GET", "path": "/ok"})))
	for _, c := range []created{one} {
		if r := b.do("GET", b.sandbox+"/v1/proxy/api/ok", c.Token, nil); r.status != 200 {
			t.Fatalf("call on B: %d %s", r.status, r.body)
		}
	}
	if r := a.do("DELETE", a.control+"/v1/grants/"+one.Grants[0].ID, adminToken, nil); r.status != 200 {
		t.Fatalf("revoke on A: %d %s", r.status, r.body)
	}
	hits = len(up.requests())
	want := a.do("GET", a.sandbox+"/v1/proxy/api/ok", one.Token, nil)
	if want.status < 400 {
		t.Fatalf("a revoked grant's call on A: %d", want.status)
	}
	code, _ := want.problem(t)["code"].(string)
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", one.Token, nil).wantProblem(t, want.status, code)
	if got := len(up.requests()); got != hits {
		t.Errorf("the upstream saw %d requests of a revoked grant", got-hits)
	}
}
