package config

import (
	"net"
	"time"

	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// Defaults.
const (
	DefaultSandboxListen = "127.0.0.1:8700"
	DefaultControlListen = "127.0.0.1:8701"
	DefaultDataDir       = "./data"
	DefaultMaxSessionTTL = time.Hour
	DefaultSessionTTL    = 15 * time.Minute
	DefaultTimeout       = 30 * time.Second
	DefaultMaxBody       = 1 << 20
	// DefaultAWSMaxBody bounds request bodies to aws upstreams (object uploads).
	DefaultAWSMaxBody = 64 << 20
	DefaultProxyWait  = 55 * time.Second
	// DefaultMCPWait is how long the MCP door holds a gated tool call
	// (approval.mcp_wait).
	DefaultMCPWait = 45 * time.Second
	// DefaultApprovalTimeout is how long a pending action waits (approval.timeout).
	DefaultApprovalTimeout = 15 * time.Minute
	// DefaultUISessionTTL is a reviewer login's lifetime (ui.session_ttl).
	DefaultUISessionTTL = 8 * time.Hour
	// DefaultProxyMaxTunnels bounds the proxy door's tunnels one session
	// holds open at once (proxy_max_tunnels): each holds a connection and
	// its TLS state.
	DefaultProxyMaxTunnels = 256
	// DefaultMaxStreams bounds the long-lived work one session holds open
	// at once (max_streams_per_session): WebSocket relays and streamed
	// answers, on every door.
	DefaultMaxStreams = 16
	// DefaultBodyIdleTimeout is how long a sandbox's request body may stop
	// arriving before the call is refused (body_idle_timeout).
	DefaultBodyIdleTimeout = 30 * time.Second
	// DefaultGitHubAPIURL is github_app's api_url by default.
	DefaultGitHubAPIURL = "https://api.github.com"
	// DefaultKubernetesJWTFile is vault.auth.jwt_file by default.
	DefaultKubernetesJWTFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// setDefault sets *v to def when it is the zero value (unset).
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func ptr[T any](v T) *T { return &v }

// applyDefaults fills every field left unset: the one place defaults are
// set. A default that derives from another field is set only when that
// field is valid, so that one mistake is reported once.
func (c *Config) applyDefaults() {
	setDefault(&c.SandboxListen, DefaultSandboxListen)
	setDefault(&c.ControlListen, DefaultControlListen)
	setDefault(&c.BodyIdleTimeout, DefaultBodyIdleTimeout)
	setDefault(&c.ProxyMaxTunnels, DefaultProxyMaxTunnels)
	setDefault(&c.MaxStreams, DefaultMaxStreams)
	setDefault(&c.DataDir, DefaultDataDir)
	setDefault(&c.Store.Driver, StoreBolt)
	setDefault(&c.MaxSessionTTL, DefaultMaxSessionTTL)
	if c.MaxSessionTTL > 0 {
		setDefault(&c.DefaultTTL, min(DefaultSessionTTL, c.MaxSessionTTL))
	}
	setDefault(&c.EnforceIsolation, ptr(true))
	setDefault(&c.Audit.Durability, store.DurabilityFsync)
	setDefault(&c.Approval.Timeout, DefaultApprovalTimeout)
	setDefault(&c.Approval.MaxPendingPerSession, gate.DefaultMaxPending)
	setDefault(&c.Approval.ProxyWait, DefaultProxyWait)
	setDefault(&c.Approval.MCPWait, ptr(DefaultMCPWait))
	// approval.execution_lease stays 0: the broker's default (15s).
	if c.RateLimit.PerSession > 0 {
		setDefault(&c.RateLimit.Burst, int(c.RateLimit.PerSession+0.999))
	}
	setDefault(&c.UI.SessionTTL, DefaultUISessionTTL)
	if c.UI.Secure == nil {
		host, _, _ := net.SplitHostPort(c.ControlListen)
		ip := net.ParseIP(host)
		c.UI.Secure = ptr(!(host == "localhost" || ip != nil && ip.IsLoopback()))
	}
	setDefault(&c.Scrub.RotationGrace, upstream.DefaultRotationGrace)
	if v := c.Vault; v != nil && v.Auth.Method == "kubernetes" {
		setDefault(&v.Auth.JWTFile, DefaultKubernetesJWTFile)
	}
	for i := range c.Upstreams {
		c.Upstreams[i].applyDefaults(c.Scrub.RotationGrace)
	}
}

// applyDefaults fills an upstream's unset fields; grace is the top-level
// scrub.rotation_grace.
func (u *Upstream) applyDefaults(grace time.Duration) {
	setDefault(&u.Type, "http")
	setDefault(&u.Sensitive, ptr(true))
	setDefault(&u.Timeout, DefaultTimeout)
	if grace > 0 {
		setDefault(&u.Scrub.RotationGrace, grace)
	}
	switch u.Type {
	case "aws":
		setDefault(&u.MaxBody, DefaultAWSMaxBody)
		if serviceRE.MatchString(u.Service) && regionRE.MatchString(u.Region) {
			setDefault(&u.Endpoint, "https://"+u.Service+"."+u.Region+".amazonaws.com")
		}
	case "http", "mcp":
		setDefault(&u.MaxBody, DefaultMaxBody)
		in := &u.Inject
		switch {
		case in.Header == "" && in.Query == "" && in.BasicUser == "" && in.HMAC == nil && in.Format == "":
			in.Header, in.Format = "Authorization", "Bearer {secret}"
		case in.Header != "":
			setDefault(&in.Format, "{secret}")
		}
	}
	switch s := u.Credential.Source.(type) {
	case *GitHubAppCredential:
		setDefault(&s.APIURL, DefaultGitHubAPIURL)
	case *OAuth2Credential:
		setDefault(&s.GrantType, "client_credentials")
	case *VaultAWSCredential:
		setDefault(&s.Mount, "aws")
	}
}
