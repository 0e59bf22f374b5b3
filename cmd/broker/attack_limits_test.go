package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Attacks on the limits of a grant: a flood of pending actions (class 7)
// and usage lost across restarts (class 11).

// limGated queues one gated payment and answers the broker's response.
func limGated(b *brokertest.Proc, token string, amount int) brokertest.Response {
	b.T.Helper()
	return b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", token, fmt.Sprintf(`{"amount": %d}`, amount))
}

// limQueued wants a gated call to be held (202 pending) and returns its action id.
func limQueued(t *testing.T, r brokertest.Response) string {
	t.Helper()
	if r.Status != http.StatusAccepted {
		t.Fatalf("gated call: got %d, want 202 pending: %s", r.Status, r.Body)
	}
	a := brokertest.DecodeAction(t, r)
	if a.Status != "pending" || a.ID == "" {
		t.Fatalf("gated call: %s", r.Body)
	}
	return a.ID
}

// limDenials counts the audited refusals with code.
func limDenials(t *testing.T, b *brokertest.Proc, code string) int {
	t.Helper()
	n := 0
	for _, r := range brokertest.ParseAudit(t, b.AuditExport()) {
		if r.Type == "call.denied" && r.Code == code {
			n++
		}
	}
	return n
}

type limGrant struct {
	Uses         int64              `json:"uses"`
	PendingUses  int64              `json:"pending_uses"`
	Spent        map[string]float64 `json:"spent"`
	PendingSpent map[string]float64 `json:"pending_spent"`
}

func limGrantView(t *testing.T, b *brokertest.Proc, id string) limGrant {
	t.Helper()
	r := b.Do("GET", b.Control+"/v1/grants/"+id, brokertest.ProcAdminToken, nil)
	if r.Status != 200 {
		t.Fatalf("grant %s: %d %s", id, r.Status, r.Body)
	}
	var g limGrant
	if err := json.Unmarshal(r.Body, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// limDecide approves or denies an action as reviewer; an approval waits
// until the action ran and wants it executed.
func limDecide(t *testing.T, b *brokertest.Proc, reviewer, sessionToken, id, verdict string) {
	t.Helper()
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/"+verdict, reviewer, map[string]any{}); r.Status != 200 {
		t.Fatalf("%s %s: %d %s", verdict, id, r.Status, r.Body)
	}
	if verdict != "approve" {
		return
	}
	if a := brokertest.DecodeAction(t, b.Do("GET", b.Sandbox+"/v1/actions/"+id, sessionToken, nil, "Prefer", "wait=20")); a.Status != "executed" {
		t.Fatalf("approved action %s: %s", id, a.Status)
	}
}

func limUpstreamCount(up *brokertest.Upstream, path string) int {
	n := 0
	for _, r := range up.Requests() {
		if r.RawPath == path {
			n++
		}
	}
	return n
}

// A session cannot queue more pending actions than the configured limit
// (default 16): the 17th gated call is refused, audited, and a decision
// frees the slot.
func TestLimitsPendingFloodIsBounded(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "rita")
	s := brokertest.GatedSession(b, op, nil)

	var ids []string
	for i := 0; i < 16; i++ {
		ids = append(ids, limQueued(t, limGated(b, s.Token, 1)))
	}
	for i := 0; i < 3; i++ {
		p := limGated(b, s.Token, 1).WantProblem(t, http.StatusTooManyRequests, "too_many_pending")
		brokertest.AssertNoCanary(t, "refusal", []byte(fmt.Sprint(p)))
	}
	if n := limDenials(t, b, "too_many_pending"); n != 3 {
		t.Fatalf("%d audited too_many_pending refusals, want 3", n)
	}
	var list struct{ Items []brokertest.ActionView }
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals?status=pending", rev, nil).Body, &list)
	if len(list.Items) != 16 {
		t.Fatalf("%d actions wait for a reviewer, want 16", len(list.Items))
	}
	if g := limGrantView(t, b, s.Grants[0].ID); g.PendingUses != 16 || g.Uses != 0 {
		t.Fatalf("grant view: %+v, want 16 pending uses and none used", g)
	}
	// Another session has its own limit.
	other := brokertest.GatedSession(b, op, nil)
	limQueued(t, limGated(b, other.Token, 1))

	// A denial frees a slot, and one only.
	limDecide(t, b, rev, s.Token, ids[0], "deny")
	limQueued(t, limGated(b, s.Token, 1))
	limGated(b, s.Token, 1).WantProblem(t, http.StatusTooManyRequests, "too_many_pending")
	// So does an approval (the action leaves pending when it executes).
	limDecide(t, b, rev, s.Token, ids[1], "approve")
	limQueued(t, limGated(b, s.Token, 1))
	limGated(b, s.Token, 1).WantProblem(t, http.StatusTooManyRequests, "too_many_pending")
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("the upstream received %d requests, want only the approved one", n)
	}
}

// A session cannot queue more pending actions than its grant's max_uses
// could ever allow, nor more than its budget: pending actions hold their
// use and amounts.
func TestLimitsPendingWithinGrant(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "rita")

	t.Run("max_uses", func(t *testing.T) {
		sent := len(up.Requests())
		s := brokertest.GatedSession(b, op, map[string]any{"max_uses": 2})
		a1 := limQueued(t, limGated(b, s.Token, 1))
		a2 := limQueued(t, limGated(b, s.Token, 1))
		for i := 0; i < 5; i++ {
			limGated(b, s.Token, 1).WantProblem(t, http.StatusForbidden, "grant_exhausted")
		}
		if n := limDenials(t, b, "grant_exhausted"); n != 5 {
			t.Fatalf("%d audited grant_exhausted refusals, want 5", n)
		}
		if g := limGrantView(t, b, s.Grants[0].ID); g.PendingUses != 2 || g.Uses != 0 {
			t.Fatalf("grant view: %+v", g)
		}
		// A denied action gives its use back.
		limDecide(t, b, rev, s.Token, a1, "deny")
		a3 := limQueued(t, limGated(b, s.Token, 1))
		limGated(b, s.Token, 1).WantProblem(t, http.StatusForbidden, "grant_exhausted")
		limDecide(t, b, rev, s.Token, a2, "approve")
		limDecide(t, b, rev, s.Token, a3, "approve")
		if g := limGrantView(t, b, s.Grants[0].ID); g.PendingUses != 0 || g.Uses != 2 {
			t.Fatalf("grant view after both ran: %+v", g)
		}
		limGated(b, s.Token, 1).WantProblem(t, http.StatusForbidden, "grant_exhausted")
		if n := len(up.Requests()) - sent; n != 2 {
			t.Fatalf("the upstream received %d requests, want max_uses (2)", n)
		}
	})

	t.Run("budget", func(t *testing.T) {
		sent := len(up.Requests())
		s := brokertest.GatedSession(b, op, map[string]any{"budget": map[string]any{"body.amount": 100}})
		a1 := limQueued(t, limGated(b, s.Token, 60))
		limGated(b, s.Token, 50).WantProblem(t, http.StatusForbidden, "budget_exceeded")
		a2 := limQueued(t, limGated(b, s.Token, 40))
		limGated(b, s.Token, 1).WantProblem(t, http.StatusForbidden, "budget_exceeded")
		if n := limDenials(t, b, "budget_exceeded"); n != 2 {
			t.Fatalf("%d audited budget_exceeded refusals, want 2", n)
		}
		if g := limGrantView(t, b, s.Grants[0].ID); g.PendingSpent["body.amount"] != 100 || g.Spent["body.amount"] != 0 {
			t.Fatalf("grant view: %+v", g)
		}
		limDecide(t, b, rev, s.Token, a1, "deny")
		a3 := limQueued(t, limGated(b, s.Token, 50))
		limGated(b, s.Token, 11).WantProblem(t, http.StatusForbidden, "budget_exceeded")
		limDecide(t, b, rev, s.Token, a2, "approve")
		limDecide(t, b, rev, s.Token, a3, "approve")
		limQueued(t, limGated(b, s.Token, 10)) // 40 + 50 spent: 10 left
		limGated(b, s.Token, 1).WantProblem(t, http.StatusForbidden, "budget_exceeded")
		sum := 0.0
		for _, r := range up.Requests()[sent:] {
			var body struct{ Amount float64 }
			_ = json.Unmarshal(r.Body, &body)
			sum += body.Amount
		}
		if sum != 90 {
			t.Fatalf("the upstream received amounts summing to %v, want 90 (the approved ones)", sum)
		}
	})
}

// After a restart the stored pending actions hold their reservations and
// slots again: a restart is no way around either limit.
func TestLimitsPendingSurviveRestart(t *testing.T) {
	up := brokertest.NewUpstream(t)
	data := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "rita")
	limited := brokertest.GatedSession(b, op, map[string]any{"max_uses": 2, "budget": map[string]any{"body.amount": 100}})
	open := brokertest.GatedSession(b, op, nil)
	l1 := limQueued(t, limGated(b, limited.Token, 30))
	limQueued(t, limGated(b, limited.Token, 60))
	for i := 0; i < 16; i++ {
		limQueued(t, limGated(b, open.Token, 1))
	}
	limGated(b, open.Token, 1).WantProblem(t, http.StatusTooManyRequests, "too_many_pending")

	b.Stop()
	b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	limGated(b, limited.Token, 1).WantProblem(t, http.StatusForbidden, "grant_exhausted")
	limGated(b, open.Token, 1).WantProblem(t, http.StatusTooManyRequests, "too_many_pending")
	if g := limGrantView(t, b, limited.Grants[0].ID); g.PendingUses != 2 || g.PendingSpent["body.amount"] != 90 {
		t.Fatalf("grant view after restart: %+v", g)
	}
	// Decisions after the restart free exactly what the actions held.
	limDecide(t, b, rev, limited.Token, l1, "approve")
	limGated(b, limited.Token, 1).WantProblem(t, http.StatusForbidden, "grant_exhausted")
	if g := limGrantView(t, b, limited.Grants[0].ID); g.Uses != 1 || g.PendingUses != 1 || g.Spent["body.amount"] != 30 || g.PendingSpent["body.amount"] != 60 {
		t.Fatalf("grant view after one approval: %+v", g)
	}
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("the upstream received %d requests, want 1", n)
	}
}

// approval.max_pending_per_session sets the limit.
func TestLimitsPendingLimitConfigured(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: "approval: {max_pending_per_session: 2}\n"})
	rev := b.NewToken("reviewer", "rita")
	s := brokertest.GatedSession(b, brokertest.ProcAdminToken, nil)
	a1 := limQueued(t, limGated(b, s.Token, 1))
	limQueued(t, limGated(b, s.Token, 1))
	limGated(b, s.Token, 1).WantProblem(t, http.StatusTooManyRequests, "too_many_pending")
	limDecide(t, b, rev, s.Token, a1, "deny")
	limQueued(t, limGated(b, s.Token, 1))
	if n := limDenials(t, b, "too_many_pending"); n != 1 {
		t.Fatalf("%d audited too_many_pending refusals, want 1", n)
	}
}

// limCall is one sandbox call from a goroutine other than the test's: it
// reports the status instead of failing the test.
func limCall(client *http.Client, method, url, token, body string) (int, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// Concurrent calls on max_uses and budget grants, across restarts: the
// upstream receives exactly max_uses calls and exactly the budget in total,
// and every call after that is refused, however the calls interleaved
// before each restart.
func TestLimitsSurviveRestartsExactly(t *testing.T) {
	up := brokertest.NewUpstream(t)
	data := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	const (
		grantsN  = 16
		maxUses  = 10
		budget   = 20
		rounds   = 3
		callers  = 4
		attempts = 2 // per caller and round: 8 tries per round, 24 in all, against 10 uses and 20 units
	)
	type target struct {
		token    string
		limPath  string
		spendURL string
	}
	var ts []target
	for i := 0; i < grantsN; i++ {
		lim := fmt.Sprintf("/lim/%d", i)
		spend := fmt.Sprintf("/spend/%d", i)
		s := b.Session(brokertest.TrustedSession(
			map[string]any{"upstream": "open", "max_uses": maxUses, "rules": []any{map[string]any{"method": "GET", "path": lim}}},
			map[string]any{"upstream": "open", "budget": map[string]any{"body.amount": budget},
				"rules": []any{map[string]any{"method": "POST", "path": spend, "irreversible": false}}},
		))
		ts = append(ts, target{token: s.Token, limPath: lim, spendURL: spend})
	}
	client := &http.Client{}
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		for _, tg := range ts {
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < attempts; k++ {
						_, _ = limCall(client, "GET", b.Sandbox+"/v1/proxy/open"+tg.limPath, tg.token, "")
						_, _ = limCall(client, "POST", b.Sandbox+"/v1/proxy/open"+tg.spendURL, tg.token, `{"amount": 1}`)
					}
				}()
			}
		}
		wg.Wait()
		b.Stop()
		b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	}
	for _, tg := range ts {
		if n := limUpstreamCount(up, tg.limPath); n != maxUses {
			t.Errorf("%s: the upstream received %d calls across %d restarts, want exactly max_uses (%d)", tg.limPath, n, rounds, maxUses)
		}
		if n := limUpstreamCount(up, tg.spendURL); n != budget {
			t.Errorf("%s: the upstream received %d units across %d restarts, want exactly the budget (%d)", tg.spendURL, n, rounds, budget)
		}
		b.Do("GET", b.Sandbox+"/v1/proxy/open"+tg.limPath, tg.token, nil).WantProblem(t, http.StatusForbidden, "grant_exhausted")
		b.Do("POST", b.Sandbox+"/v1/proxy/open"+tg.spendURL, tg.token, `{"amount": 1}`).WantProblem(t, http.StatusForbidden, "budget_exceeded")
	}
	body := b.AuditExport()
	brokertest.AssertNoCanary(t, "audit export", body)
	if !bytes.Contains(body, []byte(`"grant_exhausted"`)) {
		t.Fatal("no grant_exhausted refusal was audited")
	}
}

// rt3Budget is a grant budgeting a body field and a query parameter on a
// rule that constrains nothing itself.
func rt3Budget() map[string]any {
	return map[string]any{"upstream": "api", "budget": map[string]any{"body.fee": 10, "query.units": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/pay"}}}
}

// TestAttackBudgetNeedsJSONBody (class 1, budgets): a budget on a body
// field was counted only when the body was declared JSON. Sent as
// text/plain, with no Content-Type, as text/json or with a Content-Type the
// broker cannot parse, {"fee": 1000} passed uncounted, and an upstream that
// decodes the body whatever its type (Go's json.NewDecoder(r.Body), Flask's
// get_json(force=True)) spent 1000 of a budget of 10.
func TestAttackBudgetNeedsJSONBody(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(rt3Budget()))
	body := `{"fee": 1000}`
	var attacks []rtAttack
	for _, ct := range []string{"text/plain", "text/json", "application/x-json", "application/octet-stream", ""} {
		var h []string
		if ct != "" {
			h = []string{"Content-Type", ct}
		}
		attacks = append(attacks, rtAttack{"type " + ct, "POST", "/v1/proxy/api/pay", h, body, 403, "constraint_violated", "type"})
	}
	rtRefused(t, b, up, s.Token, attacks)
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay", header: rtJSON, body: `{"fee": 4}`},
		{method: "POST", path: "/v1/proxy/api/pay?units=3"},
	})
	b.Do("POST", b.Sandbox+"/v1/proxy/api/pay", s.Token, `{"fee": 7}`).WantProblem(t, 403, "budget_exceeded")
	// A grant that reads no body field still takes any body.
	free := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"query.units": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/send", "constraints": map[string]any{"query.to": map[string]any{"pin": "acme"}}}}}))
	rtAllowed(t, b, up, free.Token, []rtAttack{{method: "POST", path: "/v1/proxy/api/send", header: []string{"Content-Type", "text/plain"}, body: `to=mallory`}})
}
