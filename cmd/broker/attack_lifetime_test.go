package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// Lifetimes are hard bounds on what is in flight (DESIGN §4, issue 19
// class 3): at the instant a session expires, or a grant expires or is
// revoked, the relays, streamed answers, tunnel requests and held actions
// that depend on it end, with the matching code and a call.completed
// record saying why. The expiries here are a few seconds of the real
// clock: the broker's own timer ends the work, long before the
// once-a-minute janitor could (the tests wait on the end, never on a
// wall-clock bound).

// lifeOpen opens a relay on the REST door and waits for its echo.
func lifeOpen(t *testing.T, e *wsxEnv, token string) *wsxClient {
	t.Helper()
	c := e.restWS(t, token, "/chat/lobby")
	return lifeEcho(t, c)
}

func lifeEcho(t *testing.T, c *wsxClient) *wsxClient {
	t.Helper()
	if c.resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(c.resp.Body)
		t.Fatalf("handshake: %d %s", c.resp.StatusCode, body)
	}
	c.send(0x1, "still here")
	for { // the echo arrives after the upstream's own messages
		if _, op, p := c.frame(); op == 0x1 && string(p) == "still here" {
			return c
		}
	}
}

// lifeClosedWith reads the relay's frames until its close frame and checks
// it says 1008 with reason code, then that the connection ends.
func lifeClosedWith(t *testing.T, c *wsxClient, code string) {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, op, p, err := wsxReadFrame(c.br, false)
		if err != nil {
			t.Fatalf("the relay ended without a close frame saying %s: %v", code, err)
		}
		if op != 0x8 {
			continue // frames sent before the end
		}
		if len(p) < 2 || binary.BigEndian.Uint16(p) != 1008 || string(p[2:]) != code {
			t.Fatalf("close frame %q, want 1008 %q", p, code)
		}
		break
	}
	if !c.closed() {
		t.Fatal("the relay's connection stayed open after its close frame")
	}
	brokertest.AssertNoCanary(t, "bytes the relay's client received", c.got.Bytes())
}

func lifeSession(ttl string, grant map[string]any) map[string]any {
	s := brokertest.TrustedSession(grant)
	s["ttl"] = ttl
	return s
}

// TestLifetimeEndsWebSocketRelay: a relay ends at its grant's revocation,
// at its grant's expiry and at its session's expiry, through the REST door
// and, for a revocation, in a tunnel of the proxy door: the sandbox gets a
// close frame 1008 whose reason is the code, and call.completed says why.
func TestLifetimeEndsWebSocketRelay(t *testing.T) {
	e := startWSX(t)
	t.Run("grant revoked", func(t *testing.T) {
		sb := e.b.Session(brokertest.TrustedSession(wsxGrant(true)))
		c := lifeOpen(t, e, sb.Token)
		if r := e.b.Do("DELETE", e.b.Control+"/v1/grants/"+sb.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		lifeClosedWith(t, c, "grant_revoked")
		e.b.AuditHas(t, "call.completed", c.resp.Header.Get("X-Airlock-Request-Id"), 101, "grant_revoked")
	})
	t.Run("grant expired", func(t *testing.T) {
		g := wsxGrant(true)
		g["ttl"] = "3s"
		sb := e.b.Session(brokertest.TrustedSession(g))
		c := lifeOpen(t, e, sb.Token)
		lifeClosedWith(t, c, "grant_expired")
		e.b.AuditHas(t, "call.completed", c.resp.Header.Get("X-Airlock-Request-Id"), 101, "grant_expired")
	})
	t.Run("session expired", func(t *testing.T) {
		sb := e.b.Session(lifeSession("3s", wsxGrant(true)))
		c := lifeOpen(t, e, sb.Token)
		lifeClosedWith(t, c, "session_expired")
		e.b.AuditHas(t, "call.completed", c.resp.Header.Get("X-Airlock-Request-Id"), 101, "session_expired")
	})
	t.Run("proxy door tunnel: grant revoked", func(t *testing.T) {
		sb := e.session(brokertest.TrustedSession(wsxGrant(true)))
		c := lifeEcho(t, e.proxyWS(t, sb, "/chat/lobby"))
		if r := e.b.Do("DELETE", e.b.Control+"/v1/grants/"+sb.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		lifeClosedWith(t, c, "grant_revoked")
		e.b.AuditHas(t, "call.completed", c.resp.Header.Get("X-Airlock-Request-Id"), 101, "grant_revoked")
	})
}

// lifeStreamBroker is a broker with the streaming upstream "stream" (its
// own timeout long: only a lifetime ends the stream).
func lifeStreamBroker(t *testing.T, extra string) (*brokertest.Proc, *haltStreamer) {
	up := brokertest.NewUpstream(t)
	st := newHaltStreamer(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: fmt.Sprintf(`  - name: stream
    base_url: %s
    sensitive: false
    timeout: 5m
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
%s`, st.URL, extra)})
	return b, st
}

func streamGrant() map[string]any {
	return map[string]any{"upstream": "stream", "rules": []any{map[string]any{"method": "GET", "path": "/feed"}}}
}

// lifeStream opens a streamed answer and reads its first line.
func lifeStream(t *testing.T, b *brokertest.Proc, token string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequest("GET", b.Sandbox+"/v1/proxy/stream/feed", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatalf("first line: %v", err)
	}
	return resp, rd
}

// TestLifetimeEndsStreamedAnswer: a streamed answer through the REST door
// is cut at its session's expiry, its grant's revocation and its grant's
// expiry: the upstream sees its request cancelled, the sandbox's stream
// ends, and call.completed carries the code.
func TestLifetimeEndsStreamedAnswer(t *testing.T) {
	b, st := lifeStreamBroker(t, "")
	for _, tc := range []struct {
		name, code string
		session    func() brokertest.Created
		end        func(brokertest.Created)
	}{
		{"session expired", "session_expired", func() brokertest.Created { return b.Session(lifeSession("3s", streamGrant())) }, nil},
		{"grant expired", "grant_expired", func() brokertest.Created {
			g := streamGrant()
			g["ttl"] = "3s"
			return b.Session(brokertest.TrustedSession(g))
		}, nil},
		{"grant revoked", "grant_revoked", func() brokertest.Created { return b.Session(brokertest.TrustedSession(streamGrant())) }, func(s brokertest.Created) {
			if r := b.Do("DELETE", b.Control+"/v1/grants/"+s.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
				t.Fatalf("revoke: %d %s", r.Status, r.Body)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.session()
			resp, rd := lifeStream(t, b, s.Token)
			<-st.started
			if tc.end != nil {
				tc.end(s)
			}
			select {
			case <-st.gone:
			case <-time.After(30 * time.Second):
				t.Fatalf("the upstream call was still running after the %s", tc.name)
			}
			ended := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, rd); ended <- err }()
			select {
			case <-ended:
			case <-time.After(20 * time.Second):
				t.Fatal("the sandbox's stream was not cut off")
			}
			id := resp.Header.Get("X-Airlock-Request-Id")
			b.AuditHas(t, "call.completed", id, 0, tc.code)
		})
	}
}

// TestLifetimeEndsHeldAction: a call held for a reviewer, its sandbox
// waiting (Prefer: wait), ends at its session's expiry and at its grant's
// revocation: the sandbox is answered with the code at once (not when its
// wait runs out), the action is denied so no reviewer can let it run, and
// call.completed says why.
func TestLifetimeEndsHeldAction(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	reviewer := b.NewToken("reviewer", "rev")
	for _, tc := range []struct {
		name, ttl string
		status    int
		code      string
		revoke    bool
	}{
		{"session expired", "3s", 401, "session_expired", false},
		{"grant revoked", "10m", 403, "grant_revoked", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{"task_id": "t-held", "ttl": tc.ttl, "isolation": "microvm", "grants": []any{
				map[string]any{"upstream": "api", "approval": "always", "rules": []any{map[string]any{"method": "POST", "path": "/payments"}}}}})
			if r.Status != 201 {
				t.Fatalf("session: %d %s", r.Status, r.Body)
			}
			var s brokertest.Created
			if err := json.Unmarshal(r.Body, &s); err != nil {
				t.Fatal(err)
			}
			answered := make(chan brokertest.Response, 1)
			go func() {
				answered <- b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, map[string]any{"to": "acme"}, "Prefer", "wait=50")
			}()
			var actionID string
			brokertest.Eventually(t, 10*time.Second, func() bool {
				for _, rec := range brokertest.ParseAudit(t, b.AuditExport()) {
					if rec.Type == "action.pending" && rec.SessionID == s.ID {
						actionID = rec.ActionID
						return true
					}
				}
				return false
			})
			if tc.revoke {
				if r := b.Do("DELETE", b.Control+"/v1/grants/"+s.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
					t.Fatalf("revoke: %d %s", r.Status, r.Body)
				}
			}
			var got brokertest.Response
			select {
			case got = <-answered:
			case <-time.After(2 * time.Minute): // a hang guard: an answer at the 50 s wait's end would be 202, not the problem
				t.Fatal("the waiting sandbox was not answered when its lifetime ended")
			}
			got.WantProblem(t, tc.status, tc.code)
			reqID := got.Header.Get("X-Airlock-Request-Id")
			b.AuditHas(t, "call.completed", reqID, 0, tc.code)
			var act struct{ Status string }
			if r := b.Do("GET", b.Control+"/v1/approvals/"+actionID, brokertest.ProcAdminToken, nil); r.Status != 200 || json.Unmarshal(r.Body, &act) != nil || act.Status != "denied" {
				t.Fatalf("the held action after its end: %d %s, want denied", r.Status, r.Body)
			}
			if r := b.Do("POST", b.Control+"/v1/approvals/"+actionID+"/approve", reviewer, map[string]any{"comment": "too late"}); r.Status != 409 {
				t.Fatalf("approving it after its end: %d %s, want 409", r.Status, r.Body)
			}
			if n := len(up.Requests()); n != 0 {
				t.Fatalf("the upstream saw %d requests of a held call that ended", n)
			}
		})
	}
}

// TestReplicasGrantRevokeEndsRelayElsewhere: on PostgreSQL, a grant
// revoked on replica A ends a relay that replica B is running on it
// (DESIGN §9's kill bound, through the change feed): B's sandbox gets the
// close frame grant_revoked and B records call.completed. The time from
// the revocation's answer to the close frame is logged (measured, not
// asserted).
func TestReplicasGrantRevokeEndsRelayElsewhere(t *testing.T) {
	dsn := pgtest.DSN(t)
	ca := brokertest.NewCA(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "wsx-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ws := newWSXUpstream(t, ca)
	plain := brokertest.NewUpstream(t)
	extra := fmt.Sprintf(`  - name: wsx
    base_url: %s
    ca_cert: %s
    timeout: 10s
    max_body: 4096
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
store: {driver: postgres, dsn: "${AIRLOCK_PG_DSN}"}
`, ws.URL, caFile)
	start := func() *brokertest.Proc {
		return startBroker(t, brokertest.ProcOptions{Upstream: plain.URL, DataDir: filepath.Join(t.TempDir(), "data"), ExtraYAML: extra,
			Env: map[string]string{"AIRLOCK_PG_DSN": dsn}})
	}
	a := start()
	sb := a.Session(brokertest.TrustedSession(wsxGrant(true)))
	b := start()
	awaitListeners(t, pgConn(t, dsn), 2)
	eb := &wsxEnv{proxyEnv: &proxyEnv{t: t, b: b}, ws: ws}
	c := lifeOpen(t, eb, sb.Token)

	asked := time.Now()
	if r := a.Do("DELETE", a.Control+"/v1/grants/"+sb.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("revoke on A: %d %s", r.Status, r.Body)
	}
	acked := time.Since(asked)
	lifeClosedWith(t, c, "grant_revoked")
	t.Logf("the relay on B ended %s after the revocation was asked of A (A answered after %s)", time.Since(asked), acked)
	eb.b.AuditHas(t, "call.completed", c.resp.Header.Get("X-Airlock-Request-Id"), 101, "grant_revoked")
	if strings.Contains(string(b.Logs.Bytes()), brokertest.Canary) {
		t.Fatal("the canary reached B's logs")
	}
}

// TestStreamsPerSessionBounded (issue 19 class 5): a session holds at most
// max_streams_per_session relays and streamed answers at once; the next
// is refused 429 rate_limited and audited (a relay before anything is
// sent: call.denied; a streamed answer once it turned out to stream:
// call.completed), while another session still opens one, and a slot
// given back is usable again.
func TestStreamsPerSessionBounded(t *testing.T) {
	ca := brokertest.NewCA(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "wsx-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ws := newWSXUpstream(t, ca)
	b, _ := lifeStreamBroker(t, fmt.Sprintf(`  - name: wsx
    base_url: %s
    ca_cert: %s
    timeout: 10s
    max_body: 4096
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
max_streams_per_session: 2
`, ws.URL, caFile))
	e := &wsxEnv{proxyEnv: &proxyEnv{t: t, b: b}, ws: ws}
	grants := func() map[string]any {
		s := brokertest.TrustedSession(wsxGrant(true), streamGrant())
		return s
	}
	sa, sb := b.Session(grants()), b.Session(grants())
	first := lifeOpen(t, e, sa.Token)
	_, _ = lifeStream(t, b, sa.Token) // the second: a streamed answer

	third := e.restWS(t, sa.Token, "/chat/lobby")
	if third.resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the third stream of a session: %d, want 429", third.resp.StatusCode)
	}
	body, _ := io.ReadAll(third.resp.Body)
	if !strings.Contains(string(body), `"code":"rate_limited"`) {
		t.Fatalf("the third stream's problem: %s", body)
	}
	e.b.AuditHas(t, "call.denied", third.resp.Header.Get("X-Airlock-Request-Id"), 0, "rate_limited")
	r := b.Do("GET", b.Sandbox+"/v1/proxy/stream/feed", sa.Token, nil)
	r.WantProblem(t, 429, "rate_limited")
	e.b.AuditHas(t, "call.completed", r.Header.Get("X-Airlock-Request-Id"), 429, "rate_limited")

	// Another session is not affected.
	lifeOpen(t, e, sb.Token)

	// A slot given back is usable again.
	first.send(0x8, "\x03\xe8bye")
	if !first.closed() {
		t.Fatal("the first relay did not end")
	}
	brokertest.Eventually(t, 10*time.Second, func() bool {
		c := e.restWS(t, sa.Token, "/chat/lobby")
		return c.resp.StatusCode == http.StatusSwitchingProtocols
	})
}
