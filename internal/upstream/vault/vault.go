// Package vault is the Vault credential source: the broker's Vault client
// (token, AppRole and Kubernetes auth, renewed for its life), KV v2 secrets
// as an upstream.Source, static AWS keys held in KV, and AWS credentials
// minted per session by Vault's AWS secrets engine (an upstream.Minter).
package vault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/api/auth/approle"
	"github.com/hashicorp/vault/api/auth/kubernetes"
	"golang.org/x/sync/singleflight"

	"github.com/airlock-broker/airlock/internal/upstream"
)

var (
	_ upstream.Source     = (*KV)(nil)
	_ upstream.Observable = (*KV)(nil)
)

// Config says how the broker reaches and logs in to Vault.
type Config struct {
	Address   string
	Namespace string
	CACert    string // PEM file for a private CA
	Timeout   time.Duration
	Auth      Auth
	// Now is the clock of the KV cache's refresh bound (nil: time.Now).
	Now func() time.Time
}

// Auth is one of: token (Token), AppRole (RoleID and SecretID or
// SecretIDFile), Kubernetes (Role and the service-account JWTFile).
type Auth struct {
	Method       string // token | approle | kubernetes
	Token        string
	RoleID       string
	SecretID     string
	SecretIDFile string
	Role         string
	JWTFile      string
	Mount        string // auth mount path (default: the method's name)
}

// Client is the broker's Vault client: it logs in lazily (the broker starts
// and reports itself not ready while Vault is down), keeps its token renewed
// for its whole life, and logs in again when renewal fails.
type Client struct {
	client *vaultapi.Client
	auth   Auth
	log    *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	authed bool
	stop   chan struct{}
	once   sync.Once
	login  singleflight.Group
}

// New makes the client; it does not contact Vault.
func New(cfg Config, log *slog.Logger) (*Client, error) {
	vc := vaultapi.DefaultConfig()
	vc.Address = cfg.Address
	if cfg.Timeout > 0 {
		vc.Timeout = cfg.Timeout
	} else {
		vc.Timeout = 10 * time.Second
	}
	vc.MaxRetries = 0 // fail fast; the caller fails closed and retries on the next call
	if cfg.CACert != "" {
		if err := vc.ConfigureTLS(&vaultapi.TLSConfig{CACert: cfg.CACert}); err != nil {
			return nil, fmt.Errorf("vault tls: %w", err)
		}
	}
	c, err := vaultapi.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	c.ClearToken() // never pick up VAULT_TOKEN from the environment implicitly
	if cfg.Namespace != "" {
		c.SetNamespace(cfg.Namespace)
	}
	switch cfg.Auth.Method {
	case "token", "approle", "kubernetes":
	default:
		return nil, fmt.Errorf("vault auth method %q: want token, approle or kubernetes", cfg.Auth.Method)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Client{client: c, auth: cfg.Auth, log: log, now: now, stop: make(chan struct{})}, nil
}

// Close stops token renewal.
func (v *Client) Close() { v.once.Do(func() { close(v.stop) }) }

func (v *Client) ensureLogin(ctx context.Context) error {
	v.mu.Lock()
	ok := v.authed
	v.mu.Unlock()
	if ok {
		return nil
	}
	_, err, _ := v.login.Do("login", func() (any, error) { return nil, v.doLogin(ctx) })
	return err
}

func (v *Client) invalidate() {
	v.mu.Lock()
	v.authed = false
	v.mu.Unlock()
}

func (v *Client) doLogin(ctx context.Context) error {
	var (
		secret *vaultapi.Secret
		err    error
	)
	switch v.auth.Method {
	case "token":
		v.client.SetToken(v.auth.Token)
		secret, err = v.client.Auth().Token().LookupSelfWithContext(ctx)
		if err == nil && secret != nil {
			// A lookup answers data, not auth: renewable tokens are renewed below.
			if renewable, _ := secret.TokenIsRenewable(); renewable {
				secret, err = v.client.Auth().Token().RenewSelfWithContext(ctx, 0)
			} else {
				secret = nil
			}
		}
	case "approle":
		sid := &approle.SecretID{FromString: v.auth.SecretID}
		if v.auth.SecretIDFile != "" {
			sid = &approle.SecretID{FromFile: v.auth.SecretIDFile}
		}
		opts := []approle.LoginOption{}
		if v.auth.Mount != "" {
			opts = append(opts, approle.WithMountPath(v.auth.Mount))
		}
		var a *approle.AppRoleAuth
		if a, err = approle.NewAppRoleAuth(v.auth.RoleID, sid, opts...); err == nil {
			secret, err = v.client.Auth().Login(ctx, a)
		}
	case "kubernetes":
		opts := []kubernetes.LoginOption{kubernetes.WithServiceAccountTokenPath(v.auth.JWTFile)}
		if v.auth.Mount != "" {
			opts = append(opts, kubernetes.WithMountPath(v.auth.Mount))
		}
		var a *kubernetes.KubernetesAuth
		if a, err = kubernetes.NewKubernetesAuth(v.auth.Role, opts...); err == nil {
			secret, err = v.client.Auth().Login(ctx, a)
		}
	}
	if err != nil {
		return fmt.Errorf("vault login (%s): %s", v.auth.Method, errorText(err))
	}
	v.mu.Lock()
	v.authed = true
	v.mu.Unlock()
	if secret != nil && secret.Auth != nil && secret.Auth.Renewable {
		go v.renew(secret)
	}
	return nil
}

// renew keeps the login alive; when renewal stops (max TTL, revocation,
// outage) the next fetch logs in again.
func (v *Client) renew(secret *vaultapi.Secret) {
	w, err := v.client.NewLifetimeWatcher(&vaultapi.LifetimeWatcherInput{Secret: secret})
	if err != nil {
		v.invalidate()
		return
	}
	go w.Start()
	defer w.Stop()
	for {
		select {
		case <-v.stop:
			return
		case err := <-w.DoneCh():
			if err != nil {
				v.log.Warn("vault token renewal stopped; will log in again", "err", errorText(err))
			}
			v.invalidate()
			return
		case <-w.RenewCh():
			v.log.Debug("vault token renewed")
		}
	}
}

// withLogin runs op logged in to Vault. A 403 (the login expired or was
// revoked) logs in once more and runs op again. A failed login is a
// *loginError.
func (v *Client) withLogin(ctx context.Context, op func() error) error {
	if err := v.ensureLogin(ctx); err != nil {
		return &loginError{err}
	}
	err := op()
	var re *vaultapi.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusForbidden {
		v.invalidate()
		if lerr := v.ensureLogin(ctx); lerr != nil {
			return &loginError{lerr}
		}
		err = op()
	}
	return err
}

// loginError is a failed login to Vault (its text is the login's).
type loginError struct{ err error }

func (e *loginError) Error() string { return e.err.Error() }
func (e *loginError) Unwrap() error { return e.err }

// failure is what an operator is told of a failed Vault operation: a
// failed login's own text, else errorText.
func failure(err error) string {
	var le *loginError
	if errors.As(err, &le) {
		return le.Error()
	}
	return errorText(err)
}

const errVaultNotFound = "Vault: secret not found"

// cause is the safe cause of a failed Vault operation (a fixed
// phrase): a failed login, a refusal by status, or the round trip's.
func (v *Client) cause(err error) string {
	var le *loginError
	if errors.As(err, &le) {
		return "Vault: " + v.auth.Method + " login failed" // token, approle or kubernetes: New checked it
	}
	var re *vaultapi.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusForbidden:
			return "Vault: permission denied"
		case re.StatusCode == http.StatusNotFound:
			return errVaultNotFound
		case re.StatusCode == http.StatusServiceUnavailable:
			return "Vault: sealed or unavailable (503)"
		case re.StatusCode >= 100 && re.StatusCode <= 599:
			return "Vault answered " + strconv.Itoa(re.StatusCode)
		}
		return "Vault answered an invalid status"
	}
	return upstream.NetCause(err, upstream.WhoVault)
}

// errorText keeps the status and Vault's error strings, which name
// paths and reasons, never secret values.
func errorText(err error) string {
	var re *vaultapi.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("status %d: %s", re.StatusCode, strings.Join(re.Errors, "; "))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "unreachable"
}

// KV returns a source for field of the KV v2 secret at path ("secret/github"
// or "secret/data/github"), optionally a pinned version. A value is served
// from memory for at most refresh (the rotation bound), then read again; if
// Vault cannot answer by then, the fetch fails closed.
func (v *Client) KV(path, field string, version int, refresh time.Duration) (*KV, error) {
	mount, key, ok := strings.Cut(strings.Trim(path, "/"), "/")
	if !ok || key == "" {
		return nil, fmt.Errorf("vault path %q: want MOUNT/PATH", path)
	}
	key = strings.TrimPrefix(key, "data/")
	if refresh <= 0 {
		refresh = 30 * time.Second
	}
	return &KV{v: v, mount: mount, key: key, field: field, version: version, refresh: refresh}, nil
}

// KV is a credential in Vault's KV v2 engine.
type KV struct {
	v       *Client
	mount   string
	key     string
	field   string
	version int
	refresh time.Duration

	mu       sync.Mutex
	value    upstream.Secret
	fetched  time.Time
	sf       singleflight.Group
	observer func(upstream.FetchInfo)
}

// SetObserver implements upstream.Observable.
func (s *KV) SetObserver(fn func(upstream.FetchInfo)) { s.observer = fn }

// Describe implements upstream.Source.
func (s *KV) Describe() string {
	d := "vault:" + s.mount + "/" + s.key + "#" + s.field
	if s.version > 0 {
		d += fmt.Sprintf("@v%d", s.version)
	}
	return d
}

// Fetch implements upstream.Source.
func (s *KV) Fetch(ctx context.Context) (upstream.Secret, error) {
	s.mu.Lock()
	if !s.value.IsZero() && s.v.now().Sub(s.fetched) < s.refresh {
		v := s.value
		s.mu.Unlock()
		return v, nil
	}
	s.mu.Unlock()
	v, err, _ := s.sf.Do("fetch", func() (any, error) { return s.read(ctx) })
	if err != nil {
		return upstream.Secret{}, err
	}
	return v.(upstream.Secret), nil
}

func (s *KV) read(ctx context.Context) (upstream.Secret, error) {
	fail := func(cause, why string) (upstream.Secret, error) {
		return upstream.Secret{}, fmt.Errorf("%s: %w", s.Describe(), upstream.Unavailable(cause, errors.New(why)))
	}
	kv := s.v.client.KVv2(s.mount)
	var sec *vaultapi.KVSecret
	err := s.v.withLogin(ctx, func() (err error) {
		if s.version > 0 {
			sec, err = kv.GetVersion(ctx, s.key, s.version)
		} else {
			sec, err = kv.Get(ctx, s.key)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, vaultapi.ErrSecretNotFound) {
			return fail(errVaultNotFound, "secret not found")
		}
		return fail(s.v.cause(err), failure(err))
	}
	raw, ok := sec.Data[s.field]
	str, isString := raw.(string)
	if !ok || !isString || str == "" {
		return fail("Vault: the secret has no such field holding a string", fmt.Sprintf("field %q missing or not a string", s.field))
	}
	val := upstream.NewSecret(str)
	s.mu.Lock()
	s.value, s.fetched = val, s.v.now()
	s.mu.Unlock()
	if s.observer != nil {
		info := upstream.FetchInfo{Source: s.Describe()}
		if sec.Raw != nil {
			info.LeaseID = sec.Raw.LeaseID
		}
		if sec.VersionMetadata != nil {
			info.Version = sec.VersionMetadata.Version
		}
		s.observer(info)
	}
	return val, nil
}
