package main

import (
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// TestAuditGuardRefusalCode: a kill another replica committed that this
// replica has not applied yet (written here straight into the database,
// with no change row, so no feed ever tells the broker) is found by the
// guarded insert of the call's allowed record; the call is refused with the
// code one broker gives for that kill, not always session_revoked: the
// kill-switch is killswitch_engaged, a revoked grant no_matching_grant, a
// killed session session_revoked. Nothing reaches the upstream.
func TestAuditGuardRefusalCode(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	b := pgBroker(t, up, dsn, "")
	conn := pgConn(t, dsn)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	grant := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})
	live := func() brokertest.Created { // a session B serves from memory
		t.Helper()
		s := b.Session(brokertest.TrustedSession(grant))
		if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
			t.Fatalf("call before the kill: %d %s", r.Status, r.Body)
		}
		return s
	}
	for _, c := range []struct {
		name   string
		kill   func(s brokertest.Created)
		undo   func()
		status int
		code   string
	}{
		{"killswitch", func(brokertest.Created) {
			exec(`INSERT INTO meta (key, value) VALUES ('killswitch', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, []byte(`{"engaged":true}`))
		}, func() {
			exec(`UPDATE meta SET value = $1 WHERE key = 'killswitch'`, []byte(`{"engaged":false}`))
		}, 503, "killswitch_engaged"},
		{"grant", func(s brokertest.Created) { exec(`UPDATE grants SET revoked_at = now() WHERE id = $1`, s.Grants[0].ID) }, nil, 403, "no_matching_grant"},
		{"session", func(s brokertest.Created) { exec(`UPDATE sessions SET revoked_at = now() WHERE id = $1`, s.ID) }, nil, 401, "session_revoked"},
	} {
		s := live()
		c.kill(s)
		hits := len(up.Requests())
		b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, c.status, c.code)
		if got := len(up.Requests()); got != hits {
			t.Errorf("%s: the upstream saw %d requests after the kill", c.name, got-hits)
		}
		if c.undo != nil {
			c.undo()
		}
	}
}
