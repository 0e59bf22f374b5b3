package config

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/awscred"
	"github.com/airlock-broker/airlock/internal/upstream/githubapp"
	"github.com/airlock-broker/airlock/internal/upstream/oauth2"
	vaultcred "github.com/airlock-broker/airlock/internal/upstream/vault"
)

// Building the credential sources: each source's one call of its
// constructor in internal/upstream or its subpackages (vault, awscred,
// oauth2, githubapp).

// build makes the Vault client the vault sources share.
func (v *Vault) build(log *slog.Logger) (*vaultcred.Client, error) {
	a := v.Auth
	return vaultcred.New(vaultcred.Config{Address: v.Address, Namespace: v.Namespace, CACert: v.CACert, Timeout: v.Timeout,
		Auth: vaultcred.Auth{Method: a.Method, Token: a.Token, RoleID: a.RoleID, SecretID: a.SecretID,
			SecretIDFile: a.SecretIDFile, Role: a.Role, JWTFile: a.JWTFile, Mount: a.Mount}}, log)
}

// vaultClient is b's Vault client, or the error of a source at f that
// needs one without a vault: section (Build of an unvalidated config).
func (b *builder) vaultClient(f string) (*vaultcred.Client, error) {
	if b.vault == nil {
		return nil, fieldErr(f+".source", "needs a top-level vault: section")
	}
	return b.vault, nil
}

func (c *EnvCredential) build(f string, b *builder) (built, error) {
	s, err := upstream.NewEnvSource(c.Name, b.getenv)
	if err != nil {
		return built{}, fieldErr(f+".name", "%v", err)
	}
	return built{source: s}, nil
}

func (c *FileCredential) build(string, *builder) (built, error) {
	return built{source: upstream.NewFileSource(c.Path)}, nil
}

func (c *VaultCredential) build(f string, b *builder) (built, error) {
	v, err := b.vaultClient(f)
	if err != nil {
		return built{}, err
	}
	s, err := v.KV(c.Path, c.Field, c.Version, c.Refresh)
	if err != nil {
		return built{}, fieldErr(f+".path", "%v", err)
	}
	return built{source: s}, nil
}

func (c *GitHubAppCredential) build(f string, b *builder) (built, error) {
	pem, err := os.ReadFile(c.PrivateKeyFile)
	if err != nil {
		return built{}, fieldErr(f+".private_key_file", "cannot read the key file")
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(pem)
	if err != nil {
		return built{}, fieldErr(f+".private_key_file", "is not an RSA private key in PEM")
	}
	au, _ := url.Parse(c.APIURL)
	g := &githubapp.App{
		AppID: c.AppID, InstallationID: c.InstallationID, Key: key, APIURL: au,
		Repositories: c.Repositories, Permissions: c.Permissions,
		Client: tokenClient(b.tls),
	}
	return built{source: upstream.MintedSource(g), minter: g}, nil
}

// tokenClient is the HTTP client of a minter's issuer (token_url, a GitHub
// api_url): trusting the upstream's ca_cert alone when set, never
// following a redirect (a client secret, an app JWT or a refresh token is
// never re-sent to another address).
func tokenClient(tlsConf *tls.Config) *http.Client {
	tr := upstream.NewTransport()
	if tlsConf != nil {
		tr.TLSClientConfig = tlsConf.Clone()
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// valueSource builds a nested single-value credential (nil when absent).
func valueSource(c *Credential, f string, b *builder) (upstream.Source, error) {
	if c == nil || c.Source == nil {
		return nil, nil
	}
	got, err := c.Source.build(f, b)
	return got.source, err
}

func (c *OAuth2Credential) build(f string, b *builder) (built, error) {
	secret, err := valueSource(c.ClientSecret, f+".client_secret", b)
	if err != nil {
		return built{}, err
	}
	tu, _ := url.Parse(c.TokenURL)
	var ru *url.URL
	if c.RevocationURL != "" {
		ru, _ = url.Parse(c.RevocationURL)
	}
	var m upstream.Minter
	if c.GrantType == "refresh_token" {
		rt, err := valueSource(c.RefreshToken, f+".refresh_token", b)
		if err != nil {
			return built{}, err
		}
		m = &oauth2.Refresh{
			TokenURL: tu, ClientID: c.ClientID, ClientSecret: secret, Initial: rt,
			Scopes: c.Scopes, ScopesFor: c.scopeRules, Resource: c.Resource, RevocationURL: ru, Client: tokenClient(b.tls),
		}
	} else {
		m = &oauth2.ClientCredentials{
			TokenURL: tu, ClientID: c.ClientID, ClientSecret: secret, Scopes: c.Scopes, ScopesFor: c.scopeRules,
			Resource: c.Resource, RevocationURL: ru, Client: tokenClient(b.tls),
		}
	}
	return built{source: upstream.MintedSource(m), minter: m}, nil
}

func (c *AWSEnvCredential) build(f string, b *builder) (built, error) {
	ak, sk := b.getenv(c.AccessKeyName), b.getenv(c.SecretKeyName)
	if ak == "" || sk == "" {
		return built{}, fieldErr(f, "environment variables %s and %s must be set", c.AccessKeyName, c.SecretKeyName)
	}
	return c.AssumeRole.build(upstream.StaticAWSCredentials(ak, sk), "aws:env", b.region), nil
}

func (c *AWSVaultCredential) build(f string, b *builder) (built, error) {
	v, err := b.vaultClient(f)
	if err != nil {
		return built{}, err
	}
	ak, err := v.KV(c.Path, c.AccessKeyField, c.Version, c.Refresh)
	if err != nil {
		return built{}, fieldErr(f+".path", "%v", err)
	}
	sk, err := v.KV(c.Path, c.SecretKeyField, c.Version, c.Refresh)
	if err != nil {
		return built{}, fieldErr(f+".path", "%v", err)
	}
	return c.AssumeRole.build(vaultcred.AWSKeys{Access: ak, Secret: sk}, sk.Describe(), b.region), nil
}

func (c *AWSChainCredential) build(f string, b *builder) (built, error) {
	p, err := awscred.Default(b.ctx, b.region)
	if err != nil {
		return built{}, fieldErr(f, "%v", err)
	}
	return c.AssumeRole.build(p, "aws:default-chain", b.region), nil
}

func (c *VaultAWSCredential) build(f string, b *builder) (built, error) {
	v, err := b.vaultClient(f)
	if err != nil {
		return built{}, err
	}
	m, err := v.AWSEngine(c.Mount, c.Role, c.Type)
	if err != nil {
		return built{}, fieldErr(f, "%v", err)
	}
	return built{source: upstream.MintedSource(m), minter: m}, nil
}

// build has the key pair p (described by desc) assume the role, if any:
// per session, scoped to its grant, or once, shared.
func (a AssumeRole) build(p upstream.AWSCredentialsProvider, desc, region string) built {
	switch {
	case a.RoleARN != "" && a.ScopeToGrant:
		m := awscred.NewSTSScoped(p, region, a.RoleARN, a.STSEndpoint, a.MaxDuration, desc)
		return built{source: upstream.MintedSource(m), minter: m}
	case a.RoleARN != "":
		p = awscred.AssumeRole(p, region, a.RoleARN, a.STSEndpoint)
		desc += " assume " + a.RoleARN
	}
	return built{source: upstream.AWSSource(p, desc), awsCreds: p}
}
