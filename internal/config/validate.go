package config

import (
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/store"
)

// Validate applies defaults and checks every section, returning all their
// mistakes joined (errors.Join), each a *fault.FieldError.
func (c *Config) Validate(getenv func(string) string) error {
	c.applyDefaults()
	var e errs
	for _, err := range []error{
		c.validateListeners(),
		c.validateLimits(),
		c.Store.validate("store"),
		c.validateAdmin(),
		c.validateSessions(),
		c.Audit.validate("audit"),
		c.Approval.validate("approval"),
		c.RateLimit.validate("rate_limit"),
		c.UI.validate("ui"),
		validateLogLevel("log_level", c.LogLevel),
		c.Scrub.validate("scrub"),
		c.validateUpstreams(),
		c.Vault.validate("vault"),
	} {
		e.join(err)
	}
	return e.err()
}

// absoluteHTTP says whether s is an absolute http(s) URL.
func absoluteHTTP(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func hostPort(s string) bool {
	_, _, err := net.SplitHostPort(s)
	return err == nil
}

// validateListeners checks the planes' and the proxy door's addresses.
func (c *Config) validateListeners() error {
	var e errs
	for _, f := range []struct{ name, v string }{{"sandbox_listen", c.SandboxListen}, {"control_listen", c.ControlListen}} {
		if !hostPort(f.v) {
			e.add(f.name, "must be host:port")
		}
	}
	if c.SandboxListen == c.ControlListen && !strings.HasSuffix(c.SandboxListen, ":0") {
		e.add("control_listen", "must differ from sandbox_listen: the two planes are separate listeners")
	}
	switch {
	case c.ProxyListen == "":
	case !hostPort(c.ProxyListen):
		e.add("proxy_listen", "must be host:port")
	case !strings.HasSuffix(c.ProxyListen, ":0") && (c.ProxyListen == c.SandboxListen || c.ProxyListen == c.ControlListen):
		e.add("proxy_listen", "must differ from sandbox_listen and control_listen")
	}
	if c.ProxyURL != "" {
		if c.ProxyListen == "" {
			e.add("proxy_url", "needs proxy_listen")
		} else if h, p, err := net.SplitHostPort(c.ProxyURL); err != nil || h == "" || p == "" || strings.ContainsAny(c.ProxyURL, "/@?#") {
			e.add("proxy_url", "must be host:port (the address clients reach the proxy door at)")
		}
	}
	return e.err()
}

// validateLimits checks the bounds on a session's open work.
func (c *Config) validateLimits() error {
	var e errs
	if c.BodyIdleTimeout < 0 {
		e.add("body_idle_timeout", "must be positive")
	}
	if c.ProxyMaxTunnels < 0 || c.ProxyMaxTunnels > 65536 {
		e.add("proxy_max_tunnels", "must be between 1 and 65536")
	}
	if c.MaxStreams < 0 || c.MaxStreams > 65536 {
		e.add("max_streams_per_session", "must be between 1 and 65536")
	}
	return e.err()
}

func (s *Store) validate(f string) error {
	switch {
	case s.Driver != StoreBolt && s.Driver != StorePostgres:
		return fieldErr(f+".driver", "must be bbolt or postgres")
	case s.Driver == StorePostgres && s.DSN == "":
		return fieldErr(f+".dsn", "is required with driver postgres")
	case s.Driver == StoreBolt && s.DSN != "":
		return fieldErr(f+".dsn", "is for driver postgres (bbolt keeps its file in data_dir)")
	}
	return nil
}

// validateAdmin reads admin_token_file when admin_token is not set, and
// checks the token.
func (c *Config) validateAdmin() error {
	if c.AdminToken == "" && c.AdminTokenFile != "" {
		data, err := os.ReadFile(c.AdminTokenFile)
		if err != nil {
			return fieldErr("admin_token_file", "cannot read the file")
		}
		c.AdminToken = strings.TrimRight(string(data), "\r\n")
	}
	switch {
	case c.AdminToken == "":
		return fieldErr("admin_token", "is required (or admin_token_file)")
	case len(c.AdminToken) < 16:
		return fieldErr("admin_token", "must be at least 16 characters")
	}
	return nil
}

// validateSessions checks the sandbox sessions' lifetimes.
func (c *Config) validateSessions() error {
	var e errs
	if c.MaxSessionTTL < 0 {
		e.add("max_session_ttl", "must be positive")
	}
	if c.DefaultTTL < 0 || c.MaxSessionTTL > 0 && c.DefaultTTL > c.MaxSessionTTL {
		e.add("default_session_ttl", "must be positive and at most max_session_ttl")
	}
	return e.err()
}

func (a *Audit) validate(f string) error {
	switch a.Durability {
	case store.DurabilityFsync, store.DurabilityBuffered:
		return nil
	}
	return fieldErr(f+".durability", "must be fsync or buffered")
}

func (a *Approval) validate(f string) error {
	var e errs
	if a.Timeout < 0 || a.Timeout > 24*time.Hour {
		e.add(f+".timeout", "must be between 1s and 24h")
	}
	if a.MaxPendingPerSession < 0 || a.MaxPendingPerSession > 10000 {
		e.add(f+".max_pending_per_session", "must be between 1 and 10000")
	}
	if a.ExecutionLease < 0 || a.ExecutionLease > time.Hour {
		e.add(f+".execution_lease", "must be between 0 (default 15s) and 1h")
	}
	if a.ProxyWait < 0 || a.ProxyWait > 15*time.Minute {
		e.add(f+".proxy_wait", "must be between 1s and 15m")
	}
	if w := a.MCPWait; w != nil && (*w < 0 || *w > 15*time.Minute) {
		e.add(f+".mcp_wait", "must be between 0 (answer pending at once) and 15m")
	}
	e.join(a.Webhook.validate(f + ".webhook"))
	return e.err()
}

func (w *Webhook) validate(f string) error {
	if w.URL == "" {
		return nil
	}
	var e errs
	if !absoluteHTTP(w.URL) {
		e.add(f+".url", "must be an absolute http(s) URL")
	}
	if len(w.Secret) < 16 {
		e.add(f+".secret", "is required (at least 16 characters) to sign deliveries")
	}
	return e.err()
}

func (r *RateLimit) validate(f string) error {
	if r.PerSession < 0 || r.Burst < 0 {
		return fieldErr(f, "per_session and burst must not be negative")
	}
	return nil
}

func (u *UI) validate(f string) error {
	if u.SessionTTL < 0 {
		return fieldErr(f+".session_ttl", "must be positive")
	}
	return nil
}

func validateLogLevel(f, level string) error {
	switch level {
	case "", "debug", "info", "warn", "error":
		return nil
	}
	return fieldErr(f, "must be debug, info, warn or error")
}

func (s *Scrub) validate(f string) error {
	if s.RotationGrace < 0 {
		return fieldErr(f+".rotation_grace", "must be positive")
	}
	return nil
}

// validate checks the vault: section (none: nothing to check).
func (v *Vault) validate(f string) error {
	if v == nil {
		return nil
	}
	var e errs
	if !absoluteHTTP(v.Address) {
		e.add(f+".address", "must be an absolute http(s) URL")
	}
	if v.Timeout < 0 {
		e.add(f+".timeout", "must be positive")
	}
	a := &v.Auth
	switch a.Method {
	case "token":
		if a.Token == "" {
			e.add(f+".auth.token", "is required for method token")
		}
	case "approle":
		if a.RoleID == "" {
			e.add(f+".auth.role_id", "is required for method approle")
		}
		if a.SecretID == "" && a.SecretIDFile == "" {
			e.add(f+".auth.secret_id", "is required for method approle (or secret_id_file)")
		}
	case "kubernetes":
		if a.Role == "" {
			e.add(f+".auth.role", "is required for method kubernetes")
		}
	default:
		e.add(f+".auth.method", "must be token, approle or kubernetes")
	}
	return e.err()
}
