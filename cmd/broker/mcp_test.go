package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// The MCP door (DESIGN §10) through the real server, with the go-sdk's
// own client in the sandbox and a go-sdk server upstream.

// issuesGrant is a grant on the issues MCP upstream: create_issue with its
// repo pinned, a title of at most 20 characters, labels from a list and
// nothing else (deny_unknown); search (reversible).
func issuesGrant(extra map[string]any) map[string]any {
	g := map[string]any{"upstream": "issues", "rules": []any{
		map[string]any{"tool": "create_issue", "deny_unknown": true, "constraints": map[string]any{
			"args.repo":     map[string]any{"pin": "acme/web"},
			"args.title":    map[string]any{"max_length": 20},
			"args.labels.*": map[string]any{"one_of": []any{"bug", "triage"}},
			"args.amount":   map[string]any{"max": 500},
		}},
		map[string]any{"tool": "search", "irreversible": false},
		map[string]any{"tool": "leak", "irreversible": false},
		map[string]any{"tool": "sample", "irreversible": false},
	}}
	for k, v := range extra {
		g[k] = v
	}
	return g
}

func startMCPBroker(t *testing.T, extraYAML string) (*brokertest.Proc, *mcpUpstream) {
	t.Helper()
	up := startMCPUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: "http://127.0.0.1:1", ExtraYAML: mcpYAML(up, "") + extraYAML})
	return b, up
}

// rpcErr is the JSON-RPC error of a go-sdk client's call.
func rpcErr(t *testing.T, err error) (code int, airlock string) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("want a JSON-RPC error, got %v", err)
	}
	var data struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(we.Data, &data)
	return int(we.Code), data.Code
}

func TestMCPDoorBothEras(t *testing.T) {
	b, up := startMCPBroker(t, "")
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	for _, version := range []string{"", "2025-11-25", "2025-06-18"} {
		t.Run("version="+version, func(t *testing.T) {
			cs := mcpClient(t, b, "issues", s.Token, version)
			ctx := context.Background()
			want := version
			if want == "" {
				want = "2026-07-28" // the go-sdk's default: server/discover, stateless
			}
			if got := cs.InitializeResult().ProtocolVersion; got != want {
				t.Fatalf("protocol version %q, want %q", got, want)
			}
			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var create *sdk.Tool
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
				if tool.Name == "create_issue" {
					create = tool
				}
			}
			if strings.Contains(strings.Join(names, ","), "delete_repo") || create == nil {
				t.Fatalf("tools shown = %v, want create_issue and no delete_repo", names)
			}
			schema, _ := json.Marshal(create.InputSchema)
			if !bytes.Contains(schema, []byte(`"const":"acme/web"`)) || !bytes.Contains(schema, []byte(`"enum":["bug","triage"]`)) {
				t.Errorf("create_issue's schema is not narrowed: %s", schema)
			}

			// The pin is filled in; the call goes through with the broker's credential.
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "crash", "labels": []any{"bug"}}})
			if err != nil || res.IsError {
				t.Fatalf("allowed call: %v %+v", err, res)
			}
			if got := up.lastArgs(t)["repo"]; got != "acme/web" {
				t.Errorf("repo forwarded = %v, want the pin acme/web", got)
			}
			if text := res.Content[0].(*sdk.TextContent).Text; text != "created in acme/web: crash" {
				t.Errorf("result = %q", text)
			}

			for _, bad := range []struct {
				name string
				args map[string]any
				want string
			}{
				{"pin differs", map[string]any{"repo": "evil/repo", "title": "x"}, "constraint_violated"},
				{"too long", map[string]any{"title": strings.Repeat("x", 21)}, "constraint_violated"},
				{"label not allowed", map[string]any{"title": "x", "labels": []any{"bug", "wontfix"}}, "constraint_violated"},
				{"unknown argument", map[string]any{"title": "x", "assignee": "mallory"}, "constraint_violated"},
				{"amount over", map[string]any{"title": "x", "amount": 501}, "constraint_violated"},
			} {
				before := up.calls.Load()
				_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: bad.args})
				code, airlock := rpcErr(t, err)
				if code != -32602 || airlock != bad.want {
					t.Errorf("%s: error %d %q, want -32602 %q", bad.name, code, airlock, bad.want)
				}
				if up.calls.Load() != before {
					t.Errorf("%s: the refused call reached the upstream", bad.name)
				}
			}
			// A tool no rule names is refused (and hidden).
			_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "delete_repo", Arguments: map[string]any{"repo": "acme/web"}})
			if code, airlock := rpcErr(t, err); code != -32010 || airlock != "no_matching_grant" {
				t.Errorf("delete_repo: %d %q, want -32010 no_matching_grant", code, airlock)
			}
		})
	}
	// The audit: each allowed call with its tool, the arguments' digest and
	// the constrained values only; an unconstrained value never.
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "search", Arguments: map[string]any{"query": "unconstrained-secret-looking-query"}}); err != nil {
		t.Fatal(err)
	}
	var audit []byte
	brokertest.Eventually(t, 5*time.Second, func() bool {
		audit = b.AuditExport()
		return bytes.Contains(audit, []byte(`"type":"mcp.call.completed"`)) && bytes.Count(audit, []byte(`"tool":"search"`)) >= 2
	})
	if bytes.Contains(audit, []byte("unconstrained-secret-looking-query")) {
		t.Error("an unconstrained argument's value is in the audit log")
	}
	for _, want := range []string{`"type":"mcp.call.allowed"`, `"args_sha256":"`, `"constrained":{"args.labels.*":"[\"bug\"]","args.repo":"\"acme/web\"","args.title":"\"crash\""}`, `"type":"mcp.call.denied"`, `"type":"mcp.list"`} {
		if !bytes.Contains(audit, []byte(want)) {
			t.Errorf("the audit log has no %s", want)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, a := range up.auth {
		if a != "Bearer "+brokertest.Canary {
			t.Fatalf("the upstream got Authorization %q, want the broker's credential", a)
		}
	}
}

// An upstream that echoes its credential in every part of a result: the
// sandbox gets none of it.
func TestMCPDoorScrubsEveryPartOfAResult(t *testing.T) {
	b, _ := startMCPBroker(t, "")
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	for _, version := range []string{"", "2025-11-25"} {
		cs := mcpClient(t, b, "issues", s.Token, version)
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "leak", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res)
		brokertest.AssertNoCanary(t, "leak result ("+version+")", raw)
		if !bytes.Contains(raw, []byte("[REDACTED]")) {
			t.Errorf("nothing was redacted: %s", raw)
		}
	}
}

// A server that asks the client for sampling gets an error; the sandbox's
// call fails server_request_blocked and the block is audited.
func TestMCPDoorBlocksServerRequests(t *testing.T) {
	b, _ := startMCPBroker(t, "")
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	_, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sample", Arguments: map[string]any{}})
	if code, airlock := rpcErr(t, err); code != -32010 || airlock != "server_request_blocked" {
		t.Fatalf("sampling tool: %d %q, want -32010 server_request_blocked", code, airlock)
	}
	brokertest.Eventually(t, 5*time.Second, func() bool {
		return bytes.Contains(b.AuditExport(), []byte(`"type":"mcp.server_request_blocked"`))
	})
}

// A tool that changes after the session saw it is quarantined: hidden
// from the listing, its calls refused tool_changed, audited.
func TestMCPDoorQuarantinesAChangedTool(t *testing.T) {
	b, up := startMCPBroker(t, "")
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	ctx := context.Background()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	up.rugPull()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name == "create_issue" {
			t.Fatalf("the changed tool is still listed: %+v", tool)
		}
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "x"}})
	if code, airlock := rpcErr(t, err); code != -32010 || airlock != "tool_changed" {
		t.Fatalf("changed tool: %d %q, want -32010 tool_changed", code, airlock)
	}
	brokertest.Eventually(t, 5*time.Second, func() bool {
		return bytes.Contains(b.AuditExport(), []byte(`"type":"mcp.tool_changed"`))
	})
}

// rawMCP posts body to the broker's MCP endpoint as a sandbox would.
func rawMCP(b *brokertest.Proc, token, body string, header ...string) brokertest.Response {
	h := append([]string{"Content-Type", "application/json", "Accept", "application/json, text/event-stream"}, header...)
	return b.Do("POST", b.Sandbox+"/v1/mcp/issues", token, json.RawMessage(body), h...)
}

// Hostile messages: a batch, duplicate and case-variant keys, a header
// that does not match the body, a bad token; each refused with nothing
// forwarded.
func TestMCPDoorRefusesHostileMessages(t *testing.T) {
	b, up := startMCPBroker(t, "")
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	stateless := []string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "search"}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, tc := range []struct {
		name   string
		body   string
		header []string
		status int
		code   string
	}{
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `,"name":"search","arguments":{"query":"x"}}}]`, stateless, 400, "bad_request"},
		{"duplicate key", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `,"name":"search","name":"delete_repo","arguments":{}}}`, stateless, 400, "bad_request"},
		{"case-variant argument", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `,"name":"create_issue","arguments":{"title":"x","Repo":"evil/x"}}}`,
			[]string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "create_issue"}, 200, "constraint_violated"},
		{"name header differs", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `,"name":"create_issue","arguments":{"title":"x"}}}`, stateless, 400, "bad_request"},
		{"method header differs", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `,"name":"search","arguments":{"query":"x"}}}`,
			[]string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list", "Mcp-Name", "search"}, 400, "bad_request"},
		{"no session after initialize", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}}`, nil, 400, "bad_request"},
		{"unknown session", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}}`, []string{"Mcp-Session-Id", "mcs_forged"}, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.calls.Load()
			r := rawMCP(b, s.Token, tc.body, tc.header...)
			var msg struct {
				Error struct {
					Code int `json:"code"`
					Data struct {
						Code string `json:"code"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(r.Body, &msg); err != nil || r.Status != tc.status || msg.Error.Data.Code != tc.code {
				t.Fatalf("%d %s, want %d with a JSON-RPC error %s", r.Status, r.Body, tc.status, tc.code)
			}
			if up.calls.Load() != before {
				t.Fatal("a refused message reached the upstream")
			}
		})
	}
	t.Run("bad token", func(t *testing.T) {
		r := rawMCP(b, "not-a-token", `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("%d %s, want 401", r.Status, r.Body)
		}
	})
}
