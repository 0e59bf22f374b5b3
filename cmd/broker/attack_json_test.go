package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Issue 11, classes 1 and 2: JSON keys that a case-insensitive upstream
// reads as the constrained field, and path segments with ";" parameters.

// ajPayment is the payment as a Go upstream decodes it: encoding/json
// matches keys to fields case-insensitively.
type ajPayment struct {
	To     any `json:"to"`
	Amount any `json:"amount"`
	Memo   any `json:"memo"`
	Fee    any `json:"fee"`
	Meta   *struct {
		Label any `json:"label"`
	} `json:"meta"`
	Items []struct {
		Sku any `json:"sku"`
	} `json:"items"`
}

var (
	ajMemoRE = regexp.MustCompile(`^[a-z]{0,8}$`)
	ajSkuRE  = regexp.MustCompile(`^[A-Z]-[0-9]$`)
)

// ajPaymentSession grants POST /payments on "api" with a pin, a range, a
// pattern, a pin below an object, a pattern below an array and a budget.
func ajPaymentSession(b *brokertest.Proc) brokertest.Created {
	return b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"body.fee": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/payments", "constraints": map[string]any{
			"body.to":          map[string]any{"pin": "acme"},
			"body.amount":      map[string]any{"min": 0, "max": 100},
			"body.memo":        map[string]any{"pattern": "[a-z]{0,8}"},
			"body.meta.label":  map[string]any{"pin": "ok"},
			"body.items.0.sku": map[string]any{"pattern": "[A-Z]-[0-9]"},
		}}}}))
}

// ajCheckReceived decodes what the upstream received as a Go upstream
// would and fails unless every constrained field holds a checked value, and
// unless no key on a constrained path is a case variant of its name (which
// a .NET or Java upstream could read instead).
func ajCheckReceived(t *testing.T, body []byte) ajPayment {
	t.Helper()
	var p ajPayment
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("the upstream received %s: %v", body, err)
	}
	if p.To != "acme" {
		t.Fatalf("the upstream reads to = %#v from %s", p.To, body)
	}
	if p.Meta == nil || p.Meta.Label != "ok" {
		t.Fatalf("the upstream reads meta = %#v from %s", p.Meta, body)
	}
	for name, v := range map[string]any{"amount": p.Amount, "fee": p.Fee} {
		if v == nil {
			continue
		}
		n, err := v.(json.Number).Float64()
		if err != nil || n < 0 || name == "amount" && n > 100 || name == "fee" && n > 10 {
			t.Fatalf("the upstream reads %s = %v from %s", name, v, body)
		}
	}
	if s, ok := p.Memo.(string); p.Memo != nil && (!ok || !ajMemoRE.MatchString(s)) {
		t.Fatalf("the upstream reads memo = %#v from %s", p.Memo, body)
	}
	if len(p.Items) > 0 && p.Items[0].Sku != nil {
		if s, ok := p.Items[0].Sku.(string); !ok || !ajSkuRE.MatchString(s) {
			t.Fatalf("the upstream reads items[0].sku = %#v from %s", p.Items[0].Sku, body)
		}
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	ajNoVariant(t, body, doc, "to", "amount", "memo", "fee", "meta", "items")
	if m, ok := doc["meta"].(map[string]any); ok {
		ajNoVariant(t, body, m, "label")
	}
	if items, ok := doc["items"].([]any); ok && len(items) > 0 {
		if m, ok := items[0].(map[string]any); ok {
			ajNoVariant(t, body, m, "sku")
		}
	}
	return p
}

// ajNoVariant fails when obj holds a key other than name that Go's
// folding, upper-casing or lower-casing takes for name.
func ajNoVariant(t *testing.T, body []byte, obj map[string]any, names ...string) {
	t.Helper()
	for k := range obj {
		for _, name := range names {
			if k != name && (strings.EqualFold(k, name) || strings.Map(unicode.ToUpper, k) == strings.Map(unicode.ToUpper, name) ||
				strings.Map(unicode.ToLower, k) == strings.Map(unicode.ToLower, name)) {
				t.Fatalf("the upstream received %q beside the constrained %q: %s", k, name, body)
			}
		}
	}
}

// TestAttackJSONCaseVariantKeys: a body that carries a constrained key in
// another case (or a Unicode case variant: ſ for s, K for k, ı and İ for
// i), alone or beside the checked one, is refused; nothing of it reaches
// the upstream. A pin, a max, a pattern, a budget and nested constraints
// are all attacked.
func TestAttackJSONCaseVariantKeys(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := ajPaymentSession(b)
	pay := func(body string) brokertest.Response {
		return b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, body)
	}
	attacks := []struct {
		name       string
		body       string
		status     int
		code       string
		param      string // for constraint_violated
		constraint string
	}{
		{"pin: variant only, broker would fill the pin beside it", `{"TO": "mallory"}`, 403, "constraint_violated", "body.to", "pin"},
		{"pin: variant only, pinned value", `{"TO": "acme"}`, 403, "constraint_violated", "body.to", "name"},
		{"pin: both keys", `{"to": "acme", "TO": "mallory", "meta": {"label": "ok"}}`, 400, "bad_request", "", ""},
		{"pin: both keys, variant first", `{"To": "mallory", "to": "acme", "meta": {"label": "ok"}}`, 400, "bad_request", "", ""},
		{"pin: escaped variant", `{"to": "acme", "\u0054O": "mallory", "meta": {"label": "ok"}}`, 400, "bad_request", "", ""},
		{"max: both keys", `{"amount": 1, "AMOUNT": 1000000}`, 400, "bad_request", "", ""},
		{"max: variant only", `{"AMOUNT": 1000000}`, 403, "constraint_violated", "body.amount", "max"},
		{"max: variant within range", `{"Amount": 5}`, 403, "constraint_violated", "body.amount", "name"},
		{"pattern: both keys", `{"memo": "ok", "MEMO": "<script>"}`, 400, "bad_request", "", ""},
		{"pattern: variant only", `{"Memo": "<script>"}`, 403, "constraint_violated", "body.memo", "pattern"},
		{"budget: both keys", `{"fee": 1, "FEE": 1000}`, 400, "bad_request", "", ""},
		{"budget: variant only", `{"FEE": 1000}`, 403, "constraint_violated", "body.fee", "name"},
		{"long s (Go): beside the key", `{"items": [{"sku": "A-1", "\u017fku": "Z-99"}]}`, 400, "bad_request", "", ""},
		{"long s (Go): variant only", `{"items": [{"ſku": "Z-99"}]}`, 403, "constraint_violated", "body.items.0.sku", "pattern"},
		{"Kelvin sign (Go): beside the key", `{"items": [{"sku": "A-1", "s\u212au": "Z-99"}]}`, 400, "bad_request", "", ""},
		{"Kelvin sign (Go): variant only", `{"items": [{"s\u212au": "B-2"}]}`, 403, "constraint_violated", "body.items.0.sku", "name"},
		{"dotless i (.NET)", `{"ıtems": [{"sku": "Z-99"}]}`, 403, "constraint_violated", "body.items.0.sku", "pattern"},
		{"dotted capital I (Java)", `{"items": [{"sku": "A-1"}], "\u0130TEMS": [{"sku": "Z-99"}]}`, 400, "bad_request", "", ""},
		{"nested: leaf both keys", `{"meta": {"label": "ok", "LABEL": "evil"}}`, 400, "bad_request", "", ""},
		{"nested: parent variant", `{"META": {"label": "evil"}}`, 403, "constraint_violated", "body.meta.label", "pin"},
		{"nested: parent variant, pin to fill", `{"Meta": {}}`, 403, "constraint_violated", "body.meta.label", "name"},
		{"nested: second array item", `{"items": [{"sku": "A-1"}, {"sku": "A-2", "SKU": "zzz"}]}`, 400, "bad_request", "", ""},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			n := len(up.Requests())
			r := pay(a.body)
			if r.Status != a.status {
				got := "nothing"
				if rs := up.Requests(); len(rs) > n {
					got = string(rs[len(rs)-1].Body)
				}
				t.Fatalf("%s: %d %s; the upstream received %s", a.body, r.Status, r.Body, got)
			}
			p := r.WantProblem(t, a.status, a.code)
			if a.param != "" && (p["param"] != a.param || p["constraint"] != a.constraint) {
				t.Errorf("problem names %v/%v, want %s/%s", p["param"], p["constraint"], a.param, a.constraint)
			}
			if a.code == "bad_request" && !strings.Contains(fmt.Sprint(p["detail"]), "JSON key") {
				t.Errorf("detail %q does not name the ambiguous key", p["detail"])
			}
			if strings.Contains(string(r.Body), "mallory") || strings.Contains(string(r.Body), "1000000") {
				t.Errorf("the problem echoes a value: %s", r.Body)
			}
			if len(up.Requests()) != n {
				t.Fatalf("the refused body reached the upstream: %s", up.Last(t).Body)
			}
		})
	}

	// What is allowed reaches the upstream with only checked values: pins
	// filled in under the grant's spelling, beside variant keys elsewhere.
	for _, body := range []string{
		`{"to": "acme", "amount": 5, "memo": "rent", "meta": {"label": "ok"}, "items": [{"sku": "A-1"}], "fee": 3}`,
		`{"amount": 7, "other": {"TO": "x", "Amount": 9}}`,
		`{}`,
	} {
		r := pay(body)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
		ajCheckReceived(t, up.Last(t).Body)
	}
	if p := ajCheckReceived(t, up.Last(t).Body); p.Amount != nil || p.Fee != nil {
		t.Errorf("an empty body gained fields: %+v", p)
	}

	recs := brokertest.ParseAudit(t, b.AuditExport())
	denied := 0
	for _, r := range recs {
		if r.Type == "call.denied" && r.SessionID == s.ID {
			denied++
		}
	}
	if denied != len(attacks) {
		t.Errorf("audit holds %d denied calls, want %d", denied, len(attacks))
	}
	brokertest.AssertNoCanary(t, "audit export", b.AuditExport())
}

// TestAttackContentTypeAmbiguity (class 1's neighbour): a JSON body is
// checked as UTF-8 JSON; two Content-Type headers (one reader takes the
// first, another the last) or a charset other than UTF-8 let the upstream
// read another body than the one checked.
func TestAttackContentTypeAmbiguity(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
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
