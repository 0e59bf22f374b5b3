package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/clock"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// uiProblem stands in for the API's problem table (internal/httpapi), which
// this package cannot import: the page's own errors, else a 500.
func uiProblem(err error) Problem {
	switch {
	case errors.Is(err, ErrLoginRequired):
		return Problem{Status: 403, Code: "forbidden", Title: "Not logged in", Detail: err.Error()}
	case errors.Is(err, ErrForgedForm):
		return Problem{Status: 403, Code: "forbidden", Title: "Refused", Detail: err.Error()}
	case errors.Is(err, errUITest):
		return Problem{Status: 409, Code: "conflict", Title: "Already decided", Detail: err.Error()}
	case errors.Is(err, ErrLoginRefused):
		return Problem{Status: 401, Code: "invalid_token", Title: "Invalid token", Detail: err.Error()}
	}
	return Problem{Status: 500, Code: "internal", Title: "Internal error", Detail: "internal error"}
}

// uiFake is the broker side of the page: a real auth.Authenticator on a
// test clock, one pending action, and a record of decisions and log-outs.
// Backend methods the tests do not reach are left to the nil interface.
type uiFake struct {
	Backend
	auth *auth.Authenticator

	decideErr error            // what DecideAction fails with, if not nil
	action    *approval.Action // the one action, uiAction when nil

	mu        sync.Mutex
	decisions int
	logouts   []string
}

func (f *uiFake) Authenticate(tok string) (auth.Principal, error)           { return f.auth.Authenticate(tok) }
func (f *uiFake) Principal(id string) (auth.Principal, error)               { return f.auth.Lookup(id) }
func (f *uiFake) RecordLogin(context.Context, auth.Principal, bool, string) {}
func (f *uiFake) RecordLogout(_ context.Context, p auth.Principal, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logouts = append(f.logouts, p.ID+": "+reason)
}
func (f *uiFake) Actions(context.Context, approval.Status, int) ([]approval.Action, error) {
	return []approval.Action{f.the()}, nil
}
func (f *uiFake) Action(context.Context, string) (approval.Action, error) { return f.the(), nil }
func (f *uiFake) the() approval.Action {
	if f.action != nil {
		return *f.action
	}
	return uiAction
}
func (f *uiFake) ActionURL(a approval.Action) string {
	return "https://api.example.com/v2" + a.Request.Path + "?" + a.Request.Query
}
func (f *uiFake) Killswitch(context.Context) (KillswitchView, error) { return KillswitchView{}, nil }
func (f *uiFake) DecideAction(context.Context, auth.Principal, string, string, string) (approval.Action, error) {
	if f.decideErr != nil {
		return approval.Action{}, f.decideErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decisions++
	return uiAction, nil
}

var uiAction = approval.Action{ID: "act_1", Upstream: "pay<ments>", Status: approval.Pending, ExpiresAt: t0.Add(time.Hour),
	Request: approval.HeldRequest{Method: "POST", Path: "/transfers", Query: "to=acme&note=%3Cb%3E"}}

type uiHarness struct {
	t     *testing.T
	srv   *httptest.Server
	fake  *uiFake
	clock *clock.Fake
}

func newUIHarness(t *testing.T, tokens ...auth.Token) *uiHarness {
	t.Helper()
	clk := clock.NewFake(t0)
	f := &uiFake{auth: auth.NewAuthenticator("", tokens, clk.Now)}
	u, err := NewUI(f, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clk.Now, SessionTTL: 8 * time.Hour, Problem: uiProblem})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Get("/ui", u.Pending)
	r.Get("/ui/login", u.LoginForm)
	r.Post("/ui/login", u.Login)
	r.Get("/ui/actions/{id}", u.ActionPage)
	r.Post("/ui/actions/{id}/approve", u.Approve)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &uiHarness{t: t, srv: srv, fake: f, clock: clk}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs a browser-like client (a cookie jar, no redirects followed)
// in with token and returns it with the page's CSRF token.
func (h *uiHarness) login(token string) (*http.Client, string) {
	h.t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	_, body := h.get(c, "/ui/login")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		h.t.Fatalf("no CSRF token on the login form: %s", body)
	}
	resp, err := c.PostForm(h.srv.URL+"/ui/login", url.Values{"csrf": {m[1]}, "token": {token}})
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		h.t.Fatalf("log in: %d", resp.StatusCode)
	}
	resp, body = h.get(c, "/ui")
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("after log-in /ui answers %d", resp.StatusCode)
	}
	m = csrfField.FindStringSubmatch(body)
	if m == nil {
		h.t.Fatalf("no CSRF token on the page: %s", body)
	}
	return c, m[1]
}

func (h *uiHarness) get(c *http.Client, path string) (*http.Response, string) {
	h.t.Helper()
	resp, err := c.Get(h.srv.URL + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (h *uiHarness) approve(c *http.Client, csrf string) *http.Response {
	h.t.Helper()
	resp, err := c.PostForm(h.srv.URL+"/ui/actions/act_1/approve", url.Values{"csrf": {csrf}, "comment": {"ok"}})
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestUILoginDiesWithToken: once the reviewer's API token is revoked,
// expired or no longer a reviewer's, the cookie log-in made with it is
// gone on the very next request: pages redirect to the log-in form, the
// cookie is cleared, a decision is refused, and the end is audited once.
func TestUILoginDiesWithToken(t *testing.T) {
	tests := []struct {
		name string
		kill func(h *uiHarness)
	}{
		{"fail-revoked", func(h *uiHarness) { h.fake.auth.Delete("tok_rev") }},
		{"fail-expired", func(h *uiHarness) { h.clock.Advance(time.Hour) }},
		{"fail-role-changed", func(h *uiHarness) {
			h.fake.auth.Put(auth.Token{ID: "tok_rev", Name: "Rita", Role: auth.RoleAuditor, Digest: auth.Digest("x")})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, digest := auth.NewSecret("tok_rev")
			h := newUIHarness(t, auth.Token{ID: "tok_rev", Name: "Rita", Role: auth.RoleReviewer, Digest: digest, ExpiresAt: t0.Add(time.Hour)})
			c, csrf := h.login(tok)
			if resp := h.approve(c, csrf); resp.StatusCode != http.StatusSeeOther || h.fake.decisions != 1 {
				t.Fatalf("a live log-in cannot decide: %d, %d decisions", resp.StatusCode, h.fake.decisions)
			}

			tt.kill(h)
			resp, _ := h.get(c, "/ui/actions/act_1")
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login" {
				t.Fatalf("the action page answers %d (Location %q), want a redirect to the log-in", resp.StatusCode, resp.Header.Get("Location"))
			}
			if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(sc, cookieName+"=;") || !strings.Contains(sc, "Max-Age=0") {
				t.Errorf("the log-in cookie is not cleared: %q", sc)
			}
			if resp := h.approve(c, csrf); resp.StatusCode != http.StatusForbidden || h.fake.decisions != 1 {
				t.Fatalf("a dead log-in decided: %d, %d decisions", resp.StatusCode, h.fake.decisions)
			}
			if got := strings.Join(h.fake.logouts, "|"); got != "tok_rev: token revoked, expired or no longer a reviewer" {
				t.Errorf("log-outs audited: %q", got)
			}
		})
	}
}

// TestUIShowsDestination: the list and the action page show the upstream's
// name and the full URL from the backend, HTML-escaped.
func TestUIShowsDestination(t *testing.T) {
	tok, digest := auth.NewSecret("tok_rev")
	h := newUIHarness(t, auth.Token{ID: "tok_rev", Name: "Rita", Role: auth.RoleReviewer, Digest: digest})
	c, _ := h.login(tok)
	want := "https://api.example.com/v2/transfers?to=acme&amp;note=%3Cb%3E"
	for _, path := range []string{"/ui", "/ui/actions/act_1"} {
		_, body := h.get(c, path)
		if !strings.Contains(body, want) || !strings.Contains(body, "pay&lt;ments&gt;") {
			t.Errorf("%s does not show the upstream and the full URL %s:\n%s", path, want, body)
		}
		if strings.Contains(body, "pay<ments>") {
			t.Errorf("%s shows the upstream name unescaped", path)
		}
	}
}

// TestUIFormRefusesForgedPosts: a state-changing form passes only when the
// browser says it is this page's own (http.CrossOriginProtection:
// Sec-Fetch-Site, else Origin against Host) and it carries the log-in's
// CSRF token; a refusal decides nothing and answers the problem table's
// page.
func TestUIFormRefusesForgedPosts(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		csrf    string // "" means the page's own token
		want    int
	}{
		{"fail-sec-fetch-cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden},
		{"fail-sec-fetch-same-site", map[string]string{"Sec-Fetch-Site": "same-site"}, "", http.StatusForbidden},
		{"fail-sec-fetch-wins-over-origin", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "SELF"}, "", http.StatusForbidden},
		{"fail-origin-other", map[string]string{"Origin": "http://evil.example"}, "", http.StatusForbidden},
		{"fail-origin-other-port", map[string]string{"Origin": "OTHERPORT"}, "", http.StatusForbidden},
		{"fail-origin-null", map[string]string{"Origin": "null"}, "", http.StatusForbidden},
		{"fail-csrf-guessed", map[string]string{"Sec-Fetch-Site": "same-origin"}, "guessed", http.StatusForbidden},
		{"fail-csrf-missing-no-headers", nil, "-", http.StatusForbidden},
		{"ok-sec-fetch-same-origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, "", http.StatusSeeOther},
		{"ok-origin-self", map[string]string{"Origin": "SELF"}, "", http.StatusSeeOther},
		{"ok-non-browser-with-token", nil, "", http.StatusSeeOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, digest := auth.NewSecret("tok_rev")
			h := newUIHarness(t, auth.Token{ID: "tok_rev", Name: "Rita", Role: auth.RoleReviewer, Digest: digest})
			c, csrf := h.login(tok)
			form := url.Values{"comment": {"ok"}, "csrf": {csrf}}
			switch tt.csrf {
			case "":
			case "-":
				form.Del("csrf")
			default:
				form.Set("csrf", tt.csrf)
			}
			req, _ := http.NewRequest("POST", h.srv.URL+"/ui/actions/act_1/approve", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range tt.headers {
				switch v {
				case "SELF":
					v = h.srv.URL
				case "OTHERPORT":
					u, _ := url.Parse(h.srv.URL)
					v = "http://" + u.Hostname() + ":1"
				}
				req.Header.Set(k, v)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantDecisions := 0
			if tt.want == http.StatusSeeOther {
				wantDecisions = 1
			}
			if resp.StatusCode != tt.want || h.fake.decisions != wantDecisions {
				t.Fatalf("answered %d with %d decisions, want %d with %d", resp.StatusCode, h.fake.decisions, tt.want, wantDecisions)
			}
			if tt.want == http.StatusForbidden {
				if !strings.Contains(string(body), `<code id="problem-code">forbidden</code>`) || !strings.Contains(string(body), "CSRF check failed") ||
					!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
					t.Errorf("the refusal is not the problem page:\n%s", body)
				}
			}
		})
	}
}

// TestUILoginFormRefusesCrossOrigin: the log-in form is checked like the
// others (a cross-site page cannot log a browser in with its own token).
func TestUILoginFormRefusesCrossOrigin(t *testing.T) {
	tok, digest := auth.NewSecret("tok_rev")
	h := newUIHarness(t, auth.Token{ID: "tok_rev", Name: "Rita", Role: auth.RoleReviewer, Digest: digest})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	_, body := h.get(c, "/ui/login")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the login form: %s", body)
	}
	req, _ := http.NewRequest("POST", h.srv.URL+"/ui/login", strings.NewReader(url.Values{"csrf": {m[1]}, "token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || strings.Contains(resp.Header.Get("Set-Cookie"), cookieName+"=") {
		t.Fatalf("a cross-site log-in answered %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
}

// errUITest is a backend failure the test's problem table maps.
var errUITest = errors.New("already decided")

// TestUIFailuresFromProblemTable: a backend error is answered with the
// status, code and title the problem function gives it, as an HTML page;
// an error it does not know is a 500 that shows nothing of the cause.
func TestUIFailuresFromProblemTable(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		want     int
		wantCode string
		wantText string
	}{
		{"known", errUITest, http.StatusConflict, "conflict", "Already decided."},
		{"unknown", errors.New("disk on fire at /var/lib/secret"), http.StatusInternalServerError, "internal", "Internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, digest := auth.NewSecret("tok_rev")
			h := newUIHarness(t, auth.Token{ID: "tok_rev", Name: "Rita", Role: auth.RoleReviewer, Digest: digest})
			h.fake.decideErr = tt.err
			c, csrf := h.login(tok)
			resp, err := c.PostForm(h.srv.URL+"/ui/actions/act_1/approve", url.Values{"csrf": {csrf}})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want || !strings.Contains(string(body), `<code id="problem-code">`+tt.wantCode+`</code>`) ||
				!strings.Contains(string(body), tt.wantText) || strings.Contains(string(body), "disk on fire") {
				t.Fatalf("answered %d:\n%s", resp.StatusCode, body)
			}
		})
	}
}
