package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Red-team tests of the proxy door (issue 14): the sandbox holds one
// session token and the proxy's address and attacks the door through the
// real server with raw bytes, Go's TLS client and stock clients.

// apxEnv is a proxy-door broker like startProxyBroker's with two more
// upstreams: "wild" (hosts *.wild.test) and "keyed" (hosts keyed.test, its
// credential in the X-Api-Key header, which forward_headers also lets a
// sandbox send, and a placeholder).
type apxEnv struct {
	*proxyEnv
}

func apxStart(t *testing.T, topYAML string) *apxEnv {
	t.Helper()
	dir := t.TempDir()
	ca := brokertest.NewCA(t)
	caFile := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	up := &brokertest.Upstream{Started: make(chan struct{}, 16)}
	up.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/gzip") {
			// The credential echoed in a gzip answer, chunked.
			body, _ := io.ReadAll(r.Body)
			up.Record(brokertest.Recorded{At: time.Now(), Method: r.Method, RawPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Type", "text/plain")
			zw := gzip.NewWriter(w)
			for i := 0; i < 200; i++ {
				fmt.Fprintf(zw, "%d %s %s|", i, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
				if i%50 == 0 {
					_ = zw.Flush()
					w.(http.Flusher).Flush()
				}
			}
			_ = zw.Close()
			return
		}
		up.ServeHTTP(w, r)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, ghHost, "other.test")}}
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := brokertest.NewUpstream(t)
	yaml := fmt.Sprintf(`  - name: github
    base_url: %[1]s
    hosts: [%[2]s]
    ca_cert: %[3]s
    timeout: 10s
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
    placeholder: {env: GITHUB_TOKEN, format: "ghp_{random:36}"}
  - name: other
    base_url: %[1]s/other
    hosts: [other.test]
    ca_cert: %[3]s
    credential: {source: env, name: CANARY_TOKEN}
  - name: wild
    base_url: %[1]s/wild
    hosts: ["*.wild.test"]
    ca_cert: %[3]s
    credential: {source: env, name: CANARY_TOKEN}
  - name: keyed
    base_url: %[1]s/keyed
    hosts: [keyed.test]
    ca_cert: %[3]s
    forward_headers: [X-Api-Key, X-Note]
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: X-Api-Key, format: "{secret}"}
proxy_listen: 127.0.0.1:0
%[4]s`, up.URL, ghHost, caFile, topYAML)
	b := startBroker(t, brokertest.ProcOptions{Upstream: plain.URL, ExtraYAML: yaml})
	return &apxEnv{&proxyEnv{t: t, b: b, up: up, proxy: proxyDoorAddr(t, b), dir: dir}}
}

// apxGrant is a grant on upstream name allowing GET and POST anywhere.
func apxGrant(name string) map[string]any {
	return map[string]any{"upstream": name, "rules": []any{
		map[string]any{"method": "GET", "path": "/{a}/{b}"},
		map[string]any{"method": "GET", "path": "/{a}"},
		map[string]any{"method": "POST", "path": "/repos/{owner}/{repo}/issues",
			"constraints": map[string]any{"path.owner": map[string]any{"pin": "acme"}}},
	}}
}

func apxBasic(token string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("airlock:"+token))
}

// apxRaw sends raw bytes to the proxy listener and reads one answer (nil
// when the connection ended without one).
func (e *apxEnv) apxRaw(raw string) (*http.Response, []byte) {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.proxy)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: strings.Fields(raw)[0]})
	if err != nil {
		return nil, nil
	}
	if resp.StatusCode == 200 && resp.Request.Method == http.MethodConnect {
		return resp, nil // the tunnel: no body
	}
	body, _ := io.ReadAll(resp.Body)
	brokertest.AssertNoCanary(e.t, "proxy answer", body)
	return resp, body
}

// apxTunnel opens a TLS tunnel to target (host:port) with cfg (RootCAs
// defaults to the session's CA); the handshake's error, if any.
func (e *apxEnv) apxTunnel(target, token, caFile string, cfg *tls.Config) (*tls.Conn, error) {
	e.t.Helper()
	resp, body, conn := e.rawConnect(target, token)
	if resp.StatusCode != 200 {
		e.t.Fatalf("CONNECT %s: %d %s", target, resp.StatusCode, body)
	}
	if cfg.RootCAs == nil && caFile != "" {
		pool := x509.NewCertPool()
		data, _ := os.ReadFile(caFile)
		pool.AppendCertsFromPEM(data)
		cfg.RootCAs = pool
	}
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// apxAllowedMatchesUpstream: every request the upstream received was
// audited as allowed (no unaudited call), and none carried the session
// token or a proxy header.
func (e *apxEnv) apxAllowedMatchesUpstream(tokens ...string) {
	e.t.Helper()
	got := e.up.Requests()
	if allowed := len(e.auditOf("call.allowed")); allowed != len(got) {
		e.t.Fatalf("the upstream received %d requests for %d calls audited as allowed", len(got), allowed)
	}
	for _, r := range got {
		var all bytes.Buffer
		_ = r.Header.Write(&all)
		all.WriteString(r.RawPath + "?" + r.RawQuery + "\n")
		all.Write(r.Body)
		for _, tok := range tokens {
			if strings.Contains(all.String(), tok) {
				e.t.Fatalf("the session token reached the upstream: %s", all.String())
			}
		}
		for k := range r.Header {
			if strings.HasPrefix(k, "Proxy-") {
				e.t.Fatalf("the upstream received %s", k)
			}
		}
	}
	brokertest.AssertNoCanary(e.t, "audit", e.b.AuditExport())
	brokertest.AssertNoCanary(e.t, "logs", e.b.Logs.Bytes())
	for _, tok := range tokens {
		if bytes.Contains(e.b.Logs.Bytes(), []byte(tok)) {
			e.t.Fatal("a session token is in the broker's logs")
		}
	}
}

func TestProxyAttackConnectTargets(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	_, ctlPort, _ := net.SplitHostPort(strings.TrimPrefix(e.b.Control, "http://"))
	_, sbxPort, _ := net.SplitHostPort(strings.TrimPrefix(e.b.Sandbox, "http://"))
	_, pxPort, _ := net.SplitHostPort(e.proxy)
	long := strings.Repeat("a", 63) + "."
	for _, target := range []string{
		"HOST:0443", ghHost + ":0443", ghHost + ":+443", ghHost + ":443 ", ghHost + ": 443",
		"[::ffff:127.0.0.1]:443", "[::ffff:7f00:1]:443", "[0:0:0:0:0:ffff:a9fe:a9fe]:443", "[::1%25lo]:443",
		"0x7f.1:443", "2130706433:443", "0177.0.0.1:443", "127.1:443", "127.0.0.1.:443", "169.254.169.254.:443",
		"xn--pi-5ka.github.test:443", "xn--80ak6aa92e.com:443", "api.githüb.test:443",
		"api%2egithub.test:443", "api.github.test%00.evil.test:443", "a@" + ghHost + ":443", ghHost + "@evil.test:443",
		ghHost, ghHost + ":", ":443", ghHost + ":0", ghHost + ":65536", ghHost + ":4294967739", ghHost + ":-1",
		strings.Repeat(long, 4) + "test:443", strings.Repeat("a", 64) + ".test:443", strings.Repeat("x", 4000) + ".test:443",
		"http://" + ghHost + ":443", ghHost + ":443/x", "*.wild.test:443", ".wild.test:443", "a.b.wild.test:443",
		"127.0.0.1:" + ctlPort, "localhost:" + ctlPort, "127.0.0.1:" + sbxPort, "127.0.0.1:" + pxPort, "[::1]:" + ctlPort,
		"0.0.0.0:443", "[::]:443", "255.255.255.255:443",
	} {
		resp, body := e.apxRaw("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nProxy-Authorization: " + apxBasic(s.Token) + "\r\n\r\n")
		if resp == nil {
			continue // the server dropped it: no tunnel either
		}
		switch {
		case resp.StatusCode == 403 && bytes.Contains(body, []byte(`"code":"egress_denied"`)):
		case resp.StatusCode == 400:
		default:
			t.Fatalf("CONNECT %q: %d %s", target, resp.StatusCode, body)
		}
	}
	// Every refusal the door answered is audited, its path bounded.
	for _, m := range e.auditOf("egress.denied") {
		if p, _ := m["path"].(string); len(p) > 310 || m["session_id"] != s.ID {
			t.Fatalf("egress.denied record: %v", m)
		}
	}
	e.wantEgressDenied(s.ID, "127.0.0.1:"+ctlPort)
	e.wantEgressDenied(s.ID, "127.0.0.1:443") // [::ffff:127.0.0.1] read as what it is
	e.apxAllowedMatchesUpstream(s.Token)
}

func TestProxyAttackAbsoluteForm(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	_, ctlPort, _ := net.SplitHostPort(strings.TrimPrefix(e.b.Control, "http://"))
	auth := "Proxy-Authorization: " + apxBasic(s.Token) + "\r\n"

	// The URL decides the destination, never the Host header.
	resp, body := e.apxRaw("GET http://" + ghHost + "/repos/acme/widgets HTTP/1.1\r\nHost: evil.test\r\n" + auth + "\r\n")
	if resp == nil || resp.StatusCode != 200 || decodeEcho(t, body).Path != "/repos/acme/widgets" {
		t.Fatalf("granted URL, other Host: %v %s", resp, body)
	}
	for _, tc := range []struct{ target, host, want string }{
		{"http://evil.test/repos/acme/widgets", ghHost, "egress_denied"},
		{"http://" + ghHost + "@evil.test/repos/acme/widgets", ghHost, "egress_denied"},
		{"http://127.0.0.1:" + ctlPort + "/v1/sessions", ghHost, "egress_denied"},
		{"http://localhost:" + ctlPort + "/v1/audit", "localhost", "egress_denied"},
		{"http://169.254.169.254/latest/meta-data/", ghHost, "egress_denied"},
		{"http://other.test/", "other.test", "egress_denied"},
		{"http://" + ghHost + ":443/repos/acme/widgets", ghHost, "egress_denied"}, // plain HTTP is port 80 only
		{"https://" + ghHost + "/repos/acme/widgets", ghHost, "bad_request"},
		{"ftp://" + ghHost + "/repos/acme/widgets", ghHost, "bad_request"},
	} {
		resp, body := e.apxRaw("GET " + tc.target + " HTTP/1.1\r\nHost: " + tc.host + "\r\n" + auth + "\r\n")
		if resp == nil {
			continue
		}
		if resp.StatusCode == 400 && tc.want != "bad_request" && !bytes.Contains(body, []byte(`"code"`)) {
			continue // Go's server refused the request line itself
		}
		if !bytes.Contains(body, []byte(`"code":"`+tc.want+`"`)) || resp.StatusCode < 400 {
			t.Fatalf("GET %s: %d %s", tc.target, resp.StatusCode, body)
		}
	}
	// Origin form on the proxy listener is not a proxy request (not the REST door either).
	resp, body = e.apxRaw("GET /v1/proxy/github/repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\nAuthorization: Bearer " + s.Token + "\r\n\r\n")
	if resp == nil || resp.StatusCode != 400 {
		t.Fatalf("origin form: %v %s", resp, body)
	}
	// The placeholder and the proxy credentials never reach the upstream.
	resp, body = e.apxRaw("GET http://" + ghHost + "/repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n" + auth +
		"Authorization: Bearer ghp_placeholder\r\nProxy-Connection: keep-alive\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n")
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("plain call: %v %s", resp, body)
	}
	if got := e.up.Last(t); got.Header.Get("Authorization") != "Bearer "+brokertest.Canary || got.Header.Get("X-Forwarded-For") != "" {
		t.Fatalf("upstream got %v", got.Header)
	}
	e.apxAllowedMatchesUpstream(s.Token)
}

func TestProxyAttackTLS(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant(), apxGrant("other")))
	other := e.session(brokertest.TrustedSession(ghGrant()))
	get := "GET /repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n"

	t.Run("no server name", func(t *testing.T) {
		// A client that sends no SNI for a host name (and verifies nothing).
		if _, err := e.apxTunnel(ghHost+":443", s.Token, "", &tls.Config{InsecureSkipVerify: true}); err == nil {
			t.Fatal("a handshake without a server name was accepted for a host name")
		}
	})

	t.Run("server name in another case", func(t *testing.T) {
		tc, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: strings.ToUpper(ghHost)})
		if err != nil {
			t.Fatal(err)
		}
		if names := tc.ConnectionState().PeerCertificates[0].DNSNames; len(names) != 1 || names[0] != ghHost {
			t.Fatalf("leaf names %v", names)
		}
		if rs := roundTrip(t, tc, get, 1); len(rs) != 1 || rs[0].StatusCode != 200 {
			t.Fatalf("%v", rs)
		}
	})

	t.Run("no resumption across tunnels or sessions", func(t *testing.T) {
		// A resumed handshake would skip the certificate (and so the check
		// of the server name against the CONNECT host): a ticket of one
		// tunnel must open no other, of this session or another's.
		pool := x509.NewCertPool()
		for _, f := range []string{s.caFile, other.caFile} {
			data, _ := os.ReadFile(f)
			pool.AppendCertsFromPEM(data)
		}
		for _, max := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			cache := tls.NewLRUClientSessionCache(8)
			cfg := func(name string) *tls.Config {
				return &tls.Config{ServerName: name, RootCAs: pool, ClientSessionCache: cache, MaxVersion: max}
			}
			first, err := e.apxTunnel(ghHost+":443", s.Token, "", cfg(ghHost))
			if err != nil {
				t.Fatal(err)
			}
			if rs := roundTrip(t, first, get, 1); len(rs) != 1 { // reads the TLS 1.3 ticket too
				t.Fatal("no answer")
			}
			for _, tc := range []struct{ target, token, name string }{
				{ghHost + ":443", s.Token, ghHost},        // the same session again
				{ghHost + ":443", other.Token, ghHost},    // another session
				{"other.test:443", s.Token, ghHost},       // another CONNECT host, the ticket's name
				{"other.test:443", s.Token, "other.test"}, // another host
			} {
				conn, err := e.apxTunnel(tc.target, tc.token, "", cfg(tc.name))
				if err != nil {
					continue // refused: no resumption either
				}
				if conn.ConnectionState().DidResume {
					t.Fatalf("TLS %x: a ticket resumed in a tunnel to %s (%s) of %s", max, tc.target, tc.name, map[bool]string{true: "this session", false: "another session"}[tc.token == s.Token])
				}
				conn.Close()
			}
			first.Close()
		}
	})

	t.Run("h2 only", func(t *testing.T) {
		n := len(e.up.Requests())
		tc, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost, NextProtos: []string{"h2"}})
		if err == nil {
			if p := tc.ConnectionState().NegotiatedProtocol; p == "h2" {
				t.Fatal("h2 negotiated")
			}
		}
		// h2 with prior knowledge (no ALPN): not served.
		tc, err = e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost})
		if err != nil {
			t.Fatal(err)
		}
		rs := roundTrip(t, tc, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00", 1)
		if len(rs) == 1 && rs[0].StatusCode < 400 {
			t.Fatalf("h2 preface answered %d", rs[0].StatusCode)
		}
		if len(e.up.Requests()) != n {
			t.Fatal("the upstream received a request")
		}
	})
	e.apxAllowedMatchesUpstream(s.Token, other.Token)
}

func TestProxyAttackInTunnel(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant(), apxGrant("keyed")))
	tunnel := func(host string) *tls.Conn {
		t.Helper()
		tc, err := e.apxTunnel(host+":443", s.Token, s.caFile, &tls.Config{ServerName: host})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tc.Close() })
		return tc
	}
	const smuggled = "GET /orgs/acme/smuggled HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n"
	wantProblems := func(t *testing.T, rs []*http.Response, want ...string) {
		t.Helper()
		if len(rs) != len(want) {
			t.Fatalf("%d answers, want %d", len(rs), len(want))
		}
		for i, w := range want {
			if w == "200" {
				if rs[i].StatusCode != 200 {
					t.Fatalf("answer %d: %d", i, rs[i].StatusCode)
				}
				continue
			}
			st, code := problemOf(t, rs[i])
			if fmt.Sprintf("%d %s", st, code) != w {
				t.Fatalf("answer %d: %d %s, want %s", i, st, code, w)
			}
		}
	}
	noSmuggled := func(t *testing.T) {
		t.Helper()
		for _, r := range e.up.Requests() {
			if strings.Contains(r.RawPath, "smuggled") || strings.Contains(string(r.Body), "smuggled") {
				t.Fatalf("the smuggled request reached the upstream: %s %q", r.RawPath, r.Body)
			}
		}
	}

	t.Run("HTTP/1.0 without Host", func(t *testing.T) {
		wantProblems(t, roundTrip(t, tunnel(ghHost), "GET /repos/acme/widgets HTTP/1.0\r\n\r\n", 2), "421 bad_request")
	})
	t.Run("pipelined request to another host", func(t *testing.T) {
		raw := "GET /repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n" +
			"GET /repos/acme/widgets HTTP/1.1\r\nHost: other.test\r\n\r\n" + smuggled
		wantProblems(t, roundTrip(t, tunnel(ghHost), raw, 3), "200", "421 bad_request")
		noSmuggled(t)
	})
	t.Run("absolute form to another host", func(t *testing.T) {
		raw := "GET https://other.test/repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n" + smuggled
		wantProblems(t, roundTrip(t, tunnel(ghHost), raw, 2), "421 bad_request")
		raw = "GET https://" + ghHost + "/repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n"
		wantProblems(t, roundTrip(t, tunnel(ghHost), raw, 1), "200")
	})
	t.Run("Expect 100-continue refused", func(t *testing.T) {
		// Refused before the body is read: no 100 Continue, the body is never
		// read as a request of its own and never forwarded.
		n := len(e.up.Requests())
		tc := tunnel(ghHost)
		hdr := "POST /repos/acme/widgets/issues HTTP/1.1\r\nHost: other.test\r\nContent-Type: application/json\r\nContent-Length: " +
			fmt.Sprint(len(smuggled)) + "\r\nExpect: 100-continue\r\n\r\n"
		rs := roundTrip(t, tc, hdr, 1)
		wantProblems(t, rs, "421 bad_request")
		_, _ = io.WriteString(tc, smuggled)
		rs = roundTrip(t, tc, "", 1)
		if len(rs) != 0 {
			t.Fatalf("the body was read as a request: %d", rs[0].StatusCode)
		}
		// Refused after the body is read (a pinned parameter): nothing sent.
		tc = tunnel(ghHost)
		body := `{"title":"x"}`
		hdr = "POST /repos/mallory/widgets/issues HTTP/1.1\r\nHost: " + ghHost + "\r\nContent-Type: application/json\r\nContent-Length: " +
			fmt.Sprint(len(body)) + "\r\nExpect: 100-continue\r\n\r\n"
		if _, err := io.WriteString(tc, hdr); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(tc)
		cont, err := http.ReadResponse(br, nil)
		if err != nil || cont.StatusCode != 100 {
			t.Fatalf("want 100 Continue: %v %v", cont, err)
		}
		_, _ = io.WriteString(tc, body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantProblems(t, []*http.Response{resp}, "403 constraint_violated")
		if len(e.up.Requests()) != n {
			t.Fatal("a refused call reached the upstream")
		}
		noSmuggled(t)
	})
	t.Run("huge headers", func(t *testing.T) {
		raw := "GET /repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n"
		rs := roundTrip(t, tunnel(ghHost), raw, 1)
		if len(rs) == 1 && rs[0].StatusCode != 431 {
			t.Fatalf("huge header: %d", rs[0].StatusCode)
		}
		resp, _ := e.apxRaw("GET http://" + ghHost + "/repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\nProxy-Authorization: " + apxBasic(s.Token) + "\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n")
		if resp != nil && resp.StatusCode != 431 {
			t.Fatalf("huge header on the proxy listener: %d", resp.StatusCode)
		}
		wantProblems(t, roundTrip(t, tunnel(ghHost), "GET /repos/acme/widgets HTTP/1.1\r\nHost: "+ghHost+"\r\n\r\n", 1), "200")
	})
	t.Run("proxy credentials and placeholders never reach the upstream", func(t *testing.T) {
		raw := "GET /repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\nProxy-Authorization: " + apxBasic(s.Token) +
			"\r\nAuthorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:ghp_placeholder")) + "\r\n\r\n"
		wantProblems(t, roundTrip(t, tunnel(ghHost), raw, 1), "200")
		if got := e.up.Last(t); got.Header.Get("Authorization") != "Bearer "+brokertest.Canary || got.Header.Get("Proxy-Authorization") != "" {
			t.Fatalf("upstream got %v", got.Header)
		}
		// The injected header is the broker's, whatever the sandbox sent in
		// it, even where forward_headers lets the sandbox send it.
		raw = "GET /keyed/gzip HTTP/1.1\r\nHost: keyed.test\r\nX-Api-Key: placeholder-value\r\nX-Note: n\r\nAccept-Encoding: gzip\r\n\r\n"
		rs := roundTrip(t, tunnel("keyed.test"), raw, 1)
		wantProblems(t, rs, "200")
		if got := e.up.Last(t); got.Header.Values("X-Api-Key")[0] != brokertest.Canary || len(got.Header.Values("X-Api-Key")) != 1 || got.Header.Get("X-Note") != "n" {
			t.Fatalf("upstream got %v", got.Header)
		}
	})
	t.Run("echoed credential scrubbed: chunked and gzip answers", func(t *testing.T) {
		for _, path := range []string{"/repos/acme/big", "/repos/acme/gzip"} {
			for _, ae := range []string{"", "Accept-Encoding: gzip\r\n"} {
				rs := roundTrip(t, tunnel(ghHost), "GET "+path+" HTTP/1.1\r\nHost: "+ghHost+"\r\n"+ae+"\r\n", 1)
				wantProblems(t, rs, "200")
				body, _ := io.ReadAll(rs[0].Body)
				if !bytes.Contains(body, []byte("[REDACTED]")) || rs[0].Header.Get("Content-Encoding") != "" {
					t.Fatalf("%s: %q %.200s", path, rs[0].Header.Get("Content-Encoding"), body)
				}
			}
		}
	})
	e.apxAllowedMatchesUpstream(s.Token)
}

func TestProxyAttackProxyAuthForms(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	unpadded := "airlock:" + s.Token
	for len(b64(unpadded))%4 == 0 && !strings.HasSuffix(b64(unpadded), "=") {
		unpadded = "x" + unpadded
	}
	connect := "CONNECT " + ghHost + ":443 HTTP/1.1\r\nHost: " + ghHost + ":443\r\n"
	for _, tc := range []struct {
		name, headers string
		status        int
	}{
		{"lower-case scheme", "Proxy-Authorization: basic " + b64("airlock:"+s.Token) + "\r\n", 200},
		{"empty user name", "Proxy-Authorization: Basic " + b64(":"+s.Token) + "\r\n", 200},
		{"token as the user name", "Proxy-Authorization: Basic " + b64(s.Token+":") + "\r\n", 407},
		{"token alone", "Proxy-Authorization: Basic " + b64(s.Token) + "\r\n", 407},
		{"Bearer", "Proxy-Authorization: Bearer " + s.Token + "\r\n", 407},
		{"raw token", "Proxy-Authorization: " + s.Token + "\r\n", 407},
		{"unpadded base64", "Proxy-Authorization: Basic " + strings.TrimRight(b64(unpadded), "=") + "\r\n", 407},
		{"two headers", "Proxy-Authorization: " + apxBasic(s.Token) + "\r\nProxy-Authorization: " + apxBasic(s.Token) + "\r\n", 407},
		{"two headers, one good", "Proxy-Authorization: " + apxBasic("nope") + "\r\nProxy-Authorization: " + apxBasic(s.Token) + "\r\n", 407},
		{"the REST door's header", "Authorization: Bearer " + s.Token + "\r\n", 407},
		{"token with trailing garbage", "Proxy-Authorization: Basic " + b64("airlock:"+s.Token+"x") + "\r\n", 407},
		{"token in the user name and a wrong password", "Proxy-Authorization: Basic " + b64(s.Token+":nope") + "\r\n", 407},
	} {
		resp, body := e.apxRaw(connect + tc.headers + "\r\n")
		if resp == nil || resp.StatusCode != tc.status {
			t.Fatalf("%s: %v %s", tc.name, resp, body)
		}
		if tc.status == 407 && resp.Header.Get("Proxy-Authenticate") == "" {
			t.Fatalf("%s: no Proxy-Authenticate", tc.name)
		}
		// The same header on a plain http:// request: a refused proxy token
		// is 407 there too (a client offers proxy credentials only then).
		resp, body = e.apxRaw("GET http://" + ghHost + "/repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n" + tc.headers + "\r\n")
		if resp == nil || (resp.StatusCode == 407) != (tc.status == 407) {
			t.Fatalf("%s, plain http://: %v %s", tc.name, resp, body)
		}
		if tc.status == 407 && resp.Header.Get("Proxy-Authenticate") == "" {
			t.Fatalf("%s, plain http://: no Proxy-Authenticate", tc.name)
		}
	}
	e.apxAllowedMatchesUpstream(s.Token)
}

// apxGoroutines is the number of goroutines once it stops falling.
func apxGoroutines(t *testing.T, atMost int) int {
	t.Helper()
	n := 0
	brokertest.Eventually(t, 30*time.Second, func() bool {
		n = runtime.NumGoroutine()
		return n <= atMost
	})
	return n
}

func TestProxyAttackManyTunnels(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	bystander := e.session(brokertest.TrustedSession(ghGrant()))
	get := "GET /repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n"
	// Warm up: one tunnel and call, so pools and caches exist.
	tc, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, tc, get, 1)
	tc.Close()
	base := runtime.NumGoroutine()

	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	const n = 200
	var conns []*tls.Conn
	for i := 0; i < n; i++ {
		tc, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, tc)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	t.Logf("%d open tunnels: %d goroutines more, heap %+d KiB (%d B per tunnel)", n, runtime.NumGoroutine()-base,
		(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))>>10, (int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/n)
	// Another session is served meanwhile.
	other, err := e.apxTunnel(ghHost+":443", bystander.Token, bystander.caFile, &tls.Config{ServerName: ghHost})
	if err != nil {
		t.Fatal(err)
	}
	if rs := roundTrip(t, other, get, 1); len(rs) != 1 || rs[0].StatusCode != 200 {
		t.Fatal("a bystander was not served")
	}
	other.Close()
	for _, c := range conns {
		c.Close()
	}
	// Nothing is left behind once the tunnels close.
	apxGoroutines(t, base+5)
	e.apxAllowedMatchesUpstream(s.Token, bystander.Token)
}

func TestProxyAttackKillMidCall(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	tc, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []*http.Response, 1)
	go func() {
		done <- roundTrip(t, tc, "GET /repos/acme/slow HTTP/1.1\r\nHost: "+ghHost+"\r\n\r\n", 1)
	}()
	select {
	case <-e.up.Started:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not reach the upstream")
	}
	if r := e.b.Do("DELETE", e.b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	// The call in flight ends with the kill (the upstream's /slow waits
	// 30 s), answered as the kill's.
	var rs []*http.Response
	select {
	case rs = <-done:
	case <-time.After(25 * time.Second):
		t.Fatal("the call in the tunnel outlived the kill of its session")
	}
	if len(rs) != 1 {
		t.Fatalf("%d answers", len(rs))
	}
	if st, code := problemOf(t, rs[0]); st != 401 || code != "session_revoked" {
		t.Fatalf("%d %s", st, code)
	}
	e.apxAllowedMatchesUpstream(s.Token)
}

func TestProxyAttackSlowClients(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	dial := func() net.Conn {
		c, err := net.Dial("tcp", e.proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Half a request line on the proxy listener; a CONNECT whose client
	// never says hello; a tunnel with half a request's headers.
	stalled := []net.Conn{dial()}
	_, _ = io.WriteString(stalled[0], "CONNECT "+ghHost+":443 HTTP/1.1\r\nProxy-Authorization: ")
	resp, _, conn := e.rawConnect(ghHost+":443", s.Token)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	stalled = append(stalled, conn)
	tc, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(tc, "GET /repos/acme/widgets HTTP/1.1\r\nHost: ")
	stalled = append(stalled, tc)

	// Others are served meanwhile.
	ok, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost})
	if err != nil {
		t.Fatal(err)
	}
	if rs := roundTrip(t, ok, "GET /repos/acme/widgets HTTP/1.1\r\nHost: "+ghHost+"\r\n\r\n", 1); len(rs) != 1 || rs[0].StatusCode != 200 {
		t.Fatal("a client was not served beside stalled ones")
	}
	// And the broker ends each stalled connection itself (its header and
	// handshake time limits), whatever the client's own deadline.
	var wg sync.WaitGroup
	for i, c := range stalled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("stalled connection %d: the broker kept it open", i)
			}
		}()
	}
	wg.Wait()
}

func TestProxyAttackLeafPerName(t *testing.T) {
	// A wildcard upstream lets a sandbox name many hosts: every tunnel gets
	// a leaf for its own name only, and the per-session cache stays bounded
	// (a name evicted gets a fresh leaf, not another name's).
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(apxGrant("wild")))
	serial := func(name string) string {
		t.Helper()
		tc, err := e.apxTunnel(name+":443", s.Token, s.caFile, &tls.Config{ServerName: name})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		leaf := tc.ConnectionState().PeerCertificates[0]
		if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != strings.ToLower(name) || len(leaf.IPAddresses) != 0 {
			t.Fatalf("leaf for %s names %v %v", name, leaf.DNSNames, leaf.IPAddresses)
		}
		return leaf.SerialNumber.String()
	}
	first := serial("h0.wild.test")
	if serial("H0.wild.test") != first {
		t.Fatal("the same host got two leaves")
	}
	for i := 1; i <= 300; i++ {
		serial(fmt.Sprintf("h%d.wild.test", i))
	}
	if serial("h0.wild.test") == first {
		t.Fatal("the leaf cache kept more than its bound")
	}
	// A host of the wildcard's parent is not its host.
	resp, body, _ := e.rawConnect("wild.test:443", s.Token)
	if resp.StatusCode != 403 || !bytes.Contains(body, []byte("egress_denied")) {
		t.Fatalf("wild.test: %d %s", resp.StatusCode, body)
	}
}

func TestProxyAttackSessionCA(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	other := e.session(brokertest.TrustedSession(ghGrant()))
	// A sandbox's token reads no CA, its own or another's, on either plane.
	for _, base := range []string{e.b.Control, e.b.Sandbox} {
		for _, id := range []string{s.ID, other.ID} {
			r := e.b.Do("GET", base+"/v1/sessions/"+id+"/ca.pem", s.Token, nil)
			if r.Status == 200 || bytes.Contains(r.Body, []byte("CERTIFICATE")) {
				t.Fatalf("GET %s ca.pem with a session token: %d", base, r.Status)
			}
		}
	}
	// Nothing the admin reads about a session after its creation carries its token or a key.
	for _, path := range []string{"/v1/sessions/" + s.ID, "/v1/sessions/" + s.ID + "/ca.pem", "/v1/sessions"} {
		r := e.b.Do("GET", e.b.Control+path, brokertest.ProcAdminToken, nil)
		if r.Status != 200 || bytes.Contains(r.Body, []byte(s.Token)) || bytes.Contains(r.Body, []byte("PRIVATE KEY")) {
			t.Fatalf("GET %s: %d", path, r.Status)
		}
	}
}

// apxOpenTunnels opens TLS tunnels for a session until one is refused (or
// max are open): the open ones, and the refusal's status and body.
func (e *apxEnv) apxOpenTunnels(token, caFile string, max int) ([]*tls.Conn, *http.Response, []byte) {
	e.t.Helper()
	var open []*tls.Conn
	for len(open) < max {
		resp, body, conn := e.rawConnect(ghHost+":443", token)
		if resp.StatusCode != 200 {
			return open, resp, body
		}
		pool := x509.NewCertPool()
		data, _ := os.ReadFile(caFile)
		pool.AppendCertsFromPEM(data)
		tc := tls.Client(conn, &tls.Config{ServerName: ghHost, RootCAs: pool})
		if err := tc.Handshake(); err != nil {
			e.t.Fatal(err)
		}
		open = append(open, tc)
	}
	return open, nil, nil
}

func TestProxyAttackTunnelCap(t *testing.T) {
	// Each open tunnel holds a connection, a goroutine and TLS state (about
	// 30 KiB) for as long as the client keeps it (idle up to two minutes,
	// a stalled body for ever): one sandbox opening tunnels without end
	// would take every file descriptor and the memory of the broker, and
	// with them every other session and the control plane. A session holds
	// at most proxy_max_tunnels (default 256) open at once.
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	open, resp, body := e.apxOpenTunnels(s.Token, s.caFile, 300)
	if resp == nil || len(open) != 256 || resp.StatusCode != 429 || !bytes.Contains(body, []byte(`"code":"rate_limited"`)) {
		t.Fatalf("%d tunnels open, then %v %s", len(open), resp, body)
	}
	var denied bool
	for _, m := range e.auditOf("call.denied") {
		denied = denied || m["session_id"] == s.ID && m["code"] == "rate_limited" && m["path"] == ghHost+":443"
	}
	if !denied {
		t.Fatal("the refused tunnel was not audited")
	}
	// Another session is not limited by this one's tunnels.
	other := e.session(brokertest.TrustedSession(ghGrant()))
	more, resp, _ := e.apxOpenTunnels(other.Token, other.caFile, 2)
	if resp != nil || len(more) != 2 {
		t.Fatal("another session's tunnel was refused")
	}
	// A closed tunnel, or one whose handshake failed, frees its place.
	open[0].Close()
	brokertest.Eventually(t, 30*time.Second, func() bool {
		resp, _, conn := e.rawConnect(ghHost+":443", s.Token)
		conn.Close() // no handshake: the broker ends it and frees the place again
		return resp.StatusCode == 200
	})
	brokertest.Eventually(t, 30*time.Second, func() bool {
		got, _, _ := e.apxOpenTunnels(s.Token, s.caFile, 1)
		return len(got) == 1
	})
	for _, c := range append(open, more...) {
		c.Close()
	}

	// Configured: proxy_max_tunnels.
	small := apxStart(t, "proxy_max_tunnels: 2\n")
	s = small.session(brokertest.TrustedSession(ghGrant()))
	if open, resp, _ := small.apxOpenTunnels(s.Token, s.caFile, 3); len(open) != 2 || resp == nil || resp.StatusCode != 429 {
		t.Fatalf("proxy_max_tunnels 2: %d open", len(open))
	}
}

// A plain request on the proxy listener for https:// is refused for its
// scheme (use CONNECT), whatever host it names: the scheme is checked once
// the token is, before the destination.
func TestProxyAttackPlainHTTPS(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	for _, host := range []string{ghHost, "evil.test"} {
		resp, body := e.apxRaw("GET https://" + host + "/x HTTP/1.1\r\nHost: " + host + "\r\nProxy-Authorization: " + apxBasic(s.Token) + "\r\n\r\n")
		if resp == nil || resp.StatusCode != 400 || resp.Header.Get("X-Airlock-Code") != "bad_request" || !strings.Contains(string(body), "only http://") {
			t.Fatalf("https://%s: %v %s", host, resp, body)
		}
	}
}

// A gated call through the proxy door waits the door's proxy_wait, and
// Preference-Applied (when the client asked for a wait) says that wait,
// not the one asked for.
func TestProxyDoorPreferenceApplied(t *testing.T) {
	e := apxStart(t, "approval: {proxy_wait: 2s}\n")
	s := e.session(map[string]any{"task_id": "t-gate", "isolation": "microvm", "grants": []any{ghGrant()}}) // untrusted input: gated
	tc, err := e.apxTunnel(ghHost+":443", s.Token, s.caFile, &tls.Config{ServerName: ghHost})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	body := `{"title":"t"}`
	raw := "POST /repos/acme/widgets/issues HTTP/1.1\r\nHost: " + ghHost + "\r\nContent-Type: application/json\r\nPrefer: wait=1\r\nContent-Length: " +
		fmt.Sprint(len(body)) + "\r\n\r\n" + body
	rs := roundTrip(t, tc, raw, 1)
	if len(rs) != 1 || rs[0].StatusCode != http.StatusAccepted || rs[0].Header.Get("Preference-Applied") != "wait=2" {
		t.Fatalf("held call: %v", rs)
	}
}
