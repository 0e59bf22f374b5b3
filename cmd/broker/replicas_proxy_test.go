package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// TestProxyDoorGrantAddedOnAnotherReplica: two real brokers on one
// PostgreSQL, the proxy door on both. A session created on A is refused a
// tunnel to api.github.test on B (no grant on github; B now holds the
// session in memory); once A adds a github grant, B opens the tunnel at
// once (DESIGN §9: a grant made on one replica works on every other), as
// the REST door's calls do.
func TestProxyDoorGrantAddedOnAnotherReplica(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	ca := brokertest.NewCA(t)
	caFile := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	up := &brokertest.Upstream{Started: make(chan struct{}, 16)}
	up.Server = httptest.NewUnstartedServer(up)
	up.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, ghHost)}}
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := brokertest.NewUpstream(t)
	yaml := fmt.Sprintf(`  - name: github
    base_url: %s
    hosts: [%s]
    ca_cert: %s
    credential: {source: env, name: CANARY_TOKEN}
proxy_listen: 127.0.0.1:0
store: {driver: postgres, dsn: "${AIRLOCK_PG_DSN}"}
`, up.URL, ghHost, caFile)
	start := func() *proxyEnv {
		b := startBroker(t, brokertest.ProcOptions{Upstream: plain.URL, DataDir: filepath.Join(t.TempDir(), "data"),
			ExtraYAML: yaml, Env: map[string]string{"AIRLOCK_PG_DSN": dsn}})
		return &proxyEnv{t: t, b: b, up: up, proxy: proxyDoorAddr(t, b), dir: dir}
	}
	a, b := start(), start()

	s := a.b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	resp, body, _ := b.rawConnect(ghHost+":443", s.Token)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT on B before the github grant: %d %s, want 403 egress_denied", resp.StatusCode, body)
	}
	gh := map[string]any{"upstream": "github", "rules": []any{map[string]any{"method": "GET", "path": "/repos/{owner}/{repo}"}}}
	if r := a.b.Do("POST", a.b.Control+"/v1/sessions/"+s.ID+"/grants", brokertest.ProcAdminToken, gh); r.Status != http.StatusCreated {
		t.Fatalf("add the github grant on A: %d %s", r.Status, r.Body)
	}
	if resp, body, _ := b.rawConnect(ghHost+":443", s.Token); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT on B after A added the github grant: %d %s, want 200", resp.StatusCode, body)
	}
}
