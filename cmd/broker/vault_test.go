package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/testvault"
)

func TestVaultCredentialEndToEnd(t *testing.T) {
	v := testvault.Start(t, "e2e-root-token")
	v.PutKV("secret", "github", map[string]any{"token": brokertest.Canary})
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: vaulted
    base_url: ` + up.URL + `
    credential: {source: vault, path: secret/data/github, field: token, refresh: 200ms}
vault:
  address: ` + v.Addr + `
  timeout: 2s
  auth:
    method: token
    token: ${VAULT_TEST_TOKEN}
`, Env: map[string]string{"VAULT_TEST_TOKEN": v.Token}})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "vaulted", "rules": []any{map[string]any{"method": "GET", "path": "/echo"}}}))
	call := func() brokertest.Response { return b.Do("GET", b.Sandbox+"/v1/proxy/vaulted/echo", s.Token, nil) }

	r := call()
	if r.Status != 200 || up.Last(t).Header.Get("Authorization") != "Bearer "+brokertest.Canary {
		t.Fatalf("call with a Vault credential: %d %s", r.Status, r.Body)
	}
	brokertest.AssertNoCanary(t, "response", r.Body)

	// Rotation in Vault reaches the running session within the refresh bound.
	v.PutKV("secret", "github", map[string]any{"token": brokertest.Canary + "-2"})
	brokertest.Eventually(t, 10*time.Second, func() bool {
		return call().Status == 200 && up.Last(t).Header.Get("Authorization") == "Bearer "+brokertest.Canary+"-2"
	})

	// Outage: fail closed, readyz names the failing source, no stale secret past its bound.
	v.Stop()
	brokertest.Eventually(t, 10*time.Second, func() bool { return call().Status == 503 })
	n := len(up.Requests())
	for i := 0; i < 3; i++ {
		call().WantProblem(t, 503, "credential_unavailable")
	}
	if len(up.Requests()) != n {
		t.Fatal("calls went out without their credential during the Vault outage")
	}
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	rr := b.Do("GET", b.Control+"/readyz", "", nil)
	_ = json.Unmarshal(rr.Body, &ready)
	if rr.Status != 503 || ready.Checks["credential:vaulted"] == "ok" || ready.Checks["credential:api"] != "ok" {
		t.Fatalf("readyz during the outage: %d %v", rr.Status, ready)
	}

	// Vault returns: the broker recovers by itself.
	v.Restart()
	v.PutKV("secret", "github", map[string]any{"token": brokertest.Canary + "-3"})
	brokertest.Eventually(t, 10*time.Second, func() bool { return call().Status == 200 })
	if got := up.Last(t).Header.Get("Authorization"); got != "Bearer "+brokertest.Canary+"-3" {
		t.Fatalf("after recovery the upstream got %q", got)
	}

	export := b.AuditExport()
	if !strings.Contains(string(export), `"type":"credential.fetched"`) || !strings.Contains(string(export), "vault:secret/github#token") {
		t.Fatal("credential fetches are not audited")
	}
	for _, tok := range []string{brokertest.Canary, brokertest.Canary + "-2", brokertest.Canary + "-3", v.Token} {
		if strings.Contains(string(export), tok) || strings.Contains(string(b.Logs.Bytes()), tok) {
			t.Fatal("a Vault secret reached the audit log or the logs")
		}
	}
}
