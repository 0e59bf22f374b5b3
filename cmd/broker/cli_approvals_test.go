package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// gatedCall has session s make a gated call (POST /payments) and returns
// its pending action's id.
func gatedCall(t *testing.T, b *brokertest.Proc, s brokertest.Created, amount string) string {
	t.Helper()
	r := b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": `+amount+`}`)
	var a struct {
		ActionID string `json:"action_id"`
	}
	if err := json.Unmarshal(r.Body, &a); err != nil || r.Status != http.StatusAccepted || a.ActionID == "" {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	return a.ActionID
}

// TestCLIApprovals: a reviewer lists a gated call, approves it with a
// comment, waits for its execution; denies another, whose wait then
// fails; the table shows the columns a reviewer scans.
func TestCLIApprovals(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op, rev := b.NewToken("operator", "orchestrator"), b.NewToken("reviewer", "rita")
	s := brokertest.GatedSession(b, op, nil)
	first := gatedCall(t, b, s, "5")

	out, err := cli(b, rev, "", "approvals", "list")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []brokertest.ActionView }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 1 || list.Items[0].ID != first || list.Items[0].Status != "pending" {
		t.Fatalf("approvals list (JSON when not a terminal): %v\n%s", err, out)
	}
	out, err = cli(b, rev, "", "approvals", "list", "-o", "table")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID SESSION UPSTREAM METHOD PATH STATUS APPROVALS EXPIRES" {
		t.Fatalf("approvals list -o table:\n%s", out)
	}
	if row := strings.Fields(lines[1]); len(row) != 8 || row[0] != first || row[1] != s.ID || row[2] != "api" ||
		row[3] != "POST" || row[4] != "/payments" || row[5] != "pending" || row[6] != "0/1" {
		t.Fatalf("approvals list row %q", lines[1])
	}
	out, err = cli(b, rev, "", "approvals", "show", first)
	var shown brokertest.ActionView
	if err != nil || json.Unmarshal([]byte(out), &shown) != nil || shown.ID != first || shown.Request.Method != "POST" || !strings.Contains(shown.Request.Body, `"acme"`) {
		t.Fatalf("approvals show: %v\n%s", err, out)
	}

	if out, err = cli(b, rev, "", "approvals", "approve", first, "--comment", "matches ticket 42"); err != nil || !strings.Contains(out, `"comment": "matches ticket 42"`) {
		t.Fatalf("approvals approve: %v\n%s", err, out)
	}
	out, err = cli(b, rev, "", "approvals", "wait", first, "--interval", "20ms", "--timeout", "30s")
	var a brokertest.ActionView
	if err != nil || json.Unmarshal([]byte(out), &a) != nil || a.Status != "executed" {
		t.Fatalf("approvals wait: %v\n%s", err, out)
	}
	sent := 0
	for _, r := range up.Requests() {
		if r.Method == "POST" && strings.HasSuffix(r.RawPath, "/payments") {
			sent++
		}
	}
	if sent != 1 {
		t.Fatalf("the approved call reached the upstream %d times", sent)
	}

	second := gatedCall(t, b, s, "7")
	if out, err = cli(b, rev, "", "approvals", "deny", second, "--comment", "wrong amount", "-o", "table"); err != nil || !strings.Contains(out, "denied") {
		t.Fatalf("approvals deny: %v\n%s", err, out)
	}
	if _, err = cli(b, rev, "", "approvals", "wait", second, "--interval", "20ms"); err == nil || !strings.Contains(err.Error(), "action "+second+" denied") {
		t.Fatalf("approvals wait on a denied action: %v", err)
	}
	if out, err = cli(b, rev, "", "approvals", "list", "--status", "all"); err != nil || strings.Count(out, `"id": "act_`) != 2 {
		t.Fatalf("approvals list --status all: %v\n%s", err, out)
	}
	if out, err = cli(b, rev, "", "approvals", "list"); err != nil || strings.Contains(out, `"id": "act_`) {
		t.Fatalf("approvals list (pending) after both were decided: %v\n%s", err, out)
	}
}

// TestCLIOutput: -o json is the broker's answer, -o table the columns a
// user scans (a session's token only where it is created), and the
// default for a pipe is JSON.
func TestCLIOutput(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")

	out, err := cli(b, op, "", "session", "create", "--task", "t-table", "--ttl", "5m", "--isolation", "microvm", "-o", "table",
		"--grant", `{"upstream":"api","rules":[{"method":"GET","path":"/ok"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID TASK STATUS EXPIRES ISOLATION GATED GRANTS TOKEN" {
		t.Fatalf("session create -o table:\n%s", out)
	}
	row := strings.Fields(lines[1])
	if len(row) != 8 || row[1] != "t-table" || row[4] != "microvm" || row[5] != "no" || row[6] != "1" || len(row[7]) < 20 {
		t.Fatalf("session create row %q", lines[1])
	}
	id, token := row[0], row[7]
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", token, nil); r.Status == http.StatusUnauthorized {
		t.Fatalf("the table's token is not the session's: %d", r.Status)
	}

	table, err := cli(b, op, "", "session", "list", "-o", "table")
	if err != nil || !strings.HasPrefix(table, "ID ") || !strings.Contains(table, id) || strings.Contains(table, "TOKEN") || strings.Contains(table, token) {
		t.Fatalf("session list -o table: %v\n%s", err, table)
	}
	asJSON, err := cli(b, op, "", "session", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	piped, err := cli(b, op, "", "session", "list")
	if err != nil || piped != asJSON {
		t.Fatalf("the default for a pipe is not -o json: %v\n%s", err, piped)
	}
	var page struct{ Items []struct{ ID string } }
	if err := json.Unmarshal([]byte(asJSON), &page); err != nil || len(page.Items) != 1 || page.Items[0].ID != id {
		t.Fatalf("session list -o json: %v\n%s", err, asJSON)
	}
	if out, err := cli(b, brokertest.ProcAdminToken, "", "tokens", "list", "-o", "table"); err != nil ||
		strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " ") != "ID ROLE NAME CREATED EXPIRES" || !strings.Contains(out, "orchestrator") {
		t.Fatalf("tokens list -o table: %v\n%s", err, out)
	}
	if out, err := cli(b, op, "", "killswitch", "status", "-o", "table"); err != nil || !strings.Contains(out, "ENGAGED") || !strings.Contains(out, "no") {
		t.Fatalf("killswitch status -o table: %v\n%s", err, out)
	}
}

// TestCLIRefusedTokenExplained: a token the control plane refuses is
// explained by the CLI (which plane, which roles the command needs) and by
// the broker's problem detail; codes and statuses are unchanged.
func TestCLIRefusedTokenExplained(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	sess := b.Session(brokertest.TrustedSession())
	rev := b.NewToken("reviewer", "rita")

	_, err := cli(b, sess.Token, "", "session", "list")
	want := "the control plane needs an admin or operator token (AIRLOCK_TOKEN); this one was refused: 401 invalid_token: " +
		"the control plane takes an API token of role admin or operator (a session token is for the sandbox plane)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("session list with a session token: %v\nwant %q", err, want)
	}
	_, err = cli(b, rev, "", "tokens", "list")
	want = "the control plane needs an admin token (AIRLOCK_TOKEN); this one was refused: 403 forbidden: the control plane takes an API token of role admin here, not reviewer"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("tokens list with a reviewer token: %v\nwant %q", err, want)
	}
	if _, err = cli(b, "", "", "approvals", "list"); err == nil || !strings.Contains(err.Error(), "AIRLOCK_TOKEN is not set: broker approvals list needs an API token of role admin or reviewer") {
		t.Fatalf("no token: %v", err)
	}

	// The broker's own answers, without the CLI.
	p := b.Do("GET", b.Control+"/v1/sessions", "", nil).WantProblem(t, 401, "invalid_token")
	if d, _ := p["detail"].(string); d != "the control plane takes an API token of role admin or operator (a session token is for the sandbox plane): missing bearer token" {
		t.Errorf("missing token's detail %q", d)
	}
	p = b.Do("GET", b.Control+"/v1/approvals", sess.Token, nil).WantProblem(t, 401, "invalid_token")
	if d, _ := p["detail"].(string); d != "the control plane takes an API token of role admin or reviewer (a session token is for the sandbox plane): invalid API token" {
		t.Errorf("session token's detail %q", d)
	}
	p = b.Do("DELETE", b.Control+"/v1/sessions/"+sess.ID, b.NewToken("auditor", "al"), nil).WantProblem(t, 403, "forbidden")
	if d, _ := p["detail"].(string); !strings.Contains(d, "role admin, operator or reviewer here, not auditor") {
		t.Errorf("auditor's detail %q", d)
	}
}

// TestCLIConfigCheck: three mistakes in three sections are three lines,
// each with its field path, and exit 1; a good file is "FILE: ok".
func TestCLIConfigCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`
admin_token: a-sufficiently-long-admin-token
sandbox_listn: 127.0.0.1:9000
max_session_ttl: forever
upstreams:
  - name: github
    credential: {source: env, name: GITHUB_TOKEN}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := runOffline("config", "check", bad)
	want := []string{
		bad + `: sandbox_listn: unknown field (did you mean sandbox_listen?)`,
		bad + `: max_session_ttl: not a duration: "forever"`,
		bad + `: upstreams[0].base_url: must be an absolute http(s) URL without query, fragment or user info`,
	}
	if got := strings.Split(strings.TrimSpace(stdout), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("config check, bad file:\n%s\nwant:\n%s", stdout, strings.Join(want, "\n"))
	}
	if err == nil || exitCode(err) != 1 {
		t.Errorf("config check on a bad file: %v (exit %d), want exit 1", err, exitCode(err))
	}

	good, err := filepath.Abs("../../deploy/airlock.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := func(k string) string { return "a-sufficiently-long-value-for-" + strings.ToLower(k) }
	var out strings.Builder
	if err := run(t.Context(), []string{"config", "check", good}, env, nil, &out, &out); err != nil || out.String() != good+": ok\n" {
		t.Fatalf("config check, good file: %v\n%s", err, out.String())
	}
}
