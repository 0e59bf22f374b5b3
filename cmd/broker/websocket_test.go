package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// WebSocket upgrades through the REST door and the proxy door: a real
// loopback WebSocket upstream (TLS, written here on net/http's Hijack)
// that sends the injected credential in a text frame, split across two
// continuation frames and in a binary frame, then echoes; clients that
// speak RFC 6455 over a raw connection and keep every byte they receive.

const wsxHost = "ws.test"

// wsxUpstream is the WebSocket upstream: it records each handshake and
// holds every relay's connection until the test ends.
type wsxUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	seen  []http.Header
	conns []net.Conn
}

func (u *wsxUpstream) handshakes() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}

func wsxAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

func (u *wsxUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, r.Header.Clone())
	u.mu.Unlock()
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "websocket only; auth "+r.Header.Get("Authorization"), http.StatusBadRequest)
		return
	}
	secret := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	u.mu.Lock()
	u.conns = append(u.conns, conn)
	u.mu.Unlock()
	hs := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + wsxAccept(r.Header.Get("Sec-WebSocket-Key")) + "\r\n"
	if p := r.Header.Get("Sec-WebSocket-Protocol"); p != "" {
		hs += "Sec-WebSocket-Protocol: " + strings.TrimSpace(strings.Split(p, ",")[0]) + "\r\n"
	}
	if _, err := io.WriteString(conn, hs+"\r\n"); err != nil {
		return
	}
	if strings.HasSuffix(r.URL.Path, "/big") {
		_, _ = conn.Write(wsxFrame(true, 0x2, bytes.Repeat([]byte("x"), 8192), false))
	}
	// The credential, whole; split across two continuation frames; binary.
	half := len(secret) / 2
	for _, f := range [][]byte{
		wsxFrame(true, 0x1, []byte("token="+secret), false),
		wsxFrame(false, 0x1, []byte("split:"+secret[:half]), false),
		wsxFrame(true, 0x9, []byte("ping "+secret), false), // a control frame between the fragments
		wsxFrame(true, 0x0, []byte(secret[half:]+":end"), false),
		wsxFrame(true, 0x2, append([]byte{0, 1, 2}, secret...), false),
	} {
		if _, err := conn.Write(f); err != nil {
			return
		}
	}
	for { // echo
		fin, op, payload, err := wsxReadFrame(brw.Reader, true)
		if err != nil {
			conn.Close()
			return
		}
		if op == 0xA { // a pong
			continue
		}
		if _, err := conn.Write(wsxFrame(fin, op, payload, false)); err != nil || op == 0x8 {
			conn.Close()
			return
		}
	}
}

func newWSXUpstream(t *testing.T, ca *brokertest.CA) *wsxUpstream {
	u := &wsxUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, wsxHost)}, NextProtos: []string{"h2", "http/1.1"}}
	u.EnableHTTP2 = true // the broker must still speak HTTP/1.1 for an upgrade
	u.StartTLS()
	t.Cleanup(func() {
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
		u.Close()
	})
	return u
}

// wsxFrame is one frame; a client's is masked.
func wsxFrame(fin bool, op byte, payload []byte, mask bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var m byte
	if mask {
		m = 0x80
	}
	out := []byte{b0}
	switch n := len(payload); {
	case n <= 125:
		out = append(out, m|byte(n))
	case n <= 0xffff:
		out = append(out, m|126, byte(n>>8), byte(n))
	default:
		out = append(out, m|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	if !mask {
		return append(out, payload...)
	}
	var key [4]byte
	_, _ = rand.Read(key[:])
	out = append(out, key[:]...)
	for i, c := range payload {
		out = append(out, c^key[i%4])
	}
	return out
}

// wsxReadFrame reads one frame; masked says whether it must be masked (a
// client's) or not (a server's).
func wsxReadFrame(r *bufio.Reader, masked bool) (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0f
	if (h[1]&0x80 != 0) != masked || h[0]&0x70 != 0 {
		return fin, op, nil, errors.New("bad frame header")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	var key [4]byte
	if masked {
		if _, err = io.ReadFull(r, key[:]); err != nil {
			return
		}
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(r, payload); err != nil {
		return
	}
	if masked {
		for i := range payload {
			payload[i] ^= key[i%4]
		}
	}
	return
}

// wsxClient is a sandbox's WebSocket client over a raw connection; got
// holds every byte it received.
type wsxClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	got  *bytes.Buffer
	resp *http.Response
}

type wsxTee struct {
	c   net.Conn
	buf *bytes.Buffer
}

func (r wsxTee) Read(p []byte) (int, error) {
	n, err := r.c.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// wsxHandshake sends an upgrade request for target (a request target) on
// conn and reads the answer; extra are more header lines.
func wsxHandshake(t *testing.T, conn net.Conn, target, host string, extra ...string) *wsxClient {
	t.Helper()
	var key [16]byte
	_, _ = rand.Read(key[:])
	req := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " +
		base64.StdEncoding.EncodeToString(key[:]) + "\r\n"
	for _, h := range extra {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	c := &wsxClient{t: t, conn: conn, got: &bytes.Buffer{}}
	c.br = bufio.NewReader(wsxTee{conn, c.got})
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
	} else if got, want := resp.Header.Get("Sec-WebSocket-Accept"), wsxAccept(base64.StdEncoding.EncodeToString(key[:])); got != want {
		t.Fatalf("Sec-WebSocket-Accept %q, want %q", got, want)
	}
	c.resp = resp
	return c
}

// frame reads one frame from the broker (unmasked, as a server sends);
// the test fails on a read error.
func (c *wsxClient) frame() (fin bool, op byte, payload []byte) {
	c.t.Helper()
	fin, op, payload, err := wsxReadFrame(c.br, false)
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	return fin, op, payload
}

func (c *wsxClient) send(op byte, payload string) {
	c.t.Helper()
	if _, err := c.conn.Write(wsxFrame(true, op, []byte(payload), true)); err != nil {
		c.t.Fatal(err)
	}
}

// closed waits until the connection ends (a read returns an error other
// than the deadline's).
func (c *wsxClient) closed() bool {
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// wsxEnv is a broker with the WebSocket upstream as "wsx", by the REST
// door and as ws.test by the proxy door (max_body 4096: the frame limit).
type wsxEnv struct {
	*proxyEnv
	ws *wsxUpstream
}

func startWSX(t *testing.T) *wsxEnv {
	t.Helper()
	ca := brokertest.NewCA(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "wsx-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ws := newWSXUpstream(t, ca)
	plain := brokertest.NewUpstream(t)
	yaml := fmt.Sprintf(`  - name: wsx
    base_url: %s
    hosts: [%s]
    ca_cert: %s
    timeout: 10s
    max_body: 4096
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
proxy_listen: 127.0.0.1:0
`, ws.URL, wsxHost, caFile)
	b := startBroker(t, brokertest.ProcOptions{Upstream: plain.URL, ExtraYAML: yaml})
	return &wsxEnv{proxyEnv: &proxyEnv{t: t, b: b, proxy: proxyDoorAddr(t, b), dir: dir}, ws: ws}
}

// wsxGrant is a grant on wsx: GET /chat/{room}, websocket or not.
func wsxGrant(websocket bool) map[string]any {
	return map[string]any{"upstream": "wsx", "rules": []any{
		map[string]any{"method": "GET", "path": "/chat/{room}", "websocket": websocket},
	}}
}

// restDial is a connection to the REST door.
func (e *wsxEnv) restDial(t *testing.T) net.Conn {
	t.Helper()
	host := strings.TrimPrefix(e.b.Sandbox, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// restWS opens a WebSocket through the REST door.
func (e *wsxEnv) restWS(t *testing.T, token, path string, extra ...string) *wsxClient {
	t.Helper()
	host := strings.TrimPrefix(e.b.Sandbox, "http://")
	return wsxHandshake(t, e.restDial(t), "/v1/proxy/wsx"+path, host, append([]string{"Authorization: Bearer " + token}, extra...)...)
}

// proxyWS opens a WebSocket inside a TLS tunnel of the proxy door.
func (e *wsxEnv) proxyWS(t *testing.T, sb sandbox, path string, extra ...string) *wsxClient {
	t.Helper()
	tc, err := e.tunnel(wsxHost, wsxHost, sb.Token, sb.caFile)
	if err != nil {
		t.Fatal(err)
	}
	return wsxHandshake(t, tc, path, wsxHost, extra...)
}

// exchange reads what the upstream sends first (the credential three
// ways), checks it arrived scrubbed, then echoes a message.
func (c *wsxClient) exchange() {
	t := c.t
	t.Helper()
	if c.resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(c.resp.Body)
		t.Fatalf("handshake: %d %s", c.resp.StatusCode, body)
	}
	if v := c.resp.Header.Get("Sec-WebSocket-Extensions"); v != "" {
		t.Fatalf("an extension was negotiated: %q", v)
	}
	if _, op, p := c.frame(); op != 0x1 || string(p) != "token=[REDACTED]" {
		t.Fatalf("first message: op %d %q", op, p)
	}
	// The split message, with a ping between its fragments.
	var msg []byte
	fin, op, p := c.frame()
	if op != 0x1 || fin {
		t.Fatalf("split message's first frame: op %d fin %v", op, fin)
	}
	msg = append(msg, p...)
	if _, op, p := c.frame(); op != 0x9 || string(p) != "ping [REDACTED]" {
		t.Fatalf("ping: op %d %q", op, p)
	}
	for {
		fin, op, p := c.frame()
		if op != 0x0 {
			t.Fatalf("continuation expected, op %d", op)
		}
		msg = append(msg, p...)
		if fin {
			break
		}
	}
	if string(msg) != "split:[REDACTED]:end" {
		t.Fatalf("split message reassembled: %q", msg)
	}
	if _, op, p := c.frame(); op != 0x2 || !bytes.Equal(p, []byte("\x00\x01\x02[REDACTED]")) {
		t.Fatalf("binary message: op %d %q", op, p)
	}
	c.send(0x1, "hello through the broker")
	if _, op, p := c.frame(); op != 0x1 || string(p) != "hello through the broker" {
		t.Fatalf("echo: op %d %q", op, p)
	}
	c.send(0x8, "\x03\xe8bye")
	if _, op, _ := c.frame(); op != 0x8 {
		t.Fatalf("close echo: op %d", op)
	}
	if !c.closed() {
		t.Fatal("the relay did not end after the close handshake")
	}
	brokertest.AssertNoCanary(t, "bytes the WebSocket client received", c.got.Bytes())
}

func TestWebSocketThroughBothDoors(t *testing.T) {
	e := startWSX(t)
	sb := e.session(brokertest.TrustedSession(wsxGrant(true)))
	for _, tc := range []struct {
		name string
		open func() *wsxClient
	}{
		{"rest door", func() *wsxClient {
			return e.restWS(t, sb.Token, "/chat/lobby", "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits", "Sec-WebSocket-Protocol: chat.v1")
		}},
		{"proxy door", func() *wsxClient {
			return e.proxyWS(t, sb, "/chat/lobby", "Authorization: Bearer placeholder", "Sec-WebSocket-Extensions: permessage-deflate", "Sec-WebSocket-Protocol: chat.v1")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.ws.handshakes())
			c := tc.open()
			c.t = t
			if got := c.resp.Header.Get("Sec-WebSocket-Protocol"); got != "chat.v1" {
				t.Errorf("subprotocol %q, want chat.v1", got)
			}
			id := c.resp.Header.Get("X-Airlock-Request-Id")
			c.exchange()
			hs := e.ws.handshakes()
			if len(hs) != before+1 {
				t.Fatalf("the upstream saw %d handshakes, want 1", len(hs)-before)
			}
			h := hs[len(hs)-1]
			if h.Get("Authorization") != "Bearer "+brokertest.Canary {
				t.Errorf("the upstream did not get the injected credential: %q", h.Get("Authorization"))
			}
			if v := h.Values("Sec-WebSocket-Extensions"); len(v) != 0 {
				t.Errorf("permessage-deflate was forwarded: %q", v)
			}
			if h.Get("Sec-WebSocket-Protocol") != "chat.v1" || h.Get("Sec-WebSocket-Version") != "13" || h.Get("Sec-WebSocket-Key") == "" {
				t.Errorf("handshake headers not forwarded: %v", h)
			}
			e.b.AuditHas(t, "call.allowed", id, 0, "")
			e.b.AuditHas(t, "call.completed", id, 101, "")
		})
	}
	brokertest.AssertNoCanary(t, "audit export", e.b.AuditExport())
	brokertest.AssertNoCanary(t, "logs", e.b.Logs.Bytes())
}

func TestWebSocketRefused(t *testing.T) {
	e := startWSX(t)
	plainRule := e.session(brokertest.TrustedSession(wsxGrant(false)))
	wsRule := e.session(brokertest.TrustedSession(wsxGrant(true)))
	host := strings.TrimPrefix(e.b.Sandbox, "http://")
	// rawUpgrade sends a GET of the websocket rule's path through the REST
	// door with these upgrade headers, as written, and reads the answer.
	rawUpgrade := func(headers string) *wsxClient {
		conn := e.restDial(t)
		c := &wsxClient{t: t, conn: conn, got: &bytes.Buffer{}}
		_, _ = io.WriteString(conn, "GET /v1/proxy/wsx/chat/lobby HTTP/1.1\r\nHost: "+host+"\r\nAuthorization: Bearer "+wsRule.Token+"\r\n"+headers+"\r\n")
		c.br = bufio.NewReader(wsxTee{conn, c.got})
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.resp = resp
		return c
	}
	for _, tc := range []struct {
		name string
		open func() *wsxClient
	}{
		{"rest door, rule without websocket", func() *wsxClient { return e.restWS(t, plainRule.Token, "/chat/lobby") }},
		{"proxy door, rule without websocket", func() *wsxClient { return e.proxyWS(t, plainRule, "/chat/lobby") }},
		{"rest door, path no rule allows", func() *wsxClient { return e.restWS(t, wsRule.Token, "/admin/lobby") }},
		{"rest door, h2c", func() *wsxClient {
			return rawUpgrade("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n")
		}},
		{"proxy door, h2c", func() *wsxClient {
			tc, err := e.tunnel(wsxHost, wsxHost, wsRule.Token, wsRule.caFile)
			if err != nil {
				t.Fatal(err)
			}
			rs := roundTrip(t, tc, "GET /chat/lobby HTTP/1.1\r\nHost: "+wsxHost+"\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n", 1)
			if len(rs) != 1 {
				t.Fatal("no answer")
			}
			return &wsxClient{t: t, resp: rs[0], got: &bytes.Buffer{}}
		}},
		{"rest door, websocket without a key", func() *wsxClient {
			return rawUpgrade("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.ws.handshakes())
			c := tc.open()
			status, code := problemOf(t, c.resp)
			if status != 400 || code != "bad_request" {
				t.Fatalf("got %d %s, want 400 bad_request", status, code)
			}
			if n := len(e.ws.handshakes()) - before; n != 0 {
				t.Fatalf("the upstream saw %d requests", n)
			}
			e.b.AuditHas(t, "call.denied", c.resp.Header.Get("X-Airlock-Request-Id"), 0, "bad_request")
		})
	}
}

func TestWebSocketGrantValidation(t *testing.T) {
	e := startWSX(t)
	for _, tc := range []struct {
		name  string
		grant map[string]any
	}{
		{"post", map[string]any{"upstream": "wsx", "rules": []any{map[string]any{"method": "POST", "path": "/chat", "websocket": true}}}},
		{"irreversible", map[string]any{"upstream": "wsx", "rules": []any{map[string]any{"method": "GET", "path": "/chat", "websocket": true, "irreversible": true}}}},
		{"approval always", map[string]any{"upstream": "wsx", "approval": "always", "rules": []any{map[string]any{"method": "GET", "path": "/chat", "websocket": true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.b.Do("POST", e.b.Control+"/v1/sessions", brokertest.ProcAdminToken, brokertest.TrustedSession(tc.grant))
			if p := r.WantProblem(t, 400, "bad_request"); !strings.Contains(fmt.Sprint(p["field"]), "websocket") {
				t.Fatalf("field %v", p["field"])
			}
		})
	}
	// The rule reads back.
	sb := e.b.Session(brokertest.TrustedSession(wsxGrant(true)))
	r := e.b.Do("GET", e.b.Control+"/v1/grants/"+sb.Grants[0].ID, brokertest.ProcAdminToken, nil)
	if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"websocket":true`)) {
		t.Fatalf("grant: %d %s", r.Status, r.Body)
	}
}

// A kill (the session's, then the kill-switch) ends a relay at once.
func TestWebSocketKilledMidRelay(t *testing.T) {
	e := startWSX(t)
	open := func(sb brokertest.Created) *wsxClient {
		c := e.restWS(t, sb.Token, "/chat/lobby")
		if c.resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("handshake: %d", c.resp.StatusCode)
		}
		c.send(0x1, "still here")
		for { // the echo arrives after the upstream's own messages
			if _, op, p := c.frame(); op == 0x1 && string(p) == "still here" {
				return c
			}
		}
	}
	t.Run("session kill", func(t *testing.T) {
		sb := e.b.Session(brokertest.TrustedSession(wsxGrant(true)))
		c := open(sb)
		id := c.resp.Header.Get("X-Airlock-Request-Id")
		if r := e.b.Do("DELETE", e.b.Control+"/v1/sessions/"+sb.ID, brokertest.ProcAdminToken, nil); r.Status >= 300 {
			t.Fatalf("kill: %d %s", r.Status, r.Body)
		}
		if !c.closed() {
			t.Fatal("the relay outlived the session's kill")
		}
		e.b.AuditHas(t, "call.completed", id, 101, "session_revoked")
		brokertest.AssertNoCanary(t, "bytes received", c.got.Bytes())
	})
	t.Run("kill-switch", func(t *testing.T) {
		sb := e.b.Session(brokertest.TrustedSession(wsxGrant(true)))
		c := open(sb)
		id := c.resp.Header.Get("X-Airlock-Request-Id")
		if r := e.b.Do("POST", e.b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
			t.Fatalf("kill-switch: %d %s", r.Status, r.Body)
		}
		t.Cleanup(func() { e.b.Do("DELETE", e.b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil) })
		if !c.closed() {
			t.Fatal("the relay outlived the kill-switch")
		}
		e.b.AuditHas(t, "call.completed", id, 101, "killswitch_engaged")
	})
}

// A frame over the upstream's max_body closes the relay with 1009.
func TestWebSocketFrameTooLarge(t *testing.T) {
	e := startWSX(t)
	sb := e.b.Session(brokertest.TrustedSession(wsxGrant(true)))
	c := e.restWS(t, sb.Token, "/chat/big")
	if c.resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %d", c.resp.StatusCode)
	}
	_, op, p := c.frame()
	if op != 0x8 || len(p) < 2 || binary.BigEndian.Uint16(p) != 1009 {
		t.Fatalf("want close 1009, got op %d %q", op, p)
	}
	if !c.closed() {
		t.Fatal("the relay did not end")
	}
	e.b.AuditHas(t, "call.completed", c.resp.Header.Get("X-Airlock-Request-Id"), 101, "websocket_frame_too_large")
}
