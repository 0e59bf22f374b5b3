package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Black-box attacks on the MCP door (DESIGN §4, §10; docs/mcp.md,
// docs/grants.md) through the real server: a hostile sandbox sending any
// JSON-RPC it likes, and a hostile MCP server. Each case asserts the
// broker's exact refusal, what reached the upstream (nothing, or exactly
// the checked arguments), the audit, and that other sessions are still
// served. Everything the sandbox received is scanned for the canary.

// attackGrant is the issues grant the smuggling attacks aim at:
// create_issue as issuesGrant has it (deny_unknown, a pinned repo, a
// title of at most 20, labels from a list, amount at most 500); search
// with a pattern and a range; delete_repo with a pin and a constraint
// under an array; leak with a pinned number.
func attackGrant() map[string]any {
	g := issuesGrant(nil)
	g["rules"] = []any{
		g["rules"].([]any)[0],
		map[string]any{"tool": "search", "irreversible": false, "constraints": map[string]any{
			"args.query": map[string]any{"pattern": "[a-z ]+"},
			"args.limit": map[string]any{"min": 1, "max": 50},
		}},
		map[string]any{"tool": "delete_repo", "irreversible": false, "constraints": map[string]any{
			"args.repo":        map[string]any{"pin": "acme/old"},
			"args.items.*.qty": map[string]any{"max": 5},
		}},
		map[string]any{"tool": "leak", "irreversible": false, "constraints": map[string]any{
			"args.n": map[string]any{"pin": 100},
		}},
	}
	return g
}

// smuggle is one attack on a tool call's arguments: refused with an HTTP
// status, a JSON-RPC code and an Airlock code, or forwarded with exactly
// the arguments want (JSON text).
type smuggle struct {
	name   string
	tool   string
	args   string // the arguments' JSON text (when body is "")
	body   string // the whole message, instead of a call of tool with args
	status int
	code   int
	want   string // an Airlock code, or "forward"
	sent   string // the arguments the upstream must get, when forwarded
}

// runSmuggles runs each attack as session token on the issues upstream.
func runSmuggles(t *testing.T, env *attackEnv, p *poster, token string, cases []smuggle) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(env.log.sandboxMsgs())
			body := tc.body
			if body == "" {
				body = callMsg(tc.tool, tc.args)
			}
			a := p.post("issues", token, body, statelessHeaders("tools/call", tc.tool)...)
			after := env.log.sandboxMsgs()
			if tc.want != "forward" {
				wantRPCError(t, tc.name, a, tc.status, tc.code, tc.want)
				if len(after) != before {
					t.Errorf("a refused call reached the upstream: %s", after[len(after)-1].Raw)
				}
				return
			}
			if a.Status != 200 || a.Error != nil {
				t.Fatalf("want the call forwarded, got %d %s", a.Status, a.Body)
			}
			if len(after) != before+1 || after[len(after)-1].Method != "tools/call" {
				t.Fatalf("want exactly one tools/call upstream, got %d messages", len(after)-before)
			}
			var want any
			if err := json.Unmarshal([]byte(tc.sent), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, after[len(after)-1].Params["arguments"]); diff != "" {
				t.Errorf("the upstream got other arguments than the checked ones (-want +got):\n%s", diff)
			}
		})
	}
}

// Duplicate, case-fold-equal and escape-equal keys at every level of a
// tool call, and key spellings a lenient server would read as a
// constrained argument.
func TestAttackMCPArgumentKeys(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	long := `"` + strings.Repeat("x", 100) + `"`
	runSmuggles(t, env, p, s.Token, []smuggle{
		{name: "duplicate argument", tool: "create_issue", args: `{"title":"a","title":"b"}`, status: 400, code: -32600, want: "bad_request"},
		{name: "case-fold-equal argument", tool: "create_issue", args: `{"title":"a","TITLE":` + long + `}`, status: 400, code: -32600, want: "bad_request"},
		{name: "escape-equal argument", tool: "create_issue", args: `{"\u0072epo":"evil/x","repo":"acme/web","title":"t"}`, status: 400, code: -32600, want: "bad_request"},
		{name: "escaped pinned argument alone", tool: "create_issue", args: `{"\u0072epo":"evil/x","title":"t"}`, status: 200, code: -32602, want: "constraint_violated"},
		{name: "long s folds to s", tool: "create_issue", args: `{"title":"t","labels":["bug"],"label\u017f":["wontfix"]}`, status: 400, code: -32600, want: "bad_request"},
		{name: "Kelvin sign folds to k", tool: "search", args: `{"query":"ok","x":{"k":1,"\u212a":2}}`, status: 400, code: -32600, want: "bad_request"},
		{name: "duplicate deep in an array", tool: "search", args: `{"query":"ok","x":[[{"a":1,"b":[{"c":1,"C":2}]}]]}`, status: 400, code: -32600, want: "bad_request"},
		{name: "dotless i variant of a constrained argument", tool: "create_issue", args: `{"t\u0131tle":` + long + `}`, status: 200, code: -32602, want: "constraint_violated"},
		{name: "case variant of a constrained argument (no deny_unknown)", tool: "search", args: `{"QUERY":"../../etc"}`, status: 200, code: -32602, want: "constraint_violated"},
		{name: "fullwidth variant under deny_unknown", tool: "create_issue", args: `{"\uff54\uff49\uff54\uff4c\uff45":` + long + `}`, status: 200, code: -32602, want: "constraint_violated"},
		{name: "NUL-suffixed key under deny_unknown", tool: "create_issue", args: `{"title\u0000":` + long + `}`, status: 200, code: -32602, want: "constraint_violated"},
		{name: "unknown argument under deny_unknown", tool: "create_issue", args: `{"title":"t","assignee":"mallory"}`, status: 200, code: -32602, want: "constraint_violated"},
		{name: "case variant under an array element", tool: "delete_repo", args: `{"items":[{"qty":1},{"QTY":100}]}`, status: 200, code: -32602, want: "constraint_violated"},
		{name: "case-fold duplicate under an array element", tool: "delete_repo", args: `{"items":[{"qty":1,"Qty":100}]}`, status: 400, code: -32600, want: "bad_request"},
		{name: "duplicate tool name", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + statelessMeta + `,"name":"search","NAME":"delete_repo","arguments":{}}}`, tool: "search", status: 400, code: -32600, want: "bad_request"},
		{name: "duplicate arguments member", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"},"arguments":{"query":"../x"}}}`, tool: "search", status: 400, code: -32600, want: "bad_request"},
		{name: "duplicate in _meta", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":1,"PROGRESSTOKEN":2},"name":"search","arguments":{"query":"ok"}}}`, tool: "search", status: 400, code: -32600, want: "bad_request"},
		{name: "case variant of _meta", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + statelessMeta + `,"_META":{"progressToken":1},"name":"search","arguments":{"query":"ok"}}}`, tool: "search", status: 400, code: -32600, want: "bad_request"},
		{name: "duplicate top-level member", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","METHOD":"tools/list","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`, tool: "search", status: 400, code: -32600, want: "bad_request"},
		{name: "nesting past the depth cap", tool: "search", args: `{"query":"ok","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, status: 400, code: -32600, want: "bad_request"},
		{name: "not JSON", tool: "search", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search",`, status: 400, code: -32600, want: "bad_request"},
		{name: "the pin filled in (escaped key spelling is the pin's)", tool: "create_issue", args: `{"t\u0069tle":"ok"}`, want: "forward", sent: `{"repo":"acme/web","title":"ok"}`},
	})
	waitAudit(t, env.b, s.ID, "mcp.call.denied", "constraint_violated")
	stillServes(t, env.b)
}

// Numbers the broker and the server could read differently, and values
// of the wrong type for a pin, a range, a pattern, a length and a one_of.
func TestAttackMCPArgumentValues(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	refused := func(name, tool, args string) smuggle {
		return smuggle{name: name, tool: tool, args: args, status: 200, code: -32602, want: "constraint_violated"}
	}
	fwd := func(name, tool, args, sent string) smuggle {
		return smuggle{name: name, tool: tool, args: args, want: "forward", sent: sent}
	}
	runSmuggles(t, env, p, s.Token, []smuggle{
		// numbers
		{name: "1e400 overflows", tool: "create_issue", args: `{"title":"t","amount":1e400}`, status: 400, code: -32600, want: "bad_request"},
		{name: "-1e400 overflows", tool: "search", args: `{"query":"ok","x":-1e400}`, status: 400, code: -32600, want: "bad_request"},
		refused("more precision than a float64 (max)", "create_issue", `{"title":"t","amount":500.00000000000000001}`),
		refused("more precision than a float64 (pin)", "leak", `{"n":100.00000000000000001}`),
		refused("over the max", "create_issue", `{"title":"t","amount":501}`),
		refused("a number as a string (max)", "create_issue", `{"title":"t","amount":"100"}`),
		refused("a boolean (max)", "create_issue", `{"title":"t","amount":true}`),
		refused("null (max)", "create_issue", `{"title":"t","amount":null}`),
		refused("an array (max)", "create_issue", `{"title":"t","amount":[1]}`),
		refused("under the min", "search", `{"query":"ok","limit":0.5}`),
		refused("-0 under the min", "search", `{"query":"ok","limit":-0}`),
		fwd("exponent at the max", "create_issue", `{"title":"t","amount":5e2}`, `{"repo":"acme/web","title":"t","amount":500}`),
		fwd("-0 under a max", "create_issue", `{"title":"t","amount":-0}`, `{"repo":"acme/web","title":"t","amount":0}`),
		fwd("1.0 for a pin of 1e2", "leak", `{"n":100.0}`, `{"n":100}`),
		fwd("1e2 for a pin of 100", "leak", `{"n":1e2}`, `{"n":100}`),
		fwd("a numeric pin filled in", "leak", `{}`, `{"n":100}`),
		refused("a numeric pin as a string", "leak", `{"n":"100"}`),
		refused("a numeric pin as -0", "leak", `{"n":-0}`),
		refused("a numeric pin as an array", "leak", `{"n":[100]}`),
		refused("a numeric pin as an object", "leak", `{"n":{"value":100}}`),
		// a string pin
		refused("a string pin as a number", "create_issue", `{"title":"t","repo":1}`),
		refused("a string pin as an array", "create_issue", `{"title":"t","repo":["acme/web"]}`),
		refused("a string pin as an object", "create_issue", `{"title":"t","repo":{"name":"acme/web"}}`),
		refused("a string pin upper-cased", "create_issue", `{"title":"t","repo":"ACME/web"}`),
		refused("a string pin with a NUL", "create_issue", `{"title":"t","repo":"acme/web\u0000"}`),
		refused("a string pin with a trailing space", "create_issue", `{"title":"t","repo":"acme/web "}`),
		refused("a string pin with a look-alike", "create_issue", `{"title":"t","repo":"acme\u2215web"}`),
		// max_length: characters of a string, items of an array (docs/grants.md)
		refused("a string one character too long", "create_issue", `{"title":"`+strings.Repeat("x", 21)+`"}`),
		fwd("twenty characters beyond the BMP", "create_issue", `{"title":"`+strings.Repeat("\U0001F600", 20)+`"}`, `{"repo":"acme/web","title":"`+strings.Repeat("\U0001F600", 20)+`"}`),
		// documented, and a weakness: an array of one long string passes a
		// max_length meant for a string (the server reads the array)
		fwd("one long string in an array", "create_issue", `{"title":["`+strings.Repeat("x", 100)+`"]}`, `{"repo":"acme/web","title":["`+strings.Repeat("x", 100)+`"]}`),
		refused("an array of 21 items", "create_issue", `{"title":[`+strings.TrimSuffix(strings.Repeat(`"x",`, 21), ",")+`]}`),
		// pattern: a string, matched whole
		refused("pattern on an array", "search", `{"query":["abc"]}`),
		refused("pattern on a number", "search", `{"query":123}`),
		refused("pattern on null", "search", `{"query":null}`),
		refused("pattern matched only in part", "search", `{"query":"abc/../x"}`),
		refused("pattern with a trailing newline", "search", `{"query":"abc\n"}`),
		fwd("pattern matched", "search", `{"query":"abc def"}`, `{"query":"abc def"}`),
		// args.labels.* one_of: every element
		refused("* on a string", "create_issue", `{"title":"t","labels":"wontfix"}`),
		refused("* on null", "create_issue", `{"title":"t","labels":null}`),
		refused("* on an object", "create_issue", `{"title":"t","labels":{"0":"wontfix"}}`),
		refused("a nested array element", "create_issue", `{"title":"t","labels":[["wontfix"]]}`),
		refused("an object element", "create_issue", `{"title":"t","labels":[{"name":"wontfix"}]}`),
		refused("a null element", "create_issue", `{"title":"t","labels":["bug",null]}`),
		refused("a case variant element", "create_issue", `{"title":"t","labels":["Bug"]}`),
		fwd("an empty array", "create_issue", `{"title":"t","labels":[]}`, `{"repo":"acme/web","title":"t","labels":[]}`),
		// args.items.*.qty max
		refused("* on an object (under a path)", "delete_repo", `{"items":{"qty":100}}`),
		refused("an element's value as a string", "delete_repo", `{"items":[{"qty":"100"}]}`),
		refused("one element over", "delete_repo", `{"items":[{"qty":1},{"qty":6}]}`),
		fwd("an element lacking the rest of the path", "delete_repo", `{"items":[{"qty":1},{}]}`, `{"repo":"acme/old","items":[{"qty":1},{}]}`),
	})
	stillServes(t, env.b)
}

// A message over the upstream's max_body is refused before it is read
// further: nothing is forwarded.
func TestAttackMCPMessageOverMaxBody(t *testing.T) {
	env := startAttackMCP(t, "    max_body: 8192\n", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	big := callMsg("search", `{"query":"ok","pad":"`+strings.Repeat("a", 8192)+`"}`)
	a := p.post("issues", s.Token, big, statelessHeaders("tools/call", "search")...)
	wantRPCError(t, "over max_body", a, 413, -32010, "bad_request") // docs/mcp.md's table lists no row for it
	ok := callMsg("search", `{"query":"ok","pad":"`+strings.Repeat("a", 7000)+`"}`)
	if a := p.post("issues", s.Token, ok, statelessHeaders("tools/call", "search")...); a.Status != 200 || a.Error != nil {
		t.Fatalf("a message under max_body: %d %s", a.Status, a.Body)
	}
	if n := len(env.log.calls()); n != 1 {
		t.Fatalf("the upstream got %d calls, want 1 (the one under max_body)", n)
	}
	stillServes(t, env.b)
}

// JSON-RPC framing: batches, ids, versions, notifications posing as
// calls, responses from the sandbox, method names in other cases and
// methods no rule kind allows. None reaches the upstream.
func TestAttackMCPFraming(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	call := callMsg("search", `{"query":"ok"}`)
	sh := statelessHeaders("tools/call", "search")
	withID := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`
	}
	for _, tc := range []struct {
		name   string
		body   string
		header []string
		status int
		code   int
		want   string
	}{
		{"batch of one", "[" + call + "]", sh, 400, -32600, "bad_request"},
		{"batch of two", "[" + call + "," + call + "]", sh, 400, -32600, "bad_request"},
		{"empty batch", "[]", sh, 400, -32600, "bad_request"},
		{"batch after whitespace", " \r\n\t[" + call + "]", sh, 400, -32600, "bad_request"},
		{"batch after a byte-order mark", "\ufeff[" + call + "]", sh, 400, -32600, "bad_request"},
		{"null id", withID("null"), sh, 400, -32600, "bad_request"},
		{"object id", withID(`{"a":1}`), sh, 400, -32600, "bad_request"},
		{"array id", withID(`[1]`), sh, 400, -32600, "bad_request"},
		{"boolean id", withID(`true`), sh, 400, -32600, "bad_request"},
		{"fractional id", withID("1.5"), sh, 400, -32600, "bad_request"},
		{"id 1.0", withID("1.0"), sh, 400, -32600, "bad_request"},
		{"exponent id", withID("1e3"), sh, 400, -32600, "bad_request"},
		{"id 2^53", withID("9007199254740992"), sh, 400, -32600, "bad_request"},
		{"id -2^53", withID("-9007199254740992"), sh, 400, -32600, "bad_request"},
		{"huge id", withID(strings.Repeat("9", 400)), sh, 400, -32600, "bad_request"},
		{"no jsonrpc", `{"id":1,"method":"tools/call","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`, sh, 400, -32600, "bad_request"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`, sh, 400, -32600, "bad_request"},
		{"jsonrpc as a number", `{"jsonrpc":2.0,"id":1,"method":"tools/call","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`, sh, 400, -32600, "bad_request"},
		{"unknown member", `{"jsonrpc":"2.0","id":1,"method":"tools/call","extra":1,"params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`, sh, 400, -32600, "bad_request"},
		{"params an array", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`, sh, 400, -32600, "bad_request"},
		{"a result from the sandbox", `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`, sh, 400, -32600, "bad_request"},
		{"an error from the sandbox", `{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}`, sh, 400, -32600, "bad_request"},
		{"a result and a method", `{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{},"params":{` + statelessMeta + `,"name":"search","arguments":{}}}`, sh, 400, -32600, "bad_request"},
		{"Tools/Call", `{"jsonrpc":"2.0","id":1,"method":"Tools/Call","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`, statelessHeaders("Tools/Call", ""), 200, -32010, "no_matching_grant"},
		{"TOOLS/CALL", `{"jsonrpc":"2.0","id":1,"method":"TOOLS/CALL","params":{` + statelessMeta + `,"name":"search","arguments":{"query":"ok"}}}`, statelessHeaders("TOOLS/CALL", ""), 200, -32010, "no_matching_grant"},
		{"text/plain", call, append([]string{"Content-Type", "text/plain"}, sh...), 400, -32600, "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(env.log.sandboxMsgs())
			a := p.post("issues", s.Token, tc.body, tc.header...)
			wantRPCError(t, tc.name, a, tc.status, tc.code, tc.want)
			if after := env.log.sandboxMsgs(); len(after) != before {
				t.Errorf("a refused message reached the upstream: %s", after[len(after)-1].Raw)
			}
		})
	}
	// Methods no rule kind allows, as a sandbox would send them.
	for _, m := range []struct{ method, params, name string }{
		{"resources/read", `"uri":"file:///etc/passwd"`, "file:///etc/passwd"},
		{"resources/list", `"cursor":"x"`, ""},
		{"resources/templates/list", `"cursor":"x"`, ""},
		{"resources/subscribe", `"uri":"file:///x"`, ""},
		{"prompts/get", `"name":"steal"`, "steal"},
		{"prompts/list", `"cursor":"x"`, ""},
		{"sampling/createMessage", `"messages":[],"maxTokens":1`, ""},
		{"elicitation/create", `"message":"x"`, ""},
		{"roots/list", `"cursor":"x"`, ""},
		{"completion/complete", `"ref":{"type":"ref/prompt","name":"x"},"argument":{"name":"a","value":"b"}`, ""},
		{"logging/setLevel", `"level":"debug"`, ""},
		{"tasks/get", `"taskId":"x"`, ""},
		{"tools/call/", `"name":"search"`, ""},
	} {
		t.Run("method "+m.method, func(t *testing.T) {
			before := len(env.log.sandboxMsgs())
			body := `{"jsonrpc":"2.0","id":1,"method":"` + m.method + `","params":{` + statelessMeta + `,` + m.params + `}}`
			a := p.post("issues", s.Token, body, statelessHeaders(m.method, m.name)...)
			wantRPCError(t, m.method, a, 200, -32010, "no_matching_grant")
			if after := env.log.sandboxMsgs(); len(after) != before {
				t.Errorf("%s reached the upstream: %s", m.method, after[len(after)-1].Raw)
			}
		})
	}
	// A tools/call without an id (a notification posing as a call) is
	// sent nowhere, and answers no result.
	t.Run("tools/call as a notification", func(t *testing.T) {
		before := len(env.log.sandboxMsgs())
		a := p.post("issues", s.Token, `{"jsonrpc":"2.0","method":"tools/call","params":{`+statelessMeta+`,"name":"search","arguments":{"query":"ok"}}}`, sh...)
		if a.Result != nil {
			t.Errorf("a notification got a result: %d %s", a.Status, a.Body)
		}
		if after := env.log.sandboxMsgs(); len(after) != before {
			t.Errorf("a tools/call notification reached the upstream: %s", after[len(after)-1].Raw)
		}
	})
	// The session era: method names the stateless headers could not carry.
	sid := initSession(t, p, "issues", s.Token, "2025-11-25")
	for _, method := range []string{"tools/call\u0000", "tools/call ", "tools\u2215call", "tools/caLL"} {
		t.Run("session era "+method, func(t *testing.T) {
			before := len(env.log.sandboxMsgs())
			a := p.post("issues", s.Token, `{"jsonrpc":"2.0","id":2,"method":`+jsonString(method)+`,"params":{"name":"search","arguments":{"query":"ok"}}}`, "Mcp-Session-Id", sid)
			wantRPCError(t, method, a, 200, -32010, "no_matching_grant")
			if after := env.log.sandboxMsgs(); len(after) != before {
				t.Errorf("%q reached the upstream", method)
			}
		})
	}
	// Every refusal is in the audit chain: a malformed message as a
	// call.denied (it is no MCP call yet), a method no rule kind allows as
	// an mcp.call.denied.
	brokertest.Eventually(t, 10*time.Second, func() bool {
		codes := map[string]int{}
		for _, r := range brokertest.ParseAudit(t, env.b.AuditExport()) {
			if r.SessionID == s.ID && r.Decision == "deny" {
				codes[r.Type+" "+r.Code]++
			}
		}
		return codes["call.denied bad_request"]+codes["mcp.call.denied bad_request"] >= 24 && codes["mcp.call.denied no_matching_grant"] >= 17
	})
	// The id the sandbox chose never reaches the upstream (the broker's own
	// replaces it), and comes back as itself.
	a := p.post("issues", s.Token, withID(`"SANDBOX-ID-5d1e"`), sh...)
	if a.Status != 200 || a.Error != nil || string(a.ID) != `"SANDBOX-ID-5d1e"` {
		t.Fatalf("a call with a string id: %d %s", a.Status, a.Body)
	}
	for _, m := range env.log.all() {
		if strings.Contains(string(m.Raw), "SANDBOX-ID-5d1e") {
			t.Fatalf("the sandbox's id reached the upstream: %s", m.Raw)
		}
	}
	stillServes(t, env.b)
}

// initSession initializes a session-era MCP session on upstream as token
// and returns the broker's Mcp-Session-Id.
func initSession(t *testing.T, p *poster, upstream, token, version string) string {
	t.Helper()
	a := p.post(upstream, token, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{"sampling":{},"roots":{"listChanged":true}},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := a.Header.Get("Mcp-Session-Id")
	if a.Status != 200 || a.Error != nil || sid == "" {
		t.Fatalf("initialize: %d %s", a.Status, a.Body)
	}
	caps, _ := a.Result["capabilities"].(map[string]any)
	if diff := cmp.Diff([]string{"tools"}, keysOf(caps)); diff != "" {
		t.Errorf("the broker declares other capabilities than tools (-want +got):\n%s", diff)
	}
	if r := p.post(upstream, token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", sid); r.Status != 202 {
		t.Fatalf("notifications/initialized: %d %s", r.Status, r.Body)
	}
	return sid
}

// The 2026-07-28 era's Mcp-Method and Mcp-Name headers must match the
// body: missing or different, the message is refused 400 -32020 and
// nothing is sent (repeated headers: attack_mcp_bounds_test.go).
func TestAttackMCPStatelessHeaders(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	call := callMsg("search", `{"query":"ok"}`)
	v := []string{"Mcp-Protocol-Version", "2026-07-28"}
	for _, tc := range []struct {
		name   string
		body   string
		header []string
	}{
		{"no Mcp-Method", call, append(v, "Mcp-Name", "search")},
		{"no Mcp-Name", call, append(v, "Mcp-Method", "tools/call")},
		{"Mcp-Name in another case", call, append(v, "Mcp-Method", "tools/call", "Mcp-Name", "Search")},
		{"Mcp-Method in another case", call, append(v, "Mcp-Method", "Tools/Call", "Mcp-Name", "search")},
		{"Mcp-Name of another tool", call, append(v, "Mcp-Method", "tools/call", "Mcp-Name", "delete_repo")},
		{"Mcp-Method of a listing", call, append(v, "Mcp-Method", "tools/list", "Mcp-Name", "search")},
		{"no headers, version in _meta only", call, nil},
		{"version header only, no Mcp-Method", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"ok"}}}`, v},
		{"_meta stateless, header says 2025-11-25", call, []string{"Mcp-Protocol-Version", "2025-11-25"}},
		{"resources/read named otherwise", `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{` + statelessMeta + `,"uri":"file:///etc/passwd"}}`, append(v, "Mcp-Method", "resources/read", "Mcp-Name", "file:///public")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(env.log.sandboxMsgs())
			a := p.post("issues", s.Token, tc.body, tc.header...)
			wantRPCError(t, tc.name, a, 400, -32020, "bad_request")
			if after := env.log.sandboxMsgs(); len(after) != before {
				t.Errorf("a message whose headers do not match reached the upstream: %s", after[len(after)-1].Raw)
			}
		})
	}
	stillServes(t, env.b)
}

// A sandbox's _meta, params members and capabilities are not forwarded:
// the upstream gets the tool's name, the checked arguments and only the
// _meta keys the broker sets.
func TestAttackMCPMetaIsRebuilt(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{},"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"evil"},` +
		`"progressToken":"p-1","airlock":{"approved":true},"evil.example/inject":"x","io.modelcontextprotocol/logLevel":"debug"},` +
		`"name":"search","arguments":{"query":"ok"},"task":{"ttl":1},"inputResponses":{"r1":{"action":"accept"}},"requestState":"forged","cursor":"x"}}`
	a := p.post("issues", s.Token, body, statelessHeaders("tools/call", "search")...)
	if a.Status != 200 || a.Error != nil {
		t.Fatalf("call: %d %s", a.Status, a.Body)
	}
	calls := env.log.calls()
	if len(calls) != 1 {
		t.Fatalf("the upstream got %d calls, want 1", len(calls))
	}
	got := calls[0].Params
	for _, k := range keysOf(got) {
		if k != "name" && k != "arguments" && k != "_meta" {
			t.Errorf("the sandbox's params member %q was forwarded: %s", k, calls[0].Raw)
		}
	}
	meta, _ := got["_meta"].(map[string]any)
	for _, k := range keysOf(meta) {
		if k != "progressToken" && k != "io.modelcontextprotocol/protocolVersion" {
			t.Errorf("the sandbox's _meta key %q was forwarded: %s", k, calls[0].Raw)
		}
	}
	if diff := cmp.Diff(map[string]any{"query": "ok"}, got["arguments"]); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
	// The broker's own initialize upstream declares no client capability.
	for _, m := range env.log.all() {
		if m.Method == "initialize" {
			caps, _ := m.Params["capabilities"].(map[string]any)
			if len(caps) != 0 {
				t.Errorf("the broker declared client capabilities upstream: %s", m.Raw)
			}
		}
		if auth := m.Header.Get("Authorization"); auth != "Bearer "+brokertest.Canary {
			t.Errorf("a message reached the upstream with Authorization %q", auth)
		}
	}
	stillServes(t, env.b)
}

// The broker's Mcp-Session-Id is bound to the Airlock session and the
// upstream that opened it: another session, a forged or guessed id, an
// ended one, the upstream's own id, all fail; a killed session's token is
// refused 401. The upstream's session id never reaches the sandbox.
func TestAttackMCPSessionIDs(t *testing.T) {
	env := startAttackMCP(t, "", "")
	grants := func() map[string]any {
		return map[string]any{"task_id": "t-1", "ttl": "10m", "untrusted_input": false, "isolation": "container", "grants": []any{attackGrant(), hostileGrant()}}
	}
	sa, sb := env.b.Session(grants()), env.b.Session(grants())
	p := newPoster(t, env.b, hostileSessionID)
	search := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":"ok"}}}`
	sidA := initSession(t, p, "issues", sa.Token, "2025-11-25")
	if a := p.post("issues", sa.Token, search, "Mcp-Session-Id", sidA); a.Status != 200 || a.Error != nil {
		t.Fatalf("A's call on its session: %d %s", a.Status, a.Body)
	}
	// The hostile upstream's session is opened too (it names its own id).
	sidH := initSession(t, p, "hostile", sa.Token, "2025-06-18")
	if a := p.post("hostile", sa.Token, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"steady","arguments":{}}}`, "Mcp-Session-Id", sidH); a.Status != 200 || a.Error != nil {
		t.Fatalf("A's call on the hostile upstream: %d %s", a.Status, a.Body)
	}
	before := len(env.log.sandboxMsgs())
	upstreamIDs := map[string]bool{}
	for _, m := range env.log.all() {
		if id := m.Header.Get("Mcp-Session-Id"); id != "" {
			upstreamIDs[id] = true
		}
	}
	if len(upstreamIDs) == 0 {
		t.Fatal("the go-sdk upstream gave no session id: the test cannot look for it")
	}
	for _, tc := range []struct {
		name, token, upstream, id string
		status                    int
		code                      string
	}{
		{"A's id used by B", sb.Token, "issues", sidA, 404, "not_found"},
		{"A's id on another upstream", sa.Token, "hostile", sidA, 404, "not_found"},
		{"A's id with a byte more", sa.Token, "issues", sidA + "x", 404, "not_found"},
		{"A's id upper-cased", sa.Token, "issues", strings.ToUpper(sidA), 404, "not_found"},
		{"A's id cut short", sa.Token, "issues", sidA[:len(sidA)-1], 404, "not_found"},
		{"the prefix alone", sa.Token, "issues", "mcs_", 404, "not_found"},
		{"the hostile upstream's own id", sa.Token, "hostile", hostileSessionID, 404, "not_found"},
		{"the go-sdk upstream's own id", sa.Token, "issues", firstKey(upstreamIDs), 404, "not_found"},
		{"none", sa.Token, "issues", "", 400, "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.id != "" {
				h = []string{"Mcp-Session-Id", tc.id}
			}
			a := p.post(tc.upstream, tc.token, search, h...)
			wantRPCError(t, tc.name, a, tc.status, -32010, tc.code)
		})
	}
	// B cannot end A's session either.
	r := p.do(http.MethodDelete, env.b.Sandbox+"/v1/mcp/issues", sb.Token, "", "Mcp-Session-Id", sidA)
	if r.Status != 404 {
		t.Errorf("B's DELETE of A's session: %d %s", r.Status, r.Body)
	}
	if a := p.post("issues", sa.Token, search, "Mcp-Session-Id", sidA); a.Status != 200 || a.Error != nil {
		t.Fatalf("A's session after B's DELETE: %d %s", a.Status, a.Body)
	}
	if after := len(env.log.sandboxMsgs()); after != before+1 {
		t.Errorf("refused messages reached the upstream: %d messages, want 1 (A's own)", after-before)
	}
	// Ended by its DELETE: the id is dead.
	if r := p.do(http.MethodDelete, env.b.Sandbox+"/v1/mcp/issues", sa.Token, "", "Mcp-Session-Id", sidA); r.Status != 204 {
		t.Fatalf("DELETE: %d %s", r.Status, r.Body)
	}
	wantRPCError(t, "after DELETE", p.post("issues", sa.Token, search, "Mcp-Session-Id", sidA), 404, -32010, "not_found")
	// The Airlock session killed: its token is refused, whatever the id.
	sidA2 := initSession(t, p, "issues", sa.Token, "2025-11-25")
	if r := env.b.Do("DELETE", env.b.Control+"/v1/sessions/"+sa.ID, brokertest.ProcAdminToken, nil); r.Status/100 != 2 {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	before = len(env.log.sandboxMsgs())
	a := p.post("issues", sa.Token, search, "Mcp-Session-Id", sidA2)
	wantRPCError(t, "after the session was killed", a, 401, -32010, "session_revoked")
	if a.Header.Get("WWW-Authenticate") != `Bearer realm="airlock"` {
		t.Errorf("401 without the broker's WWW-Authenticate: %q", a.Header.Get("WWW-Authenticate"))
	}
	wantRPCError(t, "a bad token", p.post("issues", "not-a-token", search, "Mcp-Session-Id", sidA2), 401, -32010, "invalid_token")
	wantRPCError(t, "no token", p.post("issues", "", search), 401, -32010, "invalid_token")
	if after := len(env.log.sandboxMsgs()); after != before {
		t.Error("a killed session's call reached the upstream")
	}
	// B is served on, and nothing the sandbox got names an upstream's id.
	sidB := initSession(t, p, "issues", sb.Token, "2025-11-25")
	if a := p.post("issues", sb.Token, search, "Mcp-Session-Id", sidB); a.Status != 200 || a.Error != nil {
		t.Fatalf("B after A was killed: %d %s", a.Status, a.Body)
	}
	for id := range upstreamIDs {
		for _, d := range p.seen.data() {
			if strings.Contains(string(d), id) {
				t.Fatalf("the upstream's session id %q reached the sandbox", id)
			}
		}
	}
}

func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}

// A hostile server: its credential echoed in every part of every answer
// (JSON and SSE, results, errors, notifications, an answer to another id,
// headers, its listing), requests of the client inside the stream,
// unknown result types, answers to other ids, oversized answers, a 401
// naming a discovery document. The sandbox gets none of it, and the
// broker serves on.
func TestAttackMCPHostileUpstream(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(map[string]any{"task_id": "t-1", "ttl": "10m", "untrusted_input": false, "isolation": "container", "grants": []any{hostileGrant()}})
	p := newPoster(t, env.b, hostileSessionID, "OTHER-ID", "OBEYED", "resource_metadata")
	list := p.post("hostile", s.Token, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+statelessMeta+`}}`, statelessHeaders("tools/list", "")...)
	if tools, _ := list.Result["tools"].([]any); list.Status != 200 || len(tools) != len(hostileTools) {
		t.Fatalf("tools/list: %d %.300s", list.Status, list.Body)
	}
	for _, tool := range []string{"echo_json", "echo_sse"} {
		a := p.callTool("hostile", s.Token, tool, `{}`)
		if a.Status != 200 || a.Error != nil || !strings.Contains(string(a.Body), "[REDACTED]") {
			t.Errorf("%s: %d %.300s", tool, a.Status, a.Body)
		}
		for _, h := range []string{"X-Leak", "WWW-Authenticate", "Mcp-Session-Id"} {
			if v := a.Header.Get(h); v != "" {
				t.Errorf("%s: the upstream's %s reached the sandbox: %q", tool, h, v)
			}
		}
	}
	a := p.callTool("hostile", s.Token, "error_leak", `{}`)
	if a.Status != 200 || a.Error == nil || a.Error.Code != -32603 {
		t.Errorf("a server error in -32000..-32005: want it as -32603, got %d %s", a.Status, a.Body)
	}
	for _, tc := range []struct{ tool, want string }{
		{"unknown_type", "upstream_error"},
		{"input_required", "server_request_blocked"},
		{"sampling", "server_request_blocked"},
		{"elicit", "server_request_blocked"},
		{"roots", "server_request_blocked"},
		{"other_id", "upstream_error"},
		{"other_id_sse", "upstream_error"},
		{"huge_json", "upstream_error"},
		{"huge_event", "upstream_error"},
		{"http_401", "upstream_error"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			a := p.callTool("hostile", s.Token, tc.tool, `{}`)
			wantRPCError(t, tc.tool, a, 200, -32010, tc.want)
		})
	}
	// Each request of the server's was answered upstream with an error.
	replies := 0
	for _, m := range env.hostile.log.all() {
		var r struct {
			ID    string          `json:"id"`
			Error json.RawMessage `json:"error"`
		}
		if m.Method == "" && json.Unmarshal(m.Raw, &r) == nil && r.ID == "srv-1" {
			if len(r.Error) == 0 {
				t.Errorf("the broker answered the server's request with a result: %s", m.Raw)
			}
			replies++
		}
	}
	if replies != 3 {
		t.Errorf("the server's 3 requests got %d error answers", replies)
	}
	waitAudit(t, env.b, s.ID, "mcp.server_request_blocked", "server_request_blocked")
	if n := env.hostile.gets.Load(); n != 0 {
		t.Errorf("the broker fetched %d documents the server pointed to", n)
	}
	// A stock client in both eras gets the same (mcpClient scans it all).
	for _, version := range []string{"", "2025-11-25"} {
		cs := mcpClient(t, env.b, "hostile", s.Token, version)
		for _, tool := range []string{"echo_json", "echo_sse"} {
			res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: map[string]any{}})
			if err != nil {
				t.Fatalf("%s (%q): %v", tool, version, err)
			}
			raw, _ := json.Marshal(res)
			deepCanaryScan(t, tool+" through the go-sdk client", raw)
		}
		if _, err := cs.ListTools(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	audit := env.b.AuditExport()
	deepCanaryScan(t, "the audit export", audit)
	stillServes(t, env.b)
}

// A tool that changes (its annotations only) after the session saw it is
// quarantined: hidden, its calls refused tool_changed unsent, audited; a
// call to it held for a reviewer fails unsent and cannot be approved.
func TestAttackMCPRugPull(t *testing.T) {
	env := startAttackMCP(t, "", "approval: {mcp_wait: 0s}\n")
	op, rev := env.b.NewToken("operator", "orchestrator"), env.b.NewToken("reviewer", "rita")
	g := hostileGrant()
	for _, r := range g["rules"].([]any) {
		if m := r.(map[string]any); m["tool"] == "steady" {
			m["irreversible"], m["constraints"] = true, map[string]any{"args.q": map[string]any{"max_length": 10}}
		}
	}
	r := env.b.Do("POST", env.b.Control+"/v1/sessions", op, map[string]any{"task_id": "t-rug", "isolation": "microvm", "grants": []any{g}})
	var s brokertest.Created
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("gated session: %d %s", r.Status, r.Body)
	}
	p := newPoster(t, env.b)
	steadyCalls := func() int {
		n := 0
		for _, m := range env.hostile.log.all() {
			if m.Method == "tools/call" && m.Params["name"] == "steady" {
				n++
			}
		}
		return n
	}
	list := func() []string {
		a := p.post("hostile", s.Token, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+statelessMeta+`}}`, statelessHeaders("tools/list", "")...)
		var names []string
		tools, _ := a.Result["tools"].([]any)
		for _, x := range tools {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		return names
	}
	if names := list(); !strings.Contains(strings.Join(names, ","), "steady") {
		t.Fatalf("steady is not listed: %v", names)
	}
	// Held (mcp_wait 0s: pending at once).
	held := p.callTool("hostile", s.Token, "steady", `{"q":"x"}`)
	id, _ := held.Result["_meta"].(map[string]any)["airlock"].(map[string]any)["action_id"].(string)
	if id == "" {
		t.Fatalf("the held call names no action: %s", held.Body)
	}
	env.hostile.rug.Store(true)
	if names := list(); strings.Contains(strings.Join(names, ","), "steady") {
		t.Fatalf("the changed tool is still listed: %v", names)
	}
	a := p.callTool("hostile", s.Token, "steady", `{"q":"y"}`)
	wantRPCError(t, "a changed tool", a, 200, -32010, "tool_changed")
	// The listing that saw the change failed the held action unsent; a
	// reviewer can no longer approve it.
	brokertest.Eventually(t, 10*time.Second, func() bool { return actionStatus(t, env.b, rev, id) == "failed" })
	if r := env.b.Do("POST", env.b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.Status != 409 {
		t.Fatalf("approving the failed action: %d %s, want 409", r.Status, r.Body)
	}
	if n := steadyCalls(); n != 0 {
		t.Fatalf("the changed tool was called %d times", n)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { return len(auditOf(t, env.b, s.ID, "mcp.tool_changed")) > 0 })
	stillServes(t, env.b)
}

// The gate under a racing sandbox: identical calls held together join one
// action and, once approved, all get its one execution's result; another
// session's identical call joins nothing of this one's; a call with other
// arguments is an action of its own; a denied call sends nothing, and its
// identical retry gets the denial again.
func TestAttackMCPGateRaces(t *testing.T) {
	b, up, s, rev := gatedMCP(t, "30s")
	ctx := t.Context()
	args := map[string]any{"title": "race", "labels": []any{"bug"}}
	clients := []*sdk.ClientSession{mcpClient(t, b, "issues", s.Token, "2025-11-25"), mcpClient(t, b, "issues", s.Token, "")}
	const n = 8
	var wg sync.WaitGroup
	results := make([]*sdk.CallToolResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = clients[i%2].CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
		}()
	}
	id := b.PendingAction(t, rev)
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i].IsError || results[i].Content[0].(*sdk.TextContent).Text != "created in acme/web: race" {
			t.Errorf("racing call %d: %v %+v", i, errs[i], results[i])
		}
	}
	if c := up.calls.Load(); c != 1 {
		t.Fatalf("%d identical racing calls executed %d times, want once", n, c)
	}
	var all struct{ Items []brokertest.ActionView }
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals", rev, nil).Body, &all)
	if len(all.Items) != 1 {
		t.Fatalf("%d identical racing calls made %d actions, want 1", n, len(all.Items))
	}

	// Other arguments (one more label): an action of its own, which the
	// executed one's result does not answer.
	diff := callAsync(ctx, clients[0], "create_issue", map[string]any{"title": "race", "labels": []any{"bug", "triage"}})
	idDiff := b.PendingAction(t, rev)
	if idDiff == id {
		t.Fatal("a call with other arguments joined the executed action")
	}
	if r := b.Do("POST", b.Control+"/v1/approvals/"+idDiff+"/deny", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("deny: %d %s", r.Status, r.Body)
	}
	if res := <-diff; res == nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, idDiff) {
		t.Fatalf("the call with other arguments: %+v", res)
	}
	// Another gated session, same grant, same call: its own action.
	s2, _ := gatedSession(t, b, "t-mcp-gate-2")
	other := mcpClient(t, b, "issues", s2.Token, "")
	done := callAsync(ctx, other, "create_issue", args)
	id2 := b.PendingAction(t, rev)
	if id2 == id {
		t.Fatal("another session's identical call joined this session's executed action")
	}
	// Denied: a tool error naming the action; nothing sent.
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id2+"/deny", rev, map[string]any{"comment": "no"}); r.Status != 200 {
		t.Fatalf("deny: %d %s", r.Status, r.Body)
	}
	res := <-done
	if res == nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, id2) || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "approval_denied") {
		t.Fatalf("the denied call: %+v", res)
	}
	if c := up.calls.Load(); c != 1 {
		t.Fatalf("a denied call was sent (%d calls)", c)
	}
	// Its identical retry joins the denied action (until it expires):
	// denied again, nothing sent; the denied action cannot be approved.
	res, err := other.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, id2) || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "approval_denied") {
		t.Fatalf("the retry of a denied call: %v %+v", err, res)
	}
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id2+"/approve", rev, map[string]any{}); r.Status != 409 {
		t.Fatalf("approving a denied action: %d %s, want 409", r.Status, r.Body)
	}
	var pending struct{ Items []brokertest.ActionView }
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals?status=pending", rev, nil).Body, &pending)
	if len(pending.Items) != 0 {
		t.Fatalf("the retry of a denied call made a pending action: %+v", pending.Items)
	}
	if c := up.calls.Load(); c != 1 {
		t.Fatalf("the retry of a denied call was sent (%d calls)", c)
	}
	stillServes(t, b)
}

// max_uses under racing calls: exactly max_uses calls are sent.
func TestAttackMCPMaxUsesRace(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(issuesGrant(map[string]any{"max_uses": 3})))
	p := newPoster(t, env.b)
	const n = 12
	var wg sync.WaitGroup
	answers := make([]mcpAnswer, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = p.callTool("issues", s.Token, "search", fmt.Sprintf(`{"query":"q%d"}`, i))
		}()
	}
	wg.Wait()
	ok, exhausted := 0, 0
	for _, a := range answers {
		switch {
		case a.Status == 200 && a.Error == nil:
			ok++
		case a.Status == 200 && a.Error != nil && a.Error.Code == -32010 && a.airlockCode() == "grant_exhausted":
			exhausted++
		default:
			t.Errorf("unexpected answer: %d %s", a.Status, a.Body)
		}
	}
	if ok != 3 || exhausted != n-3 || len(env.log.calls()) != 3 {
		t.Fatalf("%d racing calls under max_uses 3: %d allowed, %d exhausted, %d sent", n, ok, exhausted, len(env.log.calls()))
	}
	// tools/list uses no grant.
	if a := p.post("issues", s.Token, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+statelessMeta+`}}`, statelessHeaders("tools/list", "")...); a.Status != 200 || a.Error != nil {
		t.Fatalf("tools/list after max_uses: %d %s", a.Status, a.Body)
	}
	stillServes(t, env.b)
}

// The same attacks through the HTTPS_PROXY door, at the server's real
// URL: the same refusals, nothing forwarded; the client's Authorization
// and _meta never reach the server; only the endpoint is served; a
// session id of another session is refused.
func TestAttackMCPProxyDoor(t *testing.T) {
	e := startProxyDoorMCP(t)
	sa, sb := e.b.Session(brokertest.TrustedSession(attackGrant())), e.b.Session(brokertest.TrustedSession(attackGrant()))
	pa, pb := e.poster(t, sa, "airlock", sa.Token), e.poster(t, sb, "airlock", sb.Token)
	sh := statelessHeaders("tools/call", "create_issue")
	for _, tc := range []struct {
		name   string
		body   string
		header []string
		status int
		code   int
		want   string
	}{
		{"batch", "[" + callMsg("create_issue", `{"title":"t"}`) + "]", sh, 400, -32600, "bad_request"},
		{"duplicate argument", callMsg("create_issue", `{"title":"a","title":"b"}`), sh, 400, -32600, "bad_request"},
		{"escape-equal pin", callMsg("create_issue", `{"\u0072epo":"evil/x","repo":"acme/web","title":"t"}`), sh, 400, -32600, "bad_request"},
		{"pin differs", callMsg("create_issue", `{"repo":"evil/x","title":"t"}`), sh, 200, -32602, "constraint_violated"},
		{"case variant of the pin", callMsg("create_issue", `{"Repo":"evil/x","title":"t"}`), sh, 200, -32602, "constraint_violated"},
		{"Mcp-Name of another tool", callMsg("create_issue", `{"title":"t"}`), statelessHeaders("tools/call", "search"), 400, -32020, "bad_request"},
		{"resources/read", `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{` + statelessMeta + `,"uri":"file:///etc/passwd"}}`, statelessHeaders("resources/read", "file:///etc/passwd"), 200, -32010, "no_matching_grant"},
		{"a tool no rule names", callMsg("sample", `{}`), statelessHeaders("tools/call", "sample"), 200, -32010, "no_matching_grant"},
		{"nesting past the cap", callMsg("search", `{"x":`+strings.Repeat("[", 70)+strings.Repeat("]", 70)+`}`), statelessHeaders("tools/call", "search"), 400, -32600, "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.log.sandboxMsgs())
			a := pa.do(http.MethodPost, mcpEndpoint, "", tc.body, tc.header...)
			wantRPCError(t, tc.name, a, tc.status, tc.code, tc.want)
			if after := e.log.sandboxMsgs(); len(after) != before {
				t.Errorf("a refused message reached the upstream: %s", after[len(after)-1].Raw)
			}
		})
	}
	// An allowed call: the pin filled in, the client's Authorization and
	// _meta dropped, the broker's credential injected.
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","evil.example/x":1,"io.modelcontextprotocol/clientCapabilities":{"sampling":{}}},"name":"create_issue","arguments":{"title":"via proxy"},"task":{"ttl":1}}}`
	a := pa.do(http.MethodPost, mcpEndpoint, "", body, append([]string{"Authorization", "Bearer attacker-chosen", "Cookie", "sid=attacker"}, sh...)...)
	if a.Status != 200 || a.Error != nil || resultText(a) != "created in acme/web: via proxy" {
		t.Fatalf("an allowed call through the proxy door: %d %s", a.Status, a.Body)
	}
	calls := e.log.calls()
	last := calls[len(calls)-1]
	if diff := cmp.Diff(map[string]any{"repo": "acme/web", "title": "via proxy"}, last.Params["arguments"]); diff != "" {
		t.Errorf("arguments (-want +got):\n%s", diff)
	}
	if got := last.Header.Get("Authorization"); got != "Bearer "+brokertest.Canary || last.Header.Get("Cookie") != "" {
		t.Errorf("the upstream got Authorization %q, Cookie %q", got, last.Header.Get("Cookie"))
	}
	meta, _ := last.Params["_meta"].(map[string]any)
	for k := range meta {
		if k != "progressToken" && k != "io.modelcontextprotocol/protocolVersion" {
			t.Errorf("the sandbox's _meta key %q was forwarded: %s", k, last.Raw)
		}
	}
	if _, ok := last.Params["task"]; ok {
		t.Errorf("the sandbox's params member task was forwarded: %s", last.Raw)
	}
	// Only the endpoint is served on the server's host.
	before := len(e.log.all())
	for _, path := range []string{"/other", "/mcp/../admin", "/mcp/", "/MCP", "/.well-known/oauth-protected-resource", "/mcp%2f..%2fadmin"} {
		a := pa.do(http.MethodPost, "https://"+mcpHost+path, "", callMsg("search", `{"query":"ok"}`), statelessHeaders("tools/call", "search")...)
		if a.Status == 200 && a.Error == nil {
			t.Errorf("POST %s through the proxy door was answered: %s", path, a.Body)
		}
	}
	if r := pa.do(http.MethodGet, "https://"+mcpHost+"/.well-known/oauth-protected-resource", "", ""); r.Status == 200 {
		t.Errorf("GET of a discovery document through the proxy door: %d %s", r.Status, r.Body)
	}
	if after := len(e.log.all()); after != before {
		t.Errorf("a request off the endpoint reached the upstream: %s", e.log.all()[before].Raw)
	}
	// A's session-era id, through the proxy door, is not B's.
	initMsg := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	ia := pa.do(http.MethodPost, mcpEndpoint, "", initMsg)
	sidA := ia.Header.Get("Mcp-Session-Id")
	if ia.Status != 200 || sidA == "" {
		t.Fatalf("initialize through the proxy door: %d %s", ia.Status, ia.Body)
	}
	search := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"query":"ok"}}}`
	wantRPCError(t, "A's id used by B", pb.do(http.MethodPost, mcpEndpoint, "", search, "Mcp-Session-Id", sidA), 404, -32010, "not_found")
	if a := pa.do(http.MethodPost, mcpEndpoint, "", search, "Mcp-Session-Id", sidA); a.Status != 200 || a.Error != nil {
		t.Fatalf("A on its own session: %d %s", a.Status, a.Body)
	}
	// Another session's token as the proxy password is that session, never
	// A's; a wrong one is refused before anything is sent.
	bad := e.poster(t, sa, "airlock", "not-a-token")
	req, _ := http.NewRequest(http.MethodPost, mcpEndpoint, strings.NewReader(search))
	if resp, err := bad.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a wrong proxy password was let through: %d", resp.StatusCode)
	}
}
