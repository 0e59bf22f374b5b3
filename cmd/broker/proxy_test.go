package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// The proxy door's end-to-end tests: stock clients (curl, Python urllib and
// requests, a Go program) configured with environment variables only reach
// TLS upstreams on loopback by host names the broker maps (the clients never
// resolve them), through the real broker.

// proxyEnv is a broker with the proxy door on and a TLS upstream known as
// api.github.test (upstream "github") and other.test (upstream "other").
type proxyEnv struct {
	t     *testing.T
	b     *brokertest.Proc
	up    *brokertest.Upstream
	proxy string // host:port of the proxy door
	dir   string
}

const ghHost = "api.github.test"

func startProxyBroker(t *testing.T, extraYAML string) *proxyEnv {
	t.Helper()
	dir := t.TempDir()
	ca := brokertest.NewCA(t)
	caFile := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	up := &brokertest.Upstream{Started: make(chan struct{}, 16)}
	up.Server = httptest.NewUnstartedServer(up)
	up.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, ghHost, "other.test")}}
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := brokertest.NewUpstream(t) // the harness's own upstreams (unused here)
	yaml := fmt.Sprintf(`  - name: github
    base_url: %s
    hosts: [%s]
    ca_cert: %s
    timeout: 10s
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
  - name: other
    base_url: %s/other
    hosts: [other.test]
    ca_cert: %s
    credential: {source: env, name: CANARY_TOKEN}
proxy_listen: 127.0.0.1:0
%s`, up.URL, ghHost, caFile, up.URL, caFile, extraYAML)
	b := startBroker(t, brokertest.ProcOptions{Upstream: plain.URL, ExtraYAML: yaml})
	return &proxyEnv{t: t, b: b, up: up, proxy: proxyDoorAddr(t, b), dir: dir}
}

// proxyDoorAddr reads the proxy door's address from the broker's start log.
func proxyDoorAddr(t *testing.T, b *brokertest.Proc) string {
	t.Helper()
	for _, line := range bytes.Split(b.Logs.Bytes(), []byte("\n")) {
		var l struct{ Msg, Proxy string }
		if json.Unmarshal(line, &l) == nil && l.Msg == "broker listening" && l.Proxy != "" {
			return l.Proxy
		}
	}
	t.Fatalf("no proxy door address in the logs:\n%s", b.Logs.Bytes())
	return ""
}

// ghGrant is a grant on the github upstream: read a repository, file an
// issue in acme's repositories only.
func ghGrant() map[string]any {
	return map[string]any{"upstream": "github", "rules": []any{
		map[string]any{"method": "GET", "path": "/repos/{owner}/{repo}"},
		map[string]any{"method": "POST", "path": "/repos/{owner}/{repo}/issues", "irreversible": true,
			"constraints": map[string]any{"path.owner": map[string]any{"pin": "acme"}}},
	}}
}

// sandbox is a session as its sandbox sees it: its token and the files
// and variables stock clients are given.
type sandbox struct {
	brokertest.Created
	caFile string
}

// session creates a session and writes its CA (GET /v1/sessions/{id}/ca.pem) to a file.
func (e *proxyEnv) session(req map[string]any) sandbox {
	e.t.Helper()
	c := e.b.Session(req)
	r := e.b.Do("GET", e.b.Control+"/v1/sessions/"+c.ID+"/ca.pem", brokertest.ProcAdminToken, nil)
	if r.Status != 200 || !bytes.Contains(r.Body, []byte("BEGIN CERTIFICATE")) {
		e.t.Fatalf("ca.pem: %d %s", r.Status, r.Body)
	}
	f := filepath.Join(e.dir, c.ID+"-ca.pem")
	if err := os.WriteFile(f, r.Body, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return sandbox{Created: c, caFile: f}
}

// proxyURL is HTTPS_PROXY for a token.
func (e *proxyEnv) proxyURL(token string) string {
	return "http://airlock:" + token + "@" + e.proxy
}

// env is what a sandbox's clients get: the proxy and the CA bundle, nothing else.
func (e *proxyEnv) env(token, caFile string) []string {
	p := e.proxyURL(token)
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.dir, "LANG=C.UTF-8",
		"HTTPS_PROXY=" + p, "https_proxy=" + p, "HTTP_PROXY=" + p, "http_proxy=" + p,
		"CURL_CA_BUNDLE=" + caFile, "SSL_CERT_FILE=" + caFile, "REQUESTS_CA_BUNDLE=" + caFile}
}

// clientResult is what a stock client printed.
type clientResult struct {
	exit   int
	status int
	header string
	body   []byte
	stderr string
}

func (r clientResult) problemCode(t *testing.T) string {
	t.Helper()
	var p struct{ Code string }
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("not a problem (%d): %s", r.status, r.body)
	}
	return p.Code
}

// runClient runs a stock client with only env.
func runClient(t *testing.T, env []string, name string, args ...string) (stdout []byte, stderr string, exit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	}
	brokertest.AssertNoCanary(t, name+" output", out.Bytes())
	brokertest.AssertNoCanary(t, name+" stderr", errb.Bytes())
	return out.Bytes(), errb.String(), exit
}

// curl runs Debian's curl: curl [args] URL, with the status, headers and body.
func (e *proxyEnv) curl(token, caFile string, args ...string) clientResult {
	e.t.Helper()
	curl := brokertest.RequireTool(e.t, "curl", "apt-get install -y curl")
	dir := e.t.TempDir()
	hdr, body := filepath.Join(dir, "h"), filepath.Join(dir, "b")
	all := append([]string{"-sS", "-o", body, "-D", hdr, "-w", "%{http_code}"}, args...)
	out, stderr, exit := runClient(e.t, e.env(token, caFile), curl, all...)
	r := clientResult{exit: exit, stderr: stderr}
	r.status, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	h, _ := os.ReadFile(hdr)
	r.header = string(h)
	r.body, _ = os.ReadFile(body)
	brokertest.AssertNoCanary(e.t, "curl headers", h)
	brokertest.AssertNoCanary(e.t, "curl body", r.body)
	return r
}

// echoed is the test upstream's JSON answer.
type echoed struct {
	Method, Path, Auth, Body string
}

func decodeEcho(t *testing.T, body []byte) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not the upstream's answer: %s", body)
	}
	return e
}

// auditOf is the audit log's records of one type.
func (e *proxyEnv) auditOf(typ string) []map[string]any {
	e.t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(e.b.AuditExport()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			e.t.Fatal(err)
		}
		if m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

// wantEgressDenied checks that a refused destination was audited.
func (e *proxyEnv) wantEgressDenied(sessionID, dest string) {
	e.t.Helper()
	for _, m := range e.auditOf("egress.denied") {
		if m["path"] == dest && (sessionID == "" || m["session_id"] == sessionID) && m["code"] == "egress_denied" && m["decision"] == "deny" {
			return
		}
	}
	e.t.Fatalf("no egress.denied record for %s (session %s)", dest, sessionID)
}

func TestProxyDoorCurl(t *testing.T) {
	e := startProxyBroker(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	url := "https://" + ghHost + "/repos/acme/widgets"

	// Allowed: the credential is injected (the upstream sees it), the
	// sandbox's own Authorization (a placeholder) never passes, and the
	// echoed credential comes back scrubbed.
	r := e.curl(s.Token, s.caFile, "-H", "Authorization: Bearer ghp_placeholder000", url)
	if r.exit != 0 || r.status != 200 {
		t.Fatalf("curl: exit %d status %d %s %s", r.exit, r.status, r.stderr, r.body)
	}
	got := e.up.Last(t)
	if got.Header.Get("Authorization") != "Bearer "+brokertest.Canary || got.RawPath != "/repos/acme/widgets" {
		t.Fatalf("upstream got %s %q", got.RawPath, got.Header.Values("Authorization"))
	}
	if ec := decodeEcho(t, r.body); !strings.Contains(ec.Auth, "[REDACTED]") || ec.Path != "/repos/acme/widgets" {
		t.Fatalf("answer = %+v", ec)
	}
	if strings.Contains(strings.ToLower(r.header), "set-cookie") || !strings.Contains(r.header, "X-Airlock-Request-Id") {
		t.Fatalf("answer headers:\n%s", r.header)
	}

	// A pinned parameter: refused inside the tunnel, nothing sent.
	n := len(e.up.Requests())
	r = e.curl(s.Token, s.caFile, "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"title":"x"}`,
		"https://"+ghHost+"/repos/mallory/widgets/issues")
	if r.exit != 0 || r.status != 403 || r.problemCode(t) != "constraint_violated" {
		t.Fatalf("pinned: exit %d status %d %s", r.exit, r.status, r.body)
	}
	r = e.curl(s.Token, s.caFile, "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"title":"x"}`,
		"https://"+ghHost+"/repos/acme/widgets/issues")
	if r.status != 200 || decodeEcho(t, r.body).Body != `{"title":"x"}` {
		t.Fatalf("allowed POST: %d %s", r.status, r.body)
	}
	if got := len(e.up.Requests()); got != n+1 {
		t.Fatalf("upstream received %d requests, want %d", got, n+1)
	}

	// A host the session holds no grant on (other.test is an upstream; evil.test is none).
	for _, host := range []string{"other.test", "evil.test"} {
		r = e.curl(s.Token, s.caFile, "https://"+host+"/")
		if r.exit == 0 || !strings.Contains(r.stderr, "403") {
			t.Fatalf("%s: exit %d status %d stderr %s", host, r.exit, r.status, r.stderr)
		}
		e.wantEgressDenied(s.ID, host+":443")
	}
	// Plain http:// through HTTP_PROXY: the same check, the same pipeline.
	r = e.curl(s.Token, s.caFile, "http://"+ghHost+"/repos/acme/widgets")
	if r.status != 200 || !strings.Contains(decodeEcho(t, r.body).Auth, "[REDACTED]") {
		t.Fatalf("plain http: %d %s", r.status, r.body)
	}
	r = e.curl(s.Token, s.caFile, "http://169.254.169.254/latest/meta-data/")
	if r.status != 403 || r.problemCode(t) != "egress_denied" {
		t.Fatalf("metadata over plain http: %d %s", r.status, r.body)
	}
	e.wantEgressDenied(s.ID, "169.254.169.254:80")
	brokertest.AssertNoCanary(t, "audit", e.b.AuditExport())
}

// debianPython is Debian's python3 with python3-requests.
func debianPython(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import requests").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Debian's python3 with requests is required in CI: apt-get install -y python3 python3-requests (%v)", err)
		}
		t.Skipf("Debian's python3 with requests not found (%v); apt-get install -y python3 python3-requests", err)
	}
	return py
}

// pyClient prints {"status", "body"} for a GET or POST with urllib or requests.
const pyClient = `
import json, sys, urllib.request, urllib.error
lib, method, url, body = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None
if lib == "requests":
    import requests
    r = requests.request(method, url, data=body, headers={"Content-Type": "application/json"} if body else {}, timeout=60)
    print(json.dumps({"status": r.status_code, "body": r.text}))
else:
    req = urllib.request.Request(url, data=body.encode() if body else None, method=method, headers={"Content-Type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            print(json.dumps({"status": r.status, "body": r.read().decode()}))
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "body": e.read().decode()}))
`

func TestProxyDoorPython(t *testing.T) {
	py := debianPython(t)
	e := startProxyBroker(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	for _, lib := range []string{"urllib", "requests"} {
		t.Run(lib, func(t *testing.T) {
			run := func(method, url, body string) clientResult {
				args := []string{"-c", pyClient, lib, method, url}
				if body != "" {
					args = append(args, body)
				}
				out, stderr, exit := runClient(t, e.env(s.Token, s.caFile), py, args...)
				var res struct {
					Status int
					Body   string
				}
				if exit != 0 || json.Unmarshal(out, &res) != nil {
					t.Fatalf("%s %s: exit %d %s %s", method, url, exit, out, stderr)
				}
				return clientResult{status: res.Status, body: []byte(res.Body)}
			}
			r := run("GET", "https://"+ghHost+"/repos/acme/widgets", "")
			if r.status != 200 || !strings.Contains(decodeEcho(t, r.body).Auth, "[REDACTED]") {
				t.Fatalf("GET: %d %s", r.status, r.body)
			}
			if e.up.Last(t).Header.Get("Authorization") != "Bearer "+brokertest.Canary {
				t.Fatal("the credential was not injected")
			}
			r = run("POST", "https://"+ghHost+"/repos/mallory/x/issues", `{"title":"t"}`)
			if r.status != 403 || r.problemCode(t) != "constraint_violated" {
				t.Fatalf("pinned: %d %s", r.status, r.body)
			}
		})
	}
}

var (
	proxyClientOnce sync.Once
	proxyClientBin  string
	proxyClientErr  error
)

// goProxyClient builds testdata/proxyclient once: a separate Go program, so
// http.ProxyFromEnvironment reads the environment the test gives it.
func goProxyClient(t *testing.T) string {
	t.Helper()
	proxyClientOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			proxyClientErr = err
			return
		}
		dir, err := os.MkdirTemp("", "airlock-proxyclient-")
		if err != nil {
			proxyClientErr = err
			return
		}
		proxyClientBin = filepath.Join(dir, "proxyclient")
		out, err := exec.Command(gobin, "build", "-o", proxyClientBin, "testdata/proxyclient/main.go").CombinedOutput()
		if err != nil {
			proxyClientErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if proxyClientErr != nil {
		t.Fatalf("build the Go proxy client: %v", proxyClientErr)
	}
	return proxyClientBin
}

func TestProxyDoorGoClient(t *testing.T) {
	bin := goProxyClient(t)
	e := startProxyBroker(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	run := func(method, url, body string) clientResult {
		t.Helper()
		args := []string{method, url}
		if body != "" {
			args = append(args, body)
		}
		out, stderr, exit := runClient(t, e.env(s.Token, s.caFile), bin, args...)
		var res struct {
			Status int
			Body   string
		}
		if exit == 0 {
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("%s", out)
			}
		}
		return clientResult{exit: exit, status: res.Status, body: []byte(res.Body), stderr: stderr}
	}
	r := run("GET", "https://"+ghHost+"/repos/acme/widgets", "")
	if r.status != 200 || !strings.Contains(decodeEcho(t, r.body).Auth, "[REDACTED]") {
		t.Fatalf("GET: %d %s %s", r.status, r.body, r.stderr)
	}
	r = run("POST", "https://"+ghHost+"/repos/mallory/x/issues", `{"title":"t"}`)
	if r.status != 403 || r.problemCode(t) != "constraint_violated" {
		t.Fatalf("pinned: %d %s", r.status, r.body)
	}
	r = run("GET", "https://other.test/", "")
	if r.exit == 0 || !strings.Contains(r.stderr, "Forbidden") {
		t.Fatalf("no grant: exit %d %s", r.exit, r.stderr)
	}
}

// rawConnect opens a connection to the proxy door and sends CONNECT target
// with the token (none when ""). On 200 the connection is the tunnel.
func (e *proxyEnv) rawConnect(target, token string) (*http.Response, []byte, net.Conn) {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.proxy)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if token != "" {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("airlock:"+token)) + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		e.t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		e.t.Fatalf("CONNECT %s: %v", target, err)
	}
	var body []byte
	if resp.StatusCode != 200 {
		body, _ = io.ReadAll(resp.Body)
		brokertest.AssertNoCanary(e.t, "CONNECT answer", body)
	}
	return resp, body, conn
}

// tunnel opens a TLS tunnel to host:443 as a client trusting caFile would.
func (e *proxyEnv) tunnel(host, serverName, token, caFile string) (*tls.Conn, error) {
	e.t.Helper()
	resp, body, conn := e.rawConnect(host+":443", token)
	if resp.StatusCode != 200 {
		e.t.Fatalf("CONNECT %s: %d %s", host, resp.StatusCode, body)
	}
	pool := x509.NewCertPool()
	data, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(data)
	tc := tls.Client(conn, &tls.Config{ServerName: serverName, RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// roundTrip writes raw request bytes into a tunnel and reads up to max
// answers, fewer when the connection ends first.
func roundTrip(t *testing.T, c net.Conn, raw string, max int) []*http.Response {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	var out []*http.Response
	for len(out) < max {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		brokertest.AssertNoCanary(t, "answer in the tunnel", body)
		out = append(out, resp)
	}
	return out
}

func problemOf(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	var p struct{ Code string }
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &p); err != nil || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("not a problem (%d): %s", resp.StatusCode, body)
	}
	return resp.StatusCode, p.Code
}

func TestProxyDoorAttacks(t *testing.T) {
	e := startProxyBroker(t, "")
	s := e.session(brokertest.TrustedSession(ghGrant()))
	other := e.session(brokertest.TrustedSession(ghGrant()))

	t.Run("proxy authentication", func(t *testing.T) {
		for _, tc := range []struct{ name, token, code string }{
			{"none", "", "invalid_token"},
			{"not a token", "nope", "invalid_token"},
			{"the admin token", brokertest.ProcAdminToken, "invalid_token"},
		} {
			resp, body, _ := e.rawConnect(ghHost+":443", tc.token)
			if resp.StatusCode != 407 || resp.Header.Get("Proxy-Authenticate") != `Basic realm="airlock"` || !bytes.Contains(body, []byte(`"code":"`+tc.code+`"`)) {
				t.Fatalf("%s: %d %q %s", tc.name, resp.StatusCode, resp.Header.Get("Proxy-Authenticate"), body)
			}
		}
	})

	t.Run("destinations", func(t *testing.T) {
		for _, dest := range []string{
			"127.0.0.1:443", "169.254.169.254:443", "169.254.169.254:80", "[fd00:ec2::254]:443", "10.0.0.1:443",
			"100.64.0.1:443", "[::1]:443", "8.8.8.8:443", "localhost:443", "evil.test:443", "api.github.test:8443",
			"other.test:443", "api.github.test.evil.test:443",
		} {
			resp, body, _ := e.rawConnect(dest, s.Token)
			if resp.StatusCode != 403 || !bytes.Contains(body, []byte(`"code":"egress_denied"`)) {
				t.Fatalf("CONNECT %s: %d %s", dest, resp.StatusCode, body)
			}
			e.wantEgressDenied(s.ID, dest)
		}
		// Names that are not canonical ASCII host names are refused too.
		for _, dest := range []string{"xn--80ak6aa92e.com:443", "api_github.test:443", "2130706433:443", "0x7f.1:443", "api.github.test"} {
			resp, body, _ := e.rawConnect(dest, s.Token)
			if resp.StatusCode != 403 || !bytes.Contains(body, []byte(`"code":"egress_denied"`)) {
				t.Fatalf("CONNECT %s: %d %s", dest, resp.StatusCode, body)
			}
		}
		// The host compares canonically: case and a trailing dot do not matter.
		resp, body, _ := e.rawConnect("API.GitHub.TEST.:443", s.Token)
		if resp.StatusCode != 200 {
			t.Fatalf("canonical host: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("revoked grant", func(t *testing.T) {
		g := e.session(brokertest.TrustedSession(ghGrant()))
		if r := e.b.Do("DELETE", e.b.Control+"/v1/grants/"+g.Grants[0].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		resp, body, _ := e.rawConnect(ghHost+":443", g.Token)
		if resp.StatusCode != 403 || !bytes.Contains(body, []byte(`"code":"egress_denied"`)) {
			t.Fatalf("CONNECT with the grant revoked: %d %s", resp.StatusCode, body)
		}
		e.wantEgressDenied(g.ID, ghHost+":443")
	})

	t.Run("another session's token", func(t *testing.T) {
		// The leaf comes from the token's session's CA, which this sandbox does not trust.
		if _, err := e.tunnel(ghHost, ghHost, other.Token, s.caFile); err == nil {
			t.Fatal("TLS with another session's token succeeded against this session's CA")
		}
		r := e.curl(other.Token, s.caFile, "https://"+ghHost+"/repos/acme/widgets")
		if r.exit == 0 || len(r.body) != 0 {
			t.Fatalf("curl with another session's token: exit %d %s", r.exit, r.body)
		}
	})

	t.Run("server name differs from the CONNECT host", func(t *testing.T) {
		if _, err := e.tunnel(ghHost, "other.test", s.Token, s.caFile); err == nil {
			t.Fatal("a TLS server name other than the CONNECT host was accepted")
		}
		// A hostile client need not verify anything: the broker itself refuses the handshake.
		resp, body, conn := e.rawConnect(ghHost+":443", s.Token)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d %s", resp.StatusCode, body)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: "other.test", InsecureSkipVerify: true})
		if err := tc.Handshake(); err == nil {
			t.Fatal("the broker completed a handshake for a server name other than the CONNECT host")
		}
		// The broker records the refusal once its side of the handshake ends.
		brokertest.Eventually(t, 10*time.Second, func() bool {
			for _, m := range e.auditOf("egress.denied") {
				if m["path"] == ghHost+":443" && strings.Contains(fmt.Sprint(m["reason"]), "server name") {
					return true
				}
			}
			return false
		})
	})

	t.Run("Host differs from the CONNECT host", func(t *testing.T) {
		n := len(e.up.Requests())
		for _, host := range []string{"other.test", ghHost + ":8443", "evil.test"} {
			tc, err := e.tunnel(ghHost, ghHost, s.Token, s.caFile)
			if err != nil {
				t.Fatal(err)
			}
			rs := roundTrip(t, tc, "GET /repos/acme/widgets HTTP/1.1\r\nHost: "+host+"\r\n\r\n", 1)
			if len(rs) != 1 {
				t.Fatalf("Host %s: %d answers", host, len(rs))
			}
			if st, code := problemOf(t, rs[0]); st != 421 || code != "bad_request" {
				t.Fatalf("Host %s: %d %s", host, st, code)
			}
		}
		if len(e.up.Requests()) != n {
			t.Fatal("a misdirected request reached the upstream")
		}
	})

	t.Run("methods the REST door refuses", func(t *testing.T) {
		for _, m := range []string{"CONNECT " + ghHost + ":443", "TRACE /repos/acme/widgets", "PROPFIND /repos/acme/widgets"} {
			tc, err := e.tunnel(ghHost, ghHost, s.Token, s.caFile)
			if err != nil {
				t.Fatal(err)
			}
			rs := roundTrip(t, tc, m+" HTTP/1.1\r\nHost: "+ghHost+"\r\n\r\n", 1)
			if len(rs) != 1 {
				t.Fatalf("%s: %d answers", m, len(rs))
			}
			if st, code := problemOf(t, rs[0]); st != 405 || code != "bad_request" {
				t.Fatalf("%s: %d %s", m, st, code)
			}
		}
	})

	t.Run("upgrade refused", func(t *testing.T) {
		tc, err := e.tunnel(ghHost, ghHost, s.Token, s.caFile)
		if err != nil {
			t.Fatal(err)
		}
		rs := roundTrip(t, tc, "GET /repos/acme/widgets HTTP/1.1\r\nHost: "+ghHost+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", 1)
		if len(rs) != 1 {
			t.Fatalf("%d answers", len(rs))
		}
		if st, code := problemOf(t, rs[0]); st != 400 || code != "bad_request" {
			t.Fatalf("upgrade: %d %s", st, code)
		}
	})

	t.Run("request smuggling", func(t *testing.T) {
		// The request behind the first is one no rule allows: if the broker
		// reads it as a request of its own, the grant refuses it; if it reads
		// it as body, it is part of a checked body. Either way the upstream
		// receives only what the broker allowed, and never it.
		const smuggled = "GET /orgs/acme/smuggled HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n"
		cases := map[string]string{
			"CL and TE":     "POST /repos/acme/widgets/issues HTTP/1.1\r\nHost: " + ghHost + "\r\nContent-Type: application/json\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
			"TE and CL":     "POST /repos/acme/widgets/issues HTTP/1.1\r\nHost: " + ghHost + "\r\nTransfer-Encoding: chunked\r\nContent-Length: 60\r\nContent-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n" + smuggled,
			"two CL":        "POST /repos/acme/widgets/issues HTTP/1.1\r\nHost: " + ghHost + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}" + smuggled,
			"bare LF":       "POST /repos/acme/widgets/issues HTTP/1.1\nHost: " + ghHost + "\nContent-Type: application/json\nContent-Length: 2\n\n{}" + smuggled,
			"TE obfuscated": "POST /repos/acme/widgets/issues HTTP/1.1\r\nHost: " + ghHost + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: xchunked\r\n\r\n{}" + smuggled,
		}
		for name, raw := range cases {
			before := len(e.up.Requests())
			allowedBefore := len(e.auditOf("call.allowed"))
			tc, err := e.tunnel(ghHost, ghHost, s.Token, s.caFile)
			if err != nil {
				t.Fatal(err)
			}
			rs := roundTrip(t, tc, raw, 2)
			tc.Close()
			var statuses []int
			for _, r := range rs {
				statuses = append(statuses, r.StatusCode)
			}
			t.Logf("%s: answers %v", name, statuses)
			if len(rs) == 2 {
				// Read as a request of its own: the grant refused it.
				if st, code := problemOf(t, rs[1]); st != 403 || code != "no_matching_grant" {
					t.Fatalf("%s: the second request was answered %d %s", name, st, code)
				}
			}
			got := e.up.Requests()[before:]
			for _, r := range got {
				if strings.Contains(r.RawPath, "smuggled") {
					t.Fatalf("%s: the smuggled request reached the upstream", name)
				}
				if r.Header.Get("Authorization") != "Bearer "+brokertest.Canary || r.Header.Get("Transfer-Encoding") != "" {
					t.Fatalf("%s: upstream got %+v", name, r.Header)
				}
			}
			if allowed := len(e.auditOf("call.allowed")) - allowedBefore; len(got) > 1 || allowed != len(got) {
				t.Fatalf("%s: the upstream received %d requests for %d allowed calls", name, len(got), allowed)
			}
		}
	})

	t.Run("killed session", func(t *testing.T) {
		k := e.session(brokertest.TrustedSession(ghGrant()))
		tc, err := e.tunnel(ghHost, ghHost, k.Token, k.caFile)
		if err != nil {
			t.Fatal(err)
		}
		get := "GET /repos/acme/widgets HTTP/1.1\r\nHost: " + ghHost + "\r\n\r\n"
		if rs := roundTrip(t, tc, get, 1); len(rs) != 1 || rs[0].StatusCode != 200 {
			t.Fatalf("before the kill: %v", rs)
		}
		if r := e.b.Do("DELETE", e.b.Control+"/v1/sessions/"+k.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
			t.Fatalf("kill: %d %s", r.Status, r.Body)
		}
		// The open tunnel stops at its next request.
		rs := roundTrip(t, tc, get, 1)
		if len(rs) != 1 {
			t.Fatalf("after the kill: %d answers", len(rs))
		}
		if st, code := problemOf(t, rs[0]); st != 401 || code != "session_revoked" {
			t.Fatalf("after the kill: %d %s", st, code)
		}
		// And no new tunnel opens.
		resp, body, _ := e.rawConnect(ghHost+":443", k.Token)
		if resp.StatusCode != 407 || !bytes.Contains(body, []byte(`"code":"session_revoked"`)) {
			t.Fatalf("CONNECT after the kill: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("kill-switch", func(t *testing.T) {
		tc, err := e.tunnel(ghHost, ghHost, s.Token, s.caFile)
		if err != nil {
			t.Fatal(err)
		}
		if r := e.b.Do("POST", e.b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "test"}); r.Status != 200 {
			t.Fatalf("engage: %d %s", r.Status, r.Body)
		}
		n := len(e.up.Requests())
		rs := roundTrip(t, tc, "GET /repos/acme/widgets HTTP/1.1\r\nHost: "+ghHost+"\r\n\r\n", 1)
		if len(rs) != 1 {
			t.Fatalf("%d answers", len(rs))
		}
		if st, code := problemOf(t, rs[0]); st != 503 || code != "killswitch_engaged" {
			t.Fatalf("in the tunnel: %d %s", st, code)
		}
		resp, body, _ := e.rawConnect(ghHost+":443", s.Token)
		if resp.StatusCode != 503 || !bytes.Contains(body, []byte(`"code":"killswitch_engaged"`)) {
			t.Fatalf("CONNECT: %d %s", resp.StatusCode, body)
		}
		if len(e.up.Requests()) != n {
			t.Fatal("a call reached the upstream under the kill-switch")
		}
		if r := e.b.Do("DELETE", e.b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
			t.Fatalf("release: %d %s", r.Status, r.Body)
		}
		if resp, body, _ := e.rawConnect(ghHost+":443", s.Token); resp.StatusCode != 200 {
			t.Fatalf("CONNECT after release: %d %s", resp.StatusCode, body)
		}
	})
	brokertest.AssertNoCanary(t, "audit", e.b.AuditExport())
}

func TestProxyDoorGatedCallApprovedWhileCurlWaits(t *testing.T) {
	e := startProxyBroker(t, "approval: {proxy_wait: 30s}\n")
	rev := e.b.NewToken("reviewer", "rita")
	// Untrusted input, a sensitive upstream, an irreversible rule: gated.
	s := e.session(map[string]any{"task_id": "t-gate", "isolation": "microvm", "grants": []any{ghGrant()}})
	issue := "https://" + ghHost + "/repos/acme/widgets/issues"

	done := make(chan clientResult, 1)
	go func() {
		done <- e.curl(s.Token, s.caFile, "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"title":"approved"}`, issue)
	}()
	id := e.b.PendingAction(t, rev)
	if len(e.up.Requests()) != 0 {
		t.Fatal("a gated call reached the upstream before approval")
	}
	if r := e.b.Do("POST", e.b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{"comment": "ok"}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	var r clientResult
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("curl did not get its answer after the approval")
	}
	if r.exit != 0 || r.status != 200 || decodeEcho(t, r.body).Body != `{"title":"approved"}` || !strings.Contains(decodeEcho(t, r.body).Auth, "[REDACTED]") {
		t.Fatalf("curl: exit %d %d %s %s", r.exit, r.status, r.body, r.stderr)
	}
	if n := len(e.up.Requests()); n != 1 {
		t.Fatalf("upstream received %d requests, want 1", n)
	}

	// Denied: curl gets 403 approval_denied.
	go func() {
		done <- e.curl(s.Token, s.caFile, "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"title":"denied"}`, issue)
	}()
	id = e.b.PendingAction(t, rev)
	if r := e.b.Do("POST", e.b.Control+"/v1/approvals/"+id+"/deny", rev, map[string]any{"comment": "no"}); r.Status != 200 {
		t.Fatalf("deny: %d %s", r.Status, r.Body)
	}
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("curl did not get its answer after the denial")
	}
	if r.status != 403 || r.problemCode(t) != "approval_denied" {
		t.Fatalf("denied: %d %s", r.status, r.body)
	}
	if n := len(e.up.Requests()); n != 1 {
		t.Fatalf("upstream received %d requests, want 1", n)
	}
}
