package main

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// roundRobin sends each request of a client to the next of the replicas'
// sandbox planes, as a load balancer without affinity would.
type roundRobin struct {
	targets []*url.URL
	n       atomic.Int64
	base    http.RoundTripper
}

func (rr *roundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	t := rr.targets[int(rr.n.Add(1))%len(rr.targets)]
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = t.Scheme, t.Host, t.Host
	return rr.base.RoundTrip(r)
}

// TestMCPSessionOnEveryReplica: two real brokers on one PostgreSQL behind
// a round-robin balancer. A stock client of the session era initializes on
// one and goes on, message by message, on both: the broker's
// Mcp-Session-Id is read alike by every replica (DESIGN §9), another
// session's is refused on each, and a DELETE ends it.
func TestMCPSessionOnEveryReplica(t *testing.T) {
	up := startMCPUpstream(t)
	a, b := startMCPReplicas(t, up)
	s := a.Session(brokertest.TrustedSession(issuesGrant(nil)))
	other := a.Session(brokertest.TrustedSession(issuesGrant(nil)))

	var targets []*url.URL
	for _, p := range []*brokertest.Proc{a, b} {
		u, err := url.Parse(p.Sandbox)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u)
	}
	rr := &roundRobin{targets: targets, base: &bearerRT{token: s.Token, base: http.DefaultTransport}}
	c := sdk.NewClient(&sdk.Implementation{Name: "sandbox-agent", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: a.Sandbox + "/v1/mcp/issues",
		HTTPClient: &http.Client{Transport: rr}, DisableStandaloneSSE: true}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	for i := range 4 { // every message lands on the other replica than the one before
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatalf("tools/list %d: %v", i, err)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "search", Arguments: map[string]any{"query": "crash"}})
		if err != nil || res.IsError {
			t.Fatalf("tools/call %d: %v %+v", i, err, res)
		}
	}
	sid := cs.ID()
	if sid == "" {
		t.Fatal("the session era's client has no Mcp-Session-Id")
	}
	call := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}}`
	for _, p := range []*brokertest.Proc{a, b} {
		if r := rawMCP(p, other.Token, call, "Mcp-Session-Id", sid); r.Status != http.StatusNotFound {
			t.Errorf("another session's Mcp-Session-Id on %s: %d %s, want 404", p.Sandbox, r.Status, r.Body)
		}
		if r := rawMCP(p, s.Token, call, "Mcp-Session-Id", sid+"x"); r.Status != http.StatusNotFound {
			t.Errorf("a tampered Mcp-Session-Id on %s: %d %s, want 404", p.Sandbox, r.Status, r.Body)
		}
	}
	if r := b.Do("DELETE", b.Sandbox+"/v1/mcp/issues", s.Token, nil, "Mcp-Session-Id", sid); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE on B: %d %s", r.Status, r.Body)
	}
	if r := rawMCP(b, s.Token, call, "Mcp-Session-Id", sid); r.Status != http.StatusNotFound {
		t.Errorf("the deleted session on B: %d %s, want 404", r.Status, r.Body)
	}
}

// startMCPReplicas starts two brokers on one PostgreSQL, the issues MCP
// upstream at up.
func startMCPReplicas(t *testing.T, up *mcpUpstream, extraYAML ...string) (*brokertest.Proc, *brokertest.Proc) {
	t.Helper()
	dsn := pgtest.DSN(t)
	yaml := mcpYAML(up, "") + "store: {driver: postgres, dsn: \"${AIRLOCK_PG_DSN}\"}\n" + strings.Join(extraYAML, "")
	start := func() *brokertest.Proc {
		return startBroker(t, brokertest.ProcOptions{Upstream: "http://127.0.0.1:1", DataDir: filepath.Join(t.TempDir(), "data"),
			ExtraYAML: yaml, Env: map[string]string{"AIRLOCK_PG_DSN": dsn}})
	}
	return start(), start()
}

// TestMCPToolPinnedAcrossReplicas: a session lists its tools on replica
// A; the server then changes create_issue; the same session's first
// listing on replica B compares with the digest A recorded (the store's),
// not with what B sees first: the tool is quarantined there too.
func TestMCPToolPinnedAcrossReplicas(t *testing.T) {
	up := startMCPUpstream(t)
	a, b := startMCPReplicas(t, up)
	s := a.Session(brokertest.TrustedSession(issuesGrant(nil)))
	ctx := context.Background()
	if _, err := mcpClient(t, a, "issues", s.Token, "2025-11-25").ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	up.rugPull()
	cs := mcpClient(t, b, "issues", s.Token, "")
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name == "create_issue" {
			t.Fatalf("replica B shows the tool changed since A listed it: %+v", tool)
		}
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "x"}})
	if code, airlock := rpcErr(t, err); code != -32010 || airlock != "tool_changed" {
		t.Fatalf("the changed tool on B: %d %q, want -32010 tool_changed", code, airlock)
	}
	// Another session sees the changed tool first: it is its first sight.
	s2 := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	if _, err := mcpClient(t, a, "issues", s2.Token, "").CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "x"}}); err != nil {
		t.Fatalf("a new session's call of the tool as it is now: %v", err)
	}
}

// TestMCPGateAcrossReplicas: a gated tools/call held on replica A is
// joined by its identical retry on replica B at once (B reads the pending
// action from the store);
// approved on B, it executes once, and identical retries on either
// replica get that one execution's result.
func TestMCPGateAcrossReplicas(t *testing.T) {
	up := startMCPUpstream(t)
	a, b := startMCPReplicas(t, up, "approval: {mcp_wait: 0s}\n")
	s, rev := gatedSession(t, a, "t-mcp-ha")
	ctx := context.Background()
	args := map[string]any{"title": "held", "labels": []any{"bug"}}
	onA, onB := mcpClient(t, a, "issues", s.Token, "2025-11-25"), mcpClient(t, b, "issues", s.Token, "")
	res, err := onA.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	id := pendingAction(t, res)
	// At once: B finds the pending action in the store, before A's change
	// reaches it by the feed.
	res, err = onB.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
	if err != nil || pendingAction(t, res) != id {
		t.Fatalf("the identical retry on B did not join %s: %v %+v", id, err, res)
	}
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve on B: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { return actionStatus(t, a, rev, id) == "executed" })
	var wg sync.WaitGroup
	for i, cs := range []*sdk.ClientSession{onA, onB, onA, onB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
			if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != "created in acme/web: held" {
				t.Errorf("retry %d after approval: %v %+v", i, err, res)
			}
		}()
	}
	wg.Wait()
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("the upstream got %d calls, want exactly 1", n)
	}
}
