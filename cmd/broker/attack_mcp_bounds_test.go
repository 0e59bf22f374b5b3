package main

import (
	"net/http"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// The MCP door's bounds an attacker probed past (attack_mcp_test.go has
// the rest): repeated stateless headers, an upstream's endless stream,
// the code of a malformed params member.

// A repeated Mcp-Method or Mcp-Name header is refused (400, -32020),
// nothing sent: were only the first value checked, anything that reads
// the last (a gateway, a WAF, a log) would see another call than the one
// made.
func TestAttackMCPRepeatedStatelessHeaders(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	call := callMsg("search", `{"query":"ok"}`)
	v := []string{"Mcp-Protocol-Version", "2026-07-28"}
	for _, tc := range []struct {
		name   string
		header []string
	}{
		{"Mcp-Method repeated with another value", append(v, "Mcp-Method", "tools/call", "Mcp-Method", "tools/list", "Mcp-Name", "search")},
		{"Mcp-Name repeated with another value", append(v, "Mcp-Method", "tools/call", "Mcp-Name", "search", "Mcp-Name", "delete_repo")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(env.log.sandboxMsgs())
			a := p.post("issues", s.Token, call, tc.header...)
			wantRPCError(t, tc.name, a, 400, -32020, "bad_request")
			if after := env.log.sandboxMsgs(); len(after) != before {
				t.Errorf("a message whose headers do not match reached the upstream: %s", after[len(after)-1].Raw)
			}
		})
	}
}

// An upstream's SSE answer is bounded as a whole (max_body), not only per
// event: a server that streams small notifications, or comments, forever
// is cut (upstream_error) long before it gives up (1024 times max_body).
func TestAttackMCPEndlessStream(t *testing.T) {
	for _, tool := range []string{"endless", "endless_comments"} {
		t.Run(tool, func(t *testing.T) {
			env := startAttackMCP(t, "", "")
			s := env.b.Session(map[string]any{"task_id": "t-1", "ttl": "10m", "untrusted_input": false, "isolation": "container", "grants": []any{hostileGrant()}})
			p := newPoster(t, env.b)
			a := p.callTool("hostile", s.Token, tool, `{}`)
			wantRPCError(t, tool, a, 200, -32010, "upstream_error")
			if env.hostile.capped.Load() {
				t.Errorf("the broker read %d bytes of a never-ending stream (the server gave up), with max_body %d", env.hostile.endless.Load(), hostileMaxBody)
			}
			stillServes(t, env.b)
		})
	}
}

// A tools/call whose params carry a case variant of "arguments" or
// "name" is a malformed message: 400, -32600 (docs/mcp.md's table), not
// the -32010 of a refusal. Nothing is forwarded.
func TestAttackMCPCaseVariantParamsMemberCode(t *testing.T) {
	env := startAttackMCP(t, "", "")
	s := env.b.Session(brokertest.TrustedSession(attackGrant()))
	p := newPoster(t, env.b)
	runSmuggles(t, env, p, s.Token, []smuggle{
		{name: "case variant of the arguments member", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + statelessMeta + `,"name":"create_issue","Arguments":{"repo":"evil/x","title":"t"}}}`, tool: "create_issue", status: 400, code: -32600, want: "bad_request"},
		{name: "case variant of the name member", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + statelessMeta + `,"NAME":"delete_repo","arguments":{}}}`, tool: "delete_repo", status: 400, code: -32600, want: "bad_request"},
	})
}

// Repeated stateless headers through the HTTPS_PROXY door.
func TestAttackMCPRepeatedStatelessHeadersProxyDoor(t *testing.T) {
	e := startProxyDoorMCP(t)
	s := e.b.Session(brokertest.TrustedSession(attackGrant()))
	p := e.poster(t, s, "airlock", s.Token)
	before := len(e.log.sandboxMsgs())
	a := p.do(http.MethodPost, mcpEndpoint, "", callMsg("search", `{"query":"ok"}`),
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "search", "Mcp-Name", "delete_repo")
	wantRPCError(t, "Mcp-Name repeated with another value", a, 400, -32020, "bad_request")
	if after := e.log.sandboxMsgs(); len(after) != before {
		t.Errorf("a message whose headers do not match reached the upstream: %s", after[len(after)-1].Raw)
	}
}
