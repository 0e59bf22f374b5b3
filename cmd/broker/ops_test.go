package main

import (
	"strings"
	"testing"
)

func TestRateLimitPerSession(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL, extraYAML: "rate_limit: {per_session: 1, burst: 3}\n"})
	s := b.session(trustedSession(apiGrant(map[string]any{"method": "GET", "path": "/ok"})))
	other := b.session(trustedSession(apiGrant(map[string]any{"method": "GET", "path": "/ok"})))
	ok, limited := 0, 0
	for i := 0; i < 10; i++ {
		r := b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil)
		switch r.status {
		case 200:
			ok++
		case 429:
			limited++
			r.wantProblem(t, 429, "rate_limited")
			if r.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		default:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
	if ok < 3 || limited == 0 {
		t.Fatalf("%d allowed, %d limited: the burst of 3 at 1/s was not enforced", ok, limited)
	}
	// Another session has its own budget.
	if r := b.do("GET", b.sandbox+"/v1/proxy/api/ok", other.Token, nil); r.status != 200 {
		t.Fatalf("another session was limited: %d", r.status)
	}
}

func TestMetricsExposeKPIs(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(apiGrant(map[string]any{"method": "GET", "path": "/ok"},
		map[string]any{"method": "GET", "path": "/q", "constraints": map[string]any{"query.n": map[string]any{"max": 5}}})))
	b.do("GET", b.sandbox+"/v1/proxy/api/ok", s.Token, nil)
	b.do("GET", b.sandbox+"/v1/proxy/api/q?n=9", s.Token, nil)
	b.do("DELETE", b.control+"/v1/sessions/"+s.ID, adminToken, nil)
	gated := gatedSession(b, adminToken, nil)
	b.do("POST", b.sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 1}`)

	r := b.do("GET", b.control+"/metrics", "", nil)
	if r.status != 200 {
		t.Fatalf("/metrics: %d", r.status)
	}
	text := string(r.body)
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
	assertNoCanary(t, "/metrics", r.body)
}
