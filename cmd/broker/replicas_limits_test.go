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

	"github.com/airlock-broker/airlock/internal/brokertest"
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
	up := brokertest.NewUpstream(t)
	a := pgBroker(t, up, dsn, "")
	b := pgBroker(t, up, dsn, "")

	uses := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})
	uses["max_uses"] = 7
	spend := brokertest.APIGrant(map[string]any{"method": "POST", "path": "/pay"})
	spend["budget"] = map[string]any{"body.amount": 5}
	s := a.Session(brokertest.TrustedSession(uses, spend))

	hits := func(path string) int {
		n := 0
		for _, r := range up.Requests() {
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
		for _, p := range []*brokertest.Proc{a, b} {
			for range per {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 2 {
						r := p.Do(method, p.Sandbox+"/v1/proxy/api"+path, s.Token, body)
						key := strconv.Itoa(r.Status)
						if r.Status != 200 {
							var pb struct{ Code string }
							_ = json.Unmarshal(r.Body, &pb)
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
	for _, r := range brokertest.ParseAudit(t, b.AuditExport()) {
		if r.Type == "call.allowed" && r.SessionID == s.ID {
			allowed++
		}
	}
	if allowed != 12 {
		t.Errorf("%d call.allowed records, want 12 (7 uses, 5 of the budget)", allowed)
	}

	// Restarted: the counts are the database's.
	a.Stop()
	b.Stop()
	c := pgBroker(t, up, dsn, "")
	c.Do("GET", c.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 403, "grant_exhausted")
	c.Do("POST", c.Sandbox+"/v1/proxy/api/pay", s.Token, pay).WantProblem(t, 403, "budget_exceeded")
	if hits("/ok") != 7 || hits("/pay") != 5 {
		t.Errorf("after the restart the upstream saw %d and %d calls, want 7 and 5", hits("/ok"), hits("/pay"))
	}
	var g struct {
		Uses int64 `json:"uses"`
	}
	_ = json.Unmarshal(c.Do("GET", c.Control+"/v1/grants/"+s.Grants[0].ID, brokertest.ProcAdminToken, nil).Body, &g)
	if g.Uses != 7 {
		t.Errorf("the grant's usage after the restart: %d uses, want 7", g.Uses)
	}
}

// limitedGatedSession is a session whose one grant gates POST /payments
// (untrusted input, sensitive upstream, irreversible) and allows GET /ok
// ungated, both counting against max_uses.
func limitedGatedSession(b *brokertest.Proc, token string, maxUses int) brokertest.Created {
	b.T.Helper()
	g := map[string]any{"upstream": "api", "max_uses": maxUses, "rules": []any{
		map[string]any{"method": "POST", "path": "/payments", "constraints": map[string]any{
			"body.to": map[string]any{"pin": "acme"}, "body.amount": map[string]any{"max": 100}}},
		map[string]any{"method": "GET", "path": "/ok"},
	}}
	r := b.Do("POST", b.Control+"/v1/sessions", token, map[string]any{"task_id": "t-limit", "isolation": "microvm", "grants": []any{g}})
	if r.Status != http.StatusCreated {
		b.T.Fatalf("limited gated session: %d %s", r.Status, r.Body)
	}
	var c brokertest.Created
	_ = json.Unmarshal(r.Body, &c)
	return c
}

// held makes a gated call on p and returns its pending action's id.
func held(t *testing.T, p *brokertest.Proc, token string) string {
	t.Helper()
	r := p.Do("POST", p.Sandbox+"/v1/proxy/api/payments", token, `{"amount": 1}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	return brokertest.DecodeAction(t, r).ID
}

// okHits counts the upstream's GET /ok requests.
func okHits(up *brokertest.Upstream) int {
	n := 0
	for _, r := range up.Requests() {
		if strings.HasSuffix(r.RawPath, "/ok") {
			n++
		}
	}
	return n
}

// feedBarrier waits until to's change feed applied every change made so
// far: a sandbox waits on to for a gated call of session gated (a session
// of brokertest.GatedSession), which a reviewer denies on from; only to's feed wakes
// that waiter (within its 30 s wait), and the feed applies in order.
func feedBarrier(t *testing.T, from, to *brokertest.Proc, reviewer string, gated brokertest.Created) {
	t.Helper()
	res := make(chan brokertest.Response, 1)
	go func() {
		res <- to.Do("POST", to.Sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 1}`, "Prefer", "wait=30")
	}()
	id := from.PendingAction(t, reviewer)
	if r := from.Do("POST", from.Control+"/v1/approvals/"+id+"/deny", reviewer, map[string]any{}); r.Status != 200 {
		t.Fatalf("barrier deny: %d %s", r.Status, r.Body)
	}
	select {
	case r := <-res:
		if r.Status == http.StatusAccepted {
			t.Fatalf("barrier: the waiter was not woken by the decision: %d %s", r.Status, r.Body)
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
	up := brokertest.NewUpstream(t)
	a := pgBroker(t, up, dsn, "")
	op := a.NewToken("operator", "orchestrator")
	alice := a.NewToken("reviewer", "alice")
	b := pgBroker(t, up, dsn, "")
	s := limitedGatedSession(a, op, 3)
	barrier := brokertest.GatedSession(a, op, nil)
	base := okHits(up)

	id := held(t, a, s.Token)
	b.Stop()
	b = pgBroker(t, up, dsn, "") // restarted: it loads the pending action
	for range 2 {
		if r := a.Do("GET", a.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
			t.Fatalf("call within max_uses: %d %s", r.Status, r.Body)
		}
	}
	a.Do("GET", a.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 403, "grant_exhausted")
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/deny", alice, map[string]any{}); r.Status != 200 {
		t.Fatalf("deny on B: %d %s", r.Status, r.Body)
	}
	feedBarrier(t, b, a, alice, barrier) // A applied the denial
	allowed := 0
	for i := range 6 {
		p := []*brokertest.Proc{a, b}[i%2]
		if p.Do("GET", p.Sandbox+"/v1/proxy/api/ok", s.Token, nil).Status == 200 {
			allowed++
		}
	}
	if allowed != 1 || okHits(up)-base != 3 {
		t.Errorf("after the denial %d more calls were allowed (want 1); the upstream saw %d uses of max_uses 3", allowed, okHits(up)-base)
	}

	// 2. The creator is gone: the replica that denies gives the use back.
	s2 := limitedGatedSession(b, op, 2)
	id2 := held(t, a, s2.Token)
	a.Stop()
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id2+"/deny", alice, map[string]any{}); r.Status != 200 {
		t.Fatalf("deny on B: %d %s", r.Status, r.Body)
	}
	base = okHits(up)
	allowed = 0
	for range 4 {
		if b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s2.Token, nil).Status == 200 {
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
