// The MCP variant: one tools/call (the stateless 2026-07-28 protocol, a
// JSON answer) to a go-sdk MCP server, through the broker's MCP door
// (strict parse, the grant on the arguments, the durable record, the
// broker's own session on the server, the result scrubbed in every part)
// and through the bare reverse proxy to the same server.

package main

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpVariant is the name of the MCP point.
const mcpVariant = "MCP tools/call"

// mcpCall is the message both proxies get: create_order with the
// arguments the grant constrains (the pin filled in by the broker).
const mcpCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientCapabilities":{}},"name":"create_order","arguments":{"sku":"ABC-1234","qty":3}}}`

// mcpHeader is the stateless era's headers of mcpCall.
func mcpHeader() http.Header {
	return http.Header{"Accept": {"application/json, text/event-stream"}, "Mcp-Protocol-Version": {"2026-07-28"},
		"Mcp-Method": {"tools/call"}, "Mcp-Name": {"create_order"}}
}

// mcpWant is what a tools/call's answer holds when it was the tool's result.
var mcpWant = []byte(`"text":"order placed"`)

// mcpHandler is the upstream's MCP server at /mcp: stateless, JSON
// answers, one tool.
func mcpHandler() http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench-tools", Version: "1"}, nil)
	type order struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
		To  string `json:"to,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "create_order", Description: "Place an order."},
		func(ctx context.Context, req *mcp.CallToolRequest, in order) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "order placed"}}}, nil, nil
		})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
}

// mcpGrant is the session's grant on the MCP upstream: create_order with
// its arguments constrained as the REST variant's POST body is.
func mcpGrant() map[string]any {
	return map[string]any{"upstream": "tools", "rules": []any{
		map[string]any{"tool": "create_order", "irreversible": false, "deny_unknown": true, "constraints": map[string]any{
			"args.sku": map[string]any{"pattern": "[A-Z]{3}-[0-9]{4}"}, "args.qty": map[string]any{"min": 1, "max": 10},
			"args.to": map[string]any{"pin": "acme"}}},
	}}
}
