package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// Sessions, grants and tokens shared by replicas on one PostgreSQL.

// TestReplicasShareSessionsGrantsAndTokens: two real brokers on one
// PostgreSQL. What one creates works on the other at once (read through on
// a miss, never cached as "not found"): a session, a grant added to a
// session the other already serves, an API token; a token revoked on one
// is refused by the other on its next request; a session created on one is
// killed for real through the other.
func TestReplicasShareSessionsGrantsAndTokens(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	a := pgBroker(t, up, dsn, "")
	b := pgBroker(t, up, dsn, "")

	// A session unknown to B is refused as invalid first (nothing cached)...
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", "not-a-token", nil).WantProblem(t, 401, "invalid_token")
	s := a.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	// ...and one created on A works on B at once.
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatalf("session created on A, called on B: %d %s", r.Status, r.Body)
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/other", s.Token, nil).WantProblem(t, 403, "no_matching_grant")
	// A grant A adds to the session B serves from memory works on B at once.
	if r := a.Do("POST", a.Control+"/v1/sessions/"+s.ID+"/grants", brokertest.ProcAdminToken, brokertest.APIGrant(map[string]any{"method": "GET", "path": "/other"})); r.Status != http.StatusCreated {
		t.Fatalf("add grant on A: %d %s", r.Status, r.Body)
	}
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/other", s.Token, nil); r.Status != 200 {
		t.Fatalf("grant added on A, called on B: %d %s", r.Status, r.Body)
	}

	// An API token created on A works on B; revoked on A, B refuses it at once.
	r := a.Do("POST", a.Control+"/v1/tokens", brokertest.ProcAdminToken, map[string]any{"role": "operator", "name": "orchestrator"})
	if r.Status != http.StatusCreated {
		t.Fatalf("create token on A: %d %s", r.Status, r.Body)
	}
	var tok struct{ ID, Token string }
	if err := json.Unmarshal(r.Body, &tok); err != nil || tok.Token == "" {
		t.Fatalf("token: %s %v", r.Body, err)
	}
	if r := b.Do("GET", b.Control+"/v1/sessions/"+s.ID, tok.Token, nil); r.Status != 200 {
		t.Fatalf("token created on A, used on B: %d %s", r.Status, r.Body)
	}
	if r := a.Do("DELETE", a.Control+"/v1/tokens/"+tok.ID, brokertest.ProcAdminToken, nil); r.Status/100 != 2 {
		t.Fatalf("revoke token on A: %d %s", r.Status, r.Body)
	}
	b.Do("GET", b.Control+"/v1/sessions/"+s.ID, tok.Token, nil).WantProblem(t, 401, "invalid_token")

	// A session created on A, never seen by B, is killed through B for real.
	s2 := a.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	if r := b.Do("DELETE", b.Control+"/v1/sessions/"+s2.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill on B: %d %s", r.Status, r.Body)
	}
	var v struct{ Status string }
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/sessions/"+s2.ID, brokertest.ProcAdminToken, nil).Body, &v)
	if v.Status != "revoked" {
		t.Errorf("session killed on B: status %q, want revoked", v.Status)
	}
	// A third broker, started after the kill, refuses the session's token.
	c := pgBroker(t, up, dsn, "")
	c.Do("GET", c.Sandbox+"/v1/proxy/api/ok", s2.Token, nil).WantProblem(t, 401, "session_revoked")
}
