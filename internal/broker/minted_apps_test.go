package broker_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/githubapp"
	"github.com/airlock-broker/airlock/internal/upstream/oauth2"
)

// fakeIssuer is a loopback token issuer's book: tokens issued, with the
// issuer's notion of "now" taken from the request (the broker's fake
// clock), and those revoked.
type fakeIssuer struct {
	mu      sync.Mutex
	n       int
	issued  map[string]bool
	revoked map[string]bool
	asked   []string // what each token was asked for (scope, or the JSON body)
}

func newFakeIssuer() *fakeIssuer {
	return &fakeIssuer{issued: map[string]bool{}, revoked: map[string]bool{}}
}

func (f *fakeIssuer) issue(prefix, asked string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	tok := fmt.Sprintf("%s-%04d-%s", prefix, f.n, strings.Repeat("z", 12))
	f.issued[tok] = true
	f.asked = append(f.asked, asked)
	return tok
}

// revoke marks tok revoked; false if it was never issued.
func (f *fakeIssuer) revoke(tok string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.issued[tok] {
		return false
	}
	f.revoked[tok] = true
	return true
}

// gone: the issuer no longer honours the lease's token.
func (f *fakeIssuer) gone(_ context.Context, l upstream.Lease) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.revoked[l.Secret.Reveal()]
}

// TestMinterContractGitHubApp runs the lifecycle contract against the
// GitHub App minter and a loopback GitHub API that verifies the app JWT
// with the app's public key, issues installation tokens living 10 minutes
// from the JWT's time (the broker's clock), and revokes a token on
// DELETE /installation/token authenticated by it.
func TestMinterContractGitHubApp(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := newFakeIssuer()
	gh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/app/installations/42/access_tokens":
			var claims jwt.RegisteredClaims
			_, err := jwt.ParseWithClaims(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), &claims,
				func(*jwt.Token) (any, error) { return &key.PublicKey, nil },
				jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer("7"), jwt.WithTimeFunc(func() time.Time { return claims.IssuedAt.Add(time.Minute) }))
			if err != nil || claims.IssuedAt == nil {
				http.Error(w, `{"message":"bad JWT"}`, http.StatusUnauthorized)
				return
			}
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			asked, _ := json.Marshal(body)
			tok := iss.issue("ghs_contract", string(asked))
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"token":%q,"expires_at":%q}`, tok, claims.IssuedAt.Add(time.Minute+10*time.Minute).UTC().Format(time.RFC3339))
		case r.Method == http.MethodDelete && r.URL.Path == "/installation/token":
			if !iss.revoke(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")) {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer gh.Close()
	api, _ := url.Parse(gh.URL)
	m := &githubapp.App{AppID: "7", InstallationID: "42", Key: key, APIURL: api,
		Repositories: []string{"widgets", "gadgets"}, Permissions: map[string]string{"issues": "write"},
		Client: &http.Client{Transport: upstream.NewTransport(), Timeout: 10 * time.Second}}
	brokertest.MinterContract{
		Minter: m, Start: t0, Upstream: httpUpstream("gh"),
		Grant:  grants.Spec{Upstream: "gh", Rules: []grants.Rule{{Method: "GET", Path: "/repos/acme/widgets/issues"}}},
		Grant2: grants.Spec{Upstream: "gh", Rules: []grants.Rule{{Method: "POST", Path: "/repos/acme/gadgets/issues"}}},
		Request: func() *broker.Request {
			return &broker.Request{Call: grants.Call{Method: "GET", Segments: []string{"repos", "acme", "widgets", "issues"}, Header: http.Header{}}}
		},
		Gone: iss.gone,
	}.Run(t)
	iss.mu.Lock()
	defer iss.mu.Unlock()
	if want := `{"permissions":{"issues":"read"},"repositories":["widgets"]}`; iss.asked[0] != want {
		t.Fatalf("first token asked %s, want %s", iss.asked[0], want)
	}
	var widened bool
	for _, a := range iss.asked {
		widened = widened || a == `{"permissions":{"issues":"write"},"repositories":["widgets","gadgets"]}`
	}
	if !widened {
		t.Fatalf("the second grant did not widen the token: %q", iss.asked)
	}
}

// fakeOAuth2 is a loopback authorization server for the contract: the
// client_credentials and refresh_token grants (rotating, single-use
// refresh tokens), tokens living 10 minutes (expires_in, counted from the
// broker's clock by the minter), an RFC 7009 revocation endpoint.
func fakeOAuth2(t *testing.T, iss *fakeIssuer) *httptest.Server {
	var mu sync.Mutex
	current := "rt-contract-0"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, sec, ok := r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		if !ok || id != "client" || sec != "client-secret-contract" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		switch r.URL.Path {
		case "/token":
			var rt string
			switch r.PostFormValue("grant_type") {
			case "client_credentials":
			case "refresh_token":
				mu.Lock()
				if r.PostFormValue("refresh_token") != current {
					mu.Unlock()
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
					return
				}
				current = fmt.Sprintf("rt-contract-%d", time.Now().UnixNano())
				rt = current
				mu.Unlock()
			default:
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":"unsupported_grant_type"}`))
				return
			}
			tok := iss.issue("at-contract", r.PostFormValue("scope"))
			_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"bearer","expires_in":600,"refresh_token":%q}`, tok, rt)
		case "/revoke":
			iss.revoke(r.PostFormValue("token")) // 200 for an unknown token too (RFC 7009 §2.2)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func oauth2Contract(m upstream.Minter, iss *fakeIssuer) brokertest.MinterContract {
	return brokertest.MinterContract{
		Minter: m, Start: t0, Upstream: httpUpstream("oauth"),
		Grant:  grants.Spec{Upstream: "oauth", Rules: []grants.Rule{{Method: "GET", Path: "/items"}}},
		Grant2: grants.Spec{Upstream: "oauth", Rules: []grants.Rule{{Method: "POST", Path: "/items"}}},
		Request: func() *broker.Request {
			return &broker.Request{Call: grants.Call{Method: "GET", Segments: []string{"items"}, Header: http.Header{}}}
		},
		Gone: iss.gone,
	}
}

func oauth2Scopes(t *testing.T) []oauth2.ScopeRule {
	t.Helper()
	read, err := oauth2.ParseScopeRule("GET /items/**", []string{"items:read"})
	if err != nil {
		t.Fatal(err)
	}
	write, err := oauth2.ParseScopeRule("POST /items/**", []string{"items:write"})
	if err != nil {
		t.Fatal(err)
	}
	return []oauth2.ScopeRule{read, write}
}

// TestMinterContractOAuth2ClientCredentials runs the lifecycle contract
// against the client_credentials minter (scopes_for narrowing, RFC 7009
// revocation) and a loopback authorization server.
func TestMinterContractOAuth2ClientCredentials(t *testing.T) {
	iss := newFakeIssuer()
	srv := fakeOAuth2(t, iss)
	tu, _ := url.Parse(srv.URL + "/token")
	ru, _ := url.Parse(srv.URL + "/revoke")
	m := &oauth2.ClientCredentials{TokenURL: tu, RevocationURL: ru, ClientID: "client",
		ClientSecret: fixedSource("client-secret-contract"),
		Scopes:       []string{"items:read", "items:write", "admin"}, ScopesFor: oauth2Scopes(t),
		Client: &http.Client{Transport: upstream.NewTransport(), Timeout: 10 * time.Second}}
	oauth2Contract(m, iss).Run(t)
	iss.mu.Lock()
	defer iss.mu.Unlock()
	if iss.asked[0] != "items:read" || !containsString(iss.asked, "items:read items:write") {
		t.Fatalf("scopes asked: %q", iss.asked)
	}
}

// TestMinterContractOAuth2Refresh runs the lifecycle contract against the
// refresh_token minter: every mint and renewal is a refresh that rotates
// the (single-use) refresh token, which must never be presented twice.
func TestMinterContractOAuth2Refresh(t *testing.T) {
	iss := newFakeIssuer()
	srv := fakeOAuth2(t, iss)
	tu, _ := url.Parse(srv.URL + "/token")
	ru, _ := url.Parse(srv.URL + "/revoke")
	m := &oauth2.Refresh{TokenURL: tu, RevocationURL: ru, ClientID: "client",
		ClientSecret: fixedSource("client-secret-contract"),
		Initial:      fixedSource("rt-contract-0"),
		Scopes:       []string{"items:read", "items:write"}, ScopesFor: oauth2Scopes(t),
		Client: &http.Client{Transport: upstream.NewTransport(), Timeout: 10 * time.Second}}
	oauth2Contract(m, iss).Run(t)
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// fixedSource is a fixed secret.
type fixedSource string

func (s fixedSource) Fetch(context.Context) (upstream.Secret, error) {
	return upstream.NewSecret(string(s)), nil
}
func (s fixedSource) Describe() string { return "static" }
