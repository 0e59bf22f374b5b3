package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Query keys an upstream reads case-insensitively (ASP.NET model binding,
// many frameworks) are the same parameter: a pinned or capped query
// parameter cannot be replaced by a case variant of its name, nor supplied
// beside one.
func TestAttackQueryCaseVariantKeys(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(
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
			p := b.Do("GET", b.Sandbox+"/v1/proxy/api/search?"+q, s.Token, nil).WantProblem(t, http.StatusForbidden, "constraint_violated")
			if p["constraint"] != "name" {
				t.Errorf("constraint = %v, want name", p["constraint"])
			}
		})
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d case-variant queries reached the upstream", n)
	}
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/search?limit=5&Q=x", s.Token, nil); r.Status != 200 {
		t.Fatalf("canonical query: %d %s", r.Status, r.Body)
	}
	if got := up.Last(t).RawQuery; got != "limit=5&Q=x&org=acme" {
		t.Errorf("forwarded query %q", got)
	}
}

// TestAttackParameterInTwoPlaces (class 1's neighbour): many servers merge
// query and body parameters into one map (Rails: the query wins over a JSON
// body; Laravel: the JSON body wins; PHP's $_REQUEST: a form wins). A pin
// checked in one place was overridden from the other.
func TestAttackParameterInTwoPlaces(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"body.fee": 10},
		"rules": []any{
			map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
				"body.to":         map[string]any{"pin": "acme"},
				"body.meta.label": map[string]any{"pin": "ok"},
			}},
			map[string]any{"method": "POST", "path": "/send", "constraints": map[string]any{
				"query.to": map[string]any{"pin": "acme"},
			}},
			map[string]any{"method": "POST", "path": "/both", "constraints": map[string]any{
				"query.to": map[string]any{"pin": "acme"},
				"body.to":  map[string]any{"pin": "acme"},
			}},
		}}))
	form := []string{"Content-Type", "application/x-www-form-urlencoded"}
	rtRefused(t, b, up, s.Token, []rtAttack{
		{"query beside a body pin", "POST", "/v1/proxy/api/pay?to=mallory", rtJSON, `{"to": "acme"}`, 403, "constraint_violated", "location"},
		{"query beside a body pin the broker fills", "POST", "/v1/proxy/api/pay?to=mallory", rtJSON, `{}`, 403, "constraint_violated", "location"},
		{"query case variant beside a body pin", "POST", "/v1/proxy/api/pay?TO=mallory", rtJSON, `{}`, 403, "constraint_violated", "location"},
		{"query with brackets beside a body pin", "POST", "/v1/proxy/api/pay?to%5B%5D=mallory", rtJSON, `{}`, 403, "constraint_violated", "location"},
		{"query replaces a nested body pin's parent", "POST", "/v1/proxy/api/pay?meta%5Blabel%5D=evil", rtJSON, `{}`, 403, "constraint_violated", "location"},
		{"query beside a budgeted body field", "POST", "/v1/proxy/api/pay?fee=1000", rtJSON, `{"fee": 1}`, 403, "constraint_violated", "location"},
		{"JSON body beside a query pin", "POST", "/v1/proxy/api/send", rtJSON, `{"to": "mallory"}`, 403, "constraint_violated", "location"},
		{"JSON body case variant beside a query pin", "POST", "/v1/proxy/api/send?to=acme", rtJSON, `{"To": "mallory"}`, 403, "constraint_violated", "location"},
		{"form body beside a query pin", "POST", "/v1/proxy/api/send", form, `to=mallory`, 403, "constraint_violated", "type"},
		{"form body, odd case type", "POST", "/v1/proxy/api/send", []string{"Content-Type", "Application/X-WWW-Form-Urlencoded; charset=utf-8"}, `to=mallory`, 403, "constraint_violated", "type"},
		{"multipart body beside a query pin", "POST", "/v1/proxy/api/send", []string{"Content-Type", "multipart/form-data; boundary=x"},
			"--x\r\nContent-Disposition: form-data; name=\"to\"\r\n\r\nmallory\r\n--x--\r\n", 403, "constraint_violated", "type"},
		// The grant budgets body.fee: a body it cannot read as JSON is refused
		// on each of its rules (TestAttackBudgetNeedsJSONBody).
		{"text body in a grant that budgets a body field", "POST", "/v1/proxy/api/send", []string{"Content-Type", "text/plain"}, `to=mallory`, 403, "constraint_violated", "type"},
	})
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay?page=2", header: rtJSON, body: `{"to": "acme", "fee": 1}`},
		{method: "POST", path: "/v1/proxy/api/send?to=acme", header: rtJSON, body: `{"note": "x"}`},
		{method: "POST", path: "/v1/proxy/api/both?to=acme", header: rtJSON, body: `{"to": "acme"}`},
	})
	if got := up.Last(t); got.RawQuery != "to=acme" || string(got.Body) != `{"to": "acme"}` {
		t.Errorf("the upstream received ?%s %s", got.RawQuery, got.Body)
	}
}

// TestAttackQueryKeyReaders (class 1, query keys): servers read a query
// key under another name than its own. Express (qs), PHP and Rails read
// "to[]=x", "to[0]=x" and "to[k]=x" as the parameter "to" (an array or a
// map); PHP also reads "account.id", "account id" and "account[id" as
// "account_id". A constrained (or budgeted) parameter sent so was not seen
// by the broker: its pattern and budget were skipped and a pin was filled
// in beside it.
func TestAttackQueryKeyReaders(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"query.units": 10},
		"rules": []any{
			map[string]any{"method": "GET", "path": "/mail", "constraints": map[string]any{
				"query.to":         map[string]any{"pattern": "[a-z]+@acme\\.com"},
				"query.account_id": map[string]any{"pin": "42"},
			}},
		}}))
	var attacks []rtAttack
	for _, q := range []string{"to%5B%5D=evil%40mallory.com", "to[]=evil%40mallory.com", "to[0]=evil%40mallory.com", "to[x]=evil%40mallory.com",
		"TO[]=evil%40mallory.com", "account.id=7", "account%20id=7", "account[id=7", "Account.Id=7", "account_id[]=7", "units[]=1000", "units[0]=1000", "%20account_id=7"} {
		attacks = append(attacks, rtAttack{q, "GET", "/v1/proxy/api/mail?" + q, nil, "", 403, "constraint_violated", "name"})
	}
	rtRefused(t, b, up, s.Token, attacks)
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "GET", path: "/v1/proxy/api/mail?to=bob%40acme.com&page[size]=2&units=3"},
		{method: "GET", path: "/v1/proxy/api/mail?account_id=42&toto=x&account=1"},
	})
	if got := up.Last(t).RawQuery; got != "account_id=42&toto=x&account=1" {
		t.Errorf("the upstream received ?%s", got)
	}
}

// TestAttackInjectedQueryParamReaders (DESIGN §4, credential in the
// query): the sandbox's own "api_key" was dropped, but "API_KEY" (ASP.NET
// reads query keys case-insensitively and binds the first value),
// "api_key[]" (qs, PHP, Rails) and "api.key" / "api key" (PHP reads both as
// "api_key") passed, ahead of the broker's: the upstream could act under a
// key the sandbox chose (its own account, to receive the grant's data).
func TestAttackInjectedQueryParamReaders(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "open", "rules": []any{map[string]any{"method": "GET", "path": "/echo"}}}))
	for _, q := range []string{"api_key=mine", "API_KEY=mine", "Api_Key=mine", "api_key%5B%5D=mine", "api_key[]=mine", "api_key[0]=mine", "api.key=mine", "api%20key=mine", "api[key=mine", "%20api_key=mine", "api_%E2%84%AAey=mine"} {
		t.Run(q, func(t *testing.T) {
			r := b.Do("GET", b.Sandbox+"/v1/proxy/open/echo?"+q+"&x=1", s.Token, nil)
			if r.Status != http.StatusOK {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			got := up.Last(t).RawQuery
			if strings.Contains(got, "mine") || !strings.HasPrefix(got, "x=1&api_key=") {
				t.Errorf("the upstream received ?%s", strings.ReplaceAll(got, url.QueryEscape(brokertest.Canary), "<secret>"))
			}
		})
	}
}
