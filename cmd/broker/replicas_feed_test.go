package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
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
	up := brokertest.NewUpstream(t)
	a := pgBroker(t, up, dsn, "")
	grant := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})
	s := a.Session(brokertest.TrustedSession(grant))
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
	brokertest.Eventually(t, 15*time.Second, func() bool {
		return b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).Status == 503
	})
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 503, "broker_unavailable")
	r := b.Do("GET", b.Control+"/readyz", "", nil)
	var ready struct{ Checks map[string]string }
	_ = json.Unmarshal(r.Body, &ready)
	if r.Status != http.StatusServiceUnavailable || ready.Checks["changes"] == "ok" || ready.Checks["changes"] == "" {
		t.Fatalf("/readyz of a stale replica = %d %v", r.Status, ready.Checks)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 15*time.Second, func() bool {
		return b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).Status == 200
	})

	// A kill while B's listener is down: B learns it by catching up.
	awaitListeners(t, watch, 2)
	if n := cutListeners(t, watch); n < 1 {
		t.Fatal("no listener connection to cut")
	}
	if r := a.Do("DELETE", a.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill on A: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool {
		return b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).Status == 401
	})
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 401, "session_revoked")
	if !strings.Contains(string(b.Logs.Bytes()), "listener lost") {
		t.Error("B's logs do not say its listener was lost")
	}
}
