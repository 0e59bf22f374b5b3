package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// cli runs a client command through run, as `broker ...` with AIRLOCK_ADDR and AIRLOCK_TOKEN.
func (b *brokerProc) cli(token string, stdin string, args ...string) (string, error) {
	b.t.Helper()
	env := map[string]string{"AIRLOCK_ADDR": b.control, "AIRLOCK_TOKEN": token}
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

func TestCLI(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})

	out, err := b.cli(adminToken, "", "tokens", "create", "--role", "operator", "--name", "orchestrator")
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(out), &tok); err != nil || !strings.HasPrefix(tok.Token, "alk_") {
		t.Fatalf("tokens create: %q %v", out, err)
	}
	op := tok.Token

	out, err = b.cli(op, "", "session", "create", "--task", "t-cli", "--ttl", "5m", "--isolation", "container", "--trusted-input",
		"--label", "team=infra", "--grant", `{"upstream":"api","rules":[{"method":"GET","path":"/ok"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		ID, Token string
		Labels    map[string]string
		Grants    []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Token == "" || s.Labels["team"] != "infra" || len(s.Grants) != 1 {
		t.Fatalf("session create: %q %v", out, err)
	}
	if r := b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil); r.status != 200 {
		t.Fatalf("call with the CLI's session: %d", r.status)
	}
	// A whole request from stdin.
	if _, err := b.cli(op, `{"task_id": "t-stdin", "untrusted_input": false, "isolation": "process"}`, "session", "create", "--file", "-"); err != nil {
		t.Fatal(err)
	}
	if out, err = b.cli(op, "", "session", "list"); err != nil || !strings.Contains(out, "t-stdin") || !strings.Contains(out, "t-cli") {
		t.Fatalf("session list: %q %v", out, err)
	}
	if out, err = b.cli(op, "", "grant", "add", s.ID, "--grant", `{"upstream":"open","rules":[{"method":"GET","path":"/x"}]}`); err != nil || !strings.Contains(out, `"upstream": "open"`) {
		t.Fatalf("grant add: %q %v", out, err)
	}
	if out, err = b.cli(op, "", "grant", "revoke", s.Grants[0].ID); err != nil || !strings.Contains(out, `"status": "revoked"`) {
		t.Fatalf("grant revoke: %q %v", out, err)
	}
	if out, err = b.cli(op, "", "session", "kill", s.ID); err != nil || !strings.Contains(out, `"status": "revoked"`) {
		t.Fatalf("session kill: %q %v", out, err)
	}
	// Errors come back as the problem, naming the code.
	if _, err = b.cli(op, "", "session", "create", "--task", "t", "--ttl", "9h"); err == nil || !strings.Contains(err.Error(), "bad_request") {
		t.Fatalf("over-long ttl: %v", err)
	}
	if _, err = b.cli(op, "", "audit", "export"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("operator exporting audit: %v", err)
	}
	out, err = b.cli(adminToken, "", "audit", "export", "--session-id", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	recs := parseAudit(t, []byte(out))
	if len(recs) == 0 {
		t.Fatal("no audit records for the session")
	}
	for _, r := range recs {
		if r.SessionID != s.ID {
			t.Fatalf("filter by session let through %+v", r)
		}
	}
	if out, err = b.cli(adminToken, "", "audit", "verify"); err != nil || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("audit verify: %q %v", out, err)
	}
	if out, err = b.cli(op, "", "killswitch", "engage", "--reason", "drill"); err != nil || !strings.Contains(out, `"engaged": true`) {
		t.Fatalf("killswitch engage: %q %v", out, err)
	}
	if _, err = b.cli(op, "", "killswitch", "release"); err == nil {
		t.Fatal("an operator released the kill-switch")
	}
	if out, err = b.cli(adminToken, "", "killswitch", "release"); err != nil || !strings.Contains(out, `"engaged": false`) {
		t.Fatalf("killswitch release: %q %v", out, err)
	}
	if _, err := b.cli("", "", "session", "list"); err == nil {
		t.Fatal("no token, no error")
	}
}
