package main

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Three bounds of the MCP notifications' features an attacker got past
// (attack_mcp_notify_test.go has the attacks that held).

// TestAttackMCPNotifySessionIDReencoded: the MAC's last base64
// character has 4 bits base64 leaves unused; were ids decoded without
// Strict, 15 other strings would read as the same id, and since a DELETE
// and the calls in flight are kept by the string, the variants would
// outlive the DELETE of the id the broker gave. A variant is an id the
// broker never gave: 404.
func TestAttackMCPNotifySessionIDReencoded(t *testing.T) {
	e := startNoteEnv(t, "")
	b := e.b
	s := b.Session(brokertest.TrustedSession(notesGrant()))
	p := newPoster(t, b)
	sid := initSession(t, p, "notes", s.Token, "2025-11-25")
	variant := sessionVariant(t, sid)
	call := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"prog_others","arguments":{"q":"x"}}}`
	if a := p.post("notes", s.Token, call, "Mcp-Session-Id", variant); a.Status != 404 {
		t.Errorf("a re-encoded id (%q for %q): %d, want 404", variant, sid, a.Status)
	}
	ls := openListen(t, b, "notes", s.Token, variant)
	if r := b.Do("DELETE", b.Sandbox+"/v1/mcp/notes", s.Token, nil, "Mcp-Session-Id", sid); r.Status != 204 {
		t.Fatalf("DELETE: %d %s", r.Status, r.Body)
	}
	if a := p.post("notes", s.Token, call, "Mcp-Session-Id", sid); a.Status != 404 {
		t.Errorf("the deleted id: %d, want 404", a.Status)
	}
	if a := p.post("notes", s.Token, call, "Mcp-Session-Id", variant); a.Status != 404 {
		t.Errorf("the deleted id re-encoded: %d %s, want 404 (DELETE ends the session)", a.Status, a.Body)
	}
	if ls.status == 200 {
		select {
		case <-ls.done:
		case <-time.After(5 * time.Second):
			t.Errorf("a GET stream opened on the re-encoded id outlives the session's DELETE")
		}
	}
}

// TestAttackMCPNotifyGetStreamsUnbounded: one session opens 200 GET
// streams at once; each takes a connection, a goroutine and a ticker on
// the broker, so each takes one of the session's stream slots
// (max_streams_per_session, 16 by default, as WebSocket relays and
// streamed answers do): beyond 16 a GET is refused (rate_limited, 429).
func TestAttackMCPNotifyGetStreamsUnbounded(t *testing.T) {
	e := startNoteEnv(t, "")
	b := e.b
	s := b.Session(brokertest.TrustedSession(notesGrant()))
	p := newPoster(t, b)
	sid := initSession(t, p, "notes", s.Token, "2025-11-25")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	var bodies []*http.Response
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", b.Sandbox+"/v1/mcp/notes", nil)
			req.Header.Set("Authorization", "Bearer "+s.Token)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", sid)
			resp, err := http.DefaultClient.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses[-1]++
				return
			}
			statuses[resp.StatusCode]++
			bodies = append(bodies, resp)
		}()
	}
	wg.Wait()
	t.Logf("200 concurrent GET streams of one session: statuses %v; GET streams to the server: %d", statuses, e.notes.gets.Load())
	if e.notes.gets.Load() != 1 {
		t.Errorf("the broker opened %d GET streams to the server for one link, want 1", e.notes.gets.Load())
	}
	a := p.post("notes", s.Token, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"prog_others","arguments":{"q":"x"}}}`, "Mcp-Session-Id", sid)
	if a.Status != 200 || resultText(a) != "done" {
		t.Errorf("a call of the session with 200 GET streams open: %d %s", a.Status, a.Body)
	}
	stillServes(t, b)
	if statuses[200] > 16 {
		t.Errorf("%d GET streams of one session held open at once (max_streams_per_session is 16)", statuses[200])
	}
	cancel()
	for _, r := range bodies {
		r.Body.Close()
	}
	brokertest.Eventually(t, 15*time.Second, func() bool { return e.notes.live.Load() == 0 })
}

// TestAttackMCPNotifyRugPullAfterGrantAdded: a session's grant names
// search only; its first listing sees create_issue too (hidden). The
// server then changes create_issue, and an operator adds a grant naming
// it. The session saw the tool first as it was, on any replica: the first
// listing is kept whole in the store, so the changed tool is quarantined
// (tool_changed) on the replica that saw it and on one that never did.
func TestAttackMCPNotifyRugPullAfterGrantAdded(t *testing.T) {
	t.Run("one replica", func(t *testing.T) {
		b, up := startMCPBroker(t, "")
		rugPullAfterGrant(t, up, b, b)
	})
	t.Run("two replicas", func(t *testing.T) {
		up := startMCPUpstream(t)
		a, b := startMCPReplicas(t, up)
		rugPullAfterGrant(t, up, a, b)
	})
}

func rugPullAfterGrant(t *testing.T, up *mcpUpstream, a, b *brokertest.Proc) {
	t.Helper()
	ctx := context.Background()
	s := a.Session(brokertest.TrustedSession(map[string]any{"upstream": "issues", "rules": []any{map[string]any{"tool": "search", "irreversible": false}}}))
	onA := mcpClient(t, a, "issues", s.Token, "2025-11-25")
	list, err := onA.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 {
		t.Fatalf("first listing on A: %v %+v", err, list)
	}
	up.rugPull()
	r := a.Do("POST", a.Control+"/v1/sessions/"+s.ID+"/grants", brokertest.ProcAdminToken, map[string]any{"upstream": "issues",
		"rules": []any{map[string]any{"tool": "create_issue", "irreversible": false}}})
	if r.Status != 201 {
		t.Fatalf("add grant: %d %s", r.Status, r.Body)
	}
	onB := mcpClient(t, b, "issues", s.Token, "")
	brokertest.Eventually(t, 10*time.Second, func() bool { // the grant reaches B by the feed
		_, err := onB.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "x", "repo": "acme/web"}})
		if err == nil {
			return true // called: the checks below fail
		}
		_, airlock := rpcErr(t, err)
		return airlock != "no_matching_grant"
	})
	// Neither replica lists it, A (which saw it before the change) after B.
	for _, cs := range []*sdk.ClientSession{onB, onA} {
		again, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range again.Tools {
			if tool.Name == "create_issue" {
				t.Errorf("create_issue is listed as the server changed it (%q), not quarantined", tool.Description)
			}
		}
	}
	for _, cs := range []*sdk.ClientSession{onA, onB} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "x", "repo": "acme/web"}})
		if err == nil {
			t.Errorf("the tool changed after the session's first listing was called: %+v (the server got %d calls)", res.Content, up.calls.Load())
			continue
		}
		if code, airlock := rpcErr(t, err); code != -32010 || airlock != "tool_changed" {
			t.Errorf("the changed tool: %d %q, want -32010 tool_changed", code, airlock)
		}
	}
}
