// Package config reads and validates the broker's YAML configuration.
package config

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/awscred"
	vaultcred "github.com/airlock-broker/airlock/internal/upstream/vault"
)

// Config is the broker's configuration file.
type Config struct {
	SandboxListen    string        `yaml:"sandbox_listen"`
	ControlListen    string        `yaml:"control_listen"`
	ProxyListen      string        `yaml:"proxy_listen"` // the HTTPS_PROXY door (DESIGN §8); off when empty
	ProxyURL         string        `yaml:"proxy_url"`    // host:port clients use to reach it (default: the listener's address)
	ProxyMaxTunnels  int           `yaml:"proxy_max_tunnels"`
	MaxStreams       int           `yaml:"max_streams_per_session"` // WebSocket relays and streamed answers one session holds open at once (default 16)
	BodyIdleTimeout  time.Duration `yaml:"body_idle_timeout"`       // a sandbox request body that stops arriving this long is cut (default 30s)
	DataDir          string        `yaml:"data_dir"`
	Store            Store         `yaml:"store"`
	AdminToken       string        `yaml:"admin_token"`
	AdminTokenFile   string        `yaml:"admin_token_file"`
	MaxSessionTTL    time.Duration `yaml:"max_session_ttl"`
	DefaultTTL       time.Duration `yaml:"default_session_ttl"`
	EnforceIsolation *bool         `yaml:"enforce_isolation"`
	Audit            Audit         `yaml:"audit"`
	Approval         Approval      `yaml:"approval"`
	RateLimit        RateLimit     `yaml:"rate_limit"`
	UI               UI            `yaml:"ui"`
	Upstreams        []Upstream    `yaml:"upstreams"`
	Vault            *Vault        `yaml:"vault"`
	Scrub            Scrub         `yaml:"scrub"`
	LogLevel         string        `yaml:"log_level"`
	Debug            Debug         `yaml:"debug"`
}

// Store selects where the broker persists its state.
type Store struct {
	// Driver is bbolt (default: one file, data_dir/airlock.db) or postgres
	// (one database that several brokers may share).
	Driver string `yaml:"driver"`
	// DSN is the postgres connection string (URL or key=value; pool
	// settings such as pool_max_conns are read from it). It may hold a
	// password: give it through ${VAR}; it is never logged.
	DSN string `yaml:"dsn"`
	// ReplicaID names this broker among the replicas on one postgres
	// database, as the owner of the approved actions it executes (default:
	// random per start; a stable name, e.g. the pod's, lets a restarted
	// replica fail its own interrupted executions at once).
	ReplicaID string `yaml:"replica_id"`
}

// Store drivers.
const (
	StoreBolt     = "bbolt"
	StorePostgres = "postgres"
)

// Debug holds switches for operators diagnosing the broker.
type Debug struct {
	Pprof bool `yaml:"pprof"` // serve Go's profiler at /debug/pprof/ on the control plane, admin only
}

// Audit configures the audit log.
type Audit struct {
	Durability         string        `yaml:"durability"`
	CheckpointEvery    uint64        `yaml:"checkpoint_every"`    // sign the chain head every N records (default 1000)
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"` // and at least this often (default 1m)
}

// Scrub configures the scrubbing of upstreams' answers.
type Scrub struct {
	// RotationGrace is how long a credential replaced by rotation is still
	// scrubbed from answers (default 24h; an upstream may set its own).
	RotationGrace time.Duration `yaml:"rotation_grace"`
}

// RateLimit bounds each session's sandbox calls (0: unlimited).
type RateLimit struct {
	PerSession float64 `yaml:"per_session"` // calls per second
	Burst      int     `yaml:"burst"`       // default: per_session rounded up
}

// Approval configures the human gate.
type Approval struct {
	Timeout time.Duration `yaml:"timeout"` // how long a pending action waits (default 15m)
	// MaxPendingPerSession bounds a session's pending actions (default 16).
	MaxPendingPerSession int     `yaml:"max_pending_per_session"`
	Webhook              Webhook `yaml:"webhook"`
	// ProxyWait is how long the proxy door holds a gated call's connection
	// for the decision (default 55s); then it answers 202 pending.
	ProxyWait time.Duration `yaml:"proxy_wait"`
	// ExecutionLease: how long an executing action's claim holds unless
	// the replica executing it renews it (default 15s); after it, any
	// replica on the database fails the action, never re-sent.
	ExecutionLease time.Duration `yaml:"execution_lease"`
}

// Webhook announces pending actions and decisions.
type Webhook struct {
	URL    string `yaml:"url"`
	Secret string `yaml:"secret"` // HMAC-SHA256 key of X-Airlock-Signature
}

// UI configures the reviewers' web page.
type UI struct {
	SessionTTL time.Duration `yaml:"session_ttl"`    // reviewer login lifetime (default 8h)
	Secure     *bool         `yaml:"secure_cookies"` // Secure cookie flag (default: on unless the control plane is loopback)
}

// Upstream configures one upstream.
type Upstream struct {
	Name           string        `yaml:"name"`
	Type           string        `yaml:"type"`
	BaseURL        string        `yaml:"base_url"`
	Sensitive      *bool         `yaml:"sensitive"`
	Timeout        time.Duration `yaml:"timeout"`
	MaxBody        int64         `yaml:"max_body"`
	ForwardHeaders []string      `yaml:"forward_headers"`
	Credential     Credential    `yaml:"credential"`
	Inject         Inject        `yaml:"inject"`
	Scrub          Scrub         `yaml:"scrub"` // rotation_grace: this upstream's (default: the top-level one)
	// Placeholder gives sandbox clients that insist on a token one shaped
	// like the real credential and worth nothing (proxy door, DESIGN §8).
	Placeholder *Placeholder          `yaml:"placeholder"`
	placeholder *upstream.Placeholder // Placeholder as Validate parsed it

	// AllowPathSemicolons lets sandbox paths carry ";" in a segment (matrix
	// parameters, "name;v=2"), for upstreams that need them. Off by default:
	// a Tomcat- or Spring-style server cuts a segment at ";", so "..;" and
	// "name;x" would reach another resource than the one the grant checked.
	// Even when on, a segment that is empty, "." or ".." before its ";" is
	// refused. http upstreams only.
	AllowPathSemicolons bool `yaml:"allow_path_semicolons"`

	// Hosts are the destinations the proxy door maps to this upstream:
	// host names, "*.example.com" (one label), IP addresses, each
	// optionally with ":port" (default: the host of base_url).
	Hosts []string `yaml:"hosts"`
	// CACert is a PEM file of the private CA the broker trusts (alone) for
	// this upstream's TLS.
	CACert string `yaml:"ca_cert"`
	// proxyHosts are Hosts (or the default) as Validate resolved them.
	proxyHosts []upstream.Host

	// aws upstreams (not yet supported)
	Service  string `yaml:"service"`
	Region   string `yaml:"region"`
	Endpoint string `yaml:"endpoint"`
	// AllowDotKeys (aws only) lets object keys hold "." / ".." / empty
	// segments, raw or percent-encoded; refused by default.
	AllowDotKeys bool `yaml:"allow_dot_keys"`
}

// Credential names a credential source.
type Credential struct {
	Source  string        `yaml:"source"`
	Name    string        `yaml:"name"`    // env
	Path    string        `yaml:"path"`    // file, or the vault KV v2 path (secret/data/github)
	Field   string        `yaml:"field"`   // vault: the field holding the secret
	Version int           `yaml:"version"` // vault: pin a KV version (default: latest)
	Refresh time.Duration `yaml:"refresh"` // vault: re-read at least this often, so rotations reach sandboxes (default 30s)
	// aws upstreams: the key pair's names (env) or fields (vault), or the SDK chain (source: aws)
	AccessKeyName  string `yaml:"access_key_name"`
	SecretKeyName  string `yaml:"secret_key_name"`
	AccessKeyField string `yaml:"access_key_field"`
	SecretKeyField string `yaml:"secret_key_field"`
	AssumeRole     struct {
		RoleARN     string `yaml:"role_arn"`
		STSEndpoint string `yaml:"sts_endpoint"` // optional, e.g. a VPC endpoint
		// ScopeToGrant mints per session an STS credential whose inline
		// session policy is the session's AWS rules, for its remaining life.
		ScopeToGrant bool          `yaml:"scope_to_grant"`
		MaxDuration  time.Duration `yaml:"max_duration"` // the role's maximum session duration (default 1h)
	} `yaml:"assume_role"`
	// vault_aws: Vault's AWS secrets engine, minted per session.
	Mount string `yaml:"mount"` // the engine's mount (default aws)
	Role  string `yaml:"role"`  // the engine's role
	Type  string `yaml:"type"`  // creds (IAM user keys, leased) or sts (default creds)
	// github_app: installation tokens minted per session (githubapp.Minter)
	AppID          string            `yaml:"app_id"`
	InstallationID string            `yaml:"installation_id"`
	PrivateKeyFile string            `yaml:"private_key_file"` // the app's PEM key (PKCS#1 or PKCS#8)
	APIURL         string            `yaml:"api_url"`          // default https://api.github.com
	Repositories   []string          `yaml:"repositories"`     // bound every token (names, without the owner)
	Permissions    map[string]string `yaml:"permissions"`      // bound every token ({contents: read, ...})
	// oauth2: an access token minted per session (oauth2.ClientCredentials, oauth2.Refresh)
	TokenURL     string      `yaml:"token_url"`
	ClientID     string      `yaml:"client_id"`
	ClientSecret *Credential `yaml:"client_secret"` // any of env, file, vault
	Scopes       []string    `yaml:"scopes"`
	GrantType    string      `yaml:"grant_type"` // client_credentials (default) or refresh_token
	// RefreshToken (grant_type refresh_token) is the initial refresh
	// token, from env, file or vault; rotated ones are stored sealed.
	RefreshToken *Credential `yaml:"refresh_token"`
	// ScopesFor narrows the scopes a session's token asks to those its
	// rules need: {"GET /repos/**": [repo:read]} (oauth2.Scopes).
	ScopesFor map[string][]string `yaml:"scopes_for"`
	// RevocationURL (optional) is the RFC 7009 endpoint where a session's
	// access token is revoked when the session ends.
	RevocationURL string `yaml:"revocation_url"`
}

// Vault says how to reach and log in to Vault.
type Vault struct {
	Address   string        `yaml:"address"`
	Namespace string        `yaml:"namespace"`
	CACert    string        `yaml:"ca_cert"`
	Timeout   time.Duration `yaml:"timeout"`
	Auth      struct {
		Method       string `yaml:"method"` // token | approle | kubernetes
		Token        string `yaml:"token"`
		RoleID       string `yaml:"role_id"`
		SecretID     string `yaml:"secret_id"`
		SecretIDFile string `yaml:"secret_id_file"`
		Role         string `yaml:"role"`
		JWTFile      string `yaml:"jwt_file"`
		Mount        string `yaml:"mount"`
	} `yaml:"auth"`
}

// Inject says how the credential is injected.
type Inject struct {
	Header    string      `yaml:"header"`
	Format    string      `yaml:"format"`
	Query     string      `yaml:"query"`
	BasicUser string      `yaml:"basic_user"`
	HMAC      *InjectHMAC `yaml:"hmac"` // sign each request with the secret as the HMAC key (upstream.HMACSigning)
}

// InjectHMAC signs requests: the header, sha256|sha512, hex|base64, the
// header's format ({timestamp}, {signature}) and the canonical string
// (upstream.HMACSigning names its placeholders).
type InjectHMAC struct {
	Header    string `yaml:"header"`
	Algorithm string `yaml:"algorithm"`
	Encoding  string `yaml:"encoding"`
	Format    string `yaml:"format"`
	Over      string `yaml:"over"`
}

// Defaults.
const (
	DefaultSandboxListen = "127.0.0.1:8700"
	DefaultControlListen = "127.0.0.1:8701"
	DefaultMaxSessionTTL = time.Hour
	DefaultSessionTTL    = 15 * time.Minute
	DefaultTimeout       = 30 * time.Second
	DefaultMaxBody       = 1 << 20
	DefaultProxyWait     = 55 * time.Second
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
)

// FieldError names the offending field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Load reads path, expands ${VAR} in values through getenv, applies defaults
// and validates.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, getenv)
}

// Parse is Load on bytes.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := expand(&root, "", getenv); err != nil {
		return nil, err
	}
	expanded, err := yaml.Marshal(&root)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := c.Validate(getenv); err != nil {
		return nil, err
	}
	return &c, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${VAR} in scalar values (never in keys, never re-parsed as
// YAML, so a variable cannot inject structure).
func expand(n *yaml.Node, field string, getenv func(string) string) error {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			f := field
			if n.Kind == yaml.SequenceNode {
				f = fmt.Sprintf("%s[%d]", field, i)
			}
			if err := expand(c, f, getenv); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			f := n.Content[i].Value
			if field != "" {
				f = field + "." + f
			}
			if err := expand(n.Content[i+1], f, getenv); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		var missing string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
			name := m[2 : len(m)-1]
			v := getenv(name)
			if v == "" && missing == "" {
				missing = name
			}
			return v
		})
		if missing != "" {
			return fieldErr(field, "environment variable %s is not set", missing)
		}
	}
	return nil
}

// Validate applies defaults and checks every field.
func (c *Config) Validate(getenv func(string) string) error {
	if c.SandboxListen == "" {
		c.SandboxListen = DefaultSandboxListen
	}
	if c.ControlListen == "" {
		c.ControlListen = DefaultControlListen
	}
	for _, f := range []struct{ name, v string }{{"sandbox_listen", c.SandboxListen}, {"control_listen", c.ControlListen}} {
		if _, _, err := net.SplitHostPort(f.v); err != nil {
			return fieldErr(f.name, "must be host:port")
		}
	}
	if c.SandboxListen == c.ControlListen && !strings.HasSuffix(c.SandboxListen, ":0") {
		return fieldErr("control_listen", "must differ from sandbox_listen: the two planes are separate listeners")
	}
	if c.ProxyListen != "" {
		if _, _, err := net.SplitHostPort(c.ProxyListen); err != nil {
			return fieldErr("proxy_listen", "must be host:port")
		}
		if !strings.HasSuffix(c.ProxyListen, ":0") && (c.ProxyListen == c.SandboxListen || c.ProxyListen == c.ControlListen) {
			return fieldErr("proxy_listen", "must differ from sandbox_listen and control_listen")
		}
	}
	if c.BodyIdleTimeout == 0 {
		c.BodyIdleTimeout = DefaultBodyIdleTimeout
	}
	if c.BodyIdleTimeout < 0 {
		return fieldErr("body_idle_timeout", "must be positive")
	}
	if c.ProxyMaxTunnels == 0 {
		c.ProxyMaxTunnels = DefaultProxyMaxTunnels
	}
	if c.ProxyMaxTunnels < 0 || c.ProxyMaxTunnels > 65536 {
		return fieldErr("proxy_max_tunnels", "must be between 1 and 65536")
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.MaxStreams < 0 || c.MaxStreams > 65536 {
		return fieldErr("max_streams_per_session", "must be between 1 and 65536")
	}
	if c.ProxyURL != "" {
		if c.ProxyListen == "" {
			return fieldErr("proxy_url", "needs proxy_listen")
		}
		if h, p, err := net.SplitHostPort(c.ProxyURL); err != nil || h == "" || p == "" || strings.ContainsAny(c.ProxyURL, "/@?#") {
			return fieldErr("proxy_url", "must be host:port (the address clients reach the proxy door at)")
		}
	}
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	switch c.Store.Driver {
	case "":
		c.Store.Driver = StoreBolt
	case StoreBolt, StorePostgres:
	default:
		return fieldErr("store.driver", "must be bbolt or postgres")
	}
	switch {
	case c.Store.Driver == StorePostgres && c.Store.DSN == "":
		return fieldErr("store.dsn", "is required with driver postgres")
	case c.Store.Driver == StoreBolt && c.Store.DSN != "":
		return fieldErr("store.dsn", "is for driver postgres (bbolt keeps its file in data_dir)")
	}
	if c.AdminToken == "" && c.AdminTokenFile != "" {
		data, err := os.ReadFile(c.AdminTokenFile)
		if err != nil {
			return fieldErr("admin_token_file", "cannot read the file")
		}
		c.AdminToken = strings.TrimRight(string(data), "\r\n")
	}
	if c.AdminToken == "" {
		return fieldErr("admin_token", "is required (or admin_token_file)")
	}
	if len(c.AdminToken) < 16 {
		return fieldErr("admin_token", "must be at least 16 characters")
	}
	if c.MaxSessionTTL == 0 {
		c.MaxSessionTTL = DefaultMaxSessionTTL
	}
	if c.MaxSessionTTL < 0 {
		return fieldErr("max_session_ttl", "must be positive")
	}
	if c.DefaultTTL == 0 {
		c.DefaultTTL = min(DefaultSessionTTL, c.MaxSessionTTL)
	}
	if c.DefaultTTL < 0 || c.DefaultTTL > c.MaxSessionTTL {
		return fieldErr("default_session_ttl", "must be positive and at most max_session_ttl")
	}
	if c.EnforceIsolation == nil {
		t := true
		c.EnforceIsolation = &t
	}
	switch c.Audit.Durability {
	case "":
		c.Audit.Durability = store.DurabilityFsync
	case store.DurabilityFsync, store.DurabilityBuffered:
	default:
		return fieldErr("audit.durability", "must be fsync or buffered")
	}
	if c.Approval.Timeout == 0 {
		c.Approval.Timeout = 15 * time.Minute
	}
	if c.Approval.Timeout < 0 || c.Approval.Timeout > 24*time.Hour {
		return fieldErr("approval.timeout", "must be between 1s and 24h")
	}
	if c.Approval.MaxPendingPerSession == 0 {
		c.Approval.MaxPendingPerSession = broker.DefaultMaxPending
	}
	if c.Approval.MaxPendingPerSession < 0 || c.Approval.MaxPendingPerSession > 10000 {
		return fieldErr("approval.max_pending_per_session", "must be between 1 and 10000")
	}
	if c.Approval.ExecutionLease < 0 || c.Approval.ExecutionLease > time.Hour {
		return fieldErr("approval.execution_lease", "must be between 0 (default 15s) and 1h")
	}
	if c.Approval.ProxyWait == 0 {
		c.Approval.ProxyWait = DefaultProxyWait
	}
	if c.Approval.ProxyWait < 0 || c.Approval.ProxyWait > 15*time.Minute {
		return fieldErr("approval.proxy_wait", "must be between 1s and 15m")
	}
	if w := c.Approval.Webhook; w.URL != "" {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fieldErr("approval.webhook.url", "must be an absolute http(s) URL")
		}
		if len(w.Secret) < 16 {
			return fieldErr("approval.webhook.secret", "is required (at least 16 characters) to sign deliveries")
		}
	}
	if c.RateLimit.PerSession < 0 || c.RateLimit.Burst < 0 {
		return fieldErr("rate_limit", "per_session and burst must not be negative")
	}
	if c.RateLimit.PerSession > 0 && c.RateLimit.Burst == 0 {
		c.RateLimit.Burst = int(c.RateLimit.PerSession + 0.999)
	}
	if c.UI.SessionTTL == 0 {
		c.UI.SessionTTL = 8 * time.Hour
	}
	if c.UI.SessionTTL < 0 {
		return fieldErr("ui.session_ttl", "must be positive")
	}
	if c.UI.Secure == nil {
		host, _, _ := net.SplitHostPort(c.ControlListen)
		ip := net.ParseIP(host)
		secure := !(host == "localhost" || ip != nil && ip.IsLoopback())
		c.UI.Secure = &secure
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return fieldErr("log_level", "must be debug, info, warn or error")
	}
	if c.Scrub.RotationGrace == 0 {
		c.Scrub.RotationGrace = upstream.DefaultRotationGrace
	}
	if c.Scrub.RotationGrace < 0 {
		return fieldErr("scrub.rotation_grace", "must be positive")
	}
	seen := map[string]bool{}
	placeholders := map[string]string{} // env name → upstream
	for i := range c.Upstreams {
		if g := &c.Upstreams[i].Scrub.RotationGrace; *g == 0 {
			*g = c.Scrub.RotationGrace
		} else if *g < 0 {
			return fieldErr(fmt.Sprintf("upstreams[%d].scrub.rotation_grace", i), "must be positive")
		}
		if err := c.Upstreams[i].validate(fmt.Sprintf("upstreams[%d]", i), seen); err != nil {
			return err
		}
		if src := c.Upstreams[i].Credential.Source; (src == "vault" || src == "vault_aws") && c.Vault == nil {
			return fieldErr(fmt.Sprintf("upstreams[%d].credential.source", i), "%s needs a top-level vault: section", src)
		}
		if err := c.Upstreams[i].uniquePlaceholder(i, placeholders); err != nil {
			return err
		}
	}
	if err := c.validateHosts(); err != nil {
		return err
	}
	if v := c.Vault; v != nil {
		u, err := url.Parse(v.Address)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fieldErr("vault.address", "must be an absolute http(s) URL")
		}
		a := &v.Auth
		switch a.Method {
		case "token":
			if a.Token == "" {
				return fieldErr("vault.auth.token", "is required for method token")
			}
		case "approle":
			if a.RoleID == "" || (a.SecretID == "" && a.SecretIDFile == "") {
				return fieldErr("vault.auth", "approle needs role_id and secret_id or secret_id_file")
			}
		case "kubernetes":
			if a.Role == "" {
				return fieldErr("vault.auth.role", "is required for method kubernetes")
			}
			if a.JWTFile == "" {
				a.JWTFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
			}
		default:
			return fieldErr("vault.auth.method", "must be token, approle or kubernetes")
		}
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func (u *Upstream) validate(f string, seen map[string]bool) error {
	if !nameRE.MatchString(u.Name) {
		return fieldErr(f+".name", "must be 1-63 of a-z, 0-9, '-', '_'")
	}
	if seen[u.Name] {
		return fieldErr(f+".name", "duplicate upstream name %q", u.Name)
	}
	seen[u.Name] = true
	if err := u.validatePlaceholder(f); err != nil {
		return err
	}
	switch u.Type {
	case "", "http":
		u.Type = "http"
		if u.AllowDotKeys {
			return fieldErr(f+".allow_dot_keys", "applies to aws upstreams only")
		}
	case "aws":
		return u.validateAWS(f)
	default:
		return fieldErr(f+".type", "must be http or aws")
	}
	bu, err := url.Parse(u.BaseURL)
	if err != nil || (bu.Scheme != "http" && bu.Scheme != "https") || bu.Host == "" || bu.RawQuery != "" || bu.Fragment != "" || bu.User != nil {
		return fieldErr(f+".base_url", "must be an absolute http(s) URL without query, fragment or user info")
	}
	if u.Sensitive == nil {
		t := true
		u.Sensitive = &t
	}
	if u.Timeout == 0 {
		u.Timeout = DefaultTimeout
	}
	if u.Timeout < 0 {
		return fieldErr(f+".timeout", "must be positive")
	}
	if u.MaxBody == 0 {
		u.MaxBody = DefaultMaxBody
	}
	if u.MaxBody < 0 {
		return fieldErr(f+".max_body", "must be positive")
	}
	for j, h := range u.ForwardHeaders {
		if grants.ForbiddenHeader(h) || strings.EqualFold(h, "Accept-Encoding") {
			return fieldErr(fmt.Sprintf("%s.forward_headers[%d]", f, j), "%s may never be forwarded from a sandbox", h)
		}
	}
	switch u.Credential.Source {
	case "env":
		if u.Credential.Name == "" {
			return fieldErr(f+".credential.name", "is required for source env")
		}
	case "file":
		if u.Credential.Path == "" {
			return fieldErr(f+".credential.path", "is required for source file")
		}
	case "vault":
		if u.Credential.Path == "" || u.Credential.Field == "" {
			return fieldErr(f+".credential", "vault needs path and field")
		}
		if u.Credential.Version < 0 || u.Credential.Refresh < 0 {
			return fieldErr(f+".credential", "version and refresh must not be negative")
		}
	case "github_app":
		if err := u.Credential.validateGitHubApp(f + ".credential"); err != nil {
			return err
		}
	case "oauth2":
		if err := u.Credential.validateOAuth2(f + ".credential"); err != nil {
			return err
		}
	case "vault_aws", "aws":
		return fieldErr(f+".credential.source", "%s credentials are for aws upstreams", u.Credential.Source)
	case "":
		return fieldErr(f+".credential.source", "is required (env, file, vault, github_app or oauth2)")
	default:
		return fieldErr(f+".credential.source", "must be env, file, vault, github_app or oauth2")
	}
	in := &u.Inject
	n := 0
	for _, set := range []bool{in.Header != "", in.Query != "", in.BasicUser != "", in.HMAC != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		in.Header, in.Format = "Authorization", "Bearer {secret}"
	case n > 1:
		return fieldErr(f+".inject", "set exactly one of header, query, basic_user, hmac")
	case in.HMAC != nil:
		if in.Format != "" {
			return fieldErr(f+".inject.format", "applies to header injection only (hmac has its own format)")
		}
		h := upstream.HMACSigning(*in.HMAC)
		if err := h.Validate(); err != nil {
			return fieldErr(f+".inject.hmac", "%v", err)
		}
		*in.HMAC = InjectHMAC(h)
	case in.Header != "":
		if in.Format == "" {
			in.Format = "{secret}"
		}
		if !strings.Contains(in.Format, "{secret}") {
			return fieldErr(f+".inject.format", "must contain {secret}")
		}
		if strings.ContainsAny(in.Header, " :\r\n") {
			return fieldErr(f+".inject.header", "is not a valid header name")
		}
	case in.Format != "":
		return fieldErr(f+".inject.format", "applies to header injection only")
	}
	return nil
}

// hmacSigning is the runtime form of h (nil: none).
func hmacSigning(h *InjectHMAC) *upstream.HMACSigning {
	if h == nil {
		return nil
	}
	s := upstream.HMACSigning(*h)
	return &s
}

// DefaultAWSMaxBody bounds request bodies to aws upstreams (object uploads).
const DefaultAWSMaxBody = 64 << 20

var (
	serviceRE = regexp.MustCompile(`^[a-z0-9-]+$`)
	regionRE  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
)

func (u *Upstream) validateAWS(f string) error {
	if !serviceRE.MatchString(u.Service) {
		return fieldErr(f+".service", "is required (s3, dynamodb, sqs, ...)")
	}
	if !regionRE.MatchString(u.Region) {
		return fieldErr(f+".region", "is required (us-east-1, ...)")
	}
	if u.Endpoint == "" {
		u.Endpoint = "https://" + u.Service + "." + u.Region + ".amazonaws.com"
	}
	eu, err := url.Parse(u.Endpoint)
	if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" || eu.RawQuery != "" {
		return fieldErr(f+".endpoint", "must be an absolute http(s) URL")
	}
	if u.BaseURL != "" || u.Inject != (Inject{}) || len(u.ForwardHeaders) > 0 || u.AllowPathSemicolons {
		return fieldErr(f, "aws upstreams take service, region and endpoint; requests are SigV4-signed, not injected")
	}
	u.BaseURL = u.Endpoint
	if u.Sensitive == nil {
		t := true
		u.Sensitive = &t
	}
	if u.Timeout == 0 {
		u.Timeout = DefaultTimeout
	}
	if u.MaxBody == 0 {
		u.MaxBody = DefaultAWSMaxBody
	}
	c := u.Credential
	switch c.Source {
	case "env":
		if c.AccessKeyName == "" || c.SecretKeyName == "" {
			return fieldErr(f+".credential", "env needs access_key_name and secret_key_name")
		}
	case "vault":
		if c.Path == "" || c.AccessKeyField == "" || c.SecretKeyField == "" {
			return fieldErr(f+".credential", "vault needs path, access_key_field and secret_key_field")
		}
	case "aws":
	case "vault_aws":
		if c.Role == "" {
			return fieldErr(f+".credential.role", "is required for source vault_aws")
		}
		if c.Type != "" && c.Type != "creds" && c.Type != "sts" {
			return fieldErr(f+".credential.type", "must be creds or sts")
		}
		if c.AssumeRole.RoleARN != "" {
			return fieldErr(f+".credential.assume_role", "does not apply to vault_aws (the engine's role decides)")
		}
		if u.Credential.Mount == "" {
			u.Credential.Mount = "aws"
		}
	default:
		return fieldErr(f+".credential.source", "must be env, vault, aws or vault_aws")
	}
	if c.AssumeRole.RoleARN != "" && !strings.HasPrefix(c.AssumeRole.RoleARN, "arn:") {
		return fieldErr(f+".credential.assume_role.role_arn", "must be an ARN")
	}
	if c.AssumeRole.ScopeToGrant && c.AssumeRole.RoleARN == "" {
		return fieldErr(f+".credential.assume_role.scope_to_grant", "needs role_arn")
	}
	if d := c.AssumeRole.MaxDuration; d < 0 || (d > 0 && (d < 15*time.Minute || d > 12*time.Hour)) {
		return fieldErr(f+".credential.assume_role.max_duration", "must be between 15m and 12h")
	}
	return nil
}

func (c *Config) buildAWS(ctx context.Context, f string, u Upstream, getenv func(string) string, vault *vaultcred.Client) (*upstream.AWS, upstream.Source, upstream.Minter, error) {
	var p upstream.AWSCredentialsProvider
	desc := "aws:" + u.Credential.Source
	awsCfg := &upstream.AWS{Service: u.Service, Region: u.Region, AllowDotKeys: u.AllowDotKeys}
	switch u.Credential.Source {
	case "vault_aws":
		m, err := vault.AWSEngine(u.Credential.Mount, u.Credential.Role, u.Credential.Type)
		if err != nil {
			return nil, nil, nil, fieldErr(f+".credential", "%v", err)
		}
		return awsCfg, upstream.MintedSource(m), m, nil
	case "env":
		ak, sk := getenv(u.Credential.AccessKeyName), getenv(u.Credential.SecretKeyName)
		if ak == "" || sk == "" {
			return nil, nil, nil, fieldErr(f+".credential", "environment variables %s and %s must be set", u.Credential.AccessKeyName, u.Credential.SecretKeyName)
		}
		p = upstream.StaticAWSCredentials(ak, sk)
	case "vault":
		ak, err := vault.KV(u.Credential.Path, u.Credential.AccessKeyField, u.Credential.Version, u.Credential.Refresh)
		if err != nil {
			return nil, nil, nil, fieldErr(f+".credential.path", "%v", err)
		}
		sk, _ := vault.KV(u.Credential.Path, u.Credential.SecretKeyField, u.Credential.Version, u.Credential.Refresh)
		p, desc = vaultcred.AWSCredentials{Access: ak, Secret: sk}, sk.Describe()
	case "aws":
		var err error
		if p, err = awscred.Default(ctx, u.Region); err != nil {
			return nil, nil, nil, fieldErr(f+".credential", "%v", err)
		}
		desc = "aws:default-chain"
	}
	ar := u.Credential.AssumeRole
	if ar.RoleARN != "" && ar.ScopeToGrant {
		m := awscred.NewSTSScoped(p, u.Region, ar.RoleARN, ar.STSEndpoint, ar.MaxDuration, desc)
		return awsCfg, upstream.MintedSource(m), m, nil
	}
	if role := ar.RoleARN; role != "" {
		p = awscred.AssumeRole(p, u.Region, role, ar.STSEndpoint)
		desc += " assume " + role
	}
	awsCfg.Creds = p
	return awsCfg, upstream.AWSSource(p, desc), nil, nil
}

// Build makes the runtime upstreams, resolving credential sources, and the
// Vault client they share (nil when none uses Vault; Close it when done).
func (c *Config) Build(getenv func(string) string, log *slog.Logger) (map[string]*upstream.Upstream, *vaultcred.Client, error) {
	out := make(map[string]*upstream.Upstream, len(c.Upstreams))
	var vault *vaultcred.Client
	if v := c.Vault; v != nil {
		var err error
		vault, err = vaultcred.New(vaultcred.Config{Address: v.Address, Namespace: v.Namespace, CACert: v.CACert, Timeout: v.Timeout,
			Auth: vaultcred.Auth{Method: v.Auth.Method, Token: v.Auth.Token, RoleID: v.Auth.RoleID, SecretID: v.Auth.SecretID,
				SecretIDFile: v.Auth.SecretIDFile, Role: v.Auth.Role, JWTFile: v.Auth.JWTFile, Mount: v.Auth.Mount}}, log.With("component", "vault"))
		if err != nil {
			return nil, nil, fieldErr("vault", "%v", err)
		}
	}
	for i, u := range c.Upstreams {
		f := fmt.Sprintf("upstreams[%d]", i)
		bu, _ := url.Parse(u.BaseURL)
		var src upstream.Source
		var awsCfg *upstream.AWS
		var minter upstream.Minter
		var tlsConf *tls.Config // the upstream's ca_cert, trusted alone (its issuer's too)
		if u.CACert != "" {
			pool, err := caPool(u.CACert)
			if err != nil {
				return nil, nil, fieldErr(f+".ca_cert", "%v", err)
			}
			tlsConf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		switch {
		case u.Type == "aws":
			var err error
			if awsCfg, src, minter, err = c.buildAWS(context.Background(), f, u, getenv, vault); err != nil {
				return nil, nil, err
			}
		case u.Credential.Source == "env":
			s, err := upstream.NewEnvSource(u.Credential.Name, getenv)
			if err != nil {
				return nil, nil, fieldErr(f+".credential.name", "%v", err)
			}
			src = s
		case u.Credential.Source == "file":
			src = upstream.NewFileSource(u.Credential.Path)
		case u.Credential.Source == "github_app":
			g, err := u.Credential.buildGitHubApp(f+".credential", tlsConf)
			if err != nil {
				return nil, nil, err
			}
			minter, src = g, upstream.MintedSource(g)
		case u.Credential.Source == "oauth2":
			o, err := u.Credential.buildOAuth2(f+".credential", getenv, vault, tlsConf)
			if err != nil {
				return nil, nil, err
			}
			minter, src = o, upstream.MintedSource(o)
		case u.Credential.Source == "vault":
			s, err := vault.KV(u.Credential.Path, u.Credential.Field, u.Credential.Version, u.Credential.Refresh)
			if err != nil {
				return nil, nil, fieldErr(f+".credential.path", "%v", err)
			}
			src = s
		}
		fwd := map[string]bool{}
		for _, h := range append(append([]string{}, upstream.DefaultForwardHeaders...), u.ForwardHeaders...) {
			fwd[http.CanonicalHeaderKey(h)] = true
		}
		up := &upstream.Upstream{
			Name: u.Name, Kind: u.Type, BaseURL: bu, Sensitive: *u.Sensitive,
			Timeout: u.Timeout, MaxBody: u.MaxBody, ForwardHeaders: fwd, Source: src,
			Inject: upstream.Injection{Header: u.Inject.Header, Format: u.Inject.Format, Query: u.Inject.Query, BasicUser: u.Inject.BasicUser, HMAC: hmacSigning(u.Inject.HMAC)},
			AWS:    awsCfg, RotationGrace: u.Scrub.RotationGrace,
			Placeholder: u.placeholder,
		}
		up.Minter = minter
		up.AllowPathSemicolons = u.AllowPathSemicolons
		up.Minter = minter
		up.Hosts = c.Upstreams[i].proxyHosts
		tr := upstream.NewTransport()
		if tlsConf != nil {
			tr.TLSClientConfig = tlsConf
		}
		up.SetTransport(tr)
		out[u.Name] = up
	}
	return out, vault, nil
}

// hosts are the upstream's configured hosts, or (explicit false) the host
// of its base URL (none when that is not a canonical host name or address);
// for an aws upstream, the names the stock SDKs and CLI use for its service
// and region (upstream.AWS.Hosts), whatever its endpoint.
func (u *Upstream) hosts(f string) (hs []upstream.Host, explicit bool, err error) {
	if len(u.Hosts) == 0 && u.Type == "aws" {
		for _, s := range (&upstream.AWS{Service: u.Service, Region: u.Region}).Hosts() {
			h, err := upstream.ParseHost(s)
			if err != nil {
				return nil, false, fmt.Errorf("%s: the AWS host %q: %w", f, s, err)
			}
			hs = append(hs, h)
		}
		return hs, false, nil
	}
	if len(u.Hosts) == 0 {
		bu, err := url.Parse(u.BaseURL)
		if err != nil {
			return nil, false, nil
		}
		entry := bu.Hostname()
		if p := bu.Port(); p != "" && !(bu.Scheme == "https" && p == "443" || bu.Scheme == "http" && p == "80") {
			entry = net.JoinHostPort(entry, p)
		}
		h, err := upstream.ParseHost(entry)
		if err != nil {
			return nil, false, nil
		}
		return []upstream.Host{h}, false, nil
	}
	hs = make([]upstream.Host, 0, len(u.Hosts))
	for j, s := range u.Hosts {
		h, err := upstream.ParseHost(s)
		if err != nil {
			return nil, true, fieldErr(fmt.Sprintf("%s.hosts[%d]", f, j), "%q: %v (a host name, *.domain, or an IP address, optionally :port; ASCII only)", truncateField(s), err)
		}
		hs = append(hs, h)
	}
	return hs, true, nil
}

func truncateField(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// validateHosts resolves every upstream's proxy hosts and checks its
// ca_cert. A destination two upstreams list in hosts is an error (the
// proxy door could not tell which credential it means). A default (the
// base URL's host) that another upstream lists, or that is also another
// upstream's default, maps to none of them: name it in hosts.
func (c *Config) validateHosts() error {
	type claim struct {
		h upstream.Host
		i int
	}
	var explicit, defaults []claim
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		f := fmt.Sprintf("upstreams[%d]", i)
		hs, isExplicit, err := u.hosts(f)
		if err != nil {
			return err
		}
		if !isExplicit {
			for _, h := range hs {
				defaults = append(defaults, claim{h, i})
			}
		}
		for j, h := range hs {
			if !isExplicit {
				break
			}
			for _, o := range explicit {
				if o.h.Overlaps(h) {
					if o.i == i {
						return fieldErr(fmt.Sprintf("%s.hosts[%d]", f, j), "%s is listed twice", h)
					}
					return fieldErr(fmt.Sprintf("%s.hosts[%d]", f, j), "%s is also a host of upstream %q: a host belongs to one upstream", h, c.Upstreams[o.i].Name)
				}
			}
			explicit = append(explicit, claim{h, i})
		}
		if u.CACert != "" {
			if _, err := caPool(u.CACert); err != nil {
				return fieldErr(f+".ca_cert", "%v", err)
			}
		}
	}
	for i := range c.Upstreams {
		c.Upstreams[i].proxyHosts = nil
	}
	for _, e := range explicit {
		u := &c.Upstreams[e.i]
		u.proxyHosts = append(u.proxyHosts, e.h)
	}
	for _, d := range defaults {
		ambiguous := false
		for _, o := range append(explicit, defaults...) {
			if o.i != d.i && o.h.Overlaps(d.h) {
				ambiguous = true
			}
		}
		if !ambiguous {
			u := &c.Upstreams[d.i]
			u.proxyHosts = append(u.proxyHosts, d.h)
		}
	}
	return nil
}

// caPool reads a PEM file of CA certificates.
func caPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.New("cannot read the file")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}
