package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// What of the server's notifications reaches the sandbox (DESIGN §10): a
// tools/call's progress (scrubbed, under the client's own token), and the
// session era's GET stream of notifications/tools/list_changed.

// addProgressTool adds to the upstream a tool that reports its progress
// twice, the second time with its credential in the message, and keeps
// the progress tokens it was given.
func addProgressTool(up *mcpUpstream) *[]any {
	var mu sync.Mutex
	tokens := &[]any{}
	sdk.AddTool(up.server, &sdk.Tool{Name: "build", Description: "Build the project."},
		func(ctx context.Context, req *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
			up.calls.Add(1)
			tok := req.Params.GetProgressToken()
			mu.Lock()
			*tokens = append(*tokens, tok)
			mu.Unlock()
			if tok != nil {
				cred := req.Extra.Header.Get("Authorization")
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: "compiling"})
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: 2, Total: 2, Message: "linking with " + cred})
				// A progress for a token the broker did not give: never relayed.
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: "someone-else", Progress: 9, Message: "forged"})
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "built"}}}, nil, nil
		})
	return tokens
}

// streamingSeen is a client transport that keeps a copy of every answer's
// body as the client reads it (streams included), for the canary scan.
type streamingSeen struct {
	base http.RoundTripper
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (s *streamingSeen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, s), resp.Body}
	return resp, nil
}

func (s *streamingSeen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *streamingSeen) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.buf.Bytes())
}

// notifyClient connects a go-sdk client with opts to the broker's issues
// endpoint, its GET stream on (the session era opens it after
// initialize); everything it receives is scanned for the canary.
func notifyClient(t *testing.T, b *brokertest.Proc, token, version string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	seen := &streamingSeen{base: &bearerRT{token: token, base: http.DefaultTransport}}
	c := sdk.NewClient(&sdk.Implementation{Name: "sandbox-agent", Version: "1"}, opts)
	tr := &sdk.StreamableClientTransport{Endpoint: b.Sandbox + "/v1/mcp/issues", HTTPClient: &http.Client{Transport: seen}}
	cs, err := c.Connect(context.Background(), tr, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect (%q): %v", version, err)
	}
	t.Cleanup(func() {
		cs.Close()
		brokertest.AssertNoCanary(t, "what an MCP client received", seen.bytes())
	})
	return cs
}

func TestMCPToolProgressIsRelayedScrubbed(t *testing.T) {
	b, up := startMCPBroker(t, "")
	tokens := addProgressTool(up)
	g := issuesGrant(nil)
	g["rules"] = append(g["rules"].([]any), map[string]any{"tool": "build", "irreversible": false})
	s := b.Session(brokertest.TrustedSession(g))
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("version="+version, func(t *testing.T) {
			got := make(chan *sdk.ProgressNotificationParams, 8)
			cs := notifyClient(t, b, s.Token, version, &sdk.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) { got <- req.Params },
			})
			params := &sdk.CallToolParams{Name: "build", Arguments: map[string]any{}}
			params.SetProgressToken("client-token-7")
			res, err := cs.CallTool(context.Background(), params)
			if err != nil || res.IsError {
				t.Fatalf("build: %v %+v", err, res)
			}
			var notes []*sdk.ProgressNotificationParams
			for len(notes) < 2 {
				select {
				case p := <-got:
					notes = append(notes, p)
				case <-time.After(10 * time.Second):
					t.Fatalf("progress relayed: %d notifications, want 2", len(notes))
				}
			}
			for i, p := range notes {
				if p.ProgressToken != "client-token-7" || p.Progress != float64(i+1) || p.Total != 2 {
					t.Errorf("progress %d = %+v, want the client's token, %d of 2", i, p, i+1)
				}
			}
			if notes[0].Message != "compiling" || !strings.HasPrefix(notes[1].Message, "linking with ") || strings.Contains(notes[1].Message, brokertest.Canary) {
				t.Errorf("messages = %q, %q: want the server's text, the credential scrubbed", notes[0].Message, notes[1].Message)
			}
			select {
			case p := <-got:
				t.Errorf("a progress the broker did not ask for was relayed: %+v", p)
			default:
			}
		})
	}
	for _, tok := range *tokens {
		if tok == "client-token-7" {
			t.Errorf("the client's progress token reached the server: the broker asks under its own")
		}
	}
	if len(*tokens) != 2 || (*tokens)[0] == nil {
		t.Errorf("tokens the server saw = %v, want two of the broker's own", *tokens)
	}

	// A call whose client asked no progress: the server is asked none.
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "build", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if n := len(*tokens); (*tokens)[n-1] != nil {
		t.Errorf("a call without a progressToken was sent one: %v", (*tokens)[n-1])
	}
}

// The session era's GET stream: a change of the server's tools (its own
// notification) and a tool the broker quarantines each reach a stock
// client as notifications/tools/list_changed.
func TestMCPGetStreamRelaysListChanged(t *testing.T) {
	b, up := startMCPBroker(t, "")
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	changed := make(chan struct{}, 16)
	cs := notifyClient(t, b, s.Token, "2025-11-25", &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := context.Background()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if caps := cs.InitializeResult().Capabilities; caps.Tools == nil || !caps.Tools.ListChanged {
		t.Fatalf("the broker does not declare tools.listChanged: %+v", caps)
	}

	// The server's own notification, on the broker's GET stream to it. The
	// streams open asynchronously: the server changes its tools until one
	// change is told (each AddTool notifies its sessions).
	deadline := time.Now().Add(15 * time.Second)
	for n := 0; ; n++ {
		sdk.AddTool(up.server, &sdk.Tool{Name: "extra_" + string(rune('a'+n%26)), Description: "Added later."},
			func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
				return &sdk.CallToolResult{}, nil, nil
			})
		select {
		case <-changed:
		case <-time.After(500 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("no list_changed reached the client\nlogs:\n%s", b.Logs.Bytes())
			}
			continue
		}
		break
	}
	drain(changed)

	// The broker's own: a rug pull found by a listing hides the tool.
	up.rugPull()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// The server's list_changed for its AddTool may come too; either way one arrives.
	select {
	case <-changed:
	case <-time.After(15 * time.Second):
		t.Fatal("no list_changed after the broker quarantined a tool")
	}
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// The GET stream's refusals, and its end when the session ends.
func TestMCPGetStreamBoundaries(t *testing.T) {
	b, _ := startMCPBroker(t, "")
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	other := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	r := rawMCP(b, s.Token, init)
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Status != 200 || sid == "" {
		t.Fatalf("initialize: %d %s", r.Status, r.Body)
	}
	get := func(token string, header ...string) brokertest.Response {
		return b.Do("GET", b.Sandbox+"/v1/mcp/issues", token, nil, header...)
	}
	sse := []string{"Accept", "text/event-stream"}
	for _, tc := range []struct {
		name   string
		r      brokertest.Response
		status int
	}{
		{"no session", get(s.Token, sse...), 405},
		{"another Airlock session's", get(other.Token, append(sse, "Mcp-Session-Id", sid)...), 404},
		{"a forged session", get(s.Token, append(sse, "Mcp-Session-Id", "mcs_forged")...), 404},
		{"no event stream accepted", get(s.Token, "Accept", "application/json", "Mcp-Session-Id", sid), 400},
		{"a bad token", get("not-a-token", append(sse, "Mcp-Session-Id", sid)...), 401},
	} {
		if tc.r.Status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, tc.r.Status, tc.r.Body, tc.status)
		}
	}

	// A stream that is open ends when its Airlock session is killed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.Sandbox+"/v1/mcp/issues", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasPrefix(resp.Header.Get("X-Airlock-Request-Id"), "req_") {
		t.Fatalf("GET stream: %d %s, request id %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Airlock-Request-Id"))
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(first, ":") {
		t.Fatalf("the stream's first line = %q, %v", first, err)
	}
	if k := b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); k.Status/100 != 2 {
		t.Fatalf("kill: %d %s", k.Status, k.Body)
	}
	rest, err := io.ReadAll(resp.Body)
	if ctx.Err() != nil {
		t.Fatal("the GET stream outlived its session")
	}
	brokertest.AssertNoCanary(t, "the GET stream", rest)
	_ = err
}
