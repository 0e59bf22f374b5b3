// Package httpapi serves the broker's two planes over HTTP: the sandbox
// plane (proxied calls) and the control plane (operators, reviewers,
// auditors). Handlers return errors; one adapter maps them to problems.
package httpapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-broker/airlock/internal/approval/web"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/fault"
)

// Server holds what the handlers need.
type Server struct {
	b        *broker.Broker
	log      *slog.Logger
	metrics  *metrics
	reg      *prometheus.Registry
	ui       *web.UI
	pprof    bool
	idle     time.Duration          // body_idle_timeout
	proxyURL atomic.Pointer[string] // the proxy door's advertised host:port (UIOptions.ProxyURL)
	mcpWait  time.Duration          // how long the MCP door holds a gated tools/call (UIOptions.MCPWait)
	mcp      mcpSessions            // the MCP door's sessions (the session era's Mcp-Session-Id)
}

// New makes a server over b. Its metrics go to o.Registry (with the Go and
// process collectors), or to a registry of its own.
func New(b *broker.Broker, log *slog.Logger, o UIOptions) (*Server, error) {
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.SessionTTL <= 0 {
		o.SessionTTL = 8 * time.Hour
	}
	if o.BodyIdleTimeout <= 0 {
		o.BodyIdleTimeout = 30 * time.Second
	}
	ui, err := web.NewUI(uiBackend{b}, web.Options{Log: log, Now: b.Now, SessionTTL: o.SessionTTL, Secure: o.SecureCookies, Problem: uiProblem})
	if err != nil {
		return nil, err
	}
	s := &Server{b: b, log: log, metrics: newMetrics(reg), reg: reg, ui: ui, pprof: o.Pprof, idle: o.BodyIdleTimeout, mcpWait: o.MCPWait}
	s.SetProxyURL(o.ProxyURL)
	return s, nil
}

// SetProxyURL sets the proxy door's advertised host:port (UIOptions.ProxyURL),
// e.g. once its listener is bound.
func (s *Server) SetProxyURL(hostport string) { s.proxyURL.Store(&hostport) }

// Plane names a listener.
type Plane int

// The two planes.
const (
	SandboxPlane Plane = iota
	ControlPlane
)

// Handler returns the router of one plane.
func (s *Server) Handler(p Plane) http.Handler {
	r := chi.NewRouter()
	r.Use(s.recoverer)
	if p == SandboxPlane {
		r.Use(s.idleBodies)
	}
	r.NotFound(s.handle(func(w http.ResponseWriter, r *http.Request) error { return errNotFoundRoute }))
	r.MethodNotAllowed(s.handle(func(w http.ResponseWriter, r *http.Request) error { return errMethod }))
	s.routes(r, p)
	return r
}

// routes mounts every route of both planes; api/openapi.yaml lists the same.
func (s *Server) routes(r chi.Router, p Plane) {
	r.Get("/healthz", s.handle(s.healthz))
	if p == SandboxPlane {
		for _, m := range proxyMethods {
			r.MethodFunc(m, "/v1/proxy/{upstream}", s.proxy)
			r.MethodFunc(m, "/v1/proxy/{upstream}/*", s.proxy)
		}
		for _, m := range proxyMethods {
			r.MethodFunc(m, "/v1/aws/{upstream}", s.awsProxy)
			r.MethodFunc(m, "/v1/aws/{upstream}/*", s.awsProxy)
		}
		r.Post("/v1/mcp/{upstream}", s.mcpPost)
		r.Get("/v1/mcp/{upstream}", s.mcpGet)
		r.Delete("/v1/mcp/{upstream}", s.mcpDelete)
		r.Get("/v1/actions/{id}", s.handle(s.getAction))
		r.Get("/v1/actions/{id}/result", s.handle(s.getActionResult))
		return
	}
	r.Get("/readyz", s.handle(s.readyz))
	// OpenMetrics for a scraper that asks for it: the format of exemplars.
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))

	ops := []string{auth.RoleOperator}
	r.Post("/v1/sessions", s.as(ops, s.createSession))
	r.Get("/v1/sessions", s.as(ops, s.listSessions))
	r.Get("/v1/sessions/{id}", s.as(ops, s.getSession))
	r.Get("/v1/sessions/{id}/ca.pem", s.as(ops, s.sessionCA))
	r.Delete("/v1/sessions/{id}", s.as([]string{auth.RoleOperator, auth.RoleReviewer}, s.killSession))
	r.Post("/v1/sessions/{id}/grants", s.as(ops, s.addGrant))
	r.Get("/v1/grants/{id}", s.as(ops, s.getGrant))
	r.Delete("/v1/grants/{id}", s.as(ops, s.revokeGrant))

	ks := []string{auth.RoleOperator, auth.RoleReviewer}
	r.Get("/v1/killswitch", s.as(ks, s.getKillswitch))
	r.Post("/v1/killswitch", s.as(ks, s.engageKillswitch))
	r.Delete("/v1/killswitch", s.as([]string{auth.RoleAdmin}, s.releaseKillswitch))

	admin := []string{auth.RoleAdmin}
	r.Post("/v1/tokens", s.as(admin, s.createToken))
	r.Get("/v1/tokens", s.as(admin, s.listTokens))
	r.Delete("/v1/tokens/{id}", s.as(admin, s.revokeToken))

	reviewers := []string{auth.RoleReviewer}
	r.Get("/v1/approvals", s.as(reviewers, s.listApprovals))
	r.Get("/v1/approvals/{id}", s.as(reviewers, s.getApproval))
	r.Post("/v1/approvals/{id}/approve", s.as(reviewers, s.decide("approve")))
	r.Post("/v1/approvals/{id}/deny", s.as(reviewers, s.decide("deny")))

	auditors := []string{auth.RoleAuditor}
	r.Get("/v1/audit", s.as(auditors, s.exportAudit))
	r.Delete("/v1/audit", s.as(admin, s.pruneAudit))
	r.Get("/v1/audit/verify", s.as(auditors, s.verifyAudit))
	r.Get("/v1/audit/checkpoints", s.as(auditors, s.auditCheckpoints))
	r.Get("/v1/audit/public-key", s.handle(s.auditPublicKey))

	// Go's profiler, for operators chasing a slow broker: off unless
	// configured, and then for admin tokens only.
	if s.pprof {
		r.Get("/debug/pprof/*", s.as(admin, func(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
			switch name := chi.URLParam(r, "*"); name {
			case "":
				pprof.Index(w, r)
			case "cmdline":
				pprof.Cmdline(w, r)
			case "profile":
				pprof.Profile(w, r)
			case "symbol":
				pprof.Symbol(w, r)
			case "trace":
				pprof.Trace(w, r)
			default:
				pprof.Handler(name).ServeHTTP(w, r)
			}
			return nil
		}))
	}

	// The reviewers' web page (cookie login, CSRF-protected forms).
	r.Get("/ui", s.ui.Pending)
	r.Get("/ui/login", s.ui.LoginForm)
	r.Post("/ui/login", s.ui.Login)
	r.Post("/ui/logout", s.ui.Logout)
	r.Get("/ui/actions/{id}", s.ui.ActionPage)
	r.Post("/ui/actions/{id}/approve", s.ui.Approve)
	r.Post("/ui/actions/{id}/deny", s.ui.Deny)
	r.Get("/ui/sessions", s.ui.Sessions)
	r.Get("/ui/sessions/{id}", s.ui.SessionPage)
	r.Post("/ui/sessions/{id}/kill", s.ui.Kill)
	r.Get("/ui/killswitch", s.ui.KillswitchPage)
	r.Post("/ui/killswitch", s.ui.EngageKillswitch)
	r.Post("/ui/killswitch/release", s.ui.ReleaseKillswitch)
	r.Get("/ui/events", s.ui.Events)
	r.Get("/ui/static/*", s.ui.Static)
}

type ctxKey int

const principalKey ctxKey = iota

// handle adapts an error-returning handler: errors become problems, and an
// unknown error is logged with its cause and answered "internal error".
func (s *Server) handle(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			s.fail(w, r, err, "")
		}
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error, requestID string) {
	p := problemFor(err)
	if p.Status >= 500 {
		s.log.Error("request failed", "method", r.Method, "route", routePattern(r), "code", p.Code, "request_id", requestID,
			"cause", fault.Reason(err), "err", err) // a control-plane error: the broker's own, no upstream's
	}
	writeProblem(w, p, requestID)
}

// as authenticates a control-plane bearer token and checks its role.
func (s *Server) as(roles []string, fn func(http.ResponseWriter, *http.Request, auth.Principal) error) http.HandlerFunc {
	// A refused token's detail names the plane and the roles this route
	// takes (admin always); the codes stay invalid_token and forbidden.
	takes := []string{auth.RoleAdmin}
	for _, r := range roles {
		if r != auth.RoleAdmin {
			takes = append(takes, r)
		}
	}
	wants := takes[len(takes)-1]
	if n := len(takes); n > 1 {
		wants = strings.Join(takes[:n-1], ", ") + " or " + takes[n-1]
	}
	wants = "the control plane takes an API token of role " + wants
	const notSession = " (a session token is for the sandbox plane)"
	return s.handle(func(w http.ResponseWriter, r *http.Request) error {
		tok, ok := bearer(r)
		if !ok {
			return &fault.Error{Kind: fault.InvalidToken, Msg: wants + notSession, Err: errMissingToken}
		}
		p, err := s.b.Authenticate(tok)
		if fault.Is(err, fault.InvalidToken) { // its own text is private
			return fault.New(fault.InvalidToken, wants+notSession+": invalid API token")
		}
		if err != nil {
			return err
		}
		if !p.Allowed(roles...) {
			return &fault.Error{Kind: fault.Forbidden, Msg: wants + " here, not " + p.Role, Err: errForbiddenRole}
		}
		ctx := context.WithValue(r.Context(), principalKey, p)
		return fn(w, r.WithContext(ctx), p)
	})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				// Never print the panic value: it could hold request data.
				s.log.Error("panic in handler", "method", r.Method, "route", routePattern(r))
				writeProblem(w, Problem{Status: 500, Code: "internal", Title: "Internal error", Detail: "internal error"}, "")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	checks := map[string]string{}
	status := http.StatusOK
	for name, err := range s.b.Ready(ctx) {
		if err == nil {
			checks[name] = "ok"
			continue
		}
		status = http.StatusServiceUnavailable
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			checks[name] = "timeout"
		default:
			checks[name] = problemFor(err).Title
		}
	}
	st := "ready"
	if status != http.StatusOK {
		st = "not_ready"
	}
	writeJSON(w, status, map[string]any{"status": st, "checks": checks})
	return nil
}

// idleBodies cuts a sandbox request body that stops arriving for the
// body idle timeout: without it a stalled upload would hold its
// connection, goroutine and buffers for ever (no server sets a
// ReadTimeout, which would also cut calls held for a decision). The
// deadline is renewed on every read and cleared once the body is read, so
// a call held for a reviewer is not cut by it.
func (s *Server) idleBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &idleBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: s.idle}
		}
		next.ServeHTTP(w, r)
	})
}

// idleBody is a request body read under a renewed read deadline.
type idleBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
	done bool
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done = true
		return n, errBodyStalled
	case err != nil:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
