package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	ca := newTestCA(t)
	caFile := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	up := &upstreamServer{started: make(chan struct{}, 16)}
	up.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/gzip") {
			// The credential echoed in a gzip answer, chunked.
			body, _ := io.ReadAll(r.Body)
			up.mu.Lock()
			up.reqs = append(up.reqs, recorded{At: time.Now(), Method: r.Method, RawPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
			up.mu.Unlock()
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
		up.serve(w, r)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, ghHost, "other.test")}}
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := newUpstream(t)
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
	b := startBroker(t, harnessOpts{upstream: plain.URL, extraYAML: yaml})
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
	body, _ := io.ReadAll(resp.Body)
	assertNoCanary(e.t, "proxy answer", body)
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
	got := e.up.requests()
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
	assertNoCanary(e.t, "audit", e.b.auditExport())
	assertNoCanary(e.t, "logs", e.b.logs.Bytes())
	for _, tok := range tokens {
		if bytes.Contains(e.b.logs.Bytes(), []byte(tok)) {
			e.t.Fatal("a session token is in the broker's logs")
		}
	}
}

func TestProxyAttackConnectTargets(t *testing.T) {
	e := apxStart(t, "")
	s := e.session(trustedSession(ghGrant()))
	_, ctlPort, _ := net.SplitHostPort(strings.TrimPrefix(e.b.control, "http://"))
	_, sbxPort, _ := net.SplitHostPort(strings.TrimPrefix(e.b.sandbox, "http://"))
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
	s := e.session(trustedSession(ghGrant()))
	_, ctlPort, _ := net.SplitHostPort(strings.TrimPrefix(e.b.control, "http://"))
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
	if got := e.up.last(t); got.Header.Get("Authorization") != "Bearer "+canary || got.Header.Get("X-Forwarded-For") != "" {
		t.Fatalf("upstream got %v", got.Header)
	}
	e.apxAllowedMatchesUpstream(s.Token)
}
