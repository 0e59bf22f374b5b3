package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Attacks on the canonical path through the real server: dot segments and
// their look-alikes, parameters inside segments, semicolons.

// TestAttackPathDotLookalikes (class 2's neighbour): segments that a
// server reads as "." or ".." after trimming trailing spaces (Windows,
// IIS) or after Unicode compatibility mapping (IIS best fit, NFKC).
func TestAttackPathDotLookalikes(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(
		map[string]any{"method": "GET", "path": "/public/{name}"},
		map[string]any{"method": "GET", "path": "/public/{name}/{file}"},
	)))
	var attacks []rtAttack
	for _, seg := range []string{"..%20", ".%20", "..%20%20", "%EF%BC%8E%EF%BC%8E", ".%EF%BC%8E", "%EF%B9%92%EF%B9%92", "%E2%80%A4%E2%80%A4", "%E2%80%A5"} {
		attacks = append(attacks, rtAttack{seg, "GET", "/v1/proxy/api/public/" + seg + "/admin", nil, "", 400, "bad_request", ""})
	}
	rtRefused(t, b, up, s.Token, attacks)
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "GET", path: "/v1/proxy/api/public/...", header: nil},
		{method: "GET", path: "/v1/proxy/api/public/a.b"},
		{method: "GET", path: "/v1/proxy/api/public/%E2%80%A6"},
	})
}

// TestAttackPathDotSegmentWithParameters: a segment that a server cutting
// segments at ";" (Tomcat, Spring) resolves as ".." or "." is refused, raw
// or percent-encoded, and so is any ";" in a path segment by default.
// Nothing reaches the upstream.
func TestAttackPathDotSegmentWithParameters(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(
		map[string]any{"method": "GET", "path": "/public/{name}"},
		map[string]any{"method": "GET", "path": "/public/{name}/{file}"},
	)))
	for _, path := range []string{
		"/v1/proxy/api/public/..;/admin",
		"/v1/proxy/api/public/..;x=1/admin",
		"/v1/proxy/api/public/.;x/admin",
		"/v1/proxy/api/public/.;",
		"/v1/proxy/api/public/%2e%2e;/admin",
		"/v1/proxy/api/public/%2E.;a=b/admin",
		"/v1/proxy/api/public/..%3B/admin",
		"/v1/proxy/api/public/..%3b",
		"/v1/proxy/api/public/report;jsessionid=0123",
		"/v1/proxy/api/public/;x/admin",
		"/v1/proxy/api/public/x;/admin",
	} {
		r := b.Raw("GET " + path + " HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", path, r.Status, r.Body)
			continue
		}
		r.WantProblem(t, 400, "bad_request")
	}
	if rs := up.Requests(); len(rs) != 0 {
		t.Fatalf("%d attacking requests reached the upstream, first %s", len(rs), rs[0].RawPath)
	}
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/public/report", s.Token, nil); r.Status != http.StatusOK {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if got := up.Last(t).RawPath; got != "/base/public/report" {
		t.Errorf("forwarded path %q", got)
	}
}

// TestAttackPathSemicolonsOptIn: an upstream that needs matrix parameters
// opts in with allow_path_semicolons; dot segments with parameters, and
// segments empty before their ";", stay refused there.
func TestAttackPathSemicolonsOptIn(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: fmt.Sprintf(`  - name: matrix
    base_url: %s/m
    allow_path_semicolons: true
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
`, up.URL)})
	s := b.Session(brokertest.TrustedSession(
		map[string]any{"upstream": "matrix", "rules": []any{
			map[string]any{"method": "GET", "path": "/public/{name}"},
			map[string]any{"method": "GET", "path": "/public/{name}/{file}"},
		}},
		brokertest.APIGrant(map[string]any{"method": "GET", "path": "/public/{name}"}),
	))
	for _, path := range []string{
		"/v1/proxy/matrix/public/..;/admin",
		"/v1/proxy/matrix/public/..;a=b/admin",
		"/v1/proxy/matrix/public/.;x/admin",
		"/v1/proxy/matrix/public/%2e%2e;x/admin",
		"/v1/proxy/matrix/public/..%3B/admin",
		"/v1/proxy/matrix/public/;x/admin",
		"/v1/proxy/matrix/public/a%3Bb",       // not canonical: ";" is sent raw
		"/v1/proxy/api/public/items;v=2",      // the api upstream did not opt in
		"/v1/proxy/api/public/items;v=2/meta", // nor for a longer path
	} {
		r := b.Raw("GET " + path + " HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", path, r.Status, r.Body)
			continue
		}
		r.WantProblem(t, 400, "bad_request")
	}
	if rs := up.Requests(); len(rs) != 0 {
		t.Fatalf("%d attacking requests reached the upstream, first %s", len(rs), rs[0].RawPath)
	}
	r := b.Raw("GET /v1/proxy/matrix/public/items;v=2 HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
	if r.Status != http.StatusOK {
		t.Fatalf("matrix parameters on the opted-in upstream: %d %s", r.Status, r.Body)
	}
	if got := up.Last(t).RawPath; got != "/m/public/items;v=2" {
		t.Errorf("forwarded path %q", got)
	}
	brokertest.AssertNoCanary(t, "answer", r.Body)
}
