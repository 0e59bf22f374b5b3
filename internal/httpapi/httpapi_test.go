package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
	"github.com/airlock-broker/airlock/internal/upstream"
)

const admin = brokertest.AdminToken

// faultyStore is the real bbolt store with audit writes that can be made to fail.
type faultyStore struct {
	*boltstore.Bolt
	failAudit atomic.Bool
}

func (f *faultyStore) WriteAudit(ctx context.Context, e []audit.Entry) (bool, error) {
	if f.failAudit.Load() {
		return false, errors.New("injected: disk full")
	}
	return f.Bolt.WriteAudit(ctx, e)
}

type env struct {
	st       *faultyStore
	sandbox  *httptest.Server
	control  *httptest.Server
	hits     *atomic.Int64
	logs     *bytes.Buffer
	credFile string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	bolt := brokertest.MustOpenStore(t, store.DurabilityFsync)
	e := &env{st: &faultyStore{Bolt: bolt}, hits: &atomic.Int64{}, logs: &bytes.Buffer{}, credFile: filepath.Join(dir, "key")}
	if err := os.WriteFile(e.credFile, []byte("CANARY-file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		w.Header().Set("X-Airlock-Code", "forged-by-upstream") // the broker must drop it
		_, _ = io.WriteString(w, `{"ok": true}`)
	}))
	t.Cleanup(up.Close)
	base, _ := url.Parse(up.URL)
	u := &upstream.Upstream{Name: "api", Kind: "http", BaseURL: base, Sensitive: true, Timeout: 5 * time.Second, MaxBody: 1 << 20,
		ForwardHeaders: map[string]bool{"Content-Type": true}, Source: upstream.NewFileSource(e.credFile),
		Inject: upstream.Injection{Header: "Authorization", Format: "Bearer {secret}"}}
	u.SetTransport(upstream.NewTransport())
	log := slog.New(slog.NewJSONHandler(e.logs, nil))
	k := brokertest.MustOpenBroker(t, brokertest.WithStore(bolt), brokertest.WithUpstream(u), brokertest.WithNow(time.Now),
		brokertest.WithOptions(func(o *broker.Options) { o.Ports, o.Log = brokertest.Ports(e.st), log }))
	api, err := httpapi.New(k.Broker, log, httpapi.UIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.sandbox = httptest.NewServer(api.Handler(httpapi.SandboxPlane))
	e.control = httptest.NewServer(api.Handler(httpapi.ControlPlane))
	t.Cleanup(func() {
		e.sandbox.Close()
		e.control.Close()
		k.Close() // the store closes after this cleanup
		if bytes.Contains(e.logs.Bytes(), []byte("CANARY")) {
			t.Error("the credential reached the logs")
		}
	})
	return e
}

func (e *env) call(t *testing.T, method, u, token, body string) (int, map[string]any) {
	t.Helper()
	var m map[string]any
	return callJSON(t, method, u, token, body, &m), m
}

// callJSON sends a request with a bearer token (and a JSON body when not
// empty), fails the test if the answer carries the canary credential, and
// decodes the answer into out (when not nil).
func callJSON(t *testing.T, method, u, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if bytes.Contains(data, []byte("CANARY")) {
		t.Fatalf("%s %s answered the credential: %s", method, u, data)
	}
	if out != nil {
		_ = json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

func (e *env) session(t *testing.T) string {
	t.Helper()
	status, s := e.call(t, "POST", e.control.URL+"/v1/sessions", admin,
		`{"task_id": "t", "untrusted_input": false, "grants": [{"upstream": "api", "rules": [{"method": "GET", "path": "/x"}]}]}`)
	if status != 201 {
		t.Fatalf("create session: %d %v", status, s)
	}
	return s["token"].(string)
}

// TestBrokerErrorsMarked: every answer the broker writes as an error carries
// X-Airlock-Code (its problem code) and an upstream's answer never does,
// even when the upstream sends one.
func TestBrokerErrorsMarked(t *testing.T) {
	e := newEnv(t)
	tok := e.session(t)
	for _, tt := range []struct {
		name, url, token, code string
	}{
		{"upstream answer", e.sandbox.URL + "/v1/proxy/api/x", tok, ""},
		{"no grant", e.sandbox.URL + "/v1/proxy/api/y", tok, "no_matching_grant"},
		{"unknown upstream", e.sandbox.URL + "/v1/proxy/nope/x", tok, "not_found"},
		{"bad token", e.sandbox.URL + "/v1/proxy/api/x", "nope", "invalid_token"},
		{"session token on the control plane", e.control.URL + "/v1/sessions", tok, "invalid_token"},
		{"no route", e.control.URL + "/v1/nothing-here", admin, "not_found"},
	} {
		req, _ := http.NewRequest("GET", tt.url, nil)
		req.Header.Set("Authorization", "Bearer "+tt.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Code string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if got := resp.Header.Get("X-Airlock-Code"); got != tt.code || p.Code != tt.code && tt.code != "" {
			t.Errorf("%s: %d X-Airlock-Code %q, problem code %q; want %q", tt.name, resp.StatusCode, got, p.Code, tt.code)
		}
	}
}

func TestAuditFailureFailsClosed(t *testing.T) {
	e := newEnv(t)
	tok := e.session(t)
	if status, _ := e.call(t, "GET", e.sandbox.URL+"/v1/proxy/api/x", tok, ""); status != 200 {
		t.Fatalf("healthy call: %d", status)
	}
	before := e.hits.Load()
	e.st.failAudit.Store(true)
	status, p := e.call(t, "GET", e.sandbox.URL+"/v1/proxy/api/x", tok, "")
	if status != 503 || p["code"] != "audit_unavailable" {
		t.Fatalf("with a failing audit log: %d %v", status, p)
	}
	if e.hits.Load() != before {
		t.Fatal("the upstream was called although its audit record could not be written")
	}
	// Control-plane changes fail closed too.
	if status, p := e.call(t, "POST", e.control.URL+"/v1/sessions", admin, `{"task_id": "t2", "untrusted_input": false}`); status != 503 || p["code"] != "audit_unavailable" {
		t.Fatalf("session creation with a failing audit log: %d %v", status, p)
	}
	e.st.failAudit.Store(false)
	if status, _ := e.call(t, "GET", e.sandbox.URL+"/v1/proxy/api/x", tok, ""); status != 200 {
		t.Fatalf("after recovery: %d", status)
	}
}

func TestCredentialUnavailableFailsClosed(t *testing.T) {
	e := newEnv(t)
	tok := e.session(t)
	if err := os.Remove(e.credFile); err != nil {
		t.Fatal(err)
	}
	status, p := e.call(t, "GET", e.sandbox.URL+"/v1/proxy/api/x", tok, "")
	if status != 503 || p["code"] != "credential_unavailable" {
		t.Fatalf("missing credential: %d %v", status, p)
	}
	if e.hits.Load() != 0 {
		t.Fatal("the upstream was called without its credential")
	}
	if status, r := e.call(t, "GET", e.control.URL+"/readyz", "", ""); status != 503 || r["checks"].(map[string]any)["credential:api"] == "ok" {
		t.Fatalf("readyz with a missing credential: %d %v", status, r)
	}
	// Rotation: a new file is picked up without a restart.
	if err := os.WriteFile(e.credFile, []byte("CANARY-rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if status, _ := e.call(t, "GET", e.sandbox.URL+"/v1/proxy/api/x", tok, ""); status != 200 {
		t.Fatalf("after the file came back: %d", status)
	}
}

// TestRoutesMatchSpec walks both routers and compares them with api/openapi.yaml.
func TestRoutesMatchSpec(t *testing.T) {
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "options": true, "head": true, "patch": true, "trace": true}
	want := map[string][]string{}
	for path, item := range spec.Paths {
		planes, _ := item["x-airlock-planes"].([]any)
		if len(planes) == 0 {
			t.Errorf("%s: no x-airlock-planes", path)
		}
		for m := range item {
			if !methods[m] {
				continue
			}
			for _, p := range planes {
				want[p.(string)] = append(want[p.(string)], strings.ToUpper(m)+" "+path)
			}
		}
	}
	api, err := httpapi.New(mustBroker(t), slog.New(slog.NewTextHandler(io.Discard, nil)), httpapi.UIOptions{Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	wildcard := regexp.MustCompile(`/\*$`)
	for plane, h := range map[string]http.Handler{"sandbox": api.Handler(httpapi.SandboxPlane), "control": api.Handler(httpapi.ControlPlane)} {
		var got []string
		err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			got = append(got, method+" "+wildcard.ReplaceAllString(route, "/{path}"))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		sort.Strings(want[plane])
		if diff := cmp.Diff(want[plane], got); diff != "" {
			t.Errorf("%s plane: routes and api/openapi.yaml disagree (-spec +router):\n%s", plane, diff)
		}
	}
}

func mustBroker(t *testing.T) *broker.Broker {
	t.Helper()
	return brokertest.MustOpenBroker(t, brokertest.WithDurability(store.DurabilityFsync),
		brokertest.WithOptions(func(o *broker.Options) { o.DefaultTTL = time.Minute })).Broker
}

// TestPprofIsOptInAndAdminOnly: Go's profiler is routed only when configured,
// and then answers admin tokens only.
func TestPprofIsOptInAndAdminOnly(t *testing.T) {
	b := mustBroker(t)
	_, operatorToken, err := b.CreateToken(context.Background(), auth.Principal{ID: "admin", Role: auth.RoleAdmin}, auth.RoleOperator, "ops", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	get := func(h http.Handler, token, path string) int {
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	off, err := httpapi.New(b, log, httpapi.UIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code := get(off.Handler(httpapi.ControlPlane), admin, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("pprof not configured: heap profile answered %d, want 404", code)
	}
	reg := prometheus.NewRegistry()
	on, err := httpapi.New(b, log, httpapi.UIOptions{Pprof: true, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	control := on.Handler(httpapi.ControlPlane)
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {operatorToken, http.StatusForbidden}, {admin, http.StatusOK}} {
		if code := get(control, tc.token, "/debug/pprof/heap"); code != tc.want {
			t.Errorf("heap profile with token %.6q…: %d, want %d", tc.token, code, tc.want)
		}
	}
	if code := get(on.Handler(httpapi.SandboxPlane), admin, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("sandbox plane: heap profile answered %d, want 404", code)
	}
}
