package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
	"github.com/airlock-broker/airlock/internal/store/pgstore"
)

// pgBroker starts the real broker on PostgreSQL (database dsn) with a data_dir of its own.
func pgBroker(t *testing.T, up *brokertest.Upstream, dsn string, extra string) *brokertest.Proc {
	t.Helper()
	return startBroker(t, brokertest.ProcOptions{
		Upstream:  up.URL,
		DataDir:   filepath.Join(t.TempDir(), "data"),
		ExtraYAML: "store: {driver: postgres, dsn: \"${AIRLOCK_PG_DSN}\"}\n" + extra,
		Env:       map[string]string{"AIRLOCK_PG_DSN": dsn},
	})
}

// TestPostgresEndToEnd: one broker on PostgreSQL, through its real server:
// a session's calls, an API token and the kill-switch survive a restart
// (with another, empty data_dir: the state is the database's), the grant's
// usage too (max_uses counts across the restart), the exported chain
// verifies offline, and /readyz reports the database.
func TestPostgresEndToEnd(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	b := pgBroker(t, up, dsn, "audit: {checkpoint_every: 5}\n")

	ready := func(b *brokertest.Proc) (int, map[string]string) {
		r := b.Do("GET", b.Control+"/readyz", "", nil)
		var body struct{ Checks map[string]string }
		_ = json.Unmarshal(r.Body, &body)
		return r.Status, body.Checks
	}
	if st, checks := ready(b); st != http.StatusOK || checks["store"] != "ok" {
		t.Fatalf("/readyz on PostgreSQL = %d %v", st, checks)
	}

	grant := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})
	grant["max_uses"] = 5
	s := b.Session(brokertest.TrustedSession(grant))
	for range 3 {
		if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
			t.Fatalf("allowed call: %d %s", r.Status, r.Body)
		}
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/nope", s.Token, nil).WantProblem(t, 403, "no_matching_grant")
	out, err := cli(b, brokertest.ProcAdminToken, "", "tokens", "create", "--role", "operator", "--name", "orchestrator")
	if err != nil {
		t.Fatalf("tokens create: %v %s", err, out)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.Token == "" {
		t.Fatalf("tokens create: %q %v", out, err)
	}
	var key struct {
		PublicKey string `json:"public_key"`
	}
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/audit/public-key", "", nil).Body, &key)
	if r := b.Do("POST", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage kill-switch: %d %s", r.Status, r.Body)
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 503, "killswitch_engaged")
	b.Stop()
	if _, err := os.Stat(filepath.Join(b.DataDir, "airlock.db")); !os.IsNotExist(err) {
		t.Errorf("a broker on PostgreSQL wrote a bbolt file (%v)", err)
	}
	hits := len(up.Requests())

	// Restarted, with a fresh data_dir: everything comes from the database.
	b = pgBroker(t, up, dsn, "")
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 503, "killswitch_engaged")
	if r := b.Do("DELETE", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("release kill-switch: %d %s", r.Status, r.Body)
	}
	if r := b.Do("GET", b.Control+"/v1/sessions/"+s.ID, tok.Token, nil); r.Status != 200 {
		t.Fatalf("the operator token after a restart: %d %s", r.Status, r.Body)
	}
	for i := range 2 { // uses 4 and 5 of max_uses 5
		if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
			t.Fatalf("call %d after the restart: %d %s", 4+i, r.Status, r.Body)
		}
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 403, "grant_exhausted")
	if got := len(up.Requests()); got != hits+2 {
		t.Errorf("upstream saw %d requests after the restart, want 2", got-hits)
	}

	// The chain, written by two broker lifetimes, verifies offline.
	dir := filepath.Join(t.TempDir(), "bundle")
	if out, err := cli(b, brokertest.ProcAdminToken, "", "audit", "export", "--bundle", dir); err != nil {
		t.Fatalf("export bundle: %v %s", err, out)
	}
	records := mustRead(t, filepath.Join(dir, "records.jsonl"))
	brokertest.AssertNoCanary(t, "audit bundle", records)
	recs := brokertest.ParseAudit(t, records)
	allowed := 0
	for _, r := range recs {
		if r.Type == "call.allowed" && r.SessionID == s.ID {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d call.allowed records for the session, want 5", allowed)
	}
	var vout bytes.Buffer
	err = run(t.Context(), []string{"audit", "verify", dir, "--public-key", key.PublicKey}, func(string) string { return "" }, nil, &vout, &vout)
	if err != nil || !strings.Contains(vout.String(), `"ok": true`) {
		t.Fatalf("offline verify of the PostgreSQL chain: %v\n%s", err, vout.String())
	}

	// /readyz reports the database: a schema it cannot use is "not ready".
	conn := mustPG(t, dsn)
	rename := func(from, to string) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), "ALTER TABLE "+from+" RENAME TO "+to); err != nil {
			t.Fatal(err)
		}
	}
	rename("audit_head", "audit_head_gone")
	if st, checks := ready(b); st != http.StatusServiceUnavailable || checks["store"] == "ok" {
		t.Errorf("/readyz with the database unusable = %d %v", st, checks)
	}
	rename("audit_head_gone", "audit_head")
	if st, checks := ready(b); st != http.StatusOK {
		t.Errorf("/readyz with the database back = %d %v", st, checks)
	}
}

// mustPG connects to dsn (closed by t.Cleanup).
func mustPG(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// pgConn opens a connection of the test's own to dsn.
func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// cutListeners terminates every replica's LISTEN connection (the change
// feed's dedicated connection) and returns how many it cut.
// awaitListeners waits until n replicas' change-feed listeners are
// connected (a replica connects its listener after it starts serving).
func awaitListeners(t *testing.T, c *pgx.Conn, n int) {
	t.Helper()
	brokertest.Eventually(t, 10*time.Second, func() bool {
		var got int
		err := c.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", pgstore.ListenerApplicationName).Scan(&got)
		return err == nil && got == n
	})
}

func cutListeners(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	err := c.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()) AS cut`, pgstore.ListenerApplicationName).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
