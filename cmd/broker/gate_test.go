package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

func TestGatedCallWaitsForApproval(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	alice := b.NewToken("reviewer", "alice")
	s := brokertest.GatedSession(b, op, nil)

	// The sandbox waits (Prefer: wait) while a reviewer decides.
	res := make(chan brokertest.Response, 1)
	go func() {
		res <- b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 42}`, "Prefer", "wait=30")
	}()
	a := brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+b.PendingAction(t, alice), alice, nil))
	if a.Request.Method != "POST" || a.Request.Path != "/payments" || !strings.Contains(a.Request.Body, `"to":"acme"`) {
		t.Fatalf("stored request = %+v", a.Request)
	}
	if len(a.Pinned) != 1 || a.Pinned[0] != "body.to" || len(a.Filled) != 1 {
		t.Fatalf("pinned/filled = %v / %v", a.Pinned, a.Filled)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatal("a gated call reached the upstream before approval")
	}
	// The operator who created the session cannot approve it.
	b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", op, map[string]any{}).WantProblem(t, 403, "forbidden")
	if r := b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", alice, map[string]any{"comment": "looks right"}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	select {
	case r := <-res:
		if r.Status != 200 || !strings.Contains(string(r.Body), `acme`) {
			t.Fatalf("waiting call: %d %s", r.Status, r.Body)
		}
		brokertest.AssertNoCanary(t, "executed answer", r.Body)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting call did not return after approval")
	}
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("upstream received %d requests, want exactly 1", n)
	}
	// Decided: a second decision is a conflict; the result stays available.
	b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", alice, nil).WantProblem(t, 409, "conflict")
	if r := b.Do("GET", b.Sandbox+"/v1/actions/"+a.ID+"/result", s.Token, nil); r.Status != 200 {
		t.Fatalf("result: %d %s", r.Status, r.Body)
	}
	// Another session cannot see it.
	other := brokertest.GatedSession(b, op, nil)
	b.Do("GET", b.Sandbox+"/v1/actions/"+a.ID, other.Token, nil).WantProblem(t, 404, "not_found")

	recs := brokertest.ParseAudit(t, b.AuditExport())
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Type] = true
	}
	for _, typ := range []string{"action.pending", "action.approved", "call.allowed", "action.executed"} {
		if !seen[typ] {
			t.Errorf("no %s record in the audit log", typ)
		}
	}
}

func TestGatedCallDeniedAndAsync(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	bob := b.NewToken("reviewer", "bob")
	s := brokertest.GatedSession(b, op, nil)
	r := b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`)
	if r.Status != http.StatusAccepted || r.Header.Get("Location") == "" {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	a := brokertest.DecodeAction(t, r)
	if a.Status != "pending" {
		t.Fatalf("status %s", a.Status)
	}
	// Long-poll while bob denies.
	res := make(chan brokertest.Response, 1)
	go func() { res <- b.Do("GET", b.Sandbox+r.Header.Get("Location"), s.Token, nil, "Prefer", "wait=30") }()
	if r := b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/deny", bob, map[string]any{"comment": "wrong vendor"}); r.Status != 200 {
		t.Fatalf("deny: %d %s", r.Status, r.Body)
	}
	got := brokertest.DecodeAction(t, <-res)
	if got.Status != "denied" {
		t.Fatalf("long-poll saw %s", got.Status)
	}
	b.Do("GET", b.Sandbox+"/v1/actions/"+a.ID+"/result", s.Token, nil).WantProblem(t, 403, "approval_denied")
	b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", bob, nil).WantProblem(t, 409, "conflict")
	if len(up.Requests()) != 0 {
		t.Fatal("a denied action reached the upstream")
	}
	// The identity that created a session cannot approve its actions.
	mine := brokertest.GatedSession(b, brokertest.ProcAdminToken, nil)
	a2 := brokertest.DecodeAction(t, b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", mine.Token, `{"amount": 5}`))
	p := b.Do("POST", b.Control+"/v1/approvals/"+a2.ID+"/approve", brokertest.ProcAdminToken, nil).WantProblem(t, 403, "forbidden")
	if !strings.Contains(p["detail"].(string), "created") {
		t.Errorf("self-approval detail: %v", p["detail"])
	}
}

func TestApprovalQuorumAndExactlyOnce(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	reviewers := []string{b.NewToken("reviewer", "r1"), b.NewToken("reviewer", "r2"), b.NewToken("reviewer", "r3")}
	s := brokertest.GatedSession(b, op, map[string]any{"approvals_required": 2})
	a := brokertest.DecodeAction(t, b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`))
	r := b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", reviewers[0], nil)
	if got := brokertest.DecodeAction(t, r); r.Status != 200 || got.Status != "pending" || got.Approvals != 1 {
		t.Fatalf("first of two approvals: %d %s", r.Status, r.Body)
	}
	b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", reviewers[0], nil).WantProblem(t, 409, "conflict")
	// Two reviewers click at once, each many times: the request is sent once.
	var wg sync.WaitGroup
	for _, tok := range reviewers[1:] {
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", tok, nil)
			}()
		}
	}
	wg.Wait()
	final := brokertest.DecodeAction(t, b.Do("GET", b.Sandbox+"/v1/actions/"+a.ID, s.Token, nil, "Prefer", "wait=20"))
	if final.Status != "executed" {
		t.Fatalf("status %s", final.Status)
	}
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("the approved request was sent %d times", n)
	}
}

func TestKillDeniesPendingAndKillswitchBlocksApproval(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "carol")
	s := brokertest.GatedSession(b, op, nil)
	a := brokertest.DecodeAction(t, b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`))

	if r := b.Do("POST", b.Control+"/v1/killswitch", rev, nil); r.Status != 200 {
		t.Fatal(r.Status)
	}
	b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", rev, nil).WantProblem(t, 503, "killswitch_engaged")
	b.Do("DELETE", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil)

	if r := b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, op, nil); r.Status != 200 {
		t.Fatal(r.Status)
	}
	got := brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+a.ID, rev, nil))
	if got.Status != "denied" {
		t.Fatalf("pending action of a killed session: %s", got.Status)
	}
	b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", rev, nil).WantProblem(t, 409, "conflict")
	if len(up.Requests()) != 0 {
		t.Fatal("an action of a killed session ran")
	}
}

func TestApprovalExpiresAndWebhook(t *testing.T) {
	up := brokertest.NewUpstream(t)
	const secret = "webhook-secret-0123456789"
	type delivery struct {
		event string
		ok    bool
	}
	got := make(chan delivery, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(r.Header.Get("X-Airlock-Timestamp") + "."))
		m.Write(body)
		var ev struct{ Event string }
		_ = json.Unmarshal(body, &ev)
		got <- delivery{ev.Event, hmac.Equal([]byte(r.Header.Get("X-Airlock-Signature")), []byte("sha256="+hex.EncodeToString(m.Sum(nil))))}
	}))
	defer hook.Close()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: "approval: {timeout: 1s, webhook: {url: " + hook.URL + ", secret: " + secret + "}}\n"})
	s := brokertest.GatedSession(b, brokertest.ProcAdminToken, nil)
	r := b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`, "Prefer", "wait=20")
	r.WantProblem(t, 403, "approval_expired")
	for _, want := range []string{"action.pending", "action.expired"} {
		select {
		case d := <-got:
			if d.event != want || !d.ok {
				t.Fatalf("delivery %+v, want %s with a valid signature", d, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s delivery", want)
		}
	}
	if len(up.Requests()) != 0 {
		t.Fatal("an expired action ran")
	}
}
