package main

import (
	"net/http"
	"testing"
)

// Query keys an upstream reads case-insensitively (ASP.NET model binding,
// many frameworks) are the same parameter: a pinned or capped query
// parameter cannot be replaced by a case variant of its name, nor supplied
// beside one.
func TestAttackQueryCaseVariantKeys(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(apiGrant(
		map[string]any{"method": "GET", "path": "/search", "constraints": map[string]any{
			"query.org": map[string]any{"pin": "acme"}, "query.limit": map[string]any{"max": 50}}},
	)))
	for _, q := range []string{
		"ORG=evil",                // absent under its own name: the broker would fill org=acme beside it
		"org=acme&Org=evil",       // both
		"Org=acme",                // the pinned value, misspelled: forwarded as is, still two readings
		"limit=5&LIMIT=100000",    // a cap beside a variant
		"org=acme&lImIt=100000",   // a cap as a variant only
		"org=acme&limit=1&LIMIT=", // an empty variant
	} {
		t.Run(q, func(t *testing.T) {
			p := b.do("GET", b.sandbox+"/v1/proxy/api/search?"+q, s.Token, nil).wantProblem(t, http.StatusForbidden, "constraint_violated")
			if p["constraint"] != "name" {
				t.Errorf("constraint = %v, want name", p["constraint"])
			}
		})
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("%d case-variant queries reached the upstream", n)
	}
	if r := b.do("GET", b.sandbox+"/v1/proxy/api/search?limit=5&Q=x", s.Token, nil); r.status != 200 {
		t.Fatalf("canonical query: %d %s", r.status, r.body)
	}
	if got := up.last(t).RawQuery; got != "limit=5&Q=x&org=acme" {
		t.Errorf("forwarded query %q", got)
	}
}
