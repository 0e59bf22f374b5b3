package main

import (
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

func TestRateLimitPerSession(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: "rate_limit: {per_session: 1, burst: 3}\n"})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	other := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	ok, limited := 0, 0
	for i := 0; i < 10; i++ {
		r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
		switch r.Status {
		case 200:
			ok++
		case 429:
			limited++
			r.WantProblem(t, 429, "rate_limited")
			if r.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		default:
			t.Fatalf("unexpected %d %s", r.Status, r.Body)
		}
	}
	if ok < 3 || limited == 0 {
		t.Fatalf("%d allowed, %d limited: the burst of 3 at 1/s was not enforced", ok, limited)
	}
	// Another session has its own budget.
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", other.Token, nil); r.Status != 200 {
		t.Fatalf("another session was limited: %d", r.Status)
	}
}

func TestMetricsExposeKPIs(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"},
		map[string]any{"method": "GET", "path": "/q", "constraints": map[string]any{"query.n": map[string]any{"max": 5}}})))
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
	b.Do("GET", b.Sandbox+"/v1/proxy/api/q?n=9", s.Token, nil)
	b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil)
	gated := brokertest.GatedSession(b, brokertest.ProcAdminToken, nil)
	b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 1}`)

	r := b.Do("GET", b.Control+"/metrics", "", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics: %d", r.Status)
	}
	text := string(r.Body)
	for _, want := range []string{
		`airlock_calls_total{code="",decision="allow",upstream="api"} 1`,
		`airlock_calls_total{code="constraint_violated",decision="deny",upstream="api"} 1`,
		`airlock_limit_hits_total{kind="constraint"} 1`,
		`airlock_session_lifetime_seconds_count 1`,
		`airlock_pending_approvals 1`,
		`airlock_oldest_pending_approval_seconds`,
		`airlock_broker_overhead_seconds_bucket`,
		`airlock_upstream_seconds_bucket`,
		`airlock_audit_commit_seconds_bucket`,
		`airlock_killswitch_engaged 0`,
		`airlock_active_sessions 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	brokertest.AssertNoCanary(t, "/metrics", r.Body)
}
