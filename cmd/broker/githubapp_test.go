package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
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

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// fakeGitHub is a loopback GitHub API: it verifies the app JWT with the
// app's public key, issues installation tokens (recording what each was
// asked for), revokes them on DELETE /installation/token, and serves
// /repos/{owner}/{repo}/... only to a live token for that repository,
// echoing the token back (the broker must scrub it).
type fakeGitHub struct {
	*httptest.Server
	t     *testing.T
	pub   *rsa.PublicKey
	appID string

	mu      sync.Mutex
	n       int
	issued  map[string]ghIssued // token → what it covers
	asked   []ghAsked
	revoked []string
	badJWT  int
	calls   int // API calls (not token requests)
}

type ghAsked struct {
	Installation string
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

type ghIssued struct {
	repos   []string
	revoked bool
}

func newFakeGitHub(t *testing.T, pub *rsa.PublicKey, appID string) *fakeGitHub {
	g := &fakeGitHub{t: t, pub: pub, appID: appID, issued: map[string]ghIssued{}}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
	return g
}

func (g *fakeGitHub) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/app/installations/") && strings.HasSuffix(r.URL.Path, "/access_tokens"):
		claims := jwt.RegisteredClaims{}
		tok, err := jwt.ParseWithClaims(bearer, &claims, func(*jwt.Token) (any, error) { return g.pub, nil },
			jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(g.appID), jwt.WithIssuedAt(), jwt.WithExpirationRequired())
		if err != nil || !tok.Valid || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 10*time.Minute {
			g.badJWT++
			http.Error(w, `{"message":"A JSON web token could not be decoded"}`, http.StatusUnauthorized)
			return
		}
		var a ghAsked
		_ = json.NewDecoder(r.Body).Decode(&a)
		a.Installation = strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/app/installations/"), "/access_tokens")
		g.asked = append(g.asked, a)
		g.n++
		token := fmt.Sprintf("ghs_CANARY%04dminted%s", g.n, strings.Repeat("x", 20))
		g.issued[token] = ghIssued{repos: a.Repositories}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"token": token, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
			"permissions": a.Permissions, "repository_selection": "selected"})
	case r.Method == "DELETE" && r.URL.Path == "/installation/token":
		is, ok := g.issued[bearer]
		if !ok || is.revoked {
			http.Error(w, "Bad credentials", http.StatusUnauthorized)
			return
		}
		is.revoked = true
		g.issued[bearer] = is
		g.revoked = append(g.revoked, bearer)
		w.WriteHeader(http.StatusNoContent)
	case strings.HasPrefix(r.URL.Path, "/repos/"):
		g.calls++
		is, ok := g.issued[bearer]
		segs := strings.Split(r.URL.Path, "/")
		if !ok || is.revoked || len(segs) < 4 || (len(is.repos) > 0 && !contains(is.repos, segs[3])) {
			http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"repo": segs[3], "token_echo": bearer,
			"b64": base64.StdEncoding.EncodeToString([]byte("x-access-token:" + bearer))})
	default:
		http.NotFound(w, r)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func (g *fakeGitHub) snapshot() (asked []ghAsked, revoked []string, tokens []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for tok := range g.issued {
		tokens = append(tokens, tok)
	}
	return append([]ghAsked(nil), g.asked...), append([]string(nil), g.revoked...), tokens
}

// assertNoneOf fails if data holds any of values, raw, base64 or URL-encoded.
func assertNoneOf(t *testing.T, what string, data []byte, values []string) {
	t.Helper()
	for _, v := range values {
		for _, f := range []string{v, url.QueryEscape(v), base64.StdEncoding.EncodeToString([]byte(v)), base64.StdEncoding.EncodeToString([]byte("x-access-token:" + v))} {
			if strings.Contains(string(data), f) {
				t.Fatalf("%s contains a minted token (form %q)", what, f)
			}
		}
	}
}

func writeAppKey(t *testing.T) (*rsa.PrivateKey, string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "app.pem")
	data := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return key, path
}

// githubAppYAML is the config of upstream "github", a GitHub App on gh
// allowed repos (a YAML list's items).
func githubAppYAML(gh *fakeGitHub, keyFile, repos string) string {
	return `  - name: github
    base_url: ` + gh.URL + `
    credential:
      source: github_app
      app_id: "1234"
      installation_id: "42"
      private_key_file: ` + keyFile + `
      api_url: ` + gh.URL + `
      repositories: [` + repos + `]
      permissions: {contents: write, issues: write, metadata: read}
    inject: {header: Authorization, format: "Bearer {secret}"}
`
}

// TestGitHubAppTokenPerSession: through the real broker, a session's first
// call mints an installation token narrowed to the grant's repository
// (pinned in the rule) and to read permissions (a GET-only grant); the
// token is injected and works for that repository; it never reaches the
// sandbox, the audit log or the logs; another session gets its own token;
// killing a session revokes its token at GitHub.
func TestGitHubAppTokenPerSession(t *testing.T) {
	key, keyFile := writeAppKey(t)
	gh := newFakeGitHub(t, &key.PublicKey, "1234")
	b := startBroker(t, brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, ExtraYAML: githubAppYAML(gh, keyFile, "widgets, gadgets")})
	repoRule := func(repo string) map[string]any {
		return map[string]any{"method": "GET", "path": "/repos/{owner}/{repo}/issues", "constraints": map[string]any{
			"path.owner": map[string]any{"pin": "acme"}, "path.repo": map[string]any{"pin": repo}}}
	}
	s1 := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "github", "rules": []any{repoRule("widgets")}}))

	var answers [][]byte
	for range 2 {
		r := b.Do("GET", b.Sandbox+"/v1/proxy/github/repos/acme/widgets/issues", s1.Token, nil)
		if r.Status != 200 {
			t.Fatalf("call: %d %s", r.Status, r.Body)
		}
		answers = append(answers, r.Body)
		for k, vs := range r.Header {
			answers = append(answers, []byte(k+": "+strings.Join(vs, ",")))
		}
	}
	asked, revoked, _ := gh.snapshot()
	want := []ghAsked{{Installation: "42", Repositories: []string{"widgets"}, Permissions: map[string]string{"contents": "read", "issues": "read", "metadata": "read"}}}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Fatalf("token requests (-want +got):\n%s", diff)
	}
	if len(revoked) != 0 {
		t.Fatalf("revoked before the session ended: %d", len(revoked))
	}
	// The grant does not allow another repository: refused by the broker, and the token could not anyway.
	b.Do("GET", b.Sandbox+"/v1/proxy/github/repos/acme/gadgets/issues", s1.Token, nil).WantProblem(t, 403, "constraint_violated")

	// A second session gets its own token, for its own repository.
	s2 := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "github", "rules": []any{repoRule("gadgets")}}))
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/github/repos/acme/gadgets/issues", s2.Token, nil); r.Status != 200 {
		t.Fatalf("second session: %d %s", r.Status, r.Body)
	}
	asked, _, tokens := gh.snapshot()
	if len(asked) != 2 || len(tokens) != 2 || !cmp.Equal(asked[1].Repositories, []string{"gadgets"}) {
		t.Fatalf("second token asked for %+v (%d tokens)", asked, len(tokens))
	}

	// Kill the first session: its token is revoked at GitHub, the other's is not.
	if r := b.Do("DELETE", b.Control+"/v1/sessions/"+s1.ID, brokertest.ProcAdminToken, nil); r.Status/100 != 2 {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	brokertest.Eventually(t, 5*time.Second, func() bool { _, rv, _ := gh.snapshot(); return len(rv) == 1 })
	_, revoked, _ = gh.snapshot()
	gh.mu.Lock()
	s1Tok := ""
	for tok, is := range gh.issued {
		if contains(is.repos, "widgets") {
			s1Tok = tok
		}
	}
	gh.mu.Unlock()
	if revoked[0] != s1Tok {
		t.Fatal("the killed session's token was not the one revoked")
	}
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/github/repos/acme/gadgets/issues", s2.Token, nil); r.Status != 200 {
		t.Fatalf("the other session after the kill: %d %s", r.Status, r.Body)
	}

	_, _, tokens = gh.snapshot()
	for i, a := range answers {
		assertNoneOf(t, fmt.Sprintf("sandbox answer %d", i), a, tokens)
	}
	assertNoneOf(t, "audit export", b.AuditExport(), tokens)
	b.Stop()
	assertNoneOf(t, "broker logs", b.Logs.Bytes(), tokens)
	if gh.badJWT != 0 {
		t.Fatalf("%d app JWTs failed verification", gh.badJWT)
	}
}

// TestGitHubAppUnavailable: GitHub refusing the app (a wrong key) fails the
// call closed: 503 credential_unavailable, nothing sent upstream.
func TestGitHubAppUnavailable(t *testing.T) {
	key, _ := writeAppKey(t)
	_, otherKeyFile := writeAppKey(t)
	gh := newFakeGitHub(t, &key.PublicKey, "1234")
	b := startBroker(t, brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, ExtraYAML: `  - name: github
    base_url: ` + gh.URL + `
    credential: {source: github_app, app_id: "1234", installation_id: "42", private_key_file: ` + otherKeyFile + `, api_url: ` + gh.URL + `}
`})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "github", "rules": []any{map[string]any{"method": "GET", "path": "/repos/acme/widgets/issues"}}}))
	b.Do("GET", b.Sandbox+"/v1/proxy/github/repos/acme/widgets/issues", s.Token, nil).WantProblem(t, 503, "credential_unavailable")
	gh.mu.Lock()
	defer gh.mu.Unlock()
	if gh.badJWT != 1 || len(gh.issued) != 0 || gh.calls != 0 {
		t.Fatalf("bad JWTs %d, tokens %d, calls sent %d", gh.badJWT, len(gh.issued), gh.calls)
	}
}

// TestGitHubAppNarrowedRevokesBroader (class 4 of issue 19): the
// installation token minted for a session's grant set is revoked at GitHub
// the moment that set changes, without the session calling again: a grant
// revoked (the token covered its repository), a grant added, a grant
// expired. The next call gets a token for what the session holds then.
func TestGitHubAppNarrowedRevokesBroader(t *testing.T) {
	key, keyFile := writeAppKey(t)
	gh := newFakeGitHub(t, &key.PublicKey, "1234")
	b := startBroker(t, brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, ExtraYAML: githubAppYAML(gh, keyFile, "widgets, gadgets, gizmos")})
	repoGrant := func(repo string) map[string]any {
		return map[string]any{"upstream": "github", "rules": []any{map[string]any{"method": "GET", "path": "/repos/{owner}/{repo}/issues", "constraints": map[string]any{
			"path.owner": map[string]any{"pin": "acme"}, "path.repo": map[string]any{"pin": repo}}}}}
	}
	s := b.Session(brokertest.TrustedSession(repoGrant("widgets"), repoGrant("gadgets")))
	call := func(repo string) {
		t.Helper()
		if r := b.Do("GET", b.Sandbox+"/v1/proxy/github/repos/acme/"+repo+"/issues", s.Token, nil); r.Status != 200 {
			t.Fatalf("call %s: %d %s", repo, r.Status, r.Body)
		}
	}
	tokenFor := func(repos ...string) string {
		t.Helper()
		gh.mu.Lock()
		defer gh.mu.Unlock()
		for tok, is := range gh.issued {
			if cmp.Equal(is.repos, repos, cmpopts.SortSlices(func(a, b string) bool { return a < b })) && !is.revoked {
				return tok
			}
		}
		t.Fatalf("no live token for %v", repos)
		return ""
	}
	revocations := 0
	revokedNow := func(what, tok string) {
		t.Helper()
		brokertest.Eventually(t, 10*time.Second, func() bool {
			gh.mu.Lock()
			defer gh.mu.Unlock()
			return gh.issued[tok].revoked
		})
		brokertest.Eventually(t, 10*time.Second, func() bool { // recorded, saying why
			n := 0
			for _, r := range brokertest.ParseAudit(t, b.AuditExport()) {
				if r.Type == "credential.revoked" && strings.Contains(r.Reason, "grants changed") {
					n++
				}
			}
			return n == revocations+1
		})
		revocations++
		t.Logf("%s: the old token was revoked at the issuer and recorded", what)
	}

	call("widgets")
	broad := tokenFor("widgets", "gadgets")
	// Revoke the gadgets grant: the token covering gadgets dies at once.
	if r := b.Do("DELETE", b.Control+"/v1/grants/"+s.Grants[1].ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("revoke grant: %d %s", r.Status, r.Body)
	}
	revokedNow("grant revoked", broad)
	call("widgets")
	narrow := tokenFor("widgets")

	// Add a grant that expires soon: the narrow token is replaced at once,
	// and the token minted for both dies when the added grant expires.
	add := repoGrant("gizmos")
	add["ttl"] = "3s"
	if r := b.Do("POST", b.Control+"/v1/sessions/"+s.ID+"/grants", brokertest.ProcAdminToken, add); r.Status != 201 {
		t.Fatalf("add grant: %d %s", r.Status, r.Body)
	}
	revokedNow("grant added", narrow)
	call("gizmos")
	both := tokenFor("gizmos", "widgets")
	revokedNow("grant expired", both)
	call("widgets")
	tokenFor("widgets")
}
