package config

import (
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/airlock-broker/airlock/internal/upstream/oauth2"
)

// OAuth2Credential (source: oauth2) mints an access token per session
// (oauth2.ClientCredentials, oauth2.Refresh).
type OAuth2Credential struct {
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
	// Resource (optional) is the RFC 8707 resource indicator every token
	// request names: the API the token is for (an MCP server's canonical
	// URI, which MCP authorization requires).
	Resource string `yaml:"resource"`

	scopeRules []oauth2.ScopeRule // ScopesFor as validate parsed it, by key
}

func (*OAuth2Credential) Source() string { return "oauth2" }

func validScope(s string) bool { return s != "" && !strings.ContainsAny(s, " \"\\") }

// resourceURI says whether s is an RFC 8707 resource indicator: an
// absolute URI with no fragment.
func resourceURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.IsAbs() && !strings.ContainsAny(s, "# \t\r\n")
}

func (c *OAuth2Credential) validate(f string, hasVault bool) error {
	var e errs
	if !httpURL(c.TokenURL, true) {
		e.add(f+".token_url", "must be an absolute http(s) URL without fragment or user info")
	}
	if c.ClientID == "" {
		e.add(f+".client_id", "is required")
	}
	if c.RevocationURL != "" && !httpURL(c.RevocationURL, true) {
		e.add(f+".revocation_url", "must be an absolute http(s) URL without fragment or user info")
	}
	if c.Resource != "" && !resourceURI(c.Resource) {
		e.add(f+".resource", "must be an absolute URI without fragment (RFC 8707), e.g. the MCP server's https URL")
	}
	for _, s := range c.Scopes {
		if !validScope(s) {
			e.add(f+".scopes", "%q is not a valid scope", s)
		}
	}
	e.join(c.validateScopesFor(f + ".scopes_for"))
	switch c.GrantType {
	case "client_credentials":
		if c.RefreshToken != nil {
			e.add(f+".refresh_token", "is only for grant_type refresh_token")
		}
		if c.ClientSecret == nil {
			e.add(f+".client_secret", "is required ({source: env|file|vault, ...})")
		}
	case "refresh_token":
		if c.RefreshToken == nil {
			e.add(f+".refresh_token", "is required for grant_type refresh_token ({source: env|file|vault, ...})")
		} else {
			e.join(c.RefreshToken.validateIn(f+".refresh_token", valueSources, hasVault))
		}
		// without a client_secret: a public client
	default:
		e.add(f+".grant_type", "must be client_credentials or refresh_token")
	}
	if c.ClientSecret != nil {
		e.join(c.ClientSecret.validateIn(f+".client_secret", valueSources, hasVault))
	}
	return e.err()
}

// validateScopesFor parses scopes_for (in a stable order) into scopeRules.
func (c *OAuth2Credential) validateScopesFor(f string) error {
	var e errs
	c.scopeRules = nil
	for _, k := range slices.Sorted(maps.Keys(c.ScopesFor)) {
		scopes := c.ScopesFor[k]
		sr, err := oauth2.ParseScopeRule(k, scopes)
		if err != nil {
			e.add(f, "%q %v", k, err)
			continue
		}
		c.scopeRules = append(c.scopeRules, sr)
		for _, s := range scopes {
			switch {
			case !validScope(s):
				e.add(f, "%q: %q is not a valid scope", k, s)
			case len(c.Scopes) > 0 && !slices.Contains(c.Scopes, s):
				e.add(f, "%q: %q is not one of scopes", k, s)
			}
		}
	}
	return e.err()
}
