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

// kinds answers "mcp" for the upstream "tools", "http" for "gh".
func kinds(name string) (string, bool) {
	switch name {
	case "tools":
		return "mcp", true
	case "gh":
		return "http", true
	}
	return "", false
}

func mustToolLive(tb testing.TB, spec Spec) *Live {
	tb.Helper()
	if err := Validate("grant", &spec, kinds, time.Hour); err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	l, err := Compile(Grant{ID: "g1", SessionID: "s1", Spec: spec, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, Usage{})
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return l
}

// toolCall is a tools/call of tool with args (a JSON object, or "" for
// none) as the MCP door builds it.
func toolCall(tb testing.TB, tool, args string) *Call {
	tb.Helper()
	c := &Call{Tool: tool, BodyJSON: true, HasBody: true}
	if args != "" {
		v, err := ParseJSON([]byte(args))
		if err != nil {
			tb.Fatal(err)
		}
		c.Body = v
	}
	return c
}

func issueSpec() Spec {
	return Spec{Upstream: "tools", Rules: []Rule{{
		Tool: "create_issue", DenyUnknown: true,
		Constraints: map[string]Constraint{
			"args.repo":          {Pin: "acme/web"},
			"args.title":         {MaxLength: ptr(20), Required: true},
			"args.labels":        {MaxLength: ptr(3)},
			"args.labels.*":      {OneOf: []any{"bug", "triage"}},
			"args.priority":      {Min: ptr(1.0), Max: ptr(5.0)},
			"args.assignee":      {Pattern: `[a-z]+`},
			"args.items.*.qty":   {Max: ptr(10.0)},
			"args.items.*.sku":   {MaxLength: ptr(4)},
			"args.meta.board.id": {OneOf: []any{"b1", "b2"}},
		},
	}}}
}

func TestEvaluateToolCall(t *testing.T) {
	tests := []struct {
		name       string
		tool       string
		args       string
		wantErr    error
		wantParam  string
		wantConstr string
		wantArgs   string // the arguments to forward, when allowed
	}{
		{name: "ok, pin filled in", args: `{"title": "crash"}`, wantArgs: `{"repo":"acme/web","title":"crash"}`},
		{name: "ok, pin matches", args: `{"title": "crash", "repo": "acme/web"}`, wantArgs: `{"repo":"acme/web","title":"crash"}`},
		{name: "ok, every element allowed", args: `{"title": "t", "labels": ["bug", "triage"], "items": [{"qty": 1, "sku": "ab"}, {"sku": "cd"}]}`,
			wantArgs: `{"items":[{"qty":1,"sku":"ab"},{"sku":"cd"}],"labels":["bug","triage"],"repo":"acme/web","title":"t"}`},
		{name: "ok, empty array", args: `{"title": "t", "labels": []}`, wantArgs: `{"labels":[],"repo":"acme/web","title":"t"}`},
		{name: "ok, nested", args: `{"title": "t", "meta": {"board": {"id": "b2"}}}`, wantArgs: `{"meta":{"board":{"id":"b2"}},"repo":"acme/web","title":"t"}`},
		{name: "fail-no arguments, title required", args: "", wantErr: ErrConstraintViolated, wantParam: "args.title", wantConstr: "required"},
		{name: "fail-pin differs", args: `{"title": "t", "repo": "evil/web"}`, wantErr: ErrConstraintViolated, wantParam: "args.repo", wantConstr: "pin"},
		{name: "fail-pin as a case variant", args: `{"title": "t", "Repo": "acme/web"}`, wantErr: ErrConstraintViolated, wantParam: "args.repo", wantConstr: "name"},
		{name: "fail-pin as a case variant with another value", args: `{"title": "t", "REPO": "evil/web"}`, wantErr: ErrConstraintViolated, wantParam: "args.repo", wantConstr: "pin"},
		{name: "fail-title too long", args: `{"title": "a title far longer than twenty"}`, wantErr: ErrConstraintViolated, wantParam: "args.title", wantConstr: "max_length"},
		{name: "fail-too many labels", args: `{"title": "t", "labels": ["bug", "bug", "bug", "bug"]}`, wantErr: ErrConstraintViolated, wantParam: "args.labels", wantConstr: "max_length"},
		{name: "fail-one element not allowed", args: `{"title": "t", "labels": ["bug", "wontfix"]}`, wantErr: ErrConstraintViolated, wantParam: "args.labels.*", wantConstr: "one_of"},
		{name: "fail-* over an object", args: `{"title": "t", "items": {"a": {"qty": 99}}}`, wantErr: ErrConstraintViolated, wantParam: "args.items.*.qty", wantConstr: "type"},
		{name: "fail-* over a string", args: `{"title": "t", "items": "x"}`, wantErr: ErrConstraintViolated, wantParam: "args.items.*.qty", wantConstr: "type"},
		{name: "fail-* over null", args: `{"title": "t", "items": null}`, wantErr: ErrConstraintViolated, wantParam: "args.items.*.qty", wantConstr: "type"},
		{name: "fail-labels as an object", args: `{"title": "t", "labels": {"a": "wontfix"}}`, wantErr: ErrConstraintViolated, wantParam: "args.labels", wantConstr: "max_length"},
		{name: "fail-nested * element over max", args: `{"title": "t", "items": [{"qty": 1}, {"qty": 11}]}`, wantErr: ErrConstraintViolated, wantParam: "args.items.*.qty", wantConstr: "max"},
		{name: "fail-nested * element max_length", args: `{"title": "t", "items": [{"sku": "abcde"}]}`, wantErr: ErrConstraintViolated, wantParam: "args.items.*.sku", wantConstr: "max_length"},
		{name: "fail-nested * element key as a case variant", args: `{"title": "t", "items": [{"qty": 1}, {"QTY": 2}]}`, wantErr: ErrConstraintViolated, wantParam: "args.items.*.qty", wantConstr: "name"},
		{name: "fail-nested * element case variant over max", args: `{"title": "t", "items": [{"Qty": 99}]}`, wantErr: ErrConstraintViolated, wantParam: "args.items.*.qty", wantConstr: "max"},
		{name: "fail-array as a case variant", args: `{"title": "t", "Labels": ["bug"]}`, wantErr: ErrConstraintViolated, wantParam: "args.labels", wantConstr: "name"},
		{name: "fail-under min", args: `{"title": "t", "priority": 0}`, wantErr: ErrConstraintViolated, wantParam: "args.priority", wantConstr: "min"},
		{name: "fail-over max", args: `{"title": "t", "priority": 6}`, wantErr: ErrConstraintViolated, wantParam: "args.priority", wantConstr: "max"},
		{name: "fail-number as a string", args: `{"title": "t", "priority": "3"}`, wantErr: ErrConstraintViolated, wantParam: "args.priority", wantConstr: "min/max"},
		{name: "fail-pattern", args: `{"title": "t", "assignee": "Mallory"}`, wantErr: ErrConstraintViolated, wantParam: "args.assignee", wantConstr: "pattern"},
		{name: "fail-pattern on a non-string", args: `{"title": "t", "assignee": ["a"]}`, wantErr: ErrConstraintViolated, wantParam: "args.assignee", wantConstr: "pattern"},
		{name: "fail-nested one_of", args: `{"title": "t", "meta": {"board": {"id": "b9"}}}`, wantErr: ErrConstraintViolated, wantParam: "args.meta.board.id", wantConstr: "one_of"},
		{name: "fail-deny_unknown", args: `{"title": "t", "body": "x"}`, wantErr: ErrConstraintViolated, wantParam: "args.body", wantConstr: "deny_unknown"},
		{name: "fail-deny_unknown dotted key", args: `{"title": "t", "meta.board": "x"}`, wantErr: ErrConstraintViolated, wantParam: "args.meta.board", wantConstr: "deny_unknown"},
		{name: "ok, deny_unknown checks top-level arguments only", args: `{"title": "t", "meta": {"other": 1}}`,
			wantArgs: `{"meta":{"other":1},"repo":"acme/web","title":"t"}`},
		{name: "fail-arguments not an object", args: `["title"]`, wantErr: ErrConstraintViolated, wantParam: "args", wantConstr: "type"},
		{name: "fail-other tool", tool: "delete_repo", args: `{"title": "t"}`, wantErr: ErrNoMatchingGrant},
		{name: "fail-tool name differs in case", tool: "Create_Issue", args: `{"title": "t"}`, wantErr: ErrNoMatchingGrant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := mustToolLive(t, issueSpec())
			tool := tt.tool
			if tool == "" {
				tool = "create_issue"
			}
			d, err := Evaluate(t0, []*Live{g}, "tools", toolCall(t, tool, tt.args))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Evaluate err = %v, want %v", err, tt.wantErr)
				}
				var v *Violation
				if tt.wantParam != "" && (!errors.As(err, &v) || v.Param != tt.wantParam || v.Constraint != tt.wantConstr) {
					t.Fatalf("violation = %v, want %s (%s)", err, tt.wantParam, tt.wantConstr)
				}
				if u := g.Usage(); u.Uses != 0 {
					t.Fatalf("a refused call consumed a use: %+v", u)
				}
				return
			}
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			got, _ := json.Marshal(d.Body)
			if string(got) != tt.wantArgs {
				t.Errorf("arguments = %s, want %s", got, tt.wantArgs)
			}
			if !d.Irreversible {
				t.Error("a tool rule with irreversible unset must be irreversible")
			}
		})
	}
}

// TestEvaluateToolPins: a pin filled in changes the arguments (the door
// re-serializes Decision.Body), a pin matched does not; the caller's
// arguments are never changed in place.
func TestEvaluateToolPins(t *testing.T) {
	g := mustToolLive(t, issueSpec())
	c := toolCall(t, "create_issue", `{"title": "t"}`)
	d, err := Evaluate(t0, []*Live{g}, "tools", c)
	if err != nil {
		t.Fatal(err)
	}
	if !d.BodyChanged || !cmp.Equal(d.Filled, []string{"args.repo"}) || !cmp.Equal(d.Pinned, []string{"args.repo"}) {
		t.Errorf("changed %v, filled %v, pinned %v", d.BodyChanged, d.Filled, d.Pinned)
	}
	if _, ok := c.Body.(map[string]any)["repo"]; ok {
		t.Error("the pin was filled into the call's own arguments")
	}
	d, err = Evaluate(t0, []*Live{g}, "tools", toolCall(t, "create_issue", `{"title": "t", "repo": "acme/web"}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.BodyChanged || len(d.Filled) != 0 || !cmp.Equal(d.Pinned, []string{"args.repo"}) {
		t.Errorf("matched pin: changed %v, filled %v, pinned %v", d.BodyChanged, d.Filled, d.Pinned)
	}
	// No arguments at all: the pin makes the object.
	g = mustToolLive(t, Spec{Upstream: "tools", Rules: []Rule{{Tool: "ping_repo", Constraints: map[string]Constraint{"args.repo": {Pin: "acme/web"}}}}})
	d, err = Evaluate(t0, []*Live{g}, "tools", toolCall(t, "ping_repo", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(d.Body); string(got) != `{"repo":"acme/web"}` {
		t.Errorf("arguments = %s", got)
	}
}

// TestToolCallsAndOtherRules: a tool rule matches only a call of its tool,
// never a REST call, and a REST rule never matches a tool call, even one
// whose arguments would satisfy it.
func TestToolCallsAndOtherRules(t *testing.T) {
	toolGrant := mustToolLive(t, Spec{Upstream: "tools", Rules: []Rule{{Tool: "search"}}})
	restGrant := mustToolLive(t, Spec{Upstream: "gh", Rules: []Rule{{Method: "POST", Path: "/"}}})
	for _, tt := range []struct {
		name     string
		live     *Live
		upstream string
		c        *Call
	}{
		{"REST call on a tool rule", toolGrant, "tools", &Call{Method: "POST", Header: http.Header{}}},
		{"REST call with the tool's name as method", toolGrant, "tools", &Call{Method: "search", Header: http.Header{}}},
		{"tool call on a REST rule", restGrant, "gh", toolCall(t, "search", `{}`)},
		{"tool call with method and path on a REST rule", restGrant, "gh", &Call{Tool: "search", Method: "POST", BodyJSON: true, HasBody: true}},
		{"aws call on a tool rule", toolGrant, "tools", &Call{Action: "s3:GetObject", Resource: "*", Header: http.Header{}}},
		{"tool call of another upstream", toolGrant, "gh", toolCall(t, "search", `{}`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Evaluate(t0, []*Live{tt.live}, tt.upstream, tt.c); !errors.Is(err, ErrNoMatchingGrant) {
				t.Fatalf("err = %v, want no_matching_grant", err)
			}
		})
	}
	if _, err := Evaluate(t0, []*Live{toolGrant}, "tools", toolCall(t, "search", `{"q": "x"}`)); err != nil {
		t.Fatalf("the tool's own call: %v", err)
	}
}

func TestToolBudgetAndMaxUses(t *testing.T) {
	spec := Spec{Upstream: "tools", MaxUses: 3, Budget: map[string]float64{"args.amount": 100},
		Rules: []Rule{{Tool: "pay", Constraints: map[string]Constraint{"args.amount": {Max: ptr(80.0)}}}}}
	g := mustToolLive(t, spec)
	call := func(args string) error {
		_, err := Evaluate(t0, []*Live{g}, "tools", toolCall(t, "pay", args))
		return err
	}
	for _, step := range []struct {
		args string
		want error
	}{
		{`{"amount": 60}`, nil},
		{`{"amount": 50}`, ErrBudgetExceeded},
		{`{"amount": -500}`, ErrConstraintViolated},
		{`{"amount": "5"}`, ErrConstraintViolated},
		{`{"AMOUNT": 5}`, ErrConstraintViolated},
		{`{"amount": 40}`, nil},
		{`{}`, nil},
		{`{}`, ErrGrantExhausted},
	} {
		if err := call(step.args); !errors.Is(err, step.want) && (err != nil || step.want != nil) {
			t.Fatalf("%s: err = %v, want %v", step.args, err, step.want)
		}
	}
	if u := g.Usage(); u.Uses != 3 || u.Spent["args.amount"] != 100 {
		t.Fatalf("usage = %+v", u)
	}
	// The amount is read after pins: a pinned amount is counted when filled in.
	g = mustToolLive(t, Spec{Upstream: "tools", Budget: map[string]float64{"args.amount": 10},
		Rules: []Rule{{Tool: "pay", Constraints: map[string]Constraint{"args.amount": {Pin: 6.0}}}}})
	if err := call(`{}`); err != nil {
		t.Fatal(err)
	}
	if err := call(`{}`); !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("second pinned amount: %v", err)
	}
}

func TestValidateToolRules(t *testing.T) {
	tool := func(r Rule) Spec { return Spec{Upstream: "tools", Rules: []Rule{r}} }
	args := func(cs map[string]Constraint) Spec { return tool(Rule{Tool: "create_issue", Constraints: cs}) }
	tests := []struct {
		name      string
		spec      Spec
		wantField string
		wantMsg   string
	}{
		{name: "ok", spec: issueSpec()},
		{name: "ok, dots and dashes", spec: tool(Rule{Tool: "repo.create-issue_v2"})},
		{name: "ok, 128 characters", spec: tool(Rule{Tool: strings.Repeat("a", 128)})},
		{name: "ok, numeric segment", spec: args(map[string]Constraint{"args.items.0.sku": {Pin: "A-1"}})},
		{name: "fail-no tool", spec: tool(Rule{}), wantField: "g.rules[0].tool", wantMsg: "is required"},
		{name: "fail-tool with a slash", spec: tool(Rule{Tool: "repos/create"}), wantField: "g.rules[0].tool", wantMsg: "may hold only"},
		{name: "fail-tool with a space", spec: tool(Rule{Tool: "create issue"}), wantField: "g.rules[0].tool"},
		{name: "fail-tool glob", spec: tool(Rule{Tool: "create_*"}), wantField: "g.rules[0].tool"},
		{name: "fail-tool non-ASCII", spec: tool(Rule{Tool: "créer"}), wantField: "g.rules[0].tool"},
		{name: "fail-tool of 200 characters", spec: tool(Rule{Tool: strings.Repeat("a", 200)}), wantField: "g.rules[0].tool", wantMsg: "1 to 128"},
		{name: "fail-method on a tool rule", spec: tool(Rule{Tool: "t", Method: "POST"}), wantField: "g.rules[0].method"},
		{name: "fail-path on a tool rule", spec: tool(Rule{Tool: "t", Path: "/"}), wantField: "g.rules[0].path"},
		{name: "fail-action on a tool rule", spec: tool(Rule{Tool: "t", Action: "s3:GetObject"}), wantField: "g.rules[0].action"},
		{name: "fail-resource on a tool rule", spec: tool(Rule{Tool: "t", Resource: "*"}), wantField: "g.rules[0].resource"},
		{name: "fail-websocket on a tool rule", spec: tool(Rule{Tool: "t", WebSocket: true}), wantField: "g.rules[0].websocket"},
		{name: "fail-tool on an http rule", spec: Spec{Upstream: "gh", Rules: []Rule{{Tool: "t", Method: "GET", Path: "/"}}}, wantField: "g.rules[0].tool"},
		{name: "fail-body on a tool rule", spec: args(map[string]Constraint{"body.repo": {Pin: "x"}}), wantField: "g.rules[0].constraints.body.repo", wantMsg: "args.PATH"},
		{name: "fail-query on a tool rule", spec: args(map[string]Constraint{"query.q": {Pin: "x"}}), wantField: "g.rules[0].constraints.query.q"},
		{name: "fail-header on a tool rule", spec: args(map[string]Constraint{"header.X-A": {Pin: "x"}}), wantField: "g.rules[0].constraints.header.X-A"},
		{name: "fail-path on a tool rule's constraint", spec: args(map[string]Constraint{"path.owner": {Pin: "x"}}), wantField: "g.rules[0].constraints.path.owner"},
		{name: "fail-args on an http rule", spec: Spec{Upstream: "gh", Rules: []Rule{{Method: "POST", Path: "/", Constraints: map[string]Constraint{"args.repo": {Pin: "x"}}}}},
			wantField: "g.rules[0].constraints.args.repo", wantMsg: "mcp upstream"},
		{name: "fail-two spellings of an argument", spec: args(map[string]Constraint{"args.repo": {Pin: "a"}, "args.Repo": {Pin: "b"}}),
			wantField: "g.rules[0].constraints.args.repo", wantMsg: "only in case"},
		{name: "fail-two spellings of a parent", spec: args(map[string]Constraint{"args.meta.a": {Pin: "a"}, "args.META.b": {Pin: "b"}}),
			wantField: "g.rules[0].constraints.args.meta.a"},
		{name: "fail-long s variant", spec: args(map[string]Constraint{"args.sku": {Pin: "a"}, "args.\u017fku": {Pin: "b"}}),
			wantField: "g.rules[0].constraints.args.\u017fku"},
		{name: "fail-* on the arguments object", spec: args(map[string]Constraint{"args.*": {MaxLength: ptr(3)}}), wantField: "g.rules[0].constraints.args.*", wantMsg: "object"},
		{name: "fail-* on the arguments object, deeper", spec: args(map[string]Constraint{"args.*.x": {MaxLength: ptr(3)}}), wantField: "g.rules[0].constraints.args.*.x"},
		{name: "fail-* pin", spec: args(map[string]Constraint{"args.labels.*": {Pin: "bug"}}), wantField: "g.rules[0].constraints.args.labels.*", wantMsg: "pin"},
		{name: "fail-nested * pin", spec: args(map[string]Constraint{"args.items.*.qty": {Pin: 1.0}}), wantField: "g.rules[0].constraints.args.items.*.qty"},
		{name: "fail-* required", spec: args(map[string]Constraint{"args.labels.*": {Required: true}}), wantField: "g.rules[0].constraints.args.labels.*", wantMsg: "required"},
		{name: "fail-empty segment", spec: args(map[string]Constraint{"args.a..b": {Pin: "x"}}), wantField: "g.rules[0].constraints.args.a..b"},
		{name: "fail-args alone", spec: args(map[string]Constraint{"args.": {Pin: "x"}}), wantField: "g.rules[0].constraints.args."},
		{name: "fail-object pin", spec: args(map[string]Constraint{"args.x": {Pin: map[string]any{}}}), wantField: "g.rules[0].constraints.args.x"},
		{name: "fail-budget on args on an http upstream", spec: Spec{Upstream: "gh", Budget: map[string]float64{"args.amount": 5}, Rules: []Rule{{Method: "POST", Path: "/"}}},
			wantField: "g.budget.args.amount", wantMsg: "mcp upstream"},
		{name: "fail-budget on body on an mcp upstream", spec: Spec{Upstream: "tools", Budget: map[string]float64{"body.amount": 5}, Rules: []Rule{{Tool: "pay"}}},
			wantField: "g.budget.body.amount", wantMsg: "args.*"},
		{name: "fail-budget on query on an mcp upstream", spec: Spec{Upstream: "tools", Budget: map[string]float64{"query.n": 5}, Rules: []Rule{{Tool: "pay"}}},
			wantField: "g.budget.query.n"},
		{name: "fail-budget with *", spec: Spec{Upstream: "tools", Budget: map[string]float64{"args.items.*.qty": 5}, Rules: []Rule{{Tool: "pay"}}},
			wantField: "g.budget.args.items.*.qty", wantMsg: "*"},
		{name: "fail-budget spelled differently from a constraint", spec: Spec{Upstream: "tools", Budget: map[string]float64{"args.Amount": 5},
			Rules: []Rule{{Tool: "pay", Constraints: map[string]Constraint{"args.amount": {Max: ptr(5.0)}}}}}, wantField: "g.rules[0].constraints.args.amount"},
		{name: "ok, budget", spec: Spec{Upstream: "tools", Budget: map[string]float64{"args.amount": 5}, Rules: []Rule{{Tool: "pay"}}}},
		{name: "fail-second rule", spec: Spec{Upstream: "tools", Rules: []Rule{{Tool: "a"}, {Tool: "b", Constraints: map[string]Constraint{"args.repo": {}}}}},
			wantField: "g.rules[1].constraints.args.repo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate("g", &tt.spec, kinds, time.Hour)
			if tt.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *fault.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField || !strings.Contains(fe.Msg, tt.wantMsg) {
				t.Fatalf("err = %v, want field %s (%q)", err, tt.wantField, tt.wantMsg)
			}
			if strings.Contains(fe.Msg, "\n") || len(fe.Msg) > 200 {
				t.Errorf("message spans lines or echoes too much: %q", fe.Msg)
			}
		})
	}
}

// TestConstrained: a decision lists the values of the constrained
// parameters only (as forwarded), for tool and REST rules.
func TestConstrained(t *testing.T) {
	spec := issueSpec()
	spec.Rules[0].DenyUnknown = false
	g := mustToolLive(t, spec)
	d, err := Evaluate(t0, []*Live{g}, "tools", toolCall(t, "create_issue",
		`{"title": "crash", "labels": ["bug"], "items": [{"qty": 2}, {"sku": "x"}, {"qty": 3}], "secret_note": "never audited"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"args.repo":        "acme/web",
		"args.title":       "crash",
		"args.labels":      []any{"bug"},
		"args.labels.*":    []any{"bug"},
		"args.items.*.qty": []any{json.Number("2"), json.Number("3")},
		"args.items.*.sku": []any{"x"},
	}
	got := d.Constrained()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("constrained (-want +got):\n%s", diff)
	}
	b, _ := json.Marshal(got)
	if strings.Contains(string(b), "never audited") {
		t.Errorf("an unconstrained argument reached the constrained values: %s", b)
	}

	rest := mustLive(t, paymentSpec())
	c := mustCall(t, "POST", "/accounts/acct-1/payments", "page=2", `{"amount": 50, "memo": "rent", "meta": {"label": "x"}}`)
	c.Header = http.Header{"X-Trace": {"abcd"}, "X-Other": {"secret"}}
	d, err = Evaluate(t0, []*Live{rest}, "pay", c)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]any{
		"path.account": "acct-1", "query.page": "2", "header.X-Trace": "abcd",
		"body.to": "acme", "body.amount": json.Number("50"), "body.memo": "rent", "body.meta.label": "x",
	}
	if diff := cmp.Diff(want, d.Constrained()); diff != "" {
		t.Errorf("REST constrained (-want +got):\n%s", diff)
	}
	if (&Decision{}).Constrained() != nil {
		t.Error("a decision of no rule has constrained values")
	}
}

func TestToolRules(t *testing.T) {
	g := mustToolLive(t, Spec{Upstream: "tools", Rules: []Rule{
		{Tool: "search", Irreversible: ptr(false)},
		{Tool: "create_issue", DenyUnknown: true, Constraints: map[string]Constraint{"args.repo": {Pin: "acme/web"}}},
	}})
	want := []ToolRule{
		{Tool: "search", Irreversible: false},
		{Tool: "create_issue", DenyUnknown: true, Irreversible: true, Constraints: map[string]Constraint{"args.repo": {Pin: "acme/web"}}},
	}
	got := g.ToolRules()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tool rules (-want +got):\n%s", diff)
	}
	got[1].Constraints["args.x"] = Constraint{Required: true}
	if _, ok := g.Grant.Rules[1].Constraints["args.x"]; ok {
		t.Error("ToolRules shares the grant's constraints")
	}
	if rest := mustLive(t, paymentSpec()); rest.ToolRules() != nil {
		t.Error("a REST grant lists tool rules")
	}
	if !(Rule{Tool: "x"}).IsIrreversible() || (Rule{Tool: "x", Irreversible: ptr(false)}).IsIrreversible() {
		t.Error("tool irreversibility default")
	}
	if !g.HasIrreversible() {
		t.Error("a grant with an unset tool rule has no irreversible rule")
	}
}
