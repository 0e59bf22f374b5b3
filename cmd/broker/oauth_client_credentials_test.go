package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// fakeAuthServer is a loopback OAuth2 authorization server (client
// credentials, client_secret_basic) issuing short-lived tokens, and a
// resource API that accepts only a live one and echoes it back.
type fakeAuthServer struct {
	*httptest.Server
	secret string

	mu        sync.Mutex
	revoked   bool // the client is revoked: invalid_client
	n         int
	expiry    map[string]time.Time
	scopes    []string
	apiCalls  int
	refusedAt int // API calls refused for an expired or unknown token
}

func newFakeAuthServer(t *testing.T, secret string, life time.Duration) *fakeAuthServer {
	a := &fakeAuthServer{secret: secret, expiry: map[string]time.Time{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch r.URL.Path {
		case "/oauth/token":
			id, sec, ok := r.BasicAuth()
			// RFC 6749 §2.3.1: id and secret are form-encoded inside basic auth.
			id, _ = url.QueryUnescape(id)
			sec, _ = url.QueryUnescape(sec)
			if !ok || id != "airlock-client" || sec != a.secret || a.revoked || r.PostFormValue("grant_type") != "client_credentials" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
				return
			}
			a.scopes = append(a.scopes, r.PostFormValue("scope"))
			a.n++
			tok := fmt.Sprintf("at-CANARY%04d-%s", a.n, strings.Repeat("q", 16))
			a.expiry[tok] = time.Now().Add(life)
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, tok, int(life/time.Second))
		default:
			a.apiCalls++
			tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			exp, ok := a.expiry[tok]
			if !ok || !time.Now().Before(exp) {
				a.refusedAt++
				http.Error(w, "invalid_token", http.StatusUnauthorized)
				return
			}
			_, _ = fmt.Fprintf(w, `{"token":%q,"client_secret":%q}`, tok, a.secret)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *fakeAuthServer) tokens() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.expiry))
	for tok := range a.expiry {
		out = append(out, tok)
	}
	return out
}

// TestOAuth2ClientCredentials: through the real broker, a session's calls
// carry an access token the broker got with the client_credentials grant
// (client secret from an env source, the configured scopes); calls keep
// working across the token's expiry (renewed before it lapses: the API
// never saw an expired token); neither the access token nor the client
// secret reaches the sandbox, the audit log or the logs; a revoked client
// fails the next session's call closed (503 credential_unavailable,
// nothing sent).
func TestOAuth2ClientCredentials(t *testing.T) {
	as := newFakeAuthServer(t, brokertest.Canary, 2*time.Second)
	b := startBroker(t, brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, ExtraYAML: `  - name: oauth
    base_url: ` + as.URL + `/api
    credential:
      source: oauth2
      token_url: ` + as.URL + `/oauth/token
      client_id: airlock-client
      client_secret: {source: env, name: CANARY_TOKEN}
      scopes: [read:items, write:items]
`})
	grant := map[string]any{"upstream": "oauth", "rules": []any{map[string]any{"method": "GET", "path": "/items"}}}
	s := b.Session(brokertest.TrustedSession(grant))
	var answers [][]byte
	call := func(token string) brokertest.Response {
		r := b.Do("GET", b.Sandbox+"/v1/proxy/oauth/items", token, nil)
		answers = append(answers, r.Body)
		return r
	}
	if r := call(s.Token); r.Status != 200 {
		t.Fatalf("first call: %d %s", r.Status, r.Body)
	}
	// Keep calling until the broker has renewed the token: every call succeeds.
	brokertest.Eventually(t, 10*time.Second, func() bool {
		if r := call(s.Token); r.Status != 200 {
			t.Fatalf("a call across expiry: %d %s", r.Status, r.Body)
		}
		return len(as.tokens()) >= 3
	})
	as.mu.Lock()
	refused, scopes := as.refusedAt, as.scopes
	as.mu.Unlock()
	if refused != 0 {
		t.Fatalf("the API saw %d calls with an expired token", refused)
	}
	if scopes[0] != "read:items write:items" {
		t.Fatalf("scope %q", scopes[0])
	}

	// The client is revoked: a new session's call fails closed, nothing sent.
	as.mu.Lock()
	as.revoked = true
	before := as.apiCalls
	as.mu.Unlock()
	s2 := b.Session(brokertest.TrustedSession(grant))
	b.Do("GET", b.Sandbox+"/v1/proxy/oauth/items", s2.Token, nil).WantProblem(t, 503, "credential_unavailable")
	as.mu.Lock()
	after := as.apiCalls
	as.mu.Unlock()
	if after != before {
		t.Fatal("a call was sent without a credential")
	}

	tokens := as.tokens()
	for i, a := range answers {
		brokertest.AssertNoCanary(t, fmt.Sprintf("answer %d", i), a)
		assertNoneOf(t, fmt.Sprintf("answer %d", i), a, tokens)
	}
	audit := b.AuditExport()
	brokertest.AssertNoCanary(t, "audit export", audit)
	assertNoneOf(t, "audit export", audit, tokens)
	b.Stop()
	assertNoneOf(t, "broker logs", b.Logs.Bytes(), tokens)
}
