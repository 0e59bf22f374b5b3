// Package config reads and validates the broker's YAML configuration.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/upstream"
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
	// MCPWait is how long the MCP door holds a gated tools/call for the
	// decision (default 45s; 0: answer pending at once). Never nil after
	// Validate.
	MCPWait *time.Duration `yaml:"mcp_wait"`
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
	Type           string        `yaml:"type"`     // http (default), aws or mcp
	BaseURL        string        `yaml:"base_url"` // http upstreams; mcp: the server's Streamable HTTP endpoint (an aws one's calls go to Endpoint)
	Sensitive      *bool         `yaml:"sensitive"`
	Timeout        time.Duration `yaml:"timeout"`
	MaxBody        int64         `yaml:"max_body"`
	ForwardHeaders []string      `yaml:"forward_headers"`
	Credential     Credential    `yaml:"credential"` // the source its source: key selects
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

	// PropagateTrace sends the broker's own trace context (the upstream
	// call's span, W3C traceparent) to this upstream. Off by default; a
	// sandbox's trace headers are never forwarded either way.
	PropagateTrace bool `yaml:"propagate_trace"`

	// Hosts are the destinations the proxy door maps to this upstream:
	// host names, "*.example.com" (one label), IP addresses, each
	// optionally with ":port" (default: the host of base_url).
	Hosts []string `yaml:"hosts"`
	// CACert is a PEM file of the private CA the broker trusts (alone) for
	// this upstream's TLS.
	CACert string `yaml:"ca_cert"`
	// proxyHosts are Hosts (or the default) as Validate resolved them.
	proxyHosts []upstream.Host

	// aws upstreams: the service and region SigV4 signs for, and where
	// calls go (default https://SERVICE.REGION.amazonaws.com).
	Service  string `yaml:"service"`
	Region   string `yaml:"region"`
	Endpoint string `yaml:"endpoint"`
	// AllowDotKeys (aws only) lets object keys hold "." / ".." / empty
	// segments, raw or percent-encoded; refused by default.
	AllowDotKeys bool `yaml:"allow_dot_keys"`

	// Tools (mcp only) pins tools' digests: a tool served with another
	// digest is quarantined from the start (default: the digest each
	// session first sees).
	Tools map[string]ToolPin `yaml:"tools"`
}

// ToolPin fixes an MCP tool's digest: "sha256:" and the lowercase hex
// SHA-256 of the RFC 8785 (JCS) form of the tool's {name, description,
// inputSchema, annotations}.
type ToolPin struct {
	Digest string `yaml:"digest"`
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

func fieldErr(field, format string, args ...any) error {
	return &fault.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Load reads path, expands ${VAR} in values through getenv, applies defaults
// and validates. Its error joins (errors.Join) every mistake in the file,
// each a *fault.FieldError; Errors lists them.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, getenv)
}

// Check reads and validates the configuration file at path as Load does,
// returning every mistake in it joined, nil when there is none.
func Check(path string, getenv func(string) string) error {
	_, err := Load(path, getenv)
	return err
}

// Errors lists the mistakes an error of Load, Parse or Validate joins, one
// per element (a *fault.FieldError each, but for a file that cannot be read or
// is not YAML).
func Errors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Errors(e)...)
		}
		return out
	}
	return []error{err}
}

// Parse is Load on bytes.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	d := &decoder{original: map[*yaml.Node]string{}}
	d.expand(&root, "", getenv)
	var c Config
	if len(root.Content) == 1 {
		doc := root.Content[0]
		if doc.Kind != yaml.MappingNode && doc.ShortTag() != "!!null" {
			return nil, errors.New("config: the file must be a mapping (sandbox_listen: ..., upstreams: ...)")
		}
		d.mapping(doc, reflect.ValueOf(&c).Elem(), "", nil, "")
	}
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		u.Credential.resolve(d, sourcesFor(u.Type))
	}
	errs := d.errs
	for _, err := range Errors(c.Validate(getenv)) {
		var fe *fault.FieldError
		if errors.As(err, &fe) && d.covers(fe.Field) {
			continue // the value did not decode: already said
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &c, nil
}

var (
	envRef  = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	plainRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// keyPath is the path of key inside the mapping at path: dotted, or
// quoted in brackets when the key is not a plain word (scopes_for's
// "GET /a/**").
func keyPath(path, key string) string {
	if !plainRE.MatchString(key) {
		return fmt.Sprintf("%s[%q]", path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// expand replaces ${VAR} in scalar values (never in keys, never re-parsed as
// YAML, so a variable cannot inject structure), noting each variable that
// is not set and each value's text before expansion.
func (d *decoder) expand(n *yaml.Node, field string, getenv func(string) string) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			f := field
			if n.Kind == yaml.SequenceNode {
				f = fmt.Sprintf("%s[%d]", field, i)
			}
			d.expand(c, f, getenv)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			d.expand(n.Content[i+1], keyPath(field, n.Content[i].Value), getenv)
		}
	case yaml.ScalarNode:
		var missing []string
		v := envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
			name := m[2 : len(m)-1]
			v := getenv(name)
			if v == "" {
				missing = append(missing, name)
			}
			return v
		})
		if v != n.Value {
			d.original[n] = n.Value
			n.Value = v
		}
		for _, name := range missing {
			d.fail(field, "environment variable %s is not set", name)
		}
	}
}

// errs collects a section's mistakes.
type errs []error

func (e *errs) add(field, format string, args ...any) {
	*e = append(*e, fieldErr(field, format, args...))
}

// join adds err's mistakes (none when nil).
func (e *errs) join(err error) { *e = append(*e, Errors(err)...) }

func (e errs) err() error { return errors.Join(e...) }
