package demo

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPHandler is the demo MCP server (Streamable HTTP, the go-sdk's), which
// `broker dev` serves beside the demo API at /mcp for the MCP quickstart
// (docs/mcp.md). It needs "Authorization: Bearer <key>" as the demo API
// does. Its tools:
//
//	create_issue  {repo, title, labels}: records an issue (irreversible)
//	list_issues   {repo}: the issues recorded (read-only)
//	whoami        echoes the Authorization it received (the broker scrubs it)
func MCPHandler(key string) http.Handler {
	type issue struct {
		Repo   string   `json:"repo"`
		Title  string   `json:"title"`
		Labels []string `json:"labels,omitempty"`
	}
	var (
		mu     sync.Mutex
		issues []issue
	)
	s := mcp.NewServer(&mcp.Implementation{Name: "airlock-demo-issues", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "create_issue", Description: "Create an issue in a repository.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)}},
		func(ctx context.Context, req *mcp.CallToolRequest, in issue) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			issues = append(issues, in)
			n := len(issues)
			mu.Unlock()
			return text(fmt.Sprintf("created issue #%d in %s: %s", n, in.Repo, in.Title)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "list_issues", Description: "List the issues of a repository.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			Repo string `json:"repo"`
		}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			out := ""
			for i, x := range issues {
				if x.Repo == in.Repo {
					out += fmt.Sprintf("#%d %s\n", i+1, x.Title)
				}
			}
			return text(out), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Echo the credential the server received.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return text("authorization received: " + req.Extra.Header.Get("Authorization")), nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+key)) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong demo key"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func ptr[T any](v T) *T { return &v }
