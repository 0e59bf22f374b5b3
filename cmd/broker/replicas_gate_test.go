package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// The approval gate across replicas: an action decided on another replica,
// a replica dying mid-execution, expiry recorded once.

// TestReplicasApprovalDecidedElsewhere: a sandbox waits for a decision on
// B; two reviewers approve at once, one on A and one on B: exactly one
// wins (the other is 409), the upstream sees the request once, and B's
// waiting sandbox gets the answer.
func TestReplicasApprovalDecidedElsewhere(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	a := pgBroker(t, up, dsn, "")
	op := a.NewToken("operator", "orchestrator")
	alice := a.NewToken("reviewer", "alice")
	bob := a.NewToken("reviewer", "bob")
	s := brokertest.GatedSession(a, op, nil)
	b := pgBroker(t, up, dsn, "")

	res := make(chan brokertest.Response, 1)
	go func() {
		res <- b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 42}`, "Prefer", "wait=30")
	}()
	id := a.PendingAction(t, alice)
	approveAtOnce(t, id, reviewerOn{a, alice}, reviewerOn{b, bob})
	select {
	case r := <-res:
		if r.Status != 200 || !strings.Contains(string(r.Body), "acme") {
			t.Fatalf("the sandbox waiting on B: %d %s", r.Status, r.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox waiting on B was not answered")
	}
	n := 0
	for _, r := range up.Requests() {
		if strings.HasSuffix(r.RawPath, "/payments") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the upstream saw the approved request %d times, want 1", n)
	}
}

// TestReplicaDiesMidExecution: replica A, a real broker process, executes
// an approved action whose upstream call hangs, and is killed (SIGKILL):
// it stops renewing its claim. Replica B fails the action once the lease
// ends; the request is never sent again.
func TestReplicaDiesMidExecution(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: %s
max_session_ttl: 1h
enforce_isolation: true
log_level: error
store: {driver: postgres, dsn: "${AIRLOCK_PG_DSN}", replica_id: replica-a}
approval: {execution_lease: 2s}
upstreams:
  - name: api
    base_url: %s/base
    timeout: 60s
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
`, filepath.Join(dir, "data"), brokertest.ProcAdminToken, up.URL)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	pa := brokertest.StartChild(t, cfg, []string{"CANARY_TOKEN=" + brokertest.Canary, "AIRLOCK_PG_DSN=" + dsn})
	t.Cleanup(pa.Kill)
	a := &brokertest.Proc{T: t, Sandbox: pa.Sandbox, Control: pa.Control, HTTP: &http.Client{Timeout: 90 * time.Second}}
	op := a.NewToken("operator", "orchestrator")
	alice := a.NewToken("reviewer", "alice")
	r := a.Do("POST", a.Control+"/v1/sessions", op, map[string]any{"task_id": "t-die", "isolation": "microvm", "grants": []any{
		map[string]any{"upstream": "api", "rules": []any{map[string]any{"method": "POST", "path": "/slow"}}},
	}})
	if r.Status != 201 {
		t.Fatalf("session on A: %d %s", r.Status, r.Body)
	}
	var s brokertest.Created
	_ = json.Unmarshal(r.Body, &s)
	b := pgBroker(t, up, dsn, "approval: {execution_lease: 2s}\n")

	r = b.Do("POST", b.Sandbox+"/v1/proxy/api/slow", s.Token, `{}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("gated call on B: %d %s", r.Status, r.Body)
	}
	id := b.PendingAction(t, alice)
	if r := a.Do("POST", a.Control+"/v1/approvals/"+id+"/approve", alice, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve on A: %d %s", r.Status, r.Body)
	}
	<-up.Started // A is executing it
	pa.Kill()
	var final brokertest.ActionView
	brokertest.Eventually(t, 20*time.Second, func() bool {
		final = brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+id, alice, nil))
		return final.Status != "executing"
	})
	if final.Status != "failed" {
		t.Fatalf("the action of a replica killed mid-execution is %q, want failed", final.Status)
	}
	n := 0
	for _, r := range up.Requests() {
		if strings.HasSuffix(r.RawPath, "/slow") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the upstream saw the action %d times, want exactly 1", n)
	}
	var failed int
	brokertest.Eventually(t, 10*time.Second, func() bool { // the record follows the transition
		failed = 0
		for _, line := range strings.Split(string(b.AuditExport()), "\n") {
			if strings.Contains(line, `"type":"action.failed"`) && strings.Contains(line, id) {
				failed++
			}
		}
		return failed > 0
	})
	if failed != 1 {
		t.Errorf("%d action.failed records, want 1", failed)
	}
}

// TestReplicasExpiryRecordedOnce: a pending action created on A expires
// on every replica's timer; the row-locked transition has one winner, so
// it is recorded once. An action whose creator stopped is expired by the
// replica still running.
func TestReplicasExpiryRecordedOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	const timeout = "approval: {timeout: 2s}\n"
	a := pgBroker(t, up, dsn, timeout)
	op := a.NewToken("operator", "orchestrator")
	alice := a.NewToken("reviewer", "alice")
	s := brokertest.GatedSession(a, op, nil)
	b := pgBroker(t, up, dsn, timeout)

	pending := func(p *brokertest.Proc) string {
		r := p.Do("POST", p.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`)
		if r.Status != http.StatusAccepted {
			t.Fatalf("gated call: %d %s", r.Status, r.Body)
		}
		return brokertest.DecodeAction(t, r).ID
	}
	expired := func(p *brokertest.Proc, id string) {
		t.Helper()
		brokertest.Eventually(t, 15*time.Second, func() bool {
			return brokertest.DecodeAction(t, p.Do("GET", p.Control+"/v1/approvals/"+id, alice, nil)).Status == "expired"
		})
	}
	count := func(id string) int {
		n := 0
		for _, line := range strings.Split(string(b.AuditExport()), "\n") {
			if strings.Contains(line, `"type":"action.expired"`) && strings.Contains(line, id) {
				n++
			}
		}
		return n
	}

	// The record follows the transition: wait for it, then count.
	recorded := func(id string) { brokertest.Eventually(t, 10*time.Second, func() bool { return count(id) > 0 }) }
	both := pending(a)
	expired(b, both)
	expired(a, both)
	recorded(both)
	if n := count(both); n != 1 {
		t.Errorf("an action expired with two replicas running has %d action.expired records, want 1", n)
	}

	orphan := pending(a)
	a.Stop() // its creator is gone before the expiry
	expired(b, orphan)
	recorded(orphan)
	if n := count(orphan); n != 1 {
		t.Errorf("an orphaned action has %d action.expired records, want 1", n)
	}
	if len(up.Requests()) != 0 {
		t.Error("an expired action reached the upstream")
	}
}

// reviewerOn is a reviewer's token on one replica.
type reviewerOn struct {
	p   *brokertest.Proc
	tok string
}

// approveAtOnce has two reviewers, each on their replica, approve action
// id at the same moment: exactly one wins (200), the other gets 409.
func approveAtOnce(t *testing.T, id string, r1, r2 reviewerOn) {
	t.Helper()
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i, rv := range []reviewerOn{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = rv.p.Do("POST", rv.p.Control+"/v1/approvals/"+id+"/approve", rv.tok, map[string]any{}).Status
		}()
	}
	wg.Wait()
	if !(statuses[0] == 200 && statuses[1] == 409 || statuses[0] == 409 && statuses[1] == 200) {
		t.Fatalf("two approvals at once on two replicas = %v, want one 200 and one 409", statuses)
	}
}
