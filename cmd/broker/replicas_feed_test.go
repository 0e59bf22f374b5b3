package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/pgtest"
)

// The change feed between replicas: a replica that cannot follow it fails
// closed and catches up when it can read again.

// TestReplicaListenerCutFailsClosed: a replica whose change feed cannot
// confirm it is current (its LISTEN connection terminated and the changes
// table unreadable) refuses sandbox calls with 503 broker_unavailable and
// /readyz says so; once it can read again it serves. A kill made on A
// while B's listener is cut reaches B by the catch-up read after B
// reconnects.
func TestReplicaListenerCutFailsClosed(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := newUpstream(t)
	a := pgBroker(t, up, dsn, "")
	grant := apiGrant(map[string]any{"method": "GET", "path": "/ok"})
	s := a.session(trustedSession(grant))
	b := pgBroker(t, up, dsn, "")
	ctx := context.Background()
	watch := pgConn(t, dsn)
	awaitListeners(t, watch, 2)

	blocker := pgConn(t, dsn)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE changes IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	if n := cutListeners(t, watch); n < 2 {
		t.Fatalf("cut %d listener connections, want one per replica (2)", n)
	}
	eventually(t, 15*time.Second, func() bool {
		return b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).status == 503
	})
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).wantProblem(t, 503, "broker_unavailable")
	r := b.do("GET", b.control+"/readyz", "", nil)
	var ready struct{ Checks map[string]string }
	_ = json.Unmarshal(r.body, &ready)
	if r.status != http.StatusServiceUnavailable || ready.Checks["changes"] == "ok" || ready.Checks["changes"] == "" {
		t.Fatalf("/readyz of a stale replica = %d %v", r.status, ready.Checks)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, func() bool {
		return b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).status == 200
	})

	// A kill while B's listener is down: B learns it by catching up.
	awaitListeners(t, watch, 2)
	if n := cutListeners(t, watch); n < 1 {
		t.Fatal("no listener connection to cut")
	}
	if r := a.do("DELETE", a.control+"/v1/sessions/"+s.ID, adminToken, nil); r.status != 200 {
		t.Fatalf("kill on A: %d %s", r.status, r.body)
	}
	eventually(t, 10*time.Second, func() bool {
		return b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).status == 401
	})
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil).wantProblem(t, 401, "session_revoked")
	if !strings.Contains(string(b.logs.Bytes()), "listener lost") {
		t.Error("B's logs do not say its listener was lost")
	}
}
