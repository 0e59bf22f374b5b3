package main

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/pgtest"
)

// Grant limits across replicas: exact max_uses and budgets under
// concurrent callers, a held action's use released once.

// TestReplicasExactLimits: two real brokers on one PostgreSQL, callers on
// both at once. A grant with max_uses 7 allows exactly 7 calls: 7 upstream
// hits and 7 call.allowed records, every other call grant_exhausted; a
// budget of 5 (amounts of 1) allows exactly 5, the rest budget_exceeded.
// After both stop, a broker started anew keeps the counts.
func TestReplicasExactLimits(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := newUpstream(t)
	a := pgBroker(t, up, dsn, "")
	b := pgBroker(t, up, dsn, "")

	uses := apiGrant(map[string]any{"method": "GET", "path": "/ok"})
	uses["max_uses"] = 7
	spend := apiGrant(map[string]any{"method": "POST", "path": "/pay"})
	spend["budget"] = map[string]any{"body.amount": 5}
	s := a.session(trustedSession(uses, spend))

	hits := func(path string) int {
		n := 0
		for _, r := range up.requests() {
			if strings.HasSuffix(r.RawPath, path) {
				n++
			}
		}
		return n
	}
	// storm makes per×2 callers (per on each broker) call twice each and
	// counts the answers by status and code.
	storm := func(method, path string, body any, per int) map[string]int {
		var mu sync.Mutex
		got := map[string]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, p := range []*brokerProc{a, b} {
			for range per {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 2 {
						r := p.do(method, p.sandbox+"/v1/proxy/api"+path, s.Token, body)
						key := strconv.Itoa(r.status)
						if r.status != 200 {
							var pb struct{ Code string }
							_ = json.Unmarshal(r.body, &pb)
							key += " " + pb.Code
						}
						mu.Lock()
						got[key]++
						mu.Unlock()
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		return got
	}

	if got, want := storm("GET", "/ok", nil, 12), map[string]int{"200": 7, "403 grant_exhausted": 41}; !reflect.DeepEqual(got, want) {
		t.Errorf("48 calls across two brokers on max_uses 7: %v, want %v", got, want)
	}
	if n := hits("/ok"); n != 7 {
		t.Errorf("upstream saw %d calls on max_uses 7, want 7", n)
	}
	pay := map[string]any{"amount": 1}
	if got, want := storm("POST", "/pay", pay, 8), map[string]int{"200": 5, "403 budget_exceeded": 27}; !reflect.DeepEqual(got, want) {
		t.Errorf("32 calls of 1 across two brokers on a budget of 5: %v, want %v", got, want)
	}
	if n := hits("/pay"); n != 5 {
		t.Errorf("upstream saw %d calls on a budget of 5, want 5", n)
	}
	allowed := 0
	for _, r := range parseAudit(t, b.auditExport()) {
		if r.Type == "call.allowed" && r.SessionID == s.ID {
			allowed++
		}
	}
	if allowed != 12 {
		t.Errorf("%d call.allowed records, want 12 (7 uses, 5 of the budget)", allowed)
	}

	// Restarted: the counts are the database's.
	a.stop()
	b.stop()
	c := pgBroker(t, up, dsn, "")
	c.do("GET", c.sandbox+"/v1/proxy/api/ok", s.Token, nil).wantProblem(t, 403, "grant_exhausted")
	c.do("POST", c.sandbox+"/v1/proxy/api/pay", s.Token, pay).wantProblem(t, 403, "budget_exceeded")
	if hits("/ok") != 7 || hits("/pay") != 5 {
		t.Errorf("after the restart the upstream saw %d and %d calls, want 7 and 5", hits("/ok"), hits("/pay"))
	}
	var g struct {
		Uses int64 `json:"uses"`
	}
	_ = json.Unmarshal(c.do("GET", c.control+"/v1/grants/"+s.Grants[0].ID, adminToken, nil).body, &g)
	if g.Uses != 7 {
		t.Errorf("the grant's usage after the restart: %d uses, want 7", g.Uses)
	}
}

// limitedGatedSession is a session whose one grant gates POST /payments
// (untrusted input, sensitive upstream, irreversible) and allows GET /ok
// ungated, both counting against max_uses.
func limitedGatedSession(b *brokerProc, token string, maxUses int) created {
	b.t.Helper()
	g := map[string]any{"upstream": "api", "max_uses": maxUses, "rules": []any{
		map[string]any{"method": "POST", "path": "/payments", "constraints": map[string]any{
			"body.to": map[string]any{"pin": "acme"}, "body.amount": map[string]any{"max": 100}}},
		map[string]any{"method": "GET", "path": "/ok"},
	}}
	r := b.do("POST", b.control+"/v1/sessions", token, map[string]any{"task_id": "t-limit", "isolation": "microvm", "grants": []any{g}})
	if r.status != http.StatusCreated {
		b.t.Fatalf("limited gated session: %d %s", r.status, r.body)
	}
	var c created
	_ = json.Unmarshal(r.body, &c)
	return c
}

// held makes a gated call on p and returns its pending action's id.
func held(t *testing.T, p *brokerProc, token string) string {
	t.Helper()
	r := p.do("POST", p.sandbox+"/v1/proxy/api/payments", token, `{"amount": 1}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("gated call: %d %s", r.status, r.body)
	}
	return decodeAction(t, r).ID
}

// okHits counts the upstream's GET /ok requests.
func okHits(up *upstreamServer) int {
	n := 0
	for _, r := range up.requests() {
		if strings.HasSuffix(r.RawPath, "/ok") {
			n++
		}
	}
	return n
}

// feedBarrier waits until to's change feed applied every change made so
// far: a sandbox waits on to for a gated call of session gated (a session
// of gatedSession), which a reviewer denies on from; only to's feed wakes
// that waiter (within its 30 s wait), and the feed applies in order.
func feedBarrier(t *testing.T, from, to *brokerProc, reviewer string, gated created) {
	t.Helper()
	res := make(chan response, 1)
	go func() {
		res <- to.do("POST", to.sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 1}`, "Prefer", "wait=30")
	}()
	id := from.pendingAction(t, reviewer)
	if r := from.do("POST", from.control+"/v1/approvals/"+id+"/deny", reviewer, map[string]any{}); r.status != 200 {
		t.Fatalf("barrier deny: %d %s", r.status, r.body)
	}
	select {
	case r := <-res:
		if r.status == http.StatusAccepted {
			t.Fatalf("barrier: the waiter was not woken by the decision: %d %s", r.status, r.body)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("barrier: the waiter was not woken by the decision")
	}
}

// TestReplicasPendingReleasedOnce: a pending action's reservation on a
// shared count is given back exactly once, by the replica that moves it out
// of pending, whoever created it and whoever restarted meanwhile.
//
// 1. max_uses 3: an action held on A, B restarted (it counts the stored
// pending action too), two calls take the rest, the action is denied on B:
// exactly one more call is allowed (3 uses in all), not two.
// 2. max_uses 2: an action held on A, A stopped, denied on B (which never
// counted it): its use comes back, two calls are allowed.
func TestReplicasPendingReleasedOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := newUpstream(t)
	a := pgBroker(t, up, dsn, "")
	op := a.newToken("operator", "orchestrator")
	alice := a.newToken("reviewer", "alice")
	b := pgBroker(t, up, dsn, "")
	s := limitedGatedSession(a, op, 3)
	barrier := gatedSession(a, op, nil)
	base := okHits(up)

	id := held(t, a, s.Token)
	b.stop()
	b = pgBroker(t, up, dsn, "") // restarted: it loads the pending action
	for range 2 {
		if r := a.do("GET", a.sandbox+"/v1/proxy/api/ok", s.Token, nil); r.status != 200 {
			t.Fatalf("call within max_uses: %d %s", r.status, r.body)
		}
	}
	a.do("GET", a.sandbox+"/v1/proxy/api/ok", s.Token, nil).wantProblem(t, 403, "grant_exhausted")
	if r := b.do("POST", b.control+"/v1/approvals/"+id+"/deny", alice, map[string]any{}); r.status != 200 {
		t.Fatalf("deny on B: %d %s", r.status, r.body)
	}
	feedBarrier(t, b, a, alice, barrier) // A applied the denial
	allowed := 0
	for i := range 6 {
		p := []*brokerProc{a, b}[i%2]
		if p.do("GET", p.sandbox+"/v1/proxy/api/ok", s.Token, nil).status == 200 {
			allowed++
		}
	}
	if allowed != 1 || okHits(up)-base != 3 {
		t.Errorf("after the denial %d more calls were allowed (want 1); the upstream saw %d uses of max_uses 3", allowed, okHits(up)-base)
	}

	// 2. The creator is gone: the replica that denies gives the use back.
	s2 := limitedGatedSession(b, op, 2)
	id2 := held(t, a, s2.Token)
	a.stop()
	if r := b.do("POST", b.control+"/v1/approvals/"+id2+"/deny", alice, map[string]any{}); r.status != 200 {
		t.Fatalf("deny on B: %d %s", r.status, r.body)
	}
	base = okHits(up)
	allowed = 0
	for range 4 {
		if b.do("GET", b.sandbox+"/v1/proxy/api/ok", s2.Token, nil).status == 200 {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("max_uses 2 with its one pending action denied on another replica: %d calls allowed, want 2 (the use was lost)", allowed)
	}
	if okHits(up)-base != allowed {
		t.Errorf("upstream hits %d, allowed %d", okHits(up)-base, allowed)
	}
}
