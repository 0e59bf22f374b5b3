package brokertest

// The process kit: a broker started through cmd/broker's run function, as
// `broker serve` with a config file, on 127.0.0.1:0 (StartProc), and its
// client (Proc). A test package that cannot import cmd/broker's run (every
// package but main) passes it in:
//
//	func startBroker(t *testing.T, o brokertest.ProcOptions) *brokertest.Proc {
//		return brokertest.StartProc(t, run, o)
//	}

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ProcAdminToken is the admin token of a broker StartProc starts (and of
// the configs tests write for a Child).
const ProcAdminToken = "test-admin-token-0123456789"

// RunFunc is cmd/broker's entry point: run(ctx, args, getenv, stdin,
// stdout, stderr) as main calls it.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error

// Proc is a running broker started through run, as `broker serve`
// (StartProc), or a client of a broker at Sandbox and Control (a Proc
// built with T, Sandbox, Control and HTTP, for a Child's process).
type Proc struct {
	T       *testing.T  // the test that reports the client's failures
	Sandbox string      // base URL of the sandbox plane
	Control string      // base URL of the control plane
	Logs    *SyncBuffer // the broker's logs (StartProc)
	DataDir string      // its data_dir (StartProc)
	cancel  context.CancelFunc
	done    chan error
	HTTP    *http.Client // the client Do uses (StartProc's never follows a redirect)
}

// ProcOptions is what differs in the config StartProc writes: two
// upstreams on Upstream, "api" (sensitive, the canary as a bearer token,
// max_body 4096, at Upstream+"/base") and "open" (not sensitive, the canary
// as the api_key query parameter).
type ProcOptions struct {
	ExtraYAML string            // appended to the config
	DataDir   string            // default: a new temporary directory
	Upstream  string            // the upstreams' base URL
	Timeout   string            // the api upstream's timeout (default 10s)
	Env       map[string]string // extra environment for ${VAR} in ExtraYAML
}

// StartProc starts a broker through run with the config of o, the admin
// token ProcAdminToken and the canary as the upstreams' credential; it
// returns once the broker printed its listening addresses. The broker is
// stopped at the test's end (Stop), and its logs then must not hold the
// canary.
func StartProc(t *testing.T, run RunFunc, o ProcOptions) *Proc {
	t.Helper()
	dir := t.TempDir()
	if o.DataDir == "" {
		o.DataDir = filepath.Join(dir, "data")
	}
	if o.Timeout == "" {
		o.Timeout = "10s"
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
%s`, o.DataDir, o.Upstream, o.Timeout, o.Upstream, o.ExtraYAML)
	path := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TEST_ADMIN": ProcAdminToken, "CANARY_TOKEN": Canary}
	for k, v := range o.Env {
		env[k] = v
	}
	getenv := func(k string) string { return env[k] }
	pr, pw := io.Pipe()
	logs := &SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Proc{T: t, Logs: logs, DataDir: o.DataDir, cancel: cancel, done: make(chan error, 1), HTTP: &http.Client{
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
	if _, err := fmt.Sscanf(line, "airlock: sandbox plane %s control plane %s", &b.Sandbox, &b.Control); err != nil {
		t.Fatalf("unexpected start line %q", line)
	}
	b.Sandbox = strings.TrimSuffix(b.Sandbox, ",")
	t.Cleanup(b.Stop)
	return b
}

// Stop ends the broker StartProc started and waits for it: it must exit
// without an error and its logs must not hold the canary. Calling it again
// does nothing.
func (b *Proc) Stop() {
	if b.cancel == nil {
		return
	}
	b.cancel()
	if err := <-b.done; err != nil {
		b.T.Errorf("broker exited with %v", err)
	}
	b.cancel = nil
	AssertNoCanary(b.T, "broker logs", b.Logs.Bytes())
}

// Response is an answer a Proc received, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Problem decodes r as a problem document (application/problem+json);
// anything else fails the test.
func (r Response) Problem(t *testing.T) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(r.Body, &p); err != nil || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("not a problem document (%d %s): %s", r.Status, r.Header.Get("Content-Type"), r.Body)
	}
	return p
}

// WantProblem fails the test unless r is a problem document with status
// and code; it returns the document.
func (r Response) WantProblem(t *testing.T, status int, code string) map[string]any {
	t.Helper()
	p := r.Problem(t)
	if r.Status != status || p["code"] != code {
		t.Fatalf("got %d %v, want %d %s: %s", r.Status, p["code"], status, code, r.Body)
	}
	return p
}

// Do sends a request to url with token as its bearer token (none if empty)
// and returns the answer. body is sent as given (a string or []byte) or as
// JSON (any other non-nil value), with Content-Type application/json;
// header holds extra name, value pairs.
func (b *Proc) Do(method, url, token string, body any, header ...string) Response {
	b.T.Helper()
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
		b.T.Fatal(err)
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
	resp, err := b.HTTP.Do(req)
	if err != nil {
		b.T.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.T.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// Raw sends bytes to the sandbox plane exactly as given (paths the Go client would clean).
func (b *Proc) Raw(request string) Response {
	b.T.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.Sandbox, "http://"))
	if err != nil {
		b.T.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		b.T.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		b.T.Fatalf("raw request: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// Created is a session as POST /v1/sessions answers it.
type Created struct {
	ID     string `json:"id"`
	Token  string `json:"token"`
	Grants []struct {
		ID string `json:"id"`
	} `json:"grants"`
}

// Session creates a session (as the admin) and returns its id, token and grant ids.
func (b *Proc) Session(req map[string]any) Created {
	b.T.Helper()
	r := b.Do("POST", b.Control+"/v1/sessions", ProcAdminToken, req)
	if r.Status != http.StatusCreated {
		b.T.Fatalf("create session: %d %s", r.Status, r.Body)
	}
	var c Created
	if err := json.Unmarshal(r.Body, &c); err != nil {
		b.T.Fatal(err)
	}
	return c
}

// AuditExport is GET /v1/audit as the admin: the records, one JSON line each.
func (b *Proc) AuditExport() []byte {
	b.T.Helper()
	r := b.Do("GET", b.Control+"/v1/audit", ProcAdminToken, nil)
	if r.Status != 200 {
		b.T.Fatalf("audit export: %d %s", r.Status, r.Body)
	}
	return r.Body
}

// AuditRecord is the part of an exported audit record tests read.
type AuditRecord struct {
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

// AuditHas waits for a record of type typ with the request id and code
// (and, when status > 0, that status).
func (b *Proc) AuditHas(t *testing.T, typ, requestID string, status int, code string) {
	t.Helper()
	Eventually(t, 10*time.Second, func() bool {
		for _, r := range ParseAudit(t, b.AuditExport()) {
			if r.Type == typ && r.RequestID == requestID && (status == 0 || r.Status == status) && r.Code == code {
				return true
			}
		}
		return false
	})
}

// ParseAudit decodes an audit export (AuditExport).
func ParseAudit(t *testing.T, data []byte) []AuditRecord {
	t.Helper()
	var out []AuditRecord
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r AuditRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// NewToken creates an API token with role and name (as the admin) and
// returns it.
func (b *Proc) NewToken(role, name string) string {
	b.T.Helper()
	var out struct{ Token string }
	r := b.Do("POST", b.Control+"/v1/tokens", ProcAdminToken, map[string]any{"role": role, "name": name})
	if r.Status != 201 {
		b.T.Fatalf("token: %d %s", r.Status, r.Body)
	}
	_ = json.Unmarshal(r.Body, &out)
	return out.Token
}

// PendingAction waits until the approvals list token reads holds a pending
// action and returns the first one's id.
func (b *Proc) PendingAction(t *testing.T, token string) string {
	t.Helper()
	var id string
	Eventually(t, 10*time.Second, func() bool {
		var list struct{ Items []ActionView }
		_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals?status=pending", token, nil).Body, &list)
		if len(list.Items) > 0 {
			id = list.Items[0].ID
		}
		return id != ""
	})
	return id
}
