package main

import (
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Attacks on a rule's constraints (DESIGN §4) through the real server:
// numbers read past a float64's precision, multi-line values, one_of type
// confusion, odd budget values, lengths in code points.

// TestAttackNumbersExact (class 1's neighbour): a number written with
// more precision than a float64 holds was checked as its rounding and
// forwarded as written, so an upstream that parses numbers exactly (an
// int64 id, a decimal amount) read another value: past a max, a pin on an
// id, a budget. Such numbers are refused where a constraint reads them.
func TestAttackNumbersExact(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"body.fee": 10, "query.units": 10},
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

// TestAttackConstraintEdges (class 1's neighbours held): multi-line
// values against a pattern, one_of type confusion, budget values that are
// not plain non-negative numbers, max_length counted in code points.
func TestAttackConstraintEdges(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"query.units": 10, "body.fee": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
			"body.to":         map[string]any{"pattern": "[a-z]+"},
			"body.kind":       map[string]any{"one_of": []any{1, "two"}},
			"body.note":       map[string]any{"max_length": 3},
			"query.ref":       map[string]any{"pattern": "[a-z]+"},
			"query.mode":      map[string]any{"one_of": []any{1}},
			"header.X-Tenant": map[string]any{"pattern": "[a-z]+"},
		}}}}))
	var attacks []rtAttack
	for _, a := range []struct{ name, path, body, constraint string }{
		{"pattern: newline then text", "/pay", `{"to": "acme\nevil"}`, "pattern"},
		{"pattern: trailing newline", "/pay", `{"to": "acme\n"}`, "pattern"},
		{"pattern: CR LF", "/pay", `{"to": "acme\r\nX: y"}`, "pattern"},
		{"pattern: NUL", "/pay", `{"to": "acme\u0000evil"}`, "pattern"},
		{"pattern: array", "/pay", `{"to": ["acme", "evil@x"]}`, "pattern"},
		{"pattern: object", "/pay", `{"to": {"acme": 1}}`, "pattern"},
		{"one_of: string for number", "/pay", `{"kind": "1"}`, "one_of"},
		{"one_of: number for string", "/pay", `{"kind": 2}`, "one_of"},
		{"one_of: true for 1", "/pay", `{"kind": true}`, "one_of"},
		{"one_of: array of the value", "/pay", `{"kind": [1]}`, "one_of"},
		{"one_of query: 1.0 for 1", "/pay?mode=1.0", `{}`, "one_of"},
		{"one_of query: 01 for 1", "/pay?mode=01", `{}`, "one_of"},
		{"one_of query: +1 for 1", "/pay?mode=%2B1", `{}`, "one_of"},
		{"budget: negative", "/pay?units=-5", `{}`, "budget"},
		{"budget: NaN", "/pay?units=NaN", `{}`, "budget"},
		{"budget: Inf", "/pay?units=Inf", `{}`, "budget"},
		{"budget: huge", "/pay?units=1e309", `{}`, "budget"},
		{"budget: hex", "/pay?units=0x10", `{}`, "budget"},
		{"budget: underscores", "/pay?units=1_000", `{}`, "budget"},
		{"budget: empty", "/pay?units=", `{}`, "budget"},
		{"budget: trailing junk", "/pay?units=5abc", `{}`, "budget"},
		{"budget: body string", "/pay", `{"fee": "5"}`, "budget"},
		{"budget: body negative zero exponent", "/pay", `{"fee": -1e0}`, "budget"},
		{"budget: body null", "/pay", `{"fee": null}`, "budget"},
		{"max_length: combining marks count", "/pay", `{"note": "e\u0301e\u0301"}`, "max_length"},
	} {
		attacks = append(attacks, rtAttack{a.name, "POST", "/v1/proxy/api" + a.path, rtJSON, a.body, 403, "constraint_violated", a.constraint})
	}
	// Control characters in a query value are refused before any rule.
	attacks = append(attacks, rtAttack{"query pattern: newline", "POST", "/v1/proxy/api/pay?ref=acme%0Aevil", rtJSON, `{}`, 400, "bad_request", ""},
		rtAttack{"query pattern: trailing newline", "POST", "/v1/proxy/api/pay?ref=acme%0A", rtJSON, `{}`, 400, "bad_request", ""})
	rtRefused(t, b, up, s.Token, attacks)
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay?units=2&mode=1&ref=ab", header: rtJSON, body: `{"to": "acme", "kind": "two", "note": "é\u00e9", "fee": 1}`},
	})
}
