package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// canary is the upstream credential planted in every e2e test; it must
// never reach anything the sandbox side, the audit log or the logs see.
const canary = "CANARY-e2e-0f1e2d3c/+=secret"

const adminToken = "test-admin-token-0123456789"

// canaryForms are the encodings of the canary that must not leak.
func canaryForms() []string {
	out := []string{canary, url.QueryEscape(canary), url.PathEscape(canary)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, enc.EncodeToString([]byte(canary)))
	}
	return out
}

func assertNoCanary(t *testing.T, what string, data []byte) {
	t.Helper()
	for _, f := range canaryForms() {
		if bytes.Contains(data, []byte(f)) {
			t.Fatalf("%s contains the canary secret (form %q)", what, f)
		}
	}
}

// syncBuffer collects logs written concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}

// recorded is what the upstream received.
type recorded struct {
	At       time.Time
	Method   string
	RawPath  string
	RawQuery string
	Header   http.Header
	Body     []byte
}

// upstreamServer is a real HTTP upstream on loopback that records every
// request and answers by path.
type upstreamServer struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []recorded
	started chan struct{} // a /slow request arrived
}

func newUpstream(t *testing.T) *upstreamServer {
	u := &upstreamServer{started: make(chan struct{}, 16)}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *upstreamServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec := recorded{At: time.Now(), Method: r.Method, RawPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	u.mu.Lock()
	u.reqs = append(u.reqs, rec)
	u.mu.Unlock()
	auth := r.Header.Get("Authorization")
	secret := strings.TrimPrefix(auth, "Bearer ")
	switch {
	case strings.HasSuffix(r.URL.Path, "/slow"):
		u.started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	case strings.HasSuffix(r.URL.Path, "/big"):
		w.Header().Set("Content-Type", "text/plain")
		fl := w.(http.Flusher)
		for i := 0; i < 2000; i++ {
			// The secret and its encodings land across write boundaries.
			fmt.Fprintf(w, "line %05d %s %s|", i, secret, base64.StdEncoding.EncodeToString([]byte("user:"+secret)))
			if i%97 == 0 {
				fl.Flush()
			}
		}
		return
	case strings.HasSuffix(r.URL.Path, "/brotli"):
		// An encoding the broker cannot read, so cannot scrub.
		w.Header().Set("Content-Encoding", "br")
		_, _ = w.Write([]byte("\x1b\x03" + secret))
		return
	case strings.HasSuffix(r.URL.Path, "/redirect"):
		w.Header().Set("Location", "http://198.51.100.7/steal?k="+url.QueryEscape(secret))
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("Set-Cookie", "session=upstream-cookie")
	w.Header().Set("X-Echo-Auth", auth)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"method": r.Method, "path": r.URL.EscapedPath(), "query": r.URL.RawQuery,
		"auth": auth, "auth_b64": base64.StdEncoding.EncodeToString([]byte(auth)),
		"auth_url": url.QueryEscape(secret), "body": string(body),
	})
}

func (u *upstreamServer) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

func (u *upstreamServer) last(t *testing.T) recorded {
	t.Helper()
	rs := u.requests()
	if len(rs) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return rs[len(rs)-1]
}

// broker is a running broker started through run, as `broker serve`.
type brokerProc struct {
	t       *testing.T
	sandbox string
	control string
	logs    *syncBuffer
	dataDir string
	cancel  context.CancelFunc
	done    chan error
	http    *http.Client
}

type harnessOpts struct {
	extraYAML string // appended to the config
	dataDir   string
	upstream  string
	timeout   string
	env       map[string]string // extra environment for ${VAR} in extraYAML
}

func startBroker(t *testing.T, o harnessOpts) *brokerProc {
	t.Helper()
	dir := t.TempDir()
	if o.dataDir == "" {
		o.dataDir = filepath.Join(dir, "data")
	}
	if o.timeout == "" {
		o.timeout = "10s"
	}
	cfg := fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: ${TEST_ADMIN}
max_session_ttl: 1h
enforce_isolation: true
upstreams:
  - name: api
    base_url: %s/base
    timeout: %s
    max_body: 4096
    forward_headers: [X-Trace]
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
  - name: open
    base_url: %s
    sensitive: false
    credential: {source: env, name: CANARY_TOKEN}
    inject: {query: api_key}
%s`, o.dataDir, o.upstream, o.timeout, o.upstream, o.extraYAML)
	path := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TEST_ADMIN": adminToken, "CANARY_TOKEN": canary}
	for k, v := range o.env {
		env[k] = v
	}
	getenv := func(k string) string { return env[k] }
	pr, pw := io.Pipe()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	b := &brokerProc{t: t, logs: logs, dataDir: o.dataDir, cancel: cancel, done: make(chan error, 1), http: &http.Client{
		Timeout: 90 * time.Second,
		// Never follow a redirect: tests look at it, and nothing leaves loopback.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	go func() {
		err := run(ctx, []string{"serve", "--config", path}, getenv, strings.NewReader(""), pw, logs)
		pw.CloseWithError(io.EOF)
		b.done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("broker did not start: %v; logs:\n%s", <-b.done, logs.Bytes())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if _, err := fmt.Sscanf(line, "airlock: sandbox plane %s control plane %s", &b.sandbox, &b.control); err != nil {
		t.Fatalf("unexpected start line %q", line)
	}
	b.sandbox = strings.TrimSuffix(b.sandbox, ",")
	t.Cleanup(b.stop)
	return b
}

func (b *brokerProc) stop() {
	if b.cancel == nil {
		return
	}
	b.cancel()
	if err := <-b.done; err != nil {
		b.t.Errorf("broker exited with %v", err)
	}
	b.cancel = nil
	assertNoCanary(b.t, "broker logs", b.logs.Bytes())
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) problem(t *testing.T) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("not a problem document (%d %s): %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	return p
}

func (r response) wantProblem(t *testing.T, status int, code string) map[string]any {
	t.Helper()
	p := r.problem(t)
	if r.status != status || p["code"] != code {
		t.Fatalf("got %d %v, want %d %s: %s", r.status, p["code"], status, code, r.body)
	}
	return p
}

func (b *brokerProc) do(method, url, token string, body any, header ...string) response {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		data, _ := json.Marshal(v)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// raw sends bytes exactly as given (paths the Go client would clean).
func (b *brokerProc) raw(request string) response {
	b.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.sandbox, "http://"))
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		b.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		b.t.Fatalf("raw request: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

type created struct {
	ID     string `json:"id"`
	Token  string `json:"token"`
	Grants []struct {
		ID string `json:"id"`
	} `json:"grants"`
}

// session creates a session and returns its id, token and grant ids.
func (b *brokerProc) session(req map[string]any) created {
	b.t.Helper()
	r := b.do("POST", b.control+"/v1/sessions", adminToken, req)
	if r.status != http.StatusCreated {
		b.t.Fatalf("create session: %d %s", r.status, r.body)
	}
	var c created
	if err := json.Unmarshal(r.body, &c); err != nil {
		b.t.Fatal(err)
	}
	return c
}

func (b *brokerProc) auditExport() []byte {
	b.t.Helper()
	r := b.do("GET", b.control+"/v1/audit", adminToken, nil)
	if r.status != 200 {
		b.t.Fatalf("audit export: %d %s", r.status, r.body)
	}
	return r.body
}

type auditRecord struct {
	Seq       uint64 `json:"seq"`
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Decision  string `json:"decision"`
	Code      string `json:"code"`
	Path      string `json:"path"`
	Status    int    `json:"status"`
	RequestID string `json:"request_id"`
	Reason    string `json:"reason"`
	ActionID  string `json:"action_id"`
}

// auditHas waits for a record of type typ with the request id and code
// (and, when status > 0, that status).
func (b *brokerProc) auditHas(t *testing.T, typ, requestID string, status int, code string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool {
		for _, r := range parseAudit(t, b.auditExport()) {
			if r.Type == typ && r.RequestID == requestID && (status == 0 || r.Status == status) && r.Code == code {
				return true
			}
		}
		return false
	})
}

func parseAudit(t *testing.T, data []byte) []auditRecord {
	t.Helper()
	var out []auditRecord
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r auditRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		<-time.After(5 * time.Millisecond)
	}
}

// apiGrant is a grant on the sensitive "api" upstream.
func apiGrant(rules ...map[string]any) map[string]any {
	rs := make([]any, len(rules))
	for i, r := range rules {
		rs[i] = r
	}
	return map[string]any{"upstream": "api", "rules": rs}
}

// trustedSession is a session that is not gated: no untrusted input.
func trustedSession(grants ...map[string]any) map[string]any {
	gs := make([]any, len(grants))
	for i, g := range grants {
		gs[i] = g
	}
	return map[string]any{"task_id": "t-1", "ttl": "10m", "untrusted_input": false, "isolation": "container", "grants": gs}
}
