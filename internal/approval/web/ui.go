// Package web is the reviewers' web page: an HTTP adapter over the
// approval domain and the broker (server-rendered, works without
// JavaScript). Its failures are rendered from the problem table the API
// uses, which the wiring passes in (Options.Problem).
package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/fault"
)

//go:embed templates/*.html static/*
var uiFiles embed.FS

// SessionSummary is what the page shows of an active session.
type SessionSummary struct {
	ID, TaskID, Isolation, Required, CreatedBy string
	CreatedAt, ExpiresAt                       time.Time
	Standing                                   approval.Standing
	Gated                                      bool
	Grants                                     int
}

// TrailEntry is one audit record shown on a session's page.
type TrailEntry struct {
	Seq                                 uint64
	Time                                time.Time
	Type, Actor, Method, Path, Code, ID string
	Status                              int
}

// KillswitchView is the global kill-switch.
type KillswitchView struct {
	Engaged           bool
	Since, By, Reason string
}

// Errors of the page itself; the problem table (Options.Problem) maps them
// like every other error.
var (
	// ErrLoginRequired: a form was posted without a live log-in.
	ErrLoginRequired = fault.New(fault.Forbidden, "log in again to do this")
	// ErrForgedForm: a state-changing form failed the cross-origin check
	// or carried a wrong CSRF token (or could not be parsed).
	ErrForgedForm = fault.New(fault.Forbidden, "this form did not come from this page (CSRF check failed)")
	// ErrLoginRefused: the token typed into the log-in form is not a live
	// reviewer's or admin's API token.
	ErrLoginRefused = fault.New(fault.InvalidToken, "that token is not a valid reviewer token")
	// ErrNotConfirmed: the kill-switch form was posted without its confirmation.
	ErrNotConfirmed = fault.New(fault.BadRequest, "tick the confirmation to engage the kill-switch")
)

// Problem is what the page shows of a failure: its HTTP status, stable
// problem code, title, and a detail that is safe to show.
type Problem struct {
	Status              int
	Code, Title, Detail string
}

// Backend is what the page needs from the broker (declared here, where it
// is consumed).
type Backend interface {
	Authenticate(token string) (auth.Principal, error)
	// Principal is the identity of API token id as it stands now: an error
	// once the token is revoked or expired.
	Principal(id string) (auth.Principal, error)
	Actions(ctx context.Context, status approval.Status, limit int) ([]approval.Action, error)
	Action(ctx context.Context, id string) (approval.Action, error)
	// ActionURL is the full URL the action's request is sent to (scheme,
	// host, base path and path, query; never the credential), "" when its
	// upstream is not configured.
	ActionURL(a approval.Action) string
	DecideAction(ctx context.Context, p auth.Principal, id, verdict, comment string) (approval.Action, error)
	ActiveSessions(ctx context.Context) []SessionSummary
	KillSession(ctx context.Context, p auth.Principal, id string) error
	Killswitch(ctx context.Context) (KillswitchView, error)
	SetKillswitch(ctx context.Context, p auth.Principal, engaged bool, reason string) error
	SessionTrail(ctx context.Context, sessionID string, limit int) ([]TrailEntry, error)
	Changes() <-chan struct{}
	RecordLogin(ctx context.Context, p auth.Principal, ok bool, remote string)
	RecordLogout(ctx context.Context, p auth.Principal, reason string)
}

// Options configure the page.
type Options struct {
	Log *slog.Logger
	Now func() time.Time
	// SessionTTL bounds a log-in.
	SessionTTL time.Duration
	// Secure sets the cookies' Secure flag (on whenever the control plane
	// is served over TLS).
	Secure bool
	// Problem maps an error to what the page shows: the API's one table
	// from errors to status and code. Required.
	Problem func(error) Problem
}

// UI is the reviewers' web page: server-rendered, works without JavaScript,
// live updates over server-sent events when it is on.
type UI struct {
	b           Backend
	log         *slog.Logger
	now         func() time.Time
	sessionTTL  time.Duration
	secure      bool
	problem     func(error) Problem
	crossOrigin *http.CrossOriginProtection
	pages       map[string]*template.Template
	static      http.Handler

	mu       sync.Mutex
	sessions map[string]*uiSession
}

// uiSession is a reviewer's log-in. p.ID is the id of the API token it was
// made with (never the token): the token is looked up on every request.
type uiSession struct {
	p       auth.Principal
	csrf    string
	expires time.Time
}

const (
	cookieName      = "airlock_ui"
	loginCookieName = "airlock_login"
)

// NewUI makes the page over b.
func NewUI(b Backend, o Options) (*UI, error) {
	if o.Problem == nil || o.Log == nil || o.Now == nil {
		return nil, errors.New("web: Options.Problem, Log and Now are required")
	}
	now := o.Now
	u := &UI{b: b, log: o.Log, now: now, sessionTTL: o.SessionTTL, secure: o.Secure, problem: o.Problem,
		crossOrigin: http.NewCrossOriginProtection(), sessions: map[string]*uiSession{}, pages: map[string]*template.Template{}}
	funcs := template.FuncMap{
		"ago":   func(t time.Time) string { return ago(now().Sub(t)) },
		"until": func(t time.Time) string { return ago(t.Sub(now())) },
		"ts":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"join":  strings.Join,
		"url":   b.ActionURL,
		"mcp":   MCPOf,
	}
	for _, page := range []string{"login", "pending", "action", "sessions", "session", "killswitch", "message"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(uiFiles, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", page, err)
		}
		u.pages[page] = t
	}
	sub, err := fs.Sub(uiFiles, "static")
	if err != nil {
		return nil, err
	}
	u.static = http.StripPrefix("/ui/static/", http.FileServerFS(sub))
	return u, nil
}

func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	}
	return strconv.Itoa(int(d.Hours())) + "h" + strconv.Itoa(int(d.Minutes())%60) + "m"
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// headers are set on every page: strict CSP, no framing, no sniffing, no caching.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" on our own form posts, and the cross-origin check falls
	// back to the real Origin where a browser sends no Sec-Fetch-Site.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

type pageData struct {
	Title   string
	User    *auth.Principal
	CSRF    string
	Live    bool // reload on changes
	Notice  string
	Error   string
	Content any
}

func (u *UI) render(w http.ResponseWriter, status int, page string, d pageData) {
	headers(w)
	var buf bytes.Buffer
	if err := u.pages[page].Execute(&buf, d); err != nil {
		u.log.Error("render page", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail answers a failure as an HTML page: status, code, title and detail
// come from the problem table; a server-side failure is logged with its
// cause, which the page never shows.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, s *uiSession, err error) {
	p := u.problem(err)
	if p.Status >= 500 {
		u.log.Error("ui request failed", "method", r.Method, "path", r.URL.Path, "code", p.Code, "err", err)
	}
	d := pageData{Title: p.Title, Content: p}
	if p.Detail != p.Title {
		d.Error = sentence(p.Detail)
	}
	if s != nil {
		d.User, d.CSRF = &s.p, s.csrf
	}
	u.render(w, p.Status, "message", d)
}

// sentence capitalizes s and ends it with a full stop.
func sentence(s string) string {
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// session finds the reviewer's log-in from the cookie, and checks on every
// request that the API token it was made with still exists, has not
// expired and still holds the reviewer role (a map read). A log-in whose
// token fails that check ends at once: it is forgotten, its end audited,
// and its cookie cleared (when w is not nil). The returned session carries
// the principal as it stands now.
func (u *UI) session(w http.ResponseWriter, r *http.Request) *uiSession {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	u.mu.Lock()
	s, ok := u.sessions[c.Value]
	if ok && !u.now().Before(s.expires) {
		delete(u.sessions, c.Value)
		ok = false
	}
	u.mu.Unlock()
	if !ok {
		u.clearCookie(w)
		return nil
	}
	p, err := u.b.Principal(s.p.ID)
	if err != nil || !p.Allowed(auth.RoleReviewer) {
		u.mu.Lock()
		_, mine := u.sessions[c.Value]
		delete(u.sessions, c.Value)
		u.mu.Unlock()
		if mine { // one request ends it and audits that
			u.b.RecordLogout(r.Context(), s.p, "token revoked, expired or no longer a reviewer")
		}
		u.clearCookie(w)
		return nil
	}
	return &uiSession{p: p, csrf: s.csrf, expires: s.expires}
}

// clearCookie tells the browser to drop the log-in cookie (w may be nil).
func (u *UI) clearCookie(w http.ResponseWriter) {
	if w != nil {
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true, Secure: u.secure, SameSite: http.SameSiteStrictMode})
	}
}

// checkForm refuses a state-changing form that is not this page's own:
// a cross-origin browser request (http.CrossOriginProtection: Sec-Fetch-Site,
// else an Origin other than the Host, "null" included), a body that does
// not parse, or a CSRF token other than want (compared in constant time;
// it still holds for a client that sends neither header).
func (u *UI) checkForm(r *http.Request, want string) error {
	if u.crossOrigin.Check(r) != nil || r.ParseForm() != nil ||
		want == "" || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(want)) != 1 {
		return ErrForgedForm
	}
	return nil
}

// page wraps GET handlers that need a login.
func (u *UI) page(fn func(http.ResponseWriter, *http.Request, *uiSession)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := u.session(w, r)
		if s == nil {
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		fn(w, r, s)
	}
}

// form wraps state-changing POST handlers: login, same origin, CSRF token.
func (u *UI) form(fn func(http.ResponseWriter, *http.Request, *uiSession)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		s := u.session(w, r)
		if s == nil {
			u.fail(w, r, nil, ErrLoginRequired)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := u.checkForm(r, s.csrf); err != nil {
			u.fail(w, r, s, err)
			return
		}
		fn(w, r, s)
	}
}

// LoginForm is GET /ui/login.
func (u *UI) LoginForm(w http.ResponseWriter, r *http.Request) {
	tok := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCookieName, Value: tok, Path: "/ui", HttpOnly: true, Secure: u.secure, SameSite: http.SameSiteStrictMode, MaxAge: 600})
	u.render(w, http.StatusOK, "login", pageData{Title: "Log in", CSRF: tok})
}

// Login is POST /ui/login: a reviewer (or admin) token becomes a cookie session.
func (u *UI) Login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	want := ""
	if c, err := r.Cookie(loginCookieName); err == nil {
		want = c.Value
	}
	if err := u.checkForm(r, want); err != nil {
		u.fail(w, r, nil, err)
		return
	}
	p, err := u.b.Authenticate(strings.TrimSpace(r.PostFormValue("token")))
	if err != nil || !p.Allowed(auth.RoleReviewer) {
		u.b.RecordLogin(r.Context(), p, false, r.RemoteAddr)
		// The form again, with a fresh log-in token; status and
		// message from the problem table.
		prob := u.problem(ErrLoginRefused)
		tok := randomToken()
		http.SetCookie(w, &http.Cookie{Name: loginCookieName, Value: tok, Path: "/ui", HttpOnly: true, Secure: u.secure, SameSite: http.SameSiteStrictMode, MaxAge: 600})
		u.render(w, prob.Status, "login", pageData{Title: "Log in", CSRF: tok, Error: sentence(prob.Detail)})
		return
	}
	sid := randomToken()
	u.mu.Lock()
	for id, s := range u.sessions { // forget expired logins
		if !u.now().Before(s.expires) {
			delete(u.sessions, id)
		}
	}
	u.sessions[sid] = &uiSession{p: p, csrf: randomToken(), expires: u.now().Add(u.sessionTTL)}
	u.mu.Unlock()
	u.b.RecordLogin(r.Context(), p, true, r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: loginCookieName, Value: "", Path: "/ui", MaxAge: -1})
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: sid, Path: "/ui", HttpOnly: true, Secure: u.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(u.sessionTTL.Seconds())})
	http.Redirect(w, r, "/ui", http.StatusSeeOther)
}

// Logout is POST /ui/logout.
func (u *UI) Logout(w http.ResponseWriter, r *http.Request) {
	u.form(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		if c, err := r.Cookie(cookieName); err == nil {
			u.mu.Lock()
			delete(u.sessions, c.Value)
			u.mu.Unlock()
		}
		u.b.RecordLogout(r.Context(), s.p, "logged out")
		u.clearCookie(w)
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
	})(w, r)
}

// Pending is GET /ui: the pending actions, oldest first.
func (u *UI) Pending(w http.ResponseWriter, r *http.Request) {
	u.page(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		as, err := u.b.Actions(r.Context(), approval.Pending, 500)
		if err != nil {
			u.fail(w, r, s, fmt.Errorf("read the pending actions: %w", err))
			return
		}
		sort.Slice(as, func(i, j int) bool { return as[i].CreatedAt.Before(as[j].CreatedAt) })
		ks, _ := u.b.Killswitch(r.Context())
		u.render(w, http.StatusOK, "pending", pageData{Title: "Pending actions", User: &s.p, CSRF: s.csrf, Live: true,
			Content: map[string]any{"Actions": as, "Killswitch": ks}})
	})(w, r)
}

// Param is one parameter of a request as the page shows it.
type Param struct {
	Name, Value string
	Pinned      bool
	Filled      bool
}

func params(a approval.Action) []Param {
	pinned := map[string]bool{}
	for _, p := range a.Pinned {
		pinned[p] = true
	}
	filled := map[string]bool{}
	for _, p := range a.Filled {
		filled[p] = true
	}
	var out []Param
	if q, err := url.ParseQuery(a.Request.Query); err == nil {
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for _, v := range q[k] {
				n := "query." + k
				out = append(out, Param{Name: n, Value: v, Pinned: pinned[n], Filled: filled[n]})
			}
		}
	}
	var body any
	if len(a.Request.Body) > 0 && json.Unmarshal(a.Request.Body, &body) == nil {
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			switch x := v.(type) {
			case map[string]any:
				keys := make([]string, 0, len(x))
				for k := range x {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					walk(prefix+"."+k, x[k])
				}
			case []any:
				for i, e := range x {
					walk(prefix+"."+strconv.Itoa(i), e)
				}
			default:
				b, _ := json.Marshal(x)
				out = append(out, Param{Name: prefix, Value: string(b), Pinned: pinned[prefix], Filled: filled[prefix]})
			}
		}
		walk("body", body)
	}
	for _, p := range a.Pinned { // pinned path and header values
		if strings.HasPrefix(p, "path.") || strings.HasPrefix(p, "header.") {
			out = append(out, Param{Name: p, Value: "(fixed by the grant)", Pinned: true, Filled: filled[p]})
		}
	}
	return out
}

func prettyBody(b []byte) string {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "", "  ") == nil {
		return buf.String()
	}
	return string(b)
}

// ActionPage is GET /ui/actions/{id}: the exact request, pinned vs
// model-chosen values, the Rule-of-Two standing, approve and deny.
func (u *UI) ActionPage(w http.ResponseWriter, r *http.Request) {
	u.page(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		a, err := u.b.Action(r.Context(), chi.URLParam(r, "id"))
		if err != nil {
			u.fail(w, r, s, err)
			return
		}
		u.render(w, http.StatusOK, "action", pageData{Title: "Action " + a.ID, User: &s.p, CSRF: s.csrf,
			Notice: r.URL.Query().Get("notice"),
			Content: map[string]any{"A": a, "Params": params(a), "MCP": MCPOf(a), "Body": prettyBody(a.Request.Body),
				"Needed": max(1, a.ApprovalsRequired), "Own": a.SessionCreatedBy == s.p.ID}})
	})(w, r)
}

// Approve is POST /ui/actions/{id}/approve.
func (u *UI) Approve(w http.ResponseWriter, r *http.Request) { u.decide(w, r, "approve") }

// Deny is POST /ui/actions/{id}/deny.
func (u *UI) Deny(w http.ResponseWriter, r *http.Request) { u.decide(w, r, "deny") }

func (u *UI) decide(w http.ResponseWriter, r *http.Request, verdict string) {
	u.form(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		id := chi.URLParam(r, "id")
		_, err := u.b.DecideAction(r.Context(), s.p, id, verdict, r.PostFormValue("comment"))
		if err != nil {
			u.fail(w, r, s, err)
			return
		}
		notice := "Denied."
		if verdict == "approve" {
			notice = "Approved."
		}
		http.Redirect(w, r, "/ui/actions/"+url.PathEscape(id)+"?notice="+url.QueryEscape(notice), http.StatusSeeOther)
	})(w, r)
}

// Sessions is GET /ui/sessions: active sessions with a kill button.
func (u *UI) Sessions(w http.ResponseWriter, r *http.Request) {
	u.page(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		ss := u.b.ActiveSessions(r.Context())
		u.render(w, http.StatusOK, "sessions", pageData{Title: "Active sessions", User: &s.p, CSRF: s.csrf, Live: true,
			Notice: r.URL.Query().Get("notice"), Content: ss})
	})(w, r)
}

// SessionPage is GET /ui/sessions/{id}: the recent audit trail of a session.
func (u *UI) SessionPage(w http.ResponseWriter, r *http.Request) {
	u.page(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		id := chi.URLParam(r, "id")
		trail, err := u.b.SessionTrail(r.Context(), id, 100)
		if err != nil {
			u.fail(w, r, s, fmt.Errorf("read the audit trail: %w", err))
			return
		}
		var sum *SessionSummary
		for _, x := range u.b.ActiveSessions(r.Context()) {
			if x.ID == id {
				sum = &x
			}
		}
		u.render(w, http.StatusOK, "session", pageData{Title: "Session " + id, User: &s.p, CSRF: s.csrf,
			Content: map[string]any{"ID": id, "S": sum, "Trail": trail}})
	})(w, r)
}

// Kill is POST /ui/sessions/{id}/kill.
func (u *UI) Kill(w http.ResponseWriter, r *http.Request) {
	u.form(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		id := chi.URLParam(r, "id")
		if err := u.b.KillSession(r.Context(), s.p, id); err != nil {
			u.fail(w, r, s, err)
			return
		}
		http.Redirect(w, r, "/ui/sessions?notice="+url.QueryEscape("Session "+id+" killed."), http.StatusSeeOther)
	})(w, r)
}

// KillswitchPage is GET /ui/killswitch.
func (u *UI) KillswitchPage(w http.ResponseWriter, r *http.Request) {
	u.page(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		ks, err := u.b.Killswitch(r.Context())
		if err != nil {
			u.fail(w, r, s, fmt.Errorf("read the kill-switch: %w", err))
			return
		}
		u.render(w, http.StatusOK, "killswitch", pageData{Title: "Kill-switch", User: &s.p, CSRF: s.csrf,
			Notice: r.URL.Query().Get("notice"), Content: map[string]any{"K": ks, "Admin": s.p.Role == auth.RoleAdmin}})
	})(w, r)
}

// EngageKillswitch is POST /ui/killswitch; the form must carry the confirmation.
func (u *UI) EngageKillswitch(w http.ResponseWriter, r *http.Request) {
	u.form(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		if r.PostFormValue("confirm") != "yes" {
			u.fail(w, r, s, ErrNotConfirmed)
			return
		}
		if err := u.b.SetKillswitch(r.Context(), s.p, true, r.PostFormValue("reason")); err != nil {
			u.fail(w, r, s, err)
			return
		}
		http.Redirect(w, r, "/ui/killswitch?notice="+url.QueryEscape("Kill-switch engaged: every sandbox call is refused."), http.StatusSeeOther)
	})(w, r)
}

// ReleaseKillswitch is POST /ui/killswitch/release (admin only).
func (u *UI) ReleaseKillswitch(w http.ResponseWriter, r *http.Request) {
	u.form(func(w http.ResponseWriter, r *http.Request, s *uiSession) {
		if err := u.b.SetKillswitch(r.Context(), s.p, false, ""); err != nil {
			u.fail(w, r, s, err)
			return
		}
		http.Redirect(w, r, "/ui/killswitch?notice="+url.QueryEscape("Kill-switch released."), http.StatusSeeOther)
	})(w, r)
}

// Events is GET /ui/events: server-sent events, one per change.
func (u *UI) Events(w http.ResponseWriter, r *http.Request) {
	headers(w)
	if u.session(w, r) == nil {
		u.fail(w, r, nil, ErrLoginRequired)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, ": connected\n\n")
	_ = rc.Flush()
	heartbeat := time.NewTicker(25 * time.Second)
	defer heartbeat.Stop()
	for {
		changed := u.b.Changes()
		select {
		case <-r.Context().Done():
			return
		case <-heartbeat.C:
			_, _ = fmt.Fprint(w, ": keep-alive\n\n")
		case <-changed:
			_, _ = fmt.Fprint(w, "event: changed\ndata: {}\n\n")
		}
		if rc.Flush() != nil || u.session(nil, r) == nil {
			return
		}
	}
}

// Static is GET /ui/static/{file}.
func (u *UI) Static(w http.ResponseWriter, r *http.Request) {
	headers(w)
	w.Header().Set("Cache-Control", "public, max-age=300")
	u.static.ServeHTTP(w, r)
}
