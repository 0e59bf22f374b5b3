package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/testvault"
)

func TestVaultCredentialEndToEnd(t *testing.T) {
	v := testvault.Start(t, "e2e-root-token")
	v.PutKV("secret", "github", map[string]any{"token": canary})
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL, extraYAML: `  - name: vaulted
    base_url: ` + up.URL + `
    credential: {source: vault, path: secret/data/github, field: token, refresh: 200ms}
vault:
  address: ` + v.Addr + `
  timeout: 2s
  auth:
    method: token
    token: ${VAULT_TEST_TOKEN}
`, env: map[string]string{"VAULT_TEST_TOKEN": v.Token}})
	s := b.session(trustedSession(map[string]any{"upstream": "vaulted", "rules": []any{map[string]any{"method": "GET", "path": "/echo"}}}))
	call := func() response { return b.do("GET", b.sandbox+"/v1/proxy/vaulted/echo", s.Token, nil) }

	r := call()
	if r.status != 200 || up.last(t).Header.Get("Authorization") != "Bearer "+canary {
		t.Fatalf("call with a Vault credential: %d %s", r.status, r.body)
	}
	assertNoCanary(t, "response", r.body)

	// Rotation in Vault reaches the running session within the refresh bound.
	v.PutKV("secret", "github", map[string]any{"token": canary + "-2"})
	eventually(t, 10*time.Second, func() bool {
		return call().status == 200 && up.last(t).Header.Get("Authorization") == "Bearer "+canary+"-2"
	})

	// Outage: fail closed, readyz names the failing source, no stale secret past its bound.
	v.Stop()
	eventually(t, 10*time.Second, func() bool { return call().status == 503 })
	n := len(up.requests())
	for i := 0; i < 3; i++ {
		call().wantProblem(t, 503, "credential_unavailable")
	}
	if len(up.requests()) != n {
		t.Fatal("calls went out without their credential during the Vault outage")
	}
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	rr := b.do("GET", b.control+"/readyz", "", nil)
	_ = json.Unmarshal(rr.body, &ready)
	if rr.status != 503 || ready.Checks["credential:vaulted"] == "ok" || ready.Checks["credential:api"] != "ok" {
		t.Fatalf("readyz during the outage: %d %v", rr.status, ready)
	}

	// Vault returns: the broker recovers by itself.
	v.Restart()
	v.PutKV("secret", "github", map[string]any{"token": canary + "-3"})
	eventually(t, 10*time.Second, func() bool { return call().status == 200 })
	if got := up.last(t).Header.Get("Authorization"); got != "Bearer "+canary+"-3" {
		t.Fatalf("after recovery the upstream got %q", got)
	}

	export := b.auditExport()
	if !strings.Contains(string(export), `"type":"credential.fetched"`) || !strings.Contains(string(export), "vault:secret/github#token") {
		t.Fatal("credential fetches are not audited")
	}
	for _, tok := range []string{canary, canary + "-2", canary + "-3", v.Token} {
		if strings.Contains(string(export), tok) || strings.Contains(string(b.logs.Bytes()), tok) {
			t.Fatal("a Vault secret reached the audit log or the logs")
		}
	}
}
