package config

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/oauth2"
)

const oauthHead = "admin_token: ${ADMIN}\nupstreams:\n  - name: billing\n    base_url: https://api.billing.example\n"

func TestOAuth2ConfigErrors(t *testing.T) {
	admin := env(map[string]string{"ADMIN": "0123456789abcdef0"})
	cred := func(s string) string {
		return oauthHead + "    credential:\n      source: oauth2\n      token_url: https://auth.example/token\n      client_id: c\n" + s
	}
	for _, tc := range []struct{ name, yaml, field string }{
		{"fail-grant type", cred("      client_secret: {source: env, name: S}\n      grant_type: password\n"), "upstreams[0].credential.grant_type"},
		{"fail-refresh_token without its token", cred("      grant_type: refresh_token\n"), "upstreams[0].credential.refresh_token"},
		{"fail-refresh_token source", cred("      grant_type: refresh_token\n      refresh_token: {source: aws}\n"), "upstreams[0].credential.refresh_token.source"},
		{"fail-refresh_token on client_credentials", cred("      client_secret: {source: env, name: S}\n      refresh_token: {source: env, name: RT}\n"), "upstreams[0].credential.refresh_token"},
		{"fail-client_credentials without a secret", cred(""), "upstreams[0].credential.client_secret"},
		{"fail-scopes_for key", cred("      client_secret: {source: env, name: S}\n      scopes_for: {'/items': [r]}\n"), "upstreams[0].credential.scopes_for"},
		{"fail-scopes_for glob mid-path", cred("      client_secret: {source: env, name: S}\n      scopes_for: {'GET /a/**/b': [r]}\n"), "upstreams[0].credential.scopes_for"},
		{"fail-scopes_for empty", cred("      client_secret: {source: env, name: S}\n      scopes_for: {'GET /a': []}\n"), "upstreams[0].credential.scopes_for"},
		{"fail-scopes_for outside scopes", cred("      client_secret: {source: env, name: S}\n      scopes: [r]\n      scopes_for: {'GET /a': [w]}\n"), "upstreams[0].credential.scopes_for"},
		{"fail-revocation_url", cred("      client_secret: {source: env, name: S}\n      revocation_url: ftp://x/revoke\n"), "upstreams[0].credential.revocation_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), admin)
			var fe *fault.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want field %s", err, tc.field)
			}
		})
	}
}

// grant_type refresh_token builds the refresh minter (a public client
// needs no client secret), its scopes_for in a stable order.
func TestOAuth2RefreshConfig(t *testing.T) {
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0", "RT": "rt-CANARY-config"})
	c, err := Parse([]byte(oauthHead+`    credential:
      source: oauth2
      grant_type: refresh_token
      token_url: https://auth.example/token
      revocation_url: https://auth.example/revoke
      client_id: public-client
      refresh_token: {source: env, name: RT}
      scopes: [a, b, c]
      scopes_for: {"POST /z/**": [c], "GET /a/**": [a]}
`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	ups, _, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := ups["billing"].Minter.(*oauth2.Refresh)
	if !ok || m.ClientSecret != nil || m.RevocationURL == nil || m.Describe() != "oauth2:refresh_token:auth.example/public-client" {
		t.Fatalf("minter %#v", ups["billing"].Minter)
	}
	got, err := oauth2.Scopes([]grants.Rule{{Method: "POST", Path: "/z/1"}, {Method: "GET", Path: "/a"}}, m.Scopes, m.ScopesFor)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "c"}, got); diff != "" {
		t.Fatal(diff)
	}
}

// The token endpoints (oauth2 token_url, github_app api_url) trust the
// upstream's ca_cert alone when it is set, and never follow a redirect.
func TestTokenEndpointsCACert(t *testing.T) {
	var redirected atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/token":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"access_token":"at-tls","token_type":"Bearer","expires_in":60}`)
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		case "/elsewhere":
			redirected.Add(1)
		case "/app/installations/1/access_tokens":
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"token":"ghs_tls","expires_at":"2030-01-01T00:00:00Z"}`)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	keyFile := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0", "S": "client-secret"})
	sc := upstream.Scope{Now: time.Now(), Expires: time.Now().Add(time.Hour), Rules: []grants.Rule{{Method: "GET", Path: "/x"}}}
	mint := func(t *testing.T, credential, caCert string) error {
		t.Helper()
		y := "admin_token: ${ADMIN}\nupstreams:\n  - name: u\n    base_url: " + srv.URL + "\n"
		if caCert != "" {
			y += "    ca_cert: " + caCert + "\n"
		}
		c, err := Parse([]byte(y+"    credential: "+credential+"\n"), getenv)
		if err != nil {
			t.Fatal(err)
		}
		ups, _, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ups["u"].Minter.Mint(t.Context(), sc)
		return err
	}
	oauth := func(path string) string {
		return "{source: oauth2, token_url: '" + srv.URL + path + "', client_id: c, client_secret: {source: env, name: S}}"
	}
	gh := "{source: github_app, app_id: '1', installation_id: '1', private_key_file: " + keyFile + ", api_url: '" + srv.URL + "'}"
	if err := mint(t, oauth("/token"), ca); err != nil {
		t.Fatalf("oauth2 with ca_cert: %v", err)
	}
	if err := mint(t, gh, ca); err != nil {
		t.Fatalf("github_app with ca_cert: %v", err)
	}
	if err := mint(t, oauth("/token"), ""); err == nil {
		t.Fatal("oauth2 trusted a certificate outside the system roots without ca_cert")
	}
	if err := mint(t, gh, ""); err == nil {
		t.Fatal("github_app trusted a certificate outside the system roots without ca_cert")
	}
	if err := mint(t, oauth("/redirect"), ca); err == nil || redirected.Load() != 0 || strings.Contains(err.Error(), "client-secret") {
		t.Fatalf("a redirected token request: %v (followed %d)", err, redirected.Load())
	}
}
