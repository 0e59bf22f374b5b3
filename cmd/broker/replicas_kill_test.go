package main

import (
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/pgtest"
)

// A kill made on one replica reaches the others: sessions, grants and the
// kill-switch, including calls in flight elsewhere (DESIGN §9).

// TestReplicasKillReachesEveryReplica: a session killed on A cuts B's
// in-flight call and B refuses the session's next call; nothing reaches
// the upstream for it after the kill is acknowledged. The kill-switch
// engaged on A refuses calls on B, and its release on A lets B serve.
func TestReplicasKillReachesEveryReplica(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := newUpstream(t)
	a := pgBroker(t, up, dsn, "")
	grant := apiGrant(map[string]any{"method": "GET", "path": "/ok"}, map[string]any{"method": "GET", "path": "/slow"})
	s := a.session(trustedSession(grant))
	other := a.session(trustedSession(grant))
	b := pgBroker(t, up, dsn, "")

	if r := b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil); r.status != 200 {
		t.Fatalf("call on B before the kill: %d %s", r.status, r.body)
	}
	inflight := make(chan response, 1)
	go func() { inflight <- b.do("GET", b.sandbox+"/v1/proxy/api/slow", s.Token, nil) }()
	<-up.started
	if r := a.do("DELETE", a.control+"/v1/sessions/"+s.ID, adminToken, nil); r.status != 200 {
		t.Fatalf("kill on A: %d %s", r.status, r.body)
	}
	hits := len(up.requests())
	select {
	case r := <-inflight:
		// Cut by the kill (not by the upstream's 10 s timeout, 504).
		t.Logf("B's in-flight call: %d %s", r.status, r.body)
		r.wantProblem(t, 401, "session_revoked")
	case <-time.After(20 * time.Second): // the upstream holds it 30 s: only the kill ends it sooner
		t.Fatal("B's in-flight call was not cut by the kill on A")
	}
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).wantProblem(t, 401, "session_revoked")
	if got := len(up.requests()); got != hits {
		t.Errorf("the upstream saw %d requests of the killed session after the kill", got-hits)
	}

	// The kill-switch, engaged and released on A, on B.
	if r := a.do("POST", a.control+"/v1/killswitch", adminToken, map[string]any{"reason": "incident"}); r.status != 200 {
		t.Fatalf("engage on A: %d %s", r.status, r.body)
	}
	eventually(t, 5*time.Second, func() bool {
		return b.do("GET", b.sandbox+"/v1/proxy/api/ok", other.Token, nil).status == 503
	})
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", other.Token, nil).wantProblem(t, 503, "killswitch_engaged")
	if r := a.do("DELETE", a.control+"/v1/killswitch", adminToken, nil); r.status != 200 {
		t.Fatalf("release on A: %d %s", r.status, r.body)
	}
	eventually(t, 5*time.Second, func() bool {
		return b.do("GET", b.sandbox+"/v1/proxy/api/ok", other.Token, nil).status == 200
	})
	assertNoCanary(t, "B's logs", b.logs.Bytes())
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
