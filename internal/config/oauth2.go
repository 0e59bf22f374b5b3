package config

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
)

func (c *Credential) validateOAuth2(f string) error {
	tu, err := url.Parse(c.TokenURL)
	if err != nil || (tu.Scheme != "http" && tu.Scheme != "https") || tu.Host == "" || tu.Fragment != "" || tu.User != nil {
		return fieldErr(f+".token_url", "must be an absolute http(s) URL without fragment or user info")
	}
	if c.ClientID == "" {
		return fieldErr(f+".client_id", "is required")
	}
	switch c.GrantType {
	case "":
		c.GrantType = "client_credentials"
	case "client_credentials":
	case "refresh_token":
		return fieldErr(f+".grant_type", "refresh_token is not supported yet")
	default:
		return fieldErr(f+".grant_type", "must be client_credentials")
	}
	for _, s := range c.Scopes {
		if s == "" || strings.ContainsAny(s, " \"\\") {
			return fieldErr(f+".scopes", "%q is not a valid scope", s)
		}
	}
	cs := c.ClientSecret
	if cs == nil {
		return fieldErr(f+".client_secret", "is required ({source: env|file|vault, ...})")
	}
	switch cs.Source {
	case "env":
		if cs.Name == "" {
			return fieldErr(f+".client_secret.name", "is required for source env")
		}
	case "file":
		if cs.Path == "" {
			return fieldErr(f+".client_secret.path", "is required for source file")
		}
	case "vault":
		if cs.Path == "" || cs.Field == "" {
			return fieldErr(f+".client_secret", "vault needs path and field")
		}
	default:
		return fieldErr(f+".client_secret.source", "must be env, file or vault")
	}
	return nil
}

func (c *Credential) buildOAuth2(f string, getenv func(string) string, vault *upstream.Vault) (*upstream.OAuth2ClientCredentials, error) {
	var src upstream.Source
	cs := c.ClientSecret
	switch cs.Source {
	case "env":
		s, err := upstream.NewEnvSource(cs.Name, getenv)
		if err != nil {
			return nil, fieldErr(f+".client_secret.name", "%v", err)
		}
		src = s
	case "file":
		src = upstream.NewFileSource(cs.Path)
	case "vault":
		s, err := vault.KV(cs.Path, cs.Field, cs.Version, cs.Refresh)
		if err != nil {
			return nil, fieldErr(f+".client_secret.path", "%v", err)
		}
		src = s
	}
	tu, _ := url.Parse(c.TokenURL)
	return &upstream.OAuth2ClientCredentials{
		TokenURL: tu, ClientID: c.ClientID, ClientSecret: src, Scopes: c.Scopes,
		Client: &http.Client{
			Transport: upstream.NewTransport(),
			Timeout:   30 * time.Second,
			// The client secret is never re-sent to another address.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}
