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
)

// gatedSession is untrusted input + a sensitive upstream + an irreversible rule.
func gatedSession(b *brokerProc, token string, extra map[string]any) created {
	b.t.Helper()
	g := map[string]any{"upstream": "api", "rules": []any{
		map[string]any{"method": "POST", "path": "/payments", "constraints": map[string]any{
			"body.to": map[string]any{"pin": "acme"}, "body.amount": map[string]any{"max": 100}}},
		map[string]any{"method": "GET", "path": "/slow"},
	}}
	for k, v := range extra {
		g[k] = v
	}
	r := b.do("POST", b.control+"/v1/sessions", token, map[string]any{"task_id": "t-gate", "isolation": "microvm", "grants": []any{g}})
	if r.status != 201 {
		b.t.Fatalf("gated session: %d %s", r.status, r.body)
	}
	var c created
	_ = json.Unmarshal(r.body, &c)
	return c
}

func (b *brokerProc) newToken(role, name string) string {
	b.t.Helper()
	var out struct{ Token string }
	r := b.do("POST", b.control+"/v1/tokens", adminToken, map[string]any{"role": role, "name": name})
	if r.status != 201 {
		b.t.Fatalf("token: %d %s", r.status, r.body)
	}
	_ = json.Unmarshal(r.body, &out)
	return out.Token
}

type actionView struct {
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

func decodeAction(t *testing.T, r response) actionView {
	t.Helper()
	var a actionView
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatalf("action: %s", r.body)
	}
	return a
}

func TestGatedCallWaitsForApproval(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	op := b.newToken("operator", "orchestrator")
	alice := b.newToken("reviewer", "alice")
	s := gatedSession(b, op, nil)

	// The sandbox waits (Prefer: wait) while a reviewer decides.
	res := make(chan response, 1)
	go func() {
		res <- b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 42}`, "Prefer", "wait=30")
	}()
	a := decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+b.pendingAction(t, alice), alice, nil))
	if a.Request.Method != "POST" || a.Request.Path != "/payments" || !strings.Contains(a.Request.Body, `"to":"acme"`) {
		t.Fatalf("stored request = %+v", a.Request)
	}
	if len(a.Pinned) != 1 || a.Pinned[0] != "body.to" || len(a.Filled) != 1 {
		t.Fatalf("pinned/filled = %v / %v", a.Pinned, a.Filled)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatal("a gated call reached the upstream before approval")
	}
	// The operator who created the session cannot approve it.
	b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", op, map[string]any{}).wantProblem(t, 403, "forbidden")
	if r := b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", alice, map[string]any{"comment": "looks right"}); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	select {
	case r := <-res:
		if r.status != 200 || !strings.Contains(string(r.body), `acme`) {
			t.Fatalf("waiting call: %d %s", r.status, r.body)
		}
		assertNoCanary(t, "executed answer", r.body)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting call did not return after approval")
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("upstream received %d requests, want exactly 1", n)
	}
	// Decided: a second decision is a conflict; the result stays available.
	b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", alice, nil).wantProblem(t, 409, "conflict")
	if r := b.do("GET", b.sandbox+"/v1/actions/"+a.ID+"/result", s.Token, nil); r.status != 200 {
		t.Fatalf("result: %d %s", r.status, r.body)
	}
	// Another session cannot see it.
	other := gatedSession(b, op, nil)
	b.do("GET", b.sandbox+"/v1/actions/"+a.ID, other.Token, nil).wantProblem(t, 404, "not_found")

	recs := parseAudit(t, b.auditExport())
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
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	op := b.newToken("operator", "orchestrator")
	bob := b.newToken("reviewer", "bob")
	s := gatedSession(b, op, nil)
	r := b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`)
	if r.status != http.StatusAccepted || r.header.Get("Location") == "" {
		t.Fatalf("gated call: %d %s", r.status, r.body)
	}
	a := decodeAction(t, r)
	if a.Status != "pending" {
		t.Fatalf("status %s", a.Status)
	}
	// Long-poll while bob denies.
	res := make(chan response, 1)
	go func() { res <- b.do("GET", b.sandbox+r.header.Get("Location"), s.Token, nil, "Prefer", "wait=30") }()
	if r := b.do("POST", b.control+"/v1/approvals/"+a.ID+"/deny", bob, map[string]any{"comment": "wrong vendor"}); r.status != 200 {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	got := decodeAction(t, <-res)
	if got.Status != "denied" {
		t.Fatalf("long-poll saw %s", got.Status)
	}
	b.do("GET", b.sandbox+"/v1/actions/"+a.ID+"/result", s.Token, nil).wantProblem(t, 403, "approval_denied")
	b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", bob, nil).wantProblem(t, 409, "conflict")
	if len(up.requests()) != 0 {
		t.Fatal("a denied action reached the upstream")
	}
	// The identity that created a session cannot approve its actions.
	mine := gatedSession(b, adminToken, nil)
	a2 := decodeAction(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", mine.Token, `{"amount": 5}`))
	p := b.do("POST", b.control+"/v1/approvals/"+a2.ID+"/approve", adminToken, nil).wantProblem(t, 403, "forbidden")
	if !strings.Contains(p["detail"].(string), "created") {
		t.Errorf("self-approval detail: %v", p["detail"])
	}
}

func TestApprovalQuorumAndExactlyOnce(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	op := b.newToken("operator", "orchestrator")
	reviewers := []string{b.newToken("reviewer", "r1"), b.newToken("reviewer", "r2"), b.newToken("reviewer", "r3")}
	s := gatedSession(b, op, map[string]any{"approvals_required": 2})
	a := decodeAction(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`))
	r := b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", reviewers[0], nil)
	if got := decodeAction(t, r); r.status != 200 || got.Status != "pending" || got.Approvals != 1 {
		t.Fatalf("first of two approvals: %d %s", r.status, r.body)
	}
	b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", reviewers[0], nil).wantProblem(t, 409, "conflict")
	// Two reviewers click at once, each many times: the request is sent once.
	var wg sync.WaitGroup
	for _, tok := range reviewers[1:] {
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", tok, nil)
			}()
		}
	}
	wg.Wait()
	final := decodeAction(t, b.do("GET", b.sandbox+"/v1/actions/"+a.ID, s.Token, nil, "Prefer", "wait=20"))
	if final.Status != "executed" {
		t.Fatalf("status %s", final.Status)
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("the approved request was sent %d times", n)
	}
}

func TestKillDeniesPendingAndKillswitchBlocksApproval(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	op := b.newToken("operator", "orchestrator")
	rev := b.newToken("reviewer", "carol")
	s := gatedSession(b, op, nil)
	a := decodeAction(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`))

	if r := b.do("POST", b.control+"/v1/killswitch", rev, nil); r.status != 200 {
		t.Fatal(r.status)
	}
	b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", rev, nil).wantProblem(t, 503, "killswitch_engaged")
	b.do("DELETE", b.control+"/v1/killswitch", adminToken, nil)

	if r := b.do("DELETE", b.control+"/v1/sessions/"+s.ID, op, nil); r.status != 200 {
		t.Fatal(r.status)
	}
	got := decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+a.ID, rev, nil))
	if got.Status != "denied" {
		t.Fatalf("pending action of a killed session: %s", got.Status)
	}
	b.do("POST", b.control+"/v1/approvals/"+a.ID+"/approve", rev, nil).wantProblem(t, 409, "conflict")
	if len(up.requests()) != 0 {
		t.Fatal("an action of a killed session ran")
	}
}

func TestApprovalExpiresAndWebhook(t *testing.T) {
	up := newUpstream(t)
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
	b := startBroker(t, harnessOpts{upstream: up.URL, extraYAML: "approval: {timeout: 1s, webhook: {url: " + hook.URL + ", secret: " + secret + "}}\n"})
	s := gatedSession(b, adminToken, nil)
	r := b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`, "Prefer", "wait=20")
	r.wantProblem(t, 403, "approval_expired")
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
	if len(up.requests()) != 0 {
		t.Fatal("an expired action ran")
	}
}
