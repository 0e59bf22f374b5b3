package main

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// fakeRefreshServer is a loopback OAuth2 authorization server over TLS
// (its certificate from a test CA the upstream's ca_cert names) with
// expiring access tokens and rotating, single-use refresh tokens: a
// refresh answers a new access token and a new refresh token, and the
// one used is dead (presenting it again is invalid_grant). Its resource
// API accepts only a live access token and, hostile, echoes it back with
// the current refresh token.
type fakeRefreshServer struct {
	*httptest.Server
	clientSecret string
	life         time.Duration

	mu       sync.Mutex
	current  string   // the one live refresh token ("" once revoked)
	rts      []string // every refresh token issued, the initial one first
	reused   int      // refreshes with a token already rotated away
	n        int
	expiry   map[string]time.Time
	scopes   []string
	apiCalls int
	refused  int // API calls with an expired or unknown token
}

func newFakeRefreshServer(t *testing.T, clientSecret, initial string, life time.Duration) *fakeRefreshServer {
	a := &fakeRefreshServer{clientSecret: clientSecret, life: life, current: initial, rts: []string{initial}, expiry: map[string]time.Time{}}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

func (a *fakeRefreshServer) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/oauth/token":
		id, sec, ok := r.BasicAuth()
		id, _ = url.QueryUnescape(id)
		sec, _ = url.QueryUnescape(sec)
		if !ok || id != "airlock-client" || sec != a.clientSecret {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		rt := r.PostFormValue("refresh_token")
		if r.PostFormValue("grant_type") != "refresh_token" || rt == "" || rt != a.current {
			for _, old := range a.rts {
				if rt == old && rt != a.current {
					a.reused++
				}
			}
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		a.n++
		a.scopes = append(a.scopes, r.PostFormValue("scope"))
		at := fmt.Sprintf("at-CANARY%04d-%s", a.n, strings.Repeat("a", 16))
		a.current = fmt.Sprintf("rt-CANARY%04d-%s", a.n, strings.Repeat("r", 16))
		a.rts = append(a.rts, a.current)
		a.expiry[at] = time.Now().Add(a.life)
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d,"refresh_token":%q}`, at, int(a.life/time.Second), a.current)
	default:
		a.apiCalls++
		at := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		exp, ok := a.expiry[at]
		if !ok || !time.Now().Before(exp) {
			a.refused++
			http.Error(w, "invalid_token", http.StatusUnauthorized)
			return
		}
		_, _ = fmt.Fprintf(w, `{"token":%q,"refresh_token":%q,"client_secret":%q}`, at, a.current, a.clientSecret)
	}
}

// secrets are every access and refresh token the server issued.
func (a *fakeRefreshServer) secrets() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]string{}, a.rts...)
	for at := range a.expiry {
		out = append(out, at)
	}
	return out
}

func (a *fakeRefreshServer) state() (issued, reused, refused, apiCalls int, scopes []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n, a.reused, a.refused, a.apiCalls, append([]string{}, a.scopes...)
}

// writeServerCA writes the TLS server's certificate as the PEM file an
// upstream's ca_cert names.
func writeServerCA(t *testing.T, s *httptest.Server) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOAuth2RefreshTokenRotation: through the real broker, an upstream
// with grant_type refresh_token (token endpoint over TLS trusted through
// the upstream's ca_cert, scopes narrowed by scopes_for) keeps working
// across access-token expiry while the server rotates its single-use
// refresh tokens (never presented twice); a restarted broker on the same
// data dir goes on with the rotated token (the configured one is dead),
// which is stored only sealed; no access or refresh token reaches the
// sandbox, the audit log or the logs; a revoked refresh token fails the
// call closed (503 credential_unavailable, nothing sent), until the
// operator configures a new one.
func TestOAuth2RefreshTokenRotation(t *testing.T) {
	const initial = "rt-CANARY-initial-0123456789"
	as := newFakeRefreshServer(t, brokertest.Canary, initial, 2*time.Second)
	ca := writeServerCA(t, as.Server)
	opts := brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, Env: map[string]string{"OAUTH_RT": initial}, ExtraYAML: `  - name: oauth
    base_url: ` + as.URL + `/api
    ca_cert: ` + ca + `
    credential:
      source: oauth2
      grant_type: refresh_token
      token_url: ` + as.URL + `/oauth/token
      client_id: airlock-client
      client_secret: {source: env, name: CANARY_TOKEN}
      refresh_token: {source: env, name: OAUTH_RT}
      scopes: [items:read, items:write, admin]
      scopes_for:
        "GET /items/**": [items:read]
        "POST /items/**": [items:write]
`}
	b := startBroker(t, opts)
	grant := map[string]any{"upstream": "oauth", "rules": []any{map[string]any{"method": "GET", "path": "/items"}}}
	var answers [][]byte
	call := func(b *brokertest.Proc, token string) brokertest.Response {
		r := b.Do("GET", b.Sandbox+"/v1/proxy/oauth/items", token, nil)
		answers = append(answers, r.Body)
		return r
	}
	s := b.Session(brokertest.TrustedSession(grant))
	if r := call(b, s.Token); r.Status != 200 {
		t.Fatalf("first call: %d %s", r.Status, r.Body)
	}
	// Keep calling across the access tokens' expiry: each renewal is a
	// refresh that rotates the refresh token.
	brokertest.Eventually(t, 10*time.Second, func() bool {
		if r := call(b, s.Token); r.Status != 200 {
			t.Fatalf("a call across expiry: %d %s", r.Status, r.Body)
		}
		issued, _, _, _, _ := as.state()
		return issued >= 3
	})
	issued, reused, refused, _, scopes := as.state()
	if refused != 0 || reused != 0 {
		t.Fatalf("the API saw %d expired tokens; %d rotated-away refresh tokens were presented", refused, reused)
	}
	for _, sc := range scopes {
		if sc != "items:read" {
			t.Fatalf("asked scope %q, want only what GET /items needs", sc)
		}
	}
	audit := b.AuditExport()
	b.Stop()
	assertNoneOf(t, "broker logs", b.Logs.Bytes(), as.secrets())

	// The store holds the rotated refresh token only sealed.
	stored := as.secrets()[issued] // the last refresh token issued
	_ = filepath.WalkDir(b.DataDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(p)
			assertNoneOf(t, "the data dir ("+d.Name()+")", data, []string{stored, initial})
		}
		return nil
	})

	// A restart on the same data dir goes on with the rotated token.
	opts.DataDir = b.DataDir
	b2 := startBroker(t, opts)
	s2 := b2.Session(brokertest.TrustedSession(grant))
	if r := call(b2, s2.Token); r.Status != 200 {
		t.Fatalf("after a restart: %d %s", r.Status, r.Body)
	}
	if _, reused, _, _, _ := as.state(); reused != 0 {
		t.Fatalf("the restarted broker presented a rotated-away refresh token (%d)", reused)
	}

	// The refresh token is revoked: the next session's call fails closed.
	as.mu.Lock()
	as.current = ""
	as.mu.Unlock()
	_, _, _, before, _ := as.state()
	s3 := b2.Session(brokertest.TrustedSession(grant))
	b2.Do("GET", b2.Sandbox+"/v1/proxy/oauth/items", s3.Token, nil).WantProblem(t, 503, "credential_unavailable")
	if _, _, _, after, _ := as.state(); after != before {
		t.Fatal("a call was sent without a credential")
	}

	audit = append(audit, b2.AuditExport()...)
	b2.Stop()

	// The operator configures a new refresh token: a restart starts a new
	// chain from it (the stored chain started from the old one).
	const reissued = "rt-CANARY-reissued-9876543210"
	as.mu.Lock()
	as.current = reissued
	as.rts = append(as.rts, reissued)
	as.mu.Unlock()
	opts.Env = map[string]string{"OAUTH_RT": reissued}
	b3 := startBroker(t, opts)
	s4 := b3.Session(brokertest.TrustedSession(grant))
	if r := call(b3, s4.Token); r.Status != 200 {
		t.Fatalf("with a newly configured refresh token: %d %s", r.Status, r.Body)
	}

	all := as.secrets()
	for i, a := range answers {
		brokertest.AssertNoCanary(t, fmt.Sprintf("answer %d", i), a)
		assertNoneOf(t, fmt.Sprintf("answer %d", i), a, all)
	}
	audit = append(audit, b3.AuditExport()...)
	brokertest.AssertNoCanary(t, "audit export", audit)
	assertNoneOf(t, "audit export", audit, all)
	b3.Stop()
	assertNoneOf(t, "broker logs", append(b2.Logs.Bytes(), b3.Logs.Bytes()...), all)
}
