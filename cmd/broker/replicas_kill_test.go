package main

import (
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
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
	up := brokertest.NewUpstream(t)
	a := pgBroker(t, up, dsn, "")
	grant := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"}, map[string]any{"method": "GET", "path": "/slow"})
	s := a.Session(brokertest.TrustedSession(grant))
	other := a.Session(brokertest.TrustedSession(grant))
	b := pgBroker(t, up, dsn, "")

	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatalf("call on B before the kill: %d %s", r.Status, r.Body)
	}
	inflight := make(chan brokertest.Response, 1)
	go func() { inflight <- b.Do("GET", b.Sandbox+"/v1/proxy/api/slow", s.Token, nil) }()
	<-up.Started
	if r := a.Do("DELETE", a.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill on A: %d %s", r.Status, r.Body)
	}
	hits := len(up.Requests())
	select {
	case r := <-inflight:
		// Cut by the kill (not by the upstream's 10 s timeout, 504).
		t.Logf("B's in-flight call: %d %s", r.Status, r.Body)
		r.WantProblem(t, 401, "session_revoked")
	case <-time.After(20 * time.Second): // the upstream holds it 30 s: only the kill ends it sooner
		t.Fatal("B's in-flight call was not cut by the kill on A")
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 401, "session_revoked")
	if got := len(up.Requests()); got != hits {
		t.Errorf("the upstream saw %d requests of the killed session after the kill", got-hits)
	}

	// The kill-switch, engaged and released on A, on B.
	if r := a.Do("POST", a.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage on A: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 5*time.Second, func() bool {
		return b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", other.Token, nil).Status == 503
	})
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", other.Token, nil).WantProblem(t, 503, "killswitch_engaged")
	if r := a.Do("DELETE", a.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("release on A: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 5*time.Second, func() bool {
		return b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", other.Token, nil).Status == 200
	})
	brokertest.AssertNoCanary(t, "B's logs", b.Logs.Bytes())
}

// TestReplicasKillswitchCutsInFlightElsewhere: the kill-switch engaged on
// A cuts a call in flight on B (killswitch_engaged, not the upstream's
// timeout), and a grant revoked on A is refused by B on its next call with
// the code a single broker gives, never forwarded.
func TestReplicasKillswitchCutsInFlightElsewhere(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	a := pgBroker(t, up, dsn, "")
	grant := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"}, map[string]any{"method": "GET", "path": "/slow"})
	s := a.Session(brokertest.TrustedSession(grant))
	b := pgBroker(t, up, dsn, "")
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatalf("call on B: %d %s", r.Status, r.Body)
	}
	inflight := make(chan brokertest.Response, 1)
	go func() { inflight <- b.Do("GET", b.Sandbox+"/v1/proxy/api/slow", s.Token, nil) }()
	<-up.Started
	if r := a.Do("POST", a.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage on A: %d %s", r.Status, r.Body)
	}
	hits := len(up.Requests())
	select {
	case r := <-inflight:
		r.WantProblem(t, 503, "killswitch_engaged")
	case <-time.After(20 * time.Second): // the upstream holds it 30 s
		t.Fatal("B's in-flight call was not cut by the kill-switch engaged on A")
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 503, "killswitch_engaged")
	if got := len(up.Requests()); got != hits {
		t.Errorf("the upstream saw %d requests after the kill-switch was engaged", got-hits)
	}
	if r := a.Do("DELETE", a.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("release on A: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 5*time.Second, func() bool {
		return b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).Status == 200
	})

	// A grant revoked on A: B's next call is refused as on one broker.
	one := a.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	for _, c := range []brokertest.Created{one} {
		if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", c.Token, nil); r.Status != 200 {
			t.Fatalf("call on B: %d %s", r.Status, r.Body)
		}
	}
	if r := a.Do("DELETE", a.Control+"/v1/grants/"+one.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("revoke on A: %d %s", r.Status, r.Body)
	}
	hits = len(up.Requests())
	want := a.Do("GET", a.Sandbox+"/v1/proxy/api/ok", one.Token, nil)
	if want.Status < 400 {
		t.Fatalf("a revoked grant's call on A: %d", want.Status)
	}
	code, _ := want.Problem(t)["code"].(string)
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", one.Token, nil).WantProblem(t, want.Status, code)
	if got := len(up.Requests()); got != hits {
		t.Errorf("the upstream saw %d requests of a revoked grant", got-hits)
	}
}
