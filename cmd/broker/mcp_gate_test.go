package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// The human gate on MCP tool calls (DESIGN §10): held up to mcp_wait,
// answered pending with the action's id, joined by identical retries,
// executed once after approval, refused after denial, withdrawn by a
// client that leaves.

// gatedMCP starts a broker whose MCP calls wait wait for a decision, and
// a gated session (untrusted input, the sensitive issues upstream, an
// irreversible tool) created by an operator; it returns the session and
// a reviewer's token.
func gatedMCP(t *testing.T, wait string) (*brokertest.Proc, *mcpUpstream, brokertest.Created, string) {
	t.Helper()
	b, up := startMCPBroker(t, "approval: {mcp_wait: "+wait+"}\n")
	s, rev := gatedSession(t, b, "t-mcp-gate")
	return b, up, s, rev
}

// gatedSession is a gated session on the issues upstream (untrusted
// input, the sensitive upstream, an irreversible tool) created by an
// operator of b's, for task, and a reviewer's token.
func gatedSession(t *testing.T, b *brokertest.Proc, task string) (brokertest.Created, string) {
	t.Helper()
	op, rev := b.NewToken("operator", "orchestrator"), b.NewToken("reviewer", "rita")
	r := b.Do("POST", b.Control+"/v1/sessions", op, map[string]any{"task_id": task, "isolation": "microvm", "grants": []any{issuesGrant(nil)}})
	var s brokertest.Created
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("gated session: %d %s", r.Status, r.Body)
	}
	return s, rev
}

var actionIDPattern = regexp.MustCompile(`act_[0-9a-z]+`)

// pendingAction is the action a pending tool result names.
func pendingAction(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	if res == nil || !res.IsError || len(res.Content) == 0 {
		t.Fatalf("want a pending tool error, got %+v", res)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	id := actionIDPattern.FindString(text)
	if id == "" {
		t.Fatalf("the pending result names no action: %q", text)
	}
	return id
}

func actionStatus(t *testing.T, b *brokertest.Proc, rev, id string) string {
	t.Helper()
	return brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+id, rev, nil)).Status
}

func TestMCPGateHoldsJoinsAndRunsOnce(t *testing.T) {
	b, up, s, rev := gatedMCP(t, "0s")
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	ctx := context.Background()
	args := map[string]any{"title": "held", "labels": []any{"bug"}}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	id := pendingAction(t, res)
	if up.calls.Load() != 0 {
		t.Fatal("a held call reached the upstream")
	}
	// Identical retries (the arguments in another order, through another
	// client of the same session) join it; a different call does not.
	cs2 := mcpClient(t, b, "issues", s.Token, "")
	res, err = cs2.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"labels": []any{"bug"}, "title": "held"}})
	if err != nil || pendingAction(t, res) != id {
		t.Fatalf("the identical retry did not join %s: %v %+v", id, err, res)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "other"}})
	if err != nil || pendingAction(t, res) == id {
		t.Fatalf("a different call joined %s: %v %+v", id, err, res)
	}
	a := brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+id, rev, nil))
	if a.Status != "pending" || !bytes.Contains([]byte(a.Request.Body), []byte(`"repo":"acme/web"`)) {
		t.Fatalf("the action does not hold the exact call with the pin: %+v", a)
	}
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { return actionStatus(t, b, rev, id) == "executed" })

	// Concurrent identical retries all get the one execution's result.
	var wg sync.WaitGroup
	results := make([]*sdk.CallToolResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
		}()
	}
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil || r.IsError || r.Content[0].(*sdk.TextContent).Text != "created in acme/web: held" {
			t.Fatalf("retry %d after approval: %v %+v", i, errs[i], r)
		}
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("the upstream got %d calls, want exactly 1", n)
	}
}

// A call that may wait gets the result in the same request once approved;
// the client's stream is kept alive meanwhile (SSE), and a denial is a
// tool error naming the action and approval_denied.
func TestMCPGateWaitsForTheDecision(t *testing.T) {
	b, up, s, rev := gatedMCP(t, "30s")
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	ctx := context.Background()
	decide := func(verdict string) {
		brokertest.Eventually(t, 10*time.Second, func() bool {
			var list struct {
				Items []struct {
					ID string `json:"id"`
				} `json:"items"`
			}
			_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals?status=pending", rev, nil).Body, &list)
			if len(list.Items) == 0 {
				return false
			}
			r := b.Do("POST", b.Control+"/v1/approvals/"+list.Items[0].ID+"/"+verdict, rev, map[string]any{"comment": "checked"})
			return r.Status == 200
		})
	}
	go decide("approve")
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "waited"}})
	if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != "created in acme/web: waited" {
		t.Fatalf("approved while waiting: %v %+v", err, res)
	}
	go decide("deny")
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "refused"}})
	if err != nil || !res.IsError {
		t.Fatalf("denied while waiting: %v %+v", err, res)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !bytes.Contains([]byte(text), []byte("approval_denied")) || actionIDPattern.FindString(text) == "" {
		t.Fatalf("the denial does not name the action and approval_denied: %q", text)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("the upstream got %d calls, want 1 (the approved one)", n)
	}
}

// A client that gives up before the decision withdraws its call: the
// action is denied (withdrawn), and a later identical call is held anew.
func TestMCPGateWithdrawsALeftCall(t *testing.T) {
	b, up, s, rev := gatedMCP(t, "30s")
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	args := map[string]any{"title": "left"}
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args}); err == nil {
		t.Fatal("the call returned before its decision")
	}
	var id string
	brokertest.Eventually(t, 10*time.Second, func() bool {
		var list struct {
			Items []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
				Reason string `json:"reason"`
			} `json:"items"`
		}
		_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals?status=denied", rev, nil).Body, &list)
		for _, a := range list.Items {
			if bytes.Contains([]byte(a.Reason), []byte("withdrawn")) {
				id = a.ID
				return true
			}
		}
		return false
	})
	cs2 := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel2()
	_, _ = cs2.CallTool(ctx2, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
	brokertest.Eventually(t, 10*time.Second, func() bool {
		var list struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals", rev, nil).Body, &list)
		return len(list.Items) >= 2 && list.Items[0].ID != id
	})
	if up.calls.Load() != 0 {
		t.Fatal("a withdrawn call reached the upstream")
	}
}

// Killing the session, or engaging the kill-switch, ends its held calls:
// nothing is sent.
func TestMCPGateKillEndsAHeldCall(t *testing.T) {
	t.Run("session", func(t *testing.T) {
		testMCPKill(t, func(b *brokertest.Proc, s brokertest.Created) brokertest.Response {
			return b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil)
		})
	})
	t.Run("killswitch", func(t *testing.T) {
		testMCPKill(t, func(b *brokertest.Proc, s brokertest.Created) brokertest.Response {
			return b.Do("POST", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"})
		})
	})
}

func testMCPKill(t *testing.T, kill func(*brokertest.Proc, brokertest.Created) brokertest.Response) {
	b, up, s, _ := gatedMCP(t, "30s")
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", b.Logs.Bytes())
		}
	}()
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	done := callAsync(context.Background(), cs, "create_issue", map[string]any{"title": "killed"})
	brokertest.Eventually(t, 10*time.Second, func() bool { // the call is held (no decision comes)
		return bytes.Contains(b.AuditExport(), []byte(`"type":"action.pending"`))
	})
	if r := kill(b, s); r.Status/100 != 2 {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the held call outlived its session")
	}
	if up.calls.Load() != 0 {
		t.Fatal("a killed session's held call reached the upstream")
	}
}

// A tool that changes while a call to it is held fails the held call
// unsent: the action fails with tool_changed, approving it sends nothing.
func TestMCPGateFailsAHeldCallWhenItsToolChanges(t *testing.T) {
	b, up, s, rev := gatedMCP(t, "0s")
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "before"}})
	if err != nil {
		t.Fatal(err)
	}
	id := pendingAction(t, res)
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "approved later"}})
	if err != nil {
		t.Fatal(err)
	}
	later := pendingAction(t, res)
	if r := b.Do("POST", b.Control+"/v1/approvals/"+later+"/approve", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { return actionStatus(t, b, rev, later) == "executed" })
	before := up.calls.Load()

	up.rugPull()
	// Approving the held call lists the tools afresh first: the change is
	// seen, the action fails unsent.
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 10*time.Second, func() bool { return actionStatus(t, b, rev, id) == "failed" })
	if up.calls.Load() != before {
		t.Fatal("a held call to a changed tool was sent")
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "before"}})
	if err == nil && !res.IsError {
		t.Fatalf("the changed tool's call was answered: %+v", res)
	}
	metrics := b.Do("GET", b.Control+"/metrics", brokertest.ProcAdminToken, nil)
	for _, want := range []string{`airlock_mcp_calls_total{outcome="hold",tool="other",upstream="issues"}`, `airlock_mcp_calls_total{outcome="allow",tool="other",upstream="issues"}`} {
		if !bytes.Contains(metrics.Body, []byte(want)) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// callAsync calls tool on cs in the background: its result, or nil for a
// failed call.
func callAsync(ctx context.Context, cs *sdk.ClientSession, tool string, args map[string]any) <-chan *sdk.CallToolResult {
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			res = nil
		}
		done <- res
	}()
	return done
}
