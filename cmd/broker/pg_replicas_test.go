package main

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-broker/airlock/internal/pgtest"
)

// TestReplicasShareSessionsGrantsAndTokens: two real brokers on one
// PostgreSQL. What one creates works on the other at once (read through on
// a miss, never cached as "not found"): a session, a grant added to a
// session the other already serves, an API token; a token revoked on one
// is refused by the other on its next request; a session created on one is
// killed for real through the other.
func TestReplicasShareSessionsGrantsAndTokens(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := newUpstream(t)
	a := pgBroker(t, up, dsn, "")
	b := pgBroker(t, up, dsn, "")

	// A session unknown to B is refused as invalid first (nothing cached)...
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", "not-a-token", nil).wantProblem(t, 401, "invalid_token")
	s := a.session(trustedSession(apiGrant(map[string]any{"method": "GET", "path": "/ok"})))
	// ...and one created on A works on B at once.
	if r := b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil); r.status != 200 {
		t.Fatalf("session created on A, called on B: %d %s", r.status, r.body)
	}
	b.do("GET", b.sandbox+"/v1/proxy/api/other", s.Token, nil).wantProblem(t, 403, "no_matching_grant")
	// A grant A adds to the session B serves from memory works on B at once.
	if r := a.do("POST", a.control+"/v1/sessions/"+s.ID+"/grants", adminToken, apiGrant(map[string]any{"method": "GET", "path": "/other"})); r.status != http.StatusCreated {
		t.Fatalf("add grant on A: %d %s", r.status, r.body)
	}
	if r := b.do("GET", b.sandbox+"/v1/proxy/api/other", s.Token, nil); r.status != 200 {
		t.Fatalf("grant added on A, called on B: %d %s", r.status, r.body)
	}

	// An API token created on A works on B; revoked on A, B refuses it at once.
	r := a.do("POST", a.control+"/v1/tokens", adminToken, map[string]any{"role": "operator", "name": "orchestrator"})
	if r.status != http.StatusCreated {
		t.Fatalf("create token on A: %d %s", r.status, r.body)
	}
	var tok struct{ ID, Token string }
	if err := json.Unmarshal(r.body, &tok); err != nil || tok.Token == "" {
		t.Fatalf("token: %s %v", r.body, err)
	}
	if r := b.do("GET", b.control+"/v1/sessions/"+s.ID, tok.Token, nil); r.status != 200 {
		t.Fatalf("token created on A, used on B: %d %s", r.status, r.body)
	}
	if r := a.do("DELETE", a.control+"/v1/tokens/"+tok.ID, adminToken, nil); r.status/100 != 2 {
		t.Fatalf("revoke token on A: %d %s", r.status, r.body)
	}
	b.do("GET", b.control+"/v1/sessions/"+s.ID, tok.Token, nil).wantProblem(t, 401, "invalid_token")

	// A session created on A, never seen by B, is killed through B for real.
	s2 := a.session(trustedSession(apiGrant(map[string]any{"method": "GET", "path": "/ok"})))
	if r := b.do("DELETE", b.control+"/v1/sessions/"+s2.ID, adminToken, nil); r.status != 200 {
		t.Fatalf("kill on B: %d %s", r.status, r.body)
	}
	var v struct{ Status string }
	_ = json.Unmarshal(b.do("GET", b.control+"/v1/sessions/"+s2.ID, adminToken, nil).body, &v)
	if v.Status != "revoked" {
		t.Errorf("session killed on B: status %q, want revoked", v.Status)
	}
	// A third broker, started after the kill, refuses the session's token.
	c := pgBroker(t, up, dsn, "")
	c.do("GET", c.sandbox+"/v1/proxy/api/ok", s2.Token, nil).wantProblem(t, 401, "session_revoked")
}

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
