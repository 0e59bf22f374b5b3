package config

import (
	"crypto/tls"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/oauth2"
	vaultcred "github.com/airlock-broker/airlock/internal/upstream/vault"
)

func (c *Credential) validateOAuth2(f string) error {
	tu, err := url.Parse(c.TokenURL)
	if err != nil || (tu.Scheme != "http" && tu.Scheme != "https") || tu.Host == "" || tu.Fragment != "" || tu.User != nil {
		return fieldErr(f+".token_url", "must be an absolute http(s) URL without fragment or user info")
	}
	if c.ClientID == "" {
		return fieldErr(f+".client_id", "is required")
	}
	if c.RevocationURL != "" {
		ru, err := url.Parse(c.RevocationURL)
		if err != nil || (ru.Scheme != "http" && ru.Scheme != "https") || ru.Host == "" || ru.Fragment != "" || ru.User != nil {
			return fieldErr(f+".revocation_url", "must be an absolute http(s) URL without fragment or user info")
		}
	}
	switch c.GrantType {
	case "":
		c.GrantType = "client_credentials"
	case "client_credentials", "refresh_token":
	default:
		return fieldErr(f+".grant_type", "must be client_credentials or refresh_token")
	}
	for _, s := range c.Scopes {
		if s == "" || strings.ContainsAny(s, " \"\\") {
			return fieldErr(f+".scopes", "%q is not a valid scope", s)
		}
	}
	for k, scopes := range c.ScopesFor {
		if _, err := oauth2.ParseScopeRule(k, scopes); err != nil {
			return fieldErr(f+".scopes_for", "%q %v", k, err)
		}
		for _, s := range scopes {
			if s == "" || strings.ContainsAny(s, " \"\\") {
				return fieldErr(f+".scopes_for", "%q: %q is not a valid scope", k, s)
			}
			if len(c.Scopes) > 0 && !slices.Contains(c.Scopes, s) {
				return fieldErr(f+".scopes_for", "%q: %q is not one of scopes", k, s)
			}
		}
	}
	if c.GrantType == "refresh_token" {
		if c.RefreshToken == nil {
			return fieldErr(f+".refresh_token", "is required for grant_type refresh_token ({source: env|file|vault, ...})")
		}
		if err := c.RefreshToken.validateValueSource(f + ".refresh_token"); err != nil {
			return err
		}
		if c.ClientSecret == nil {
			return nil // a public client
		}
	} else if c.RefreshToken != nil {
		return fieldErr(f+".refresh_token", "is only for grant_type refresh_token")
	}
	if c.ClientSecret == nil {
		return fieldErr(f+".client_secret", "is required ({source: env|file|vault, ...})")
	}
	return c.ClientSecret.validateValueSource(f + ".client_secret")
}

// validateValueSource checks a single-value source: env, file or vault.
func (c *Credential) validateValueSource(f string) error {
	switch c.Source {
	case "env":
		if c.Name == "" {
			return fieldErr(f+".name", "is required for source env")
		}
	case "file":
		if c.Path == "" {
			return fieldErr(f+".path", "is required for source file")
		}
	case "vault":
		if c.Path == "" || c.Field == "" {
			return fieldErr(f, "vault needs path and field")
		}
	default:
		return fieldErr(f+".source", "must be env, file or vault")
	}
	return nil
}

// valueSource builds a validated single-value source.
func (c *Credential) valueSource(f string, getenv func(string) string, vault *vaultcred.Client) (upstream.Source, error) {
	switch c.Source {
	case "env":
		s, err := upstream.NewEnvSource(c.Name, getenv)
		if err != nil {
			return nil, fieldErr(f+".name", "%v", err)
		}
		return s, nil
	case "file":
		return upstream.NewFileSource(c.Path), nil
	default: // vault
		s, err := vault.KV(c.Path, c.Field, c.Version, c.Refresh)
		if err != nil {
			return nil, fieldErr(f+".path", "%v", err)
		}
		return s, nil
	}
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

func (c *Credential) buildOAuth2(f string, getenv func(string) string, vault *vaultcred.Client, tlsConf *tls.Config) (upstream.Minter, error) {
	var secret upstream.Source
	if c.ClientSecret != nil {
		s, err := c.ClientSecret.valueSource(f+".client_secret", getenv, vault)
		if err != nil {
			return nil, err
		}
		secret = s
	}
	var scopesFor []oauth2.ScopeRule
	keys := make([]string, 0, len(c.ScopesFor))
	for k := range c.ScopesFor {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		sr, err := oauth2.ParseScopeRule(k, c.ScopesFor[k])
		if err != nil {
			return nil, fieldErr(f+".scopes_for", "%q %v", k, err)
		}
		scopesFor = append(scopesFor, sr)
	}
	tu, _ := url.Parse(c.TokenURL)
	var ru *url.URL
	if c.RevocationURL != "" {
		ru, _ = url.Parse(c.RevocationURL)
	}
	if c.GrantType == "refresh_token" {
		rt, err := c.RefreshToken.valueSource(f+".refresh_token", getenv, vault)
		if err != nil {
			return nil, err
		}
		return &oauth2.Refresh{
			TokenURL: tu, ClientID: c.ClientID, ClientSecret: secret, Initial: rt,
			Scopes: c.Scopes, ScopesFor: scopesFor, RevocationURL: ru, Client: tokenClient(tlsConf),
		}, nil
	}
	return &oauth2.ClientCredentials{
		TokenURL: tu, ClientID: c.ClientID, ClientSecret: secret, Scopes: c.Scopes, ScopesFor: scopesFor,
		RevocationURL: ru, Client: tokenClient(tlsConf),
	}, nil
}
