package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// cli runs a client command through run, as `broker ...` with AIRLOCK_ADDR and AIRLOCK_TOKEN.
func cli(b *brokertest.Proc, token string, stdin string, args ...string) (string, error) {
	b.T.Helper()
	env := map[string]string{"AIRLOCK_ADDR": b.Control, "AIRLOCK_TOKEN": token}
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

func TestCLI(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})

	out, err := cli(b, brokertest.ProcAdminToken, "", "tokens", "create", "--role", "operator", "--name", "orchestrator")
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(out), &tok); err != nil || !strings.HasPrefix(tok.Token, "alk_") {
		t.Fatalf("tokens create: %q %v", out, err)
	}
	op := tok.Token

	out, err = cli(b, op, "", "session", "create", "--task", "t-cli", "--ttl", "5m", "--isolation", "container", "--trusted-input",
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
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatalf("call with the CLI's session: %d", r.Status)
	}
	// A whole request from stdin.
	if _, err := cli(b, op, `{"task_id": "t-stdin", "untrusted_input": false, "isolation": "process"}`, "session", "create", "--file", "-"); err != nil {
		t.Fatal(err)
	}
	if out, err = cli(b, op, "", "session", "list"); err != nil || !strings.Contains(out, "t-stdin") || !strings.Contains(out, "t-cli") {
		t.Fatalf("session list: %q %v", out, err)
	}
	if out, err = cli(b, op, "", "grant", "add", s.ID, "--grant", `{"upstream":"open","rules":[{"method":"GET","path":"/x"}]}`); err != nil || !strings.Contains(out, `"upstream": "open"`) {
		t.Fatalf("grant add: %q %v", out, err)
	}
	if out, err = cli(b, op, "", "grant", "revoke", s.Grants[0].ID); err != nil || !strings.Contains(out, `"status": "revoked"`) {
		t.Fatalf("grant revoke: %q %v", out, err)
	}
	if out, err = cli(b, op, "", "session", "kill", s.ID); err != nil || !strings.Contains(out, `"status": "revoked"`) {
		t.Fatalf("session kill: %q %v", out, err)
	}
	// Errors come back as the problem, naming the code.
	if _, err = cli(b, op, "", "session", "create", "--task", "t", "--ttl", "9h"); err == nil || !strings.Contains(err.Error(), "bad_request") {
		t.Fatalf("over-long ttl: %v", err)
	}
	if _, err = cli(b, op, "", "audit", "export"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("operator exporting audit: %v", err)
	}
	out, err = cli(b, brokertest.ProcAdminToken, "", "audit", "export", "--session-id", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	recs := brokertest.ParseAudit(t, []byte(out))
	if len(recs) == 0 {
		t.Fatal("no audit records for the session")
	}
	for _, r := range recs {
		if r.SessionID != s.ID {
			t.Fatalf("filter by session let through %+v", r)
		}
	}
	if out, err = cli(b, brokertest.ProcAdminToken, "", "audit", "verify"); err != nil || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("audit verify: %q %v", out, err)
	}
	if out, err = cli(b, op, "", "killswitch", "engage", "--reason", "drill"); err != nil || !strings.Contains(out, `"engaged": true`) {
		t.Fatalf("killswitch engage: %q %v", out, err)
	}
	if _, err = cli(b, op, "", "killswitch", "release"); err == nil {
		t.Fatal("an operator released the kill-switch")
	}
	if out, err = cli(b, brokertest.ProcAdminToken, "", "killswitch", "release"); err != nil || !strings.Contains(out, `"engaged": false`) {
		t.Fatalf("killswitch release: %q %v", out, err)
	}
	if _, err := cli(b, "", "", "session", "list"); err == nil {
		t.Fatal("no token, no error")
	}
}
