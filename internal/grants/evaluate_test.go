package grants

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/fault"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func httpKind(name string) (string, bool) { return "http", name == "pay" || name == "gh" }

// mustLive validates and compiles a spec into a live grant expiring in an hour.
func mustLive(tb testing.TB, spec Spec) *Live {
	tb.Helper()
	if err := Validate("grant", &spec, httpKind, time.Hour); err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	l, err := Compile(Grant{ID: "g1", SessionID: "s1", Spec: spec, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, Usage{})
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return l
}

func mustCall(tb testing.TB, method, path, query, body string) *Call {
	tb.Helper()
	segs, err := CanonicalPath(path, PathOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	q, err := ParseQuery(query)
	if err != nil {
		tb.Fatal(err)
	}
	c := &Call{Method: method, Segments: segs, Query: q, Header: http.Header{}}
	if body != "" {
		v, err := ParseJSON([]byte(body))
		if err != nil {
			tb.Fatal(err)
		}
		c.Body, c.BodyJSON, c.HasBody = v, true, true
	}
	return c
}

func paymentSpec() Spec {
	return Spec{Upstream: "pay", Rules: []Rule{{
		Method: "POST", Path: "/accounts/{account}/payments", DenyUnknown: true,
		Constraints: map[string]Constraint{
			"path.account":    {Pin: "acct-1"},
			"body.to":         {Pin: "acme"},
			"body.amount":     {Min: ptr(1.0), Max: ptr(100.0), Required: true},
			"body.currency":   {OneOf: []any{"EUR", "USD"}},
			"body.memo":       {MaxLength: ptr(10)},
			"body.items":      {MaxLength: ptr(2)},
			"query.page":      {Pattern: `[0-9]+`},
			"header.X-Trace":  {Pattern: `[a-z]{4}`},
			"body.meta.label": {Pattern: `[a-z]+`},
		},
	}}}
}

func TestEvaluateConstraints(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		query      string
		body       string
		header     http.Header
		wantErr    error
		wantParam  string
		wantBody   string
		wantFilled []string
	}{
		{name: "ok, pin filled in", path: "/accounts/acct-1/payments", body: `{"amount": 50}`,
			wantBody: `{"amount":50,"to":"acme"}`, wantFilled: []string{"body.to"}},
		{name: "ok, pin matches", path: "/accounts/acct-1/payments", body: `{"amount": 50, "to": "acme", "currency": "EUR"}`},
		{name: "ok, nested", path: "/accounts/acct-1/payments", body: `{"amount": 1, "meta": {"label": "abc"}}`, wantFilled: []string{"body.to"}},
		{name: "fail-pin differs", path: "/accounts/acct-1/payments", body: `{"amount": 50, "to": "mallory"}`, wantErr: ErrConstraintViolated, wantParam: "body.to"},
		{name: "fail-path pin differs", path: "/accounts/acct-2/payments", body: `{"amount": 50}`, wantErr: ErrConstraintViolated, wantParam: "path.account"},
		{name: "fail-over max", path: "/accounts/acct-1/payments", body: `{"amount": 101}`, wantErr: ErrConstraintViolated, wantParam: "body.amount"},
		{name: "fail-under min", path: "/accounts/acct-1/payments", body: `{"amount": 0.5}`, wantErr: ErrConstraintViolated, wantParam: "body.amount"},
		{name: "fail-amount as string", path: "/accounts/acct-1/payments", body: `{"amount": "50"}`, wantErr: ErrConstraintViolated, wantParam: "body.amount"},
		{name: "fail-huge exponent", path: "/accounts/acct-1/payments", body: `{"amount": 1e999}`, wantErr: ErrConstraintViolated, wantParam: "body.amount"},
		{name: "fail-required missing", path: "/accounts/acct-1/payments", body: `{"to": "acme"}`, wantErr: ErrConstraintViolated, wantParam: "body.amount"},
		{name: "fail-one_of", path: "/accounts/acct-1/payments", body: `{"amount": 5, "currency": "BTC"}`, wantErr: ErrConstraintViolated, wantParam: "body.currency"},
		{name: "fail-max_length", path: "/accounts/acct-1/payments", body: `{"amount": 5, "memo": "far too long a memo"}`, wantErr: ErrConstraintViolated, wantParam: "body.memo"},
		{name: "fail-max_length array", path: "/accounts/acct-1/payments", body: `{"amount": 5, "items": [1,2,3]}`, wantErr: ErrConstraintViolated, wantParam: "body.items"},
		{name: "fail-pattern non-string", path: "/accounts/acct-1/payments", body: `{"amount": 5, "meta": {"label": 7}}`, wantErr: ErrConstraintViolated, wantParam: "body.meta.label"},
		{name: "fail-deny_unknown", path: "/accounts/acct-1/payments", body: `{"amount": 5, "bcc": "mallory"}`, wantErr: ErrConstraintViolated, wantParam: "body.bcc"},
		{name: "fail-deny_unknown nested", path: "/accounts/acct-1/payments", body: `{"amount": 5, "meta": {"label": "a", "to": "x"}}`, wantErr: ErrConstraintViolated, wantParam: "body.meta.to"},
		{name: "fail-dotted key smuggling", path: "/accounts/acct-1/payments", body: `{"amount": 5, "meta.label": "x"}`, wantErr: ErrConstraintViolated},
		{name: "ok, query pattern", path: "/accounts/acct-1/payments", query: "page=2", body: `{"amount": 5}`, wantFilled: []string{"body.to"}},
		{name: "fail-query pattern is whole match", path: "/accounts/acct-1/payments", query: "page=2x", body: `{"amount": 5}`, wantErr: ErrConstraintViolated, wantParam: "query.page"},
		{name: "fail-constrained query repeated", path: "/accounts/acct-1/payments", query: "page=1&page=2", body: `{"amount": 5}`, wantErr: ErrConstraintViolated, wantParam: "query.page"},
		{name: "fail-constrained query beside a case variant", path: "/accounts/acct-1/payments", query: "page=1&PAGE=2x", body: `{"amount": 5}`, wantErr: ErrConstraintViolated, wantParam: "query.page"},
		{name: "fail-constrained query as a case variant only", path: "/accounts/acct-1/payments", query: "Page=2x", body: `{"amount": 5}`, wantErr: ErrConstraintViolated, wantParam: "query.page"},
		{name: "ok-other query key with non-ASCII letters", path: "/accounts/acct-1/payments", query: "page=1&pa%C4%A3e=x", body: `{"amount": 5}`, wantFilled: []string{"body.to"}},
		{name: "fail-constrained header repeated", path: "/accounts/acct-1/payments", body: `{"amount": 5}`,
			header: http.Header{"X-Trace": {"abcd", "efgh"}}, wantErr: ErrConstraintViolated, wantParam: "header.X-Trace"},
		{name: "fail-header pattern", path: "/accounts/acct-1/payments", body: `{"amount": 5}`,
			header: http.Header{"X-Trace": {"ABCD"}}, wantErr: ErrConstraintViolated, wantParam: "header.X-Trace"},
		{name: "fail-no rule for path", path: "/accounts/acct-1/refunds", body: `{"amount": 5}`, wantErr: ErrNoMatchingGrant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := mustLive(t, paymentSpec())
			c := mustCall(t, "POST", tt.path, tt.query, tt.body)
			if tt.header != nil {
				c.Header = tt.header
			}
			d, err := Evaluate(t0, []*Live{g}, "pay", c)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Evaluate err = %v, want %v", err, tt.wantErr)
				}
				var v *Violation
				if tt.wantParam != "" && (!errors.As(err, &v) || v.Param != tt.wantParam) {
					t.Fatalf("violation = %v, want param %s", err, tt.wantParam)
				}
				if u := g.Usage(); u.Uses != 0 {
					t.Fatalf("a refused call consumed a use: %+v", u)
				}
				return
			}
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			if tt.wantBody != "" {
				got, _ := json.Marshal(d.Body)
				if string(got) != tt.wantBody || !d.BodyChanged {
					t.Errorf("body = %s (changed %v), want %s", got, d.BodyChanged, tt.wantBody)
				}
			}
			if diff := cmp.Diff(tt.wantFilled, d.Filled); diff != "" {
				t.Errorf("filled (-want +got):\n%s", diff)
			}
			if g.Usage().Uses != 1 {
				t.Errorf("uses = %d, want 1", g.Usage().Uses)
			}
		})
	}
}

func TestEvaluateTextNumbersRejectNonDecimal(t *testing.T) {
	spec := Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/items", Constraints: map[string]Constraint{
		"query.limit": {Min: ptr(1.0), Max: ptr(50.0)},
	}}}}
	for _, v := range []string{"NaN", "Inf", "-Inf", "0x10", "1_0", "1e3", "+5", " 5"} {
		g := mustLive(t, spec)
		_, err := Evaluate(t0, []*Live{g}, "gh", &Call{Method: "GET", Segments: []string{"items"}, Query: []Param{{"limit", v}}, Header: http.Header{}})
		if !errors.Is(err, ErrConstraintViolated) {
			t.Errorf("limit=%q: err = %v, want constraint_violated", v, err)
		}
	}
}

func TestEvaluateQueryAndHeaderPins(t *testing.T) {
	spec := Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/search", Constraints: map[string]Constraint{
		"query.org":              {Pin: "acme"},
		"header.X-Api-Version":   {Pin: "2022-11-28"},
		"header.Idempotency-Key": {MaxLength: ptr(64)},
	}}}}
	g := mustLive(t, spec)
	d, err := Evaluate(t0, []*Live{g}, "gh", &Call{Method: "GET", Segments: []string{"search"}, Query: []Param{{"q", "x"}}, Header: http.Header{"Idempotency-Key": {"k1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := EncodeQuery(d.Query); got != "q=x&org=acme" {
		t.Errorf("query = %q", got)
	}
	want := http.Header{"X-Api-Version": {"2022-11-28"}, "Idempotency-Key": {"k1"}}
	if diff := cmp.Diff(want, d.Header); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	_, err = Evaluate(t0, []*Live{g}, "gh", &Call{Method: "GET", Segments: []string{"search"}, Query: []Param{{"org", "evil"}}, Header: http.Header{}})
	if !errors.Is(err, ErrConstraintViolated) {
		t.Errorf("pinned query differing: %v", err)
	}
}

func TestEvaluateNonJSONBody(t *testing.T) {
	g := mustLive(t, paymentSpec())
	c := &Call{Method: "POST", Segments: []string{"accounts", "acct-1", "payments"}, Header: http.Header{}, HasBody: true}
	if _, err := Evaluate(t0, []*Live{g}, "pay", c); !errors.Is(err, ErrConstraintViolated) {
		t.Fatalf("non-JSON body against body constraints: %v", err)
	}
	plain := mustLive(t, Spec{Upstream: "pay", Rules: []Rule{{Method: "PUT", Path: "/blob"}}})
	c = &Call{Method: "PUT", Segments: []string{"blob"}, Header: http.Header{}, HasBody: true}
	if _, err := Evaluate(t0, []*Live{plain}, "pay", c); err != nil {
		t.Fatalf("non-JSON body on a rule without body constraints: %v", err)
	}
}

func TestMaxUsesAndBudget(t *testing.T) {
	spec := Spec{Upstream: "pay", MaxUses: 3, Budget: map[string]float64{"body.amount": 100},
		Rules: []Rule{{Method: "POST", Path: "/pay", Constraints: map[string]Constraint{"body.amount": {Max: ptr(80.0)}}}}}
	g := mustLive(t, spec)
	call := func(body string) error {
		_, err := Evaluate(t0, []*Live{g}, "pay", mustCall(t, "POST", "/pay", "", body))
		return err
	}
	if err := call(`{"amount": 60}`); err != nil {
		t.Fatal(err)
	}
	if err := call(`{"amount": 50}`); !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("over budget: %v", err)
	}
	if err := call(`{"amount": -500}`); !errors.Is(err, ErrConstraintViolated) {
		t.Fatalf("negative amount must not refill the budget: %v", err)
	}
	if err := call(`{"amount": 40}`); err != nil {
		t.Fatal(err)
	}
	if err := call(`{}`); err != nil {
		t.Fatal(err)
	}
	if err := call(`{}`); !errors.Is(err, ErrGrantExhausted) {
		t.Fatalf("fourth use: %v", err)
	}
	u := g.Usage()
	if u.Uses != 3 || u.Spent["body.amount"] != 100 {
		t.Fatalf("usage = %+v", u)
	}
}

func TestReleaseRefunds(t *testing.T) {
	g := mustLive(t, Spec{Upstream: "pay", MaxUses: 1, Budget: map[string]float64{"body.amount": 10},
		Rules: []Rule{{Method: "POST", Path: "/pay"}}})
	d, err := Evaluate(t0, []*Live{g}, "pay", mustCall(t, "POST", "/pay", "", `{"amount": 10}`))
	if err != nil {
		t.Fatal(err)
	}
	d.Release()
	d.Release()
	if u := g.Usage(); u.Uses != 0 || u.Spent["body.amount"] != 0 {
		t.Fatalf("after release: %+v", u)
	}
}

func TestEvaluateExpiredAndRevoked(t *testing.T) {
	g := mustLive(t, Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/x"}}})
	c := mustCall(t, "GET", "/x", "", "")
	if _, err := Evaluate(t0.Add(2*time.Hour), []*Live{g}, "gh", c); !errors.Is(err, ErrGrantExpired) {
		t.Fatalf("expired: %v", err)
	}
	if _, err := Evaluate(t0, []*Live{g}, "pay", c); !errors.Is(err, ErrNoMatchingGrant) {
		t.Fatalf("other upstream: %v", err)
	}
	g.Revoke()
	if _, err := Evaluate(t0, []*Live{g}, "gh", c); !errors.Is(err, ErrNoMatchingGrant) {
		t.Fatalf("revoked: %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		spec      Spec
		wantField string
	}{
		{name: "fail-unknown upstream", spec: Spec{Upstream: "nope", Rules: []Rule{{Method: "GET", Path: "/"}}}, wantField: "g.upstream"},
		{name: "fail-no rules", spec: Spec{Upstream: "gh"}, wantField: "g.rules"},
		{name: "fail-ttl over session", spec: Spec{Upstream: "gh", TTL: 2 * time.Hour, Rules: []Rule{{Method: "GET", Path: "/"}}}, wantField: "g.ttl"},
		{name: "fail-bad method", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "TRACE", Path: "/"}}}, wantField: "g.rules[0].method"},
		{name: "fail-bad template", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/a/../b"}}}, wantField: "g.rules[0].path"},
		{name: "fail-partial param", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/a/x{id}"}}}, wantField: "g.rules[0].path"},
		{name: "fail-unknown path param", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/a/{id}", Constraints: map[string]Constraint{"path.other": {Pin: "x"}}}}}, wantField: "g.rules[0].constraints.path.other"},
		{name: "fail-bad regexp", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"query.q": {Pattern: "("}}}}}, wantField: "g.rules[0].constraints.query.q"},
		{name: "fail-min over max", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"query.n": {Min: ptr(5.0), Max: ptr(1.0)}}}}}, wantField: "g.rules[0].constraints.query.n"},
		{name: "fail-empty constraint", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"query.n": {}}}}}, wantField: "g.rules[0].constraints.query.n"},
		{name: "fail-authorization header", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"header.authorization": {Pin: "x"}}}}}, wantField: "g.rules[0].constraints.header.authorization"},
		{name: "fail-traceparent header", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"header.traceparent": {Pattern: ".*"}}}}}, wantField: "g.rules[0].constraints.header.traceparent"},
		{name: "fail-tracestate header", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"header.Tracestate": {Pin: "x=1"}}}}}, wantField: "g.rules[0].constraints.header.Tracestate"},
		{name: "fail-baggage header", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"header.baggage": {Pin: "a=b"}}}}}, wantField: "g.rules[0].constraints.header.baggage"},
		{name: "fail-bad location", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"cookie.x": {Pin: "x"}}}}}, wantField: "g.rules[0].constraints.cookie.x"},
		{name: "fail-object pin", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "GET", Path: "/", Constraints: map[string]Constraint{"body.x": {Pin: map[string]any{}}}}}}, wantField: "g.rules[0].constraints.body.x"},
		{name: "fail-budget on path", spec: Spec{Upstream: "gh", Budget: map[string]float64{"path.x": 1}, Rules: []Rule{{Method: "GET", Path: "/"}}}, wantField: "g.budget.path.x"},
		{name: "fail-zero budget", spec: Spec{Upstream: "gh", Budget: map[string]float64{"body.x": 0}, Rules: []Rule{{Method: "GET", Path: "/"}}}, wantField: "g.budget.body.x"},
		{name: "fail-approval", spec: Spec{Upstream: "gh", Approval: "never", Rules: []Rule{{Method: "GET", Path: "/"}}}, wantField: "g.approval"},
		{name: "fail-aws fields on http", spec: Spec{Upstream: "gh", Rules: []Rule{{Action: "s3:GetObject", Resource: "*"}}}, wantField: "g.rules[0]"},
		{name: "fail-two spellings of one body field", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "POST", Path: "/", Constraints: map[string]Constraint{
			"body.to": {Pin: "acme"}, "body.TO": {Pin: "mallory"}}}}}, wantField: "g.rules[0].constraints.body.to"},
		{name: "fail-two spellings of a parent", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "POST", Path: "/", Constraints: map[string]Constraint{
			"body.meta.a": {Pin: "x"}, "body.Meta.b": {Pin: "y"}}}}}, wantField: "g.rules[0].constraints.body.meta.a"},
		{name: "fail-budget spelled differently from a constraint", spec: Spec{Upstream: "gh", Budget: map[string]float64{"body.Amount": 10}, Rules: []Rule{{Method: "POST", Path: "/", Constraints: map[string]Constraint{
			"body.amount": {Max: ptr(5.0)}}}}}, wantField: "g.rules[0].constraints.body.amount"},
		{name: "fail-two spellings of a budget", spec: Spec{Upstream: "gh", Budget: map[string]float64{"body.amount": 10, "body.AMOUNT": 10}, Rules: []Rule{{Method: "POST", Path: "/"}}}, wantField: "g.budget.body.amount"},
		{name: "ok, one spelling in two rules", spec: Spec{Upstream: "gh", Rules: []Rule{
			{Method: "POST", Path: "/a", Constraints: map[string]Constraint{"body.to": {Pin: "x"}}},
			{Method: "POST", Path: "/b", Constraints: map[string]Constraint{"body.TO": {Pin: "x"}}}}}},
		{name: "ok", spec: paymentSpec()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate("g", &tt.spec, httpKind, time.Hour)
			if tt.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *fault.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Fatalf("err = %v, want field %s", err, tt.wantField)
			}
			if strings.Contains(fe.Msg, "\n") {
				t.Errorf("message spans lines: %q", fe.Msg)
			}
		})
	}
}

func TestIrreversibleDefault(t *testing.T) {
	for m, want := range map[string]bool{"GET": false, "HEAD": false, "OPTIONS": false, "POST": true, "PUT": true, "PATCH": true, "DELETE": true} {
		if got := (Rule{Method: m}).IsIrreversible(); got != want {
			t.Errorf("%s irreversible = %v, want %v", m, got, want)
		}
	}
	if (Rule{Method: "POST", Irreversible: ptr(false)}).IsIrreversible() {
		t.Error("explicit irreversible=false ignored")
	}
}

// BenchmarkEvaluate is the grant part of the authorization decision: rule
// matching and every constraint of a realistic payment rule.
func BenchmarkEvaluate(b *testing.B) {
	g := mustLive(b, paymentSpec())
	g.Grant.MaxUses = 0
	c := mustCall(b, "POST", "/accounts/acct-1/payments", "page=3", `{"amount": 50, "to": "acme", "currency": "EUR", "memo": "rent"}`)
	b.ReportAllocs()
	for b.Loop() {
		d, err := Evaluate(t0, []*Live{g}, "pay", c)
		if err != nil {
			b.Fatal(err)
		}
		d.Release()
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		p, s string
		want bool
	}{
		{"arn:aws:s3:::reports/t-42/*", "arn:aws:s3:::reports/t-42/a/b.csv", true},
		{"arn:aws:s3:::reports/t-42/*", "arn:aws:s3:::reports/t-43/a", false},
		{"arn:aws:s3:::reports/t-42/*", "arn:aws:s3:::reports/t-42", false},
		{"s3:*Object", "s3:PutObject", true},
		{"s3:Get*", "s3:PutObject", false},
		{"*", "", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*a*b*", "xxaxxbxx", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		if got := Glob(tt.p, tt.s); got != tt.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", tt.p, tt.s, got, tt.want)
		}
	}
}

func TestAWSRules(t *testing.T) {
	kind := func(name string) (string, bool) { return "aws", name == "s3" }
	spec := Spec{Upstream: "s3", Rules: []Rule{
		{Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/t-42/*"},
		{Action: "s3:ListBucket", Resource: "arn:aws:s3:::reports", Constraints: map[string]Constraint{"query.prefix": {Pattern: "t-42/.*", Required: true}}},
	}}
	if err := Validate("g", &spec, kind, time.Hour); err != nil {
		t.Fatal(err)
	}
	g, _ := Compile(Grant{ID: "g", Spec: spec, ExpiresAt: t0.Add(time.Hour)}, Usage{})
	ok := &Call{Method: "PUT", Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/t-42/x.csv", Header: http.Header{}}
	if d, err := Evaluate(t0, []*Live{g}, "s3", ok); err != nil || !d.Irreversible {
		t.Fatalf("put inside the prefix: %v", err)
	}
	out := &Call{Method: "PUT", Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/t-43/x.csv", Header: http.Header{}}
	if _, err := Evaluate(t0, []*Live{g}, "s3", out); !errors.Is(err, ErrNoMatchingGrant) {
		t.Fatalf("put outside the prefix: %v", err)
	}
	list := &Call{Method: "GET", Action: "s3:ListBucket", Resource: "arn:aws:s3:::reports", Query: []Param{{"prefix", "t-43/"}}, Header: http.Header{}}
	if _, err := Evaluate(t0, []*Live{g}, "s3", list); !errors.Is(err, ErrConstraintViolated) {
		t.Fatalf("list outside the prefix: %v", err)
	}
	if (Rule{Action: "s3:GetObject"}).IsIrreversible() || !(Rule{Action: "s3:DeleteObject"}).IsIrreversible() {
		t.Fatal("aws irreversibility defaults")
	}
	// An http-style call never matches an aws rule and vice versa.
	if _, err := Evaluate(t0, []*Live{g}, "s3", &Call{Method: "PUT", Header: http.Header{}}); !errors.Is(err, ErrNoMatchingGrant) {
		t.Fatalf("http call on aws rules: %v", err)
	}
}

// TestEvaluateCaseVariantKeys: a body key that differs from a constrained
// name only in case is that name (a case-insensitive upstream reads it so),
// never an unknown field beside an absent one.
func TestEvaluateCaseVariantKeys(t *testing.T) {
	spec := Spec{Upstream: "pay", Budget: map[string]float64{"body.fee": 10}, Rules: []Rule{{
		Method: "POST", Path: "/pay",
		Constraints: map[string]Constraint{
			"body.to":          {Pin: "acme"},
			"body.amount":      {Max: ptr(100.0)},
			"body.memo":        {Pattern: `[a-z]*`},
			"body.meta.label":  {Pin: "ok"},
			"body.items.0.sku": {Pattern: `[A-Z]-[0-9]`},
		},
	}, {
		Method: "POST", Path: "/strict", DenyUnknown: true,
		Constraints: map[string]Constraint{"body.to": {Pin: "acme"}, "body.amount": {Max: ptr(100.0)}},
	}}}
	tests := []struct {
		name       string
		path       string
		body       string
		wantParam  string
		wantConstr string
		wantErr    error
		wantBody   string // the forwarded body, when allowed
	}{
		{name: "fail-variant with another value", body: `{"TO": "mallory"}`, wantErr: ErrConstraintViolated, wantParam: "body.to", wantConstr: "pin"},
		{name: "fail-variant with the pinned value", body: `{"TO": "acme"}`, wantErr: ErrConstraintViolated, wantParam: "body.to", wantConstr: "name"},
		{name: "fail-long s variant", body: `{"memo": "ok", "to": "acme", "meta": {"labe\u006c": "ok"}, "amount": 1, "items": [{"\u017fku": "Z-9"}]}`,
			wantErr: ErrConstraintViolated, wantParam: "body.items.0.sku", wantConstr: "name"},
		{name: "fail-long s parent variant, leaf absent", body: `{"amount": 5, "meta": {}, "item\u017f": []}`, wantErr: ErrConstraintViolated, wantParam: "body.items.0.sku", wantConstr: "name"},
		{name: "fail-max variant", body: `{"AMOUNT": 1000000}`, wantErr: ErrConstraintViolated, wantParam: "body.amount", wantConstr: "max"},
		{name: "fail-max variant within max", body: `{"Amount": 50}`, wantErr: ErrConstraintViolated, wantParam: "body.amount", wantConstr: "name"},
		{name: "fail-pattern variant", body: `{"MEMO": "<script>"}`, wantErr: ErrConstraintViolated, wantParam: "body.memo", wantConstr: "pattern"},
		{name: "fail-dotless i variant", body: `{"\u0131tems": [{"sku": "A-1"}]}`, wantErr: ErrConstraintViolated, wantParam: "body.items.0.sku", wantConstr: "name"},
		{name: "fail-nested parent variant", body: `{"META": {"label": "ok"}}`, wantErr: ErrConstraintViolated, wantParam: "body.meta.label", wantConstr: "name"},
		{name: "fail-nested parent variant, leaf absent", body: `{"Meta": {}}`, wantErr: ErrConstraintViolated, wantParam: "body.meta.label", wantConstr: "name"},
		{name: "fail-nested leaf variant", body: `{"meta": {"LABEL": "evil"}}`, wantErr: ErrConstraintViolated, wantParam: "body.meta.label", wantConstr: "pin"},
		{name: "fail-budget variant", body: `{"FEE": 1000}`, wantErr: ErrConstraintViolated, wantParam: "body.fee", wantConstr: "name"},
		{name: "fail-deny_unknown sees the variant as the named field", path: "/strict", body: `{"To": "acme"}`, wantErr: ErrConstraintViolated, wantParam: "body.to", wantConstr: "name"},
		{name: "fail-deny_unknown unknown field", path: "/strict", body: `{"BCC": "x"}`, wantErr: ErrConstraintViolated, wantParam: "body.bcc", wantConstr: "deny_unknown"},
		{name: "ok, pins filled in beside unrelated variants", body: `{"amount": 5, "other": {"TO": "x"}}`,
			wantBody: `{"amount":5,"meta":{"label":"ok"},"other":{"TO":"x"},"to":"acme"}`},
		{name: "ok, exact spelling", body: `{"to": "acme", "amount": 5, "meta": {"label": "ok"}, "items": [{"sku": "A-1"}], "fee": 3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := mustLive(t, spec)
			path := tt.path
			if path == "" {
				path = "/pay"
			}
			raw := []byte(tt.body)
			d, err := Evaluate(t0, []*Live{g}, "pay", mustCall(t, "POST", path, "", tt.body))
			if tt.wantErr != nil {
				var v *Violation
				if !errors.Is(err, tt.wantErr) || !errors.As(err, &v) || v.Param != tt.wantParam || v.Constraint != tt.wantConstr {
					t.Fatalf("Evaluate err = %v, want %v on %s (%s)", err, tt.wantErr, tt.wantParam, tt.wantConstr)
				}
				if u := g.Usage(); u.Uses != 0 || u.Spent["body.fee"] != 0 {
					t.Fatalf("a refused call consumed the grant: %+v", u)
				}
				return
			}
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			out, err := d.BodyBytes(raw)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.wantBody
			if want == "" {
				want = tt.body
			}
			if string(out) != want {
				t.Errorf("forwarded body = %s, want %s", out, want)
			}
		})
	}
}

// TestSetNeverAddsAVariant: filling in a pin beside a key that differs only
// in case fails rather than leave two keys an upstream may read as one.
func TestSetNeverAddsAVariant(t *testing.T) {
	for _, body := range []string{`{"TO": "x"}`, `{"META": {}}`, `{"meta": {"LABEL": "x"}}`} {
		doc, err := ParseJSON([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		path := []string{"to"}
		if strings.Contains(strings.ToLower(body), "meta") {
			path = []string{"meta", "label"}
		}
		if set(doc, path, "v") {
			t.Errorf("set %v into %s succeeded", path, body)
		}
	}
}
