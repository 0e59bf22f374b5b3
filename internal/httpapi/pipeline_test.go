package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// The call pipeline (broker.Do) through each of its doors: the REST door,
// the AWS (SigV4) door, the proxy door (a tunnel, as HTTPS_PROXY clients
// open one), a WebSocket upgrade, and the execution of an approved action.
// Every door runs the same scenarios against a real broker, real bbolt and
// a real loopback upstream; what differs is only how each door speaks.

const pipeAdmin = "admin-token-for-pipeline-tests"

// pipeCanary is the upstream credential; no answer or record may carry it.
const pipeCanary = "CANARY-pipeline-secret"

// pipeStore is the real bbolt store whose writes of "allowed" records can
// be made to fail (the rest of the audit log stays writable).
type pipeStore struct {
	*boltstore.Bolt
	failAllowed atomic.Bool
}

func (s *pipeStore) WriteAudit(ctx context.Context, e []audit.Entry) (bool, error) {
	if s.failAllowed.Load() {
		for _, x := range e {
			if bytes.Contains(x.Data, []byte(`"type":"call.allowed"`)) {
				return false, errors.New("injected: disk full")
			}
		}
	}
	return s.Bolt.WriteAudit(ctx, e)
}

// pipeFileCreds are AWS keys whose secret is read from a file on every
// call: removing the file makes the credential unavailable.
type pipeFileCreds string

func (p pipeFileCreds) Retrieve(context.Context) (upstream.AWSCredentials, error) {
	data, err := os.ReadFile(string(p))
	if err != nil {
		return upstream.AWSCredentials{}, err
	}
	return upstream.AWSCredentials{AccessKeyID: "AKIAPIPELINE0000", SecretAccessKey: strings.TrimSpace(string(data)), Source: "file"}, nil
}

type pipeEnv struct {
	st       *pipeStore
	sandbox  *httptest.Server
	control  *httptest.Server
	credFile string
	hits     atomic.Int64
	started  chan struct{} // a slow call reached the upstream
	proxy    string        // the proxy door's address
	reviewer string
	header   atomic.Pointer[http.Header] // the headers of the upstream's last request
}

// pipeStart runs a broker with a REST upstream "api" and a JSON-protocol
// AWS upstream "ddb", both reaching one loopback upstream that answers by
// operation: ...Ok answers (echoing the credential it got), ...Slow hangs
// until the call is cut, ...Broken drops the connection.
func pipeStart(t *testing.T, opts ...func(*broker.Options)) *pipeEnv {
	t.Helper()
	dir := t.TempDir()
	bolt, err := boltstore.OpenBolt(filepath.Join(dir, "airlock.db"), store.DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e := &pipeEnv{st: &pipeStore{Bolt: bolt}, credFile: filepath.Join(dir, "key"), started: make(chan struct{}, 4)}
	if err := os.WriteFile(e.credFile, []byte(pipeCanary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		h := r.Header.Clone()
		e.header.Store(&h)
		_, _ = io.Copy(io.Discard, r.Body) // then a closed connection ends r's context
		op := r.URL.Path
		if target := r.Header.Get("X-Amz-Target"); target != "" {
			op = target
		}
		switch op = strings.ToLower(op); {
		case r.Header.Get("Upgrade") == "websocket" && strings.HasSuffix(op, "ok"):
			pipeWebSocket(w, r)
			return
		case strings.HasSuffix(op, "slow"):
			e.started <- struct{}{}
			<-r.Context().Done()
			return
		case strings.HasSuffix(op, "broken"):
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok": true, "auth": %q}`, r.Header.Get("Authorization"))
	}))
	t.Cleanup(up.Close)
	base, _ := url.Parse(up.URL)
	host, err := upstream.ParseHost(pipeHost)
	if err != nil {
		t.Fatal(err)
	}
	api := &upstream.Upstream{Name: "api", Kind: "http", BaseURL: base, Sensitive: true, Timeout: 20 * time.Second, MaxBody: 1 << 20,
		ForwardHeaders: map[string]bool{"Content-Type": true}, Source: upstream.NewFileSource(e.credFile),
		Inject: upstream.Injection{Header: "Authorization", Format: "Bearer {secret}"}, Hosts: []upstream.Host{host}}
	api.SetTransport(upstream.NewTransport())
	creds := pipeFileCreds(e.credFile)
	ddb := &upstream.Upstream{Name: "ddb", Kind: "aws", BaseURL: base, Sensitive: true, Timeout: 20 * time.Second, MaxBody: 1 << 20,
		Source: upstream.AWSSource(creds, "file"), AWS: &upstream.AWS{Service: "dynamodb", Region: "us-east-1", Creds: creds}}
	ddb.SetTransport(upstream.NewTransport())
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	o := broker.Options{Ports: brokertest.Ports(e.st), Upstreams: map[string]*upstream.Upstream{"api": api, "ddb": ddb},
		AdminToken: pipeAdmin, MaxSessionTTL: time.Hour, DefaultTTL: 10 * time.Minute, Log: log, ProxyCA: true}
	for _, opt := range opts {
		opt(&o)
	}
	b, err := broker.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(b, log, httpapi.UIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.sandbox = httptest.NewServer(h.Handler(httpapi.SandboxPlane))
	e.control = httptest.NewServer(h.Handler(httpapi.ControlPlane))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	door := h.NewProxyDoor(httpapi.ProxyOptions{})
	served := make(chan error, 1)
	go func() { served <- door.Serve(ln) }()
	e.proxy = ln.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = door.Shutdown(ctx)
		<-served
		e.sandbox.Close()
		e.control.Close()
		b.Close()
		_ = bolt.Close()
		if bytes.Contains(logs.Bytes(), []byte("CANARY")) {
			t.Error("the credential reached the logs")
		}
	})
	var tok struct {
		Token string `json:"token"`
	}
	if status := e.json(t, "POST", e.control.URL+"/v1/tokens", pipeAdmin, `{"role": "reviewer", "name": "rita"}`, &tok); status != 201 {
		t.Fatalf("reviewer token: %d", status)
	}
	e.reviewer = tok.Token
	return e
}

// json sends a control-plane request and decodes its answer into out.
func (e *pipeEnv) json(t *testing.T, method, u, token, body string, out any) int {
	t.Helper()
	return callJSON(t, method, u, token, body, out)
}

// pipeSession is a session with one grant on each upstream, allowing the
// operations Ok, Slow and Broken (POST, so irreversible: gated under
// approval: always).
type pipeSession struct {
	ID    string
	Token string
	Proxy struct {
		CAPEM string `json:"ca_pem"`
	}
	Grants []struct {
		ID string `json:"id"`
	}
	AWS struct {
		AccessKeyID     string `json:"access_key_id"`
		SecretAccessKey string `json:"secret_access_key"`
	} `json:"aws_credentials"`
}

func (e *pipeEnv) session(t *testing.T, gated bool) pipeSession {
	t.Helper()
	approval := ""
	if gated {
		approval = `"approval": "always",`
	}
	websocket := `, {"method": "GET", "path": "/Ok", "websocket": true}, {"method": "GET", "path": "/Slow", "websocket": true},
			{"method": "GET", "path": "/Broken", "websocket": true}`
	if gated {
		websocket = "" // a websocket rule cannot wait for a human: refused at grant creation
	}
	var s pipeSession
	status := e.json(t, "POST", e.control.URL+"/v1/sessions", pipeAdmin, `{"task_id": "t", "untrusted_input": false, "grants": [
		{"upstream": "api", "max_uses": 100, `+approval+` "rules": [
			{"method": "POST", "path": "/Ok"}, {"method": "POST", "path": "/Slow"}, {"method": "POST", "path": "/Broken"}`+websocket+`]},
		{"upstream": "ddb", "max_uses": 100, `+approval+` "rules": [
			{"action": "dynamodb:Ok", "resource": "*"}, {"action": "dynamodb:Slow", "resource": "*"}, {"action": "dynamodb:Broken", "resource": "*"}]}]}`, &s)
	if status != 201 || len(s.Grants) != 2 || s.AWS.SecretAccessKey == "" {
		t.Fatalf("create session: %d %+v", status, s)
	}
	return s
}

// uses is how many uses the session's grants count.
func (e *pipeEnv) uses(t *testing.T, s pipeSession) int64 {
	t.Helper()
	var n int64
	for _, g := range s.Grants {
		var v struct {
			Uses int64 `json:"uses"`
		}
		if status := e.json(t, "GET", e.control.URL+"/v1/grants/"+g.ID, pipeAdmin, "", &v); status != 200 {
			t.Fatalf("grant %s: %d", g.ID, status)
		}
		n += v.Uses
	}
	return n
}

// records are the types of the audit records of a request.
func (e *pipeEnv) records(t *testing.T, requestID string) []string {
	t.Helper()
	req, _ := http.NewRequest("GET", e.control.URL+"/v1/audit", nil)
	req.Header.Set("Authorization", "Bearer "+pipeAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if bytes.Contains(data, []byte("CANARY")) {
		t.Fatal("the audit log carries the credential")
	}
	var out []string
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var r struct {
			Type      string `json:"type"`
			RequestID string `json:"request_id"`
			Code      string `json:"code"`
		}
		if json.Unmarshal(line, &r) == nil && r.RequestID == requestID && (strings.HasPrefix(r.Type, "call.") || strings.HasPrefix(r.Type, "egress.")) {
			out = append(out, strings.TrimSuffix(r.Type+" "+r.Code, " "))
		}
	}
	return out
}

// pipeAnswer is what the sandbox got from a door.
type pipeAnswer struct {
	status    int
	code      string // the Airlock code of a refusal, "" for an upstream answer
	requestID string
	actionID  string // of a held call
}

// rest calls op through the REST door.
func (e *pipeEnv) rest(t *testing.T, s pipeSession, op string) pipeAnswer {
	t.Helper()
	req, _ := http.NewRequest("POST", e.sandbox.URL+"/v1/proxy/api/"+op, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	return e.answer(t, req)
}

// aws calls op through the SigV4 door, as the SDK signs it.
func (e *pipeEnv) aws(t *testing.T, s pipeSession, op string) pipeAnswer {
	t.Helper()
	body := `{}`
	req, _ := http.NewRequest("POST", e.sandbox.URL+"/v1/aws/ddb/", strings.NewReader(body))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("Prefer", "wait=0") // a held call answers at once
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: s.AWS.AccessKeyID, SecretAccessKey: s.AWS.SecretAccessKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "dynamodb", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return e.answer(t, req)
}

// pipeHost is the api upstream's host for the proxy door.
const pipeHost = "api.pipeline.test"

// proxyDoor calls op through the proxy door, as a stock client with
// HTTPS_PROXY does: CONNECT to the upstream's host (its refusal is the
// answer), TLS with the session's CA, the request inside the tunnel.
func (e *pipeEnv) proxyDoor(t *testing.T, s pipeSession, op string) pipeAnswer {
	t.Helper()
	return e.proxyDoorWith(t, s, op, "", func(h http.Header) { h.Set("Prefer", "wait=0") }) // a held call answers at once
}

// proxyDoorWith is proxyDoor with extra CONNECT header lines (each ending
// in CRLF) and the inner request's headers set by header.
func (e *pipeEnv) proxyDoorWith(t *testing.T, s pipeSession, op, connectHeaders string, header func(http.Header)) pipeAnswer {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(s.Proxy.CAPEM)) {
		t.Fatal("the session has no CA")
	}
	conn, err := net.Dial("tcp", e.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	auth := base64.StdEncoding.EncodeToString([]byte("airlock:" + s.Token))
	fmt.Fprintf(conn, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\nProxy-Authorization: Basic %s\r\n%s\r\n", pipeHost, pipeHost, auth, connectHeaders)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return e.read(t, resp)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: pipeHost, MinVersion: tls.VersionTLS12})
	req, _ := http.NewRequest("POST", "https://"+pipeHost+"/"+op, nil)
	header(req.Header)
	if err := req.Write(tc); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatal(err)
	}
	return e.read(t, resp)
}

// webSocket opens op as a WebSocket through the REST door; an upgrade
// answers 101 (the relay is closed at once).
func (e *pipeEnv) webSocket(t *testing.T, s pipeSession, op string) pipeAnswer {
	t.Helper()
	req, _ := http.NewRequest("GET", e.sandbox.URL+"/v1/proxy/api/"+op, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	return e.answer(t, req)
}

// pipeWebSocket answers a WebSocket handshake with 101, then closes.
func pipeWebSocket(w http.ResponseWriter, r *http.Request) {
	sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		base64.StdEncoding.EncodeToString(sum[:]))
	_ = brw.Flush()
}

func (e *pipeEnv) answer(t *testing.T, req *http.Request) pipeAnswer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return e.read(t, resp)
}

// read reads what the sandbox got.
func (e *pipeEnv) read(t *testing.T, resp *http.Response) pipeAnswer {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if bytes.Contains(data, []byte("CANARY")) || strings.Contains(fmt.Sprint(resp.Header), "CANARY") {
		t.Fatalf("the answer carries the credential: %v %s", resp.Header, data)
	}
	a := pipeAnswer{status: resp.StatusCode, requestID: resp.Header.Get("X-Airlock-Request-Id"), code: resp.Header.Get("X-Airlock-Code")}
	var body struct {
		Code string `json:"code"`
		ID   string `json:"id"`
	}
	_ = json.Unmarshal(data, &body)
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		a.code = body.Code
	}
	if resp.StatusCode == http.StatusAccepted {
		a.actionID = body.ID
	}
	return a
}

// pipeOutcome is a scenario's result through one door.
type pipeOutcome struct {
	Status  string   // the HTTP status the sandbox got; for an executed action, the action's status
	Code    string   // the Airlock code of the failure ("" for none)
	Sent    bool     // the upstream received the call
	Uses    int64    // uses the grants count afterwards
	Records []string // the call's audit records (durable ones: allowed, denied), "type code"
}

// pipeDoor runs a call of op (in a session of the given gating) through
// one door; prepare sets the scenario's fault up at the last moment before
// the call is decided or sent.
type pipeDoor func(t *testing.T, e *pipeEnv, op string, gated bool, prepare func(*testing.T, *pipeEnv, pipeSession), verdict string) pipeOutcome

func pipeDirect(call func(*pipeEnv, *testing.T, pipeSession, string) pipeAnswer) pipeDoor {
	return func(t *testing.T, e *pipeEnv, op string, gated bool, prepare func(*testing.T, *pipeEnv, pipeSession), _ string) pipeOutcome {
		s := e.session(t, gated)
		if prepare != nil {
			prepare(t, e, s)
		}
		a := call(e, t, s, op)
		return pipeOutcome{Status: strconv.Itoa(a.status), Code: a.code, Sent: e.hits.Load() > 0, Uses: e.uses(t, s), Records: pipeDurable(e.records(t, a.requestID))}
	}
}

// pipeDurable keeps the records written before the answer (completion
// records are written after it, off the caller's path).
func pipeDurable(rs []string) []string {
	var out []string
	for _, r := range rs {
		if !strings.HasPrefix(r, "call.completed") {
			out = append(out, r)
		}
	}
	return out
}

// pipeExecute holds the call (always gated), sets the fault up, lets a
// reviewer decide, and waits for the action's end.
func pipeExecute(t *testing.T, e *pipeEnv, op string, _ bool, prepare func(*testing.T, *pipeEnv, pipeSession), verdict string) pipeOutcome {
	s := e.session(t, true)
	a := e.rest(t, s, op)
	if a.status != http.StatusAccepted || a.actionID == "" {
		t.Fatalf("gated call: %+v, want 202 with an action", a)
	}
	if e.hits.Load() != 0 {
		t.Fatal("a held call reached the upstream before a decision")
	}
	if prepare != nil {
		prepare(t, e, s)
	}
	// A fault that ends what the action depends on (its grant revoked)
	// denies it at once: the reviewer then finds it decided (409).
	if status := e.json(t, "POST", e.control.URL+"/v1/approvals/"+a.actionID+"/"+verdict, e.reviewer, "", nil); status != 200 && status != 409 {
		t.Fatalf("%s: %d", verdict, status)
	}
	var act struct {
		Status string `json:"status"`
		Result *struct {
			Code string `json:"code"`
		} `json:"result"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if status := e.json(t, "GET", e.control.URL+"/v1/approvals/"+a.actionID, e.reviewer, "", &act); status != 200 {
			t.Fatalf("action: %d", status)
		}
		if act.Status != "pending" && act.Status != "executing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the action did not end: %s", act.Status)
		}
		<-time.After(5 * time.Millisecond)
	}
	out := pipeOutcome{Status: act.Status, Sent: e.hits.Load() > 0, Uses: e.uses(t, s), Records: pipeDurable(e.records(t, a.requestID))}
	switch {
	case act.Status == "denied":
		out.Code = "approval_denied"
	case act.Result != nil:
		out.Code = act.Result.Code
	}
	return out
}

func TestPipelineThroughEachDoor(t *testing.T) {
	doors := []struct {
		name string
		run  pipeDoor
	}{
		{"rest", pipeDirect((*pipeEnv).rest)},
		{"aws", pipeDirect((*pipeEnv).aws)},
		{"proxy", pipeDirect((*pipeEnv).proxyDoor)},
		{"websocket", pipeDirect((*pipeEnv).webSocket)},
		{"execute", pipeExecute},
	}
	revoke := func(t *testing.T, e *pipeEnv, s pipeSession) {
		for _, g := range s.Grants {
			if status := e.json(t, "DELETE", e.control.URL+"/v1/grants/"+g.ID, pipeAdmin, "", nil); status != 200 {
				t.Errorf("revoke grant: %d", status)
			}
		}
	}
	noCredential := func(t *testing.T, e *pipeEnv, _ pipeSession) {
		if err := os.Remove(e.credFile); err != nil {
			t.Error(err)
		}
	}
	noAudit := func(_ *testing.T, e *pipeEnv, _ pipeSession) { e.st.failAllowed.Store(true) }
	killWhenSent := func(_ *testing.T, e *pipeEnv, s pipeSession) {
		go func() {
			<-e.started
			req, _ := http.NewRequest("DELETE", e.control.URL+"/v1/sessions/"+s.ID, nil)
			req.Header.Set("Authorization", "Bearer "+pipeAdmin)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	allowed := []string{"call.allowed"}
	tests := []struct {
		name    string
		op      string
		gated   bool
		prepare func(*testing.T, *pipeEnv, pipeSession)
		verdict string // of the reviewer, for the executed action
		want    map[string]pipeOutcome
	}{
		{name: "allowed", op: "Ok", want: map[string]pipeOutcome{
			"rest":      {Status: "200", Sent: true, Uses: 1, Records: allowed},
			"aws":       {Status: "200", Sent: true, Uses: 1, Records: allowed},
			"proxy":     {Status: "200", Sent: true, Uses: 1, Records: allowed},
			"websocket": {Status: "101", Sent: true, Uses: 1, Records: allowed},
			"execute":   {Status: "executed", Sent: true, Uses: 1, Records: allowed},
		}},
		{name: "denied: the grant is revoked", op: "Ok", prepare: revoke, want: map[string]pipeOutcome{
			"rest": {Status: "403", Code: "no_matching_grant", Records: []string{"call.denied no_matching_grant"}},
			"aws":  {Status: "403", Code: "no_matching_grant", Records: []string{"call.denied no_matching_grant"}},
			// The proxy door refuses the tunnel: its destination names an
			// upstream the session holds no live grant on.
			"proxy":     {Status: "403", Code: "egress_denied", Records: []string{"egress.denied egress_denied"}},
			"websocket": {Status: "400", Code: "bad_request", Records: []string{"call.denied bad_request"}}, // no websocket rule left
			"execute":   {Status: "denied", Code: "approval_denied"},                                        // denied at the revocation (lifetime.go)
		}},
		{name: "gated: held for a reviewer, who denies", op: "Ok", gated: true, verdict: "deny", want: map[string]pipeOutcome{
			"rest":      {Status: "202"},
			"aws":       {Status: "202"},
			"proxy":     {Status: "202"},
			"websocket": {Status: "400", Code: "bad_request", Records: []string{"call.denied bad_request"}}, // a gated grant holds no websocket rule
			"execute":   {Status: "denied", Code: "approval_denied"},
		}},
		{name: "credential unavailable", op: "Ok", prepare: noCredential, want: map[string]pipeOutcome{
			"rest":      {Status: "503", Code: "credential_unavailable", Records: []string{"call.denied credential_unavailable"}},
			"aws":       {Status: "503", Code: "credential_unavailable", Records: []string{"call.denied credential_unavailable"}},
			"proxy":     {Status: "503", Code: "credential_unavailable", Records: []string{"call.denied credential_unavailable"}},
			"websocket": {Status: "503", Code: "credential_unavailable", Records: []string{"call.denied credential_unavailable"}},
			"execute":   {Status: "failed", Code: "credential_unavailable", Records: []string{"call.denied credential_unavailable"}},
		}},
		{name: "audit unavailable", op: "Ok", prepare: noAudit, want: map[string]pipeOutcome{
			"rest":      {Status: "503", Code: "audit_unavailable"},
			"aws":       {Status: "503", Code: "audit_unavailable"},
			"proxy":     {Status: "503", Code: "audit_unavailable"},
			"websocket": {Status: "503", Code: "audit_unavailable"},
			"execute":   {Status: "failed", Code: "audit_unavailable"},
		}},
		{name: "upstream error", op: "Broken", want: map[string]pipeOutcome{
			"rest":      {Status: "502", Code: "upstream_error", Sent: true, Uses: 1, Records: allowed},
			"aws":       {Status: "502", Code: "upstream_error", Sent: true, Uses: 1, Records: allowed},
			"proxy":     {Status: "502", Code: "upstream_error", Sent: true, Uses: 1, Records: allowed},
			"websocket": {Status: "502", Code: "upstream_error", Sent: true, Uses: 1, Records: allowed},
			"execute":   {Status: "failed", Code: "upstream_error", Sent: true, Uses: 1, Records: allowed},
		}},
		{name: "kill mid-call", op: "Slow", prepare: killWhenSent, want: map[string]pipeOutcome{
			"rest":      {Status: "401", Code: "session_revoked", Sent: true, Uses: 1, Records: allowed},
			"aws":       {Status: "401", Code: "session_revoked", Sent: true, Uses: 1, Records: allowed},
			"proxy":     {Status: "401", Code: "session_revoked", Sent: true, Uses: 1, Records: allowed},
			"websocket": {Status: "401", Code: "session_revoked", Sent: true, Uses: 1, Records: allowed},
			"execute":   {Status: "failed", Code: "session_revoked", Sent: true, Uses: 1, Records: allowed},
		}},
	}
	for _, tt := range tests {
		for _, door := range doors {
			t.Run(tt.name+"/"+door.name, func(t *testing.T) {
				verdict := tt.verdict
				if verdict == "" {
					verdict = "approve"
				}
				got := door.run(t, pipeStart(t), tt.op, tt.gated, tt.prepare, verdict)
				if diff := cmp.Diff(tt.want[door.name], got); diff != "" {
					t.Errorf("outcome (-want +got):\n%s", diff)
				}
			})
		}
	}
}
