package brokertest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// SyncBuffer collects logs written concurrently.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Bytes is a copy of what was written so far.
func (b *SyncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}

// Eventually polls cond until it holds or the deadline passes.
func Eventually(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		<-time.After(5 * time.Millisecond)
	}
}

// APIGrant is a grant on the sensitive "api" upstream.
func APIGrant(rules ...map[string]any) map[string]any {
	rs := make([]any, len(rules))
	for i, r := range rules {
		rs[i] = r
	}
	return map[string]any{"upstream": "api", "rules": rs}
}

// TrustedSession is a session that is not gated: no untrusted input.
func TrustedSession(grants ...map[string]any) map[string]any {
	gs := make([]any, len(grants))
	for i, g := range grants {
		gs[i] = g
	}
	return map[string]any{"task_id": "t-1", "ttl": "10m", "untrusted_input": false, "isolation": "container", "grants": gs}
}

// GatedSession creates, with token (an operator's), a session that is
// gated: untrusted input + a sensitive upstream + an irreversible rule
// (POST /payments, to pinned to "acme", amount at most 100; and GET
// /slow), extra added to its grant.
func GatedSession(b *Proc, token string, extra map[string]any) Created {
	b.T.Helper()
	g := map[string]any{"upstream": "api", "rules": []any{
		map[string]any{"method": "POST", "path": "/payments", "constraints": map[string]any{
			"body.to": map[string]any{"pin": "acme"}, "body.amount": map[string]any{"max": 100}}},
		map[string]any{"method": "GET", "path": "/slow"},
	}}
	for k, v := range extra {
		g[k] = v
	}
	r := b.Do("POST", b.Control+"/v1/sessions", token, map[string]any{"task_id": "t-gate", "isolation": "microvm", "grants": []any{g}})
	if r.Status != 201 {
		b.T.Fatalf("gated session: %d %s", r.Status, r.Body)
	}
	var c Created
	_ = json.Unmarshal(r.Body, &c)
	return c
}

// ActionView is the part of an action (GET /v1/approvals/{id}) tests read.
type ActionView struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Approvals int    `json:"approvals"`
	Request   struct {
		Method string `json:"method"`
		Path   string `json:"path"`
		Body   string `json:"body"`
	} `json:"request"`
	Pinned []string `json:"pinned"`
	Filled []string `json:"filled"`
}

// DecodeAction decodes an action from r.
func DecodeAction(t *testing.T, r Response) ActionView {
	t.Helper()
	var a ActionView
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("action: %s", r.Body)
	}
	return a
}

// ApprovedResult has a gated session (untrusted input, microvm) call
// method path on upstream with body under its one irreversible rule, a
// reviewer approve the action, and returns the result the sandbox reads
// with the reviewer's token and the action's id.
func ApprovedResult(t *testing.T, b *Proc, upstream, method, path, body string) (res Response, reviewer, actionID string) {
	t.Helper()
	tok := func(role, name string) string {
		var out struct{ Token string }
		_ = json.Unmarshal(b.Do("POST", b.Control+"/v1/tokens", ProcAdminToken, map[string]any{"role": role, "name": name}).Body, &out)
		return out.Token
	}
	op, rev := tok("operator", "orchestrator"), tok("reviewer", "rita")
	r := b.Do("POST", b.Control+"/v1/sessions", op, map[string]any{"task_id": "t-gated", "isolation": "microvm", "grants": []any{
		map[string]any{"upstream": upstream, "rules": []any{map[string]any{"method": method, "path": path, "irreversible": true}}}}})
	var s Created
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("gated session: %d %s", r.Status, r.Body)
	}
	r = b.Do(method, b.Sandbox+"/v1/proxy/"+upstream+path, s.Token, body)
	var a struct {
		ActionID string `json:"action_id"`
	}
	if err := json.Unmarshal(r.Body, &a); err != nil || r.Status != 202 || a.ActionID == "" {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	if r := b.Do("POST", b.Control+"/v1/approvals/"+a.ActionID+"/approve", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	Eventually(t, 20*time.Second, func() bool {
		res = b.Do("GET", b.Sandbox+"/v1/actions/"+a.ActionID+"/result", s.Token, nil)
		return res.Status != 409 && res.Status != 404
	})
	if res.Status != 200 || !bytes.Contains(res.Body, []byte("[REDACTED]")) {
		t.Fatalf("result: %d %.300s", res.Status, res.Body)
	}
	return res, rev, a.ActionID
}

// RequireTool finds a command the test needs: with CI=true a missing one
// fails the test, locally it skips with how to get it.
func RequireTool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required in CI: %s", name, install)
		}
		t.Skipf("%s not found; %s", name, install)
	}
	return p
}
