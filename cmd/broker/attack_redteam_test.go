package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Red team against issue 11's merged hardening: neighbouring variants of
// each closed class, attacked through the real server.

// rtSend sends raw bytes for a sandbox call on the api upstream and returns
// the answer and whether the upstream received anything.
func rtSend(t *testing.T, b *brokerProc, up *upstreamServer, req string) (response, *recorded) {
	t.Helper()
	n := len(up.requests())
	r := b.raw(req)
	if rs := up.requests(); len(rs) > n {
		last := rs[len(rs)-1]
		return r, &last
	}
	return r, nil
}

func rtRequest(method, path, token string, header []string, body string) string {
	var sb strings.Builder
	sb.WriteString(method + " " + path + " HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer " + token + "\r\nConnection: close\r\n")
	for i := 0; i+1 < len(header); i += 2 {
		sb.WriteString(header[i] + ": " + header[i+1] + "\r\n")
	}
	if body != "" {
		sb.WriteString("Content-Length: " + itoa(len(body)) + "\r\n")
	}
	sb.WriteString("\r\n" + body)
	return sb.String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for n > 0 {
		d = append([]byte{byte('0' + n%10)}, d...)
		n /= 10
	}
	return string(d)
}

// rtRefused sends each attack and fails unless it is refused with status
// and code, and nothing reached the upstream.
func rtRefused(t *testing.T, b *brokerProc, up *upstreamServer, token string, attacks []rtAttack) {
	t.Helper()
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			r, got := rtSend(t, b, up, rtRequest(a.method, a.path, token, a.header, a.body))
			if got != nil {
				t.Fatalf("%s %s %s: %d; the upstream received %s %s?%s %s", a.method, a.path, a.body, r.status, got.Method, got.RawPath, got.RawQuery, got.Body)
			}
			p := r.wantProblem(t, a.status, a.code)
			if a.constraint != "" && p["constraint"] != a.constraint {
				t.Errorf("constraint %v, want %s", p["constraint"], a.constraint)
			}
			if strings.Contains(string(r.body), "mallory") {
				t.Errorf("the problem echoes a value: %s", r.body)
			}
		})
	}
}

// rtAllowed sends each request and fails unless the upstream received it.
func rtAllowed(t *testing.T, b *brokerProc, up *upstreamServer, token string, allowed []rtAttack) {
	t.Helper()
	for _, a := range allowed {
		r, got := rtSend(t, b, up, rtRequest(a.method, a.path, token, a.header, a.body))
		if got == nil || r.status != http.StatusOK {
			t.Errorf("allowed %s %s %s: %d %s", a.method, a.path, a.body, r.status, r.body)
		}
	}
}

type rtAttack struct {
	name, method, path string
	header             []string
	body               string
	status             int
	code, constraint   string
}

var rtJSON = []string{"Content-Type", "application/json"}

// TestRedTeamNumbersExact (class 1's neighbour): a number written with
// more precision than a float64 holds was checked as its rounding and
// forwarded as written, so an upstream that parses numbers exactly (an
// int64 id, a decimal amount) read another value: past a max, a pin on an
// id, a budget. Such numbers are refused where a constraint reads them.
func TestRedTeamNumbersExact(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"body.fee": 10, "query.units": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
			"body.amount":  map[string]any{"min": 0, "max": 100},
			"body.account": map[string]any{"pin": 9007199254740992},
			"body.kind":    map[string]any{"one_of": []any{1, 2}},
			"query.limit":  map[string]any{"max": 100},
		}}}}))
	rtRefused(t, b, up, s.Token, []rtAttack{
		{"max: extra digits", "POST", "/v1/proxy/api/pay", rtJSON, `{"amount": 100.00000000000000001}`, 403, "constraint_violated", "min/max"},
		{"max: extra digits with exponent", "POST", "/v1/proxy/api/pay", rtJSON, `{"amount": 100000000000000000001e-18}`, 403, "constraint_violated", "min/max"},
		{"min: below zero by less than a float", "POST", "/v1/proxy/api/pay", rtJSON, `{"amount": -1e-400}`, 403, "constraint_violated", "min/max"},
		{"pin: integer id past 2^53", "POST", "/v1/proxy/api/pay", rtJSON, `{"account": 9007199254740993}`, 403, "constraint_violated", "pin"},
		{"one_of: near value", "POST", "/v1/proxy/api/pay", rtJSON, `{"kind": 1.0000000000000000001}`, 403, "constraint_violated", "one_of"},
		{"budget: extra digits", "POST", "/v1/proxy/api/pay", rtJSON, `{"fee": 10.000000000000000001}`, 403, "constraint_violated", "budget"},
		{"query max: extra digits", "POST", "/v1/proxy/api/pay?limit=100.00000000000000001", nil, "", 403, "constraint_violated", "min/max"},
		{"query budget: extra digits", "POST", "/v1/proxy/api/pay?units=10.000000000000000001", nil, "", 403, "constraint_violated", "budget"},
	})
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay", header: rtJSON, body: `{"amount": 1e2, "account": 9007199254740992, "kind": 2.0}`},
		{method: "POST", path: "/v1/proxy/api/pay", header: rtJSON, body: `{"amount": 0.1, "fee": 0.5}`},
		{method: "POST", path: "/v1/proxy/api/pay", header: rtJSON, body: `{"amount": -0, "fee": 1.50}`},
		{method: "POST", path: "/v1/proxy/api/pay?limit=99.99&units=2", header: rtJSON, body: `{"amount": 100.000}`},
	})
}

// TestRedTeamParameterInTwoPlaces (class 1's neighbour): many servers merge
// query and body parameters into one map (Rails: the query wins over a JSON
// body; Laravel: the JSON body wins; PHP's $_REQUEST: a form wins). A pin
// checked in one place was overridden from the other.
func TestRedTeamParameterInTwoPlaces(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"body.fee": 10},
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
		// on each of its rules (TestRedTeam3BudgetNeedsJSONBody).
		{"text body in a grant that budgets a body field", "POST", "/v1/proxy/api/send", []string{"Content-Type", "text/plain"}, `to=mallory`, 403, "constraint_violated", "type"},
	})
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay?page=2", header: rtJSON, body: `{"to": "acme", "fee": 1}`},
		{method: "POST", path: "/v1/proxy/api/send?to=acme", header: rtJSON, body: `{"note": "x"}`},
		{method: "POST", path: "/v1/proxy/api/both?to=acme", header: rtJSON, body: `{"to": "acme"}`},
	})
	if got := up.last(t); got.RawQuery != "to=acme" || string(got.Body) != `{"to": "acme"}` {
		t.Errorf("the upstream received ?%s %s", got.RawQuery, got.Body)
	}
}

// TestRedTeamContentTypeAmbiguity (class 1's neighbour): a JSON body is
// checked as UTF-8 JSON; two Content-Type headers (one reader takes the
// first, another the last) or a charset other than UTF-8 let the upstream
// read another body than the one checked.
func TestRedTeamContentTypeAmbiguity(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(apiGrant(map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
		"body.to": map[string]any{"pin": "acme"},
	}})))
	rtRefused(t, b, up, s.Token, []rtAttack{
		{"JSON then form", "POST", "/v1/proxy/api/pay", []string{"Content-Type", "application/json", "Content-Type", "application/x-www-form-urlencoded"},
			`{"to": "acme", "x": "&to=mallory&"}`, 400, "bad_request", ""},
		{"JSON twice", "POST", "/v1/proxy/api/pay", []string{"Content-Type", "application/json", "Content-Type", "application/json; charset=utf-16"},
			`{"to": "acme"}`, 400, "bad_request", ""},
		{"charset utf-7", "POST", "/v1/proxy/api/pay", []string{"Content-Type", "application/json; charset=utf-7"}, `{"to": "acme", "+AHQAbw-": "mallory"}`, 400, "bad_request", ""},
		{"charset latin1", "POST", "/v1/proxy/api/pay", []string{"Content-Type", "application/json; charset=ISO-8859-1"}, `{"to": "acme"}`, 400, "bad_request", ""},
	})
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay", header: []string{"Content-Type", "application/json; charset=UTF-8"}, body: `{"to": "acme"}`},
		{method: "POST", path: "/v1/proxy/api/pay", header: []string{"Content-Type", "application/merge-patch+json"}, body: `{"to": "acme"}`},
	})
}

// TestRedTeamPathDotLookalikes (class 2's neighbour): segments that a
// server reads as "." or ".." after trimming trailing spaces (Windows,
// IIS) or after Unicode compatibility mapping (IIS best fit, NFKC).
func TestRedTeamPathDotLookalikes(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(apiGrant(
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

// TestRedTeamScrubNestedURL (class 4's neighbour): the broker injects the
// credential in the query (inject: {query: ...}); an upstream that carries
// the request's URL inside another URL (a redirect's "next=", an echo of the
// request) writes it percent-encoded twice ("%252F"), and an HTML encoder
// may write "&#X2F;". Both reached the sandbox.
func TestRedTeamScrubNestedURL(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := url.QueryEscape(r.URL.RequestURI()) // the secret, encoded twice
		html := strings.ReplaceAll(r.URL.Query().Get("api_key"), "/", "&#X2F;")
		w.Header().Set("Location", "/login?next="+next)
		w.Header().Set("X-Next", next)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusFound)
		fmt.Fprintf(w, `<a href="/login?next=%s">login</a> <code>%s</code>`, next, html)
	}))
	t.Cleanup(echo.Close)
	b := startBroker(t, harnessOpts{upstream: echo.URL})
	s := b.session(trustedSession(map[string]any{"upstream": "open", "rules": []any{map[string]any{"method": "GET", "path": "/private"}}}))
	r := b.do("GET", b.sandbox+"/v1/proxy/open/private", s.Token, nil)
	if r.status != http.StatusFound {
		t.Fatalf("%d %s", r.status, r.body)
	}
	all := string(r.body) + fmt.Sprint(r.header)
	for _, form := range []string{"%252F", "&#X2F;"} {
		if strings.Contains(all, "0f1e2d3c"+form) {
			t.Errorf("the answer holds the secret written with %s: %s", form, all)
		}
	}
	if !strings.Contains(r.header.Get("Location"), "[REDACTED]") || !strings.Contains(string(r.body), "[REDACTED]") {
		t.Errorf("nothing was redacted: %s", all)
	}
	assertNoCanary(t, "answer", []byte(all))
}
