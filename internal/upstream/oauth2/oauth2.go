// Package oauth2 mints OAuth2 access tokens per session (upstream.Minter):
// the client_credentials grant (ClientCredentials) and a shared, rotating
// refresh token (Refresh), each asking for the scopes the session's rules
// need (Scopes).
package oauth2

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
)

var (
	_ upstream.Minter         = (*ClientCredentials)(nil)
	_ upstream.StatefulMinter = (*Refresh)(nil)
)

// ClientCredentials mints an OAuth2 access token per session with
// the client_credentials grant (RFC 6749 §4.4): the client authenticates
// with HTTP basic (client_secret_basic, §2.3.1), the scopes are those the
// session's rules need (Scopes). Renew asks for a new token; Revoke
// revokes it at RevocationURL (RFC 7009) when set, else forgets it (it
// lapses with its expires_in).
type ClientCredentials struct {
	TokenURL     *url.URL
	ClientID     string
	ClientSecret upstream.Source
	Scopes       []string
	ScopesFor    []ScopeRule // narrows Scopes to the session's rules (none: Scopes)
	// Resource, when set, is the RFC 8707 resource indicator each token
	// request names (an MCP server's canonical URI).
	Resource string
	// RevocationURL is the server's RFC 7009 endpoint, or nil.
	RevocationURL *url.URL
	Client        *http.Client
}

// Describe implements upstream.Minter.
func (o *ClientCredentials) Describe() string {
	return "oauth2:client_credentials:" + o.TokenURL.Host + "/" + o.ClientID
}

// Mint implements upstream.Minter.
func (o *ClientCredentials) Mint(ctx context.Context, sc upstream.Scope) (upstream.Lease, error) {
	scopes, err := Scopes(sc.Rules, o.Scopes, o.ScopesFor)
	if err != nil {
		return upstream.Lease{}, err
	}
	secret, err := o.ClientSecret.Fetch(ctx)
	if err != nil || secret.IsZero() {
		return upstream.Lease{}, errNoClientSecret
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	if o.Resource != "" {
		form.Set("resource", o.Resource)
	}
	out, err := requestToken(ctx, o.Client, o.TokenURL, o.ClientID, secret, form)
	if err != nil {
		return upstream.Lease{}, err
	}
	return out.lease(sc, "oauth2-", secret), nil
}

// Renew implements upstream.Minter: a new token.
func (o *ClientCredentials) Renew(ctx context.Context, sc upstream.Scope, _ upstream.Lease) (upstream.Lease, error) {
	return o.Mint(ctx, sc)
}

// Revoke implements upstream.Minter (revokeToken).
func (o *ClientCredentials) Revoke(ctx context.Context, l upstream.Lease) error {
	return revokeToken(ctx, o.Client, o.RevocationURL, o.ClientID, o.ClientSecret, l)
}

// revokeToken revokes a lease's access token at the RFC 7009 endpoint
// (nil: nothing to call, the token lapses at its expiry), authenticating
// the client as the token request does. The server answers 200 for a token
// it no longer knows too (§2.2).
func revokeToken(ctx context.Context, client *http.Client, revURL *url.URL, clientID string, clientSecret upstream.Source, l upstream.Lease) error {
	if revURL == nil || l.Secret.IsZero() {
		return nil
	}
	form := url.Values{"token": {l.Secret.Reveal()}, "token_type_hint": {"access_token"}}
	var secret upstream.Secret
	if clientSecret != nil {
		s, err := clientSecret.Fetch(ctx)
		if err != nil || s.IsZero() {
			return errors.New("the client secret is unavailable")
		}
		secret = s
	}
	if secret.IsZero() {
		form.Set("client_id", clientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, revURL.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return errors.New("cannot build the revocation")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if !secret.IsZero() {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret.Reveal()))
	}
	resp, err := client.Do(req)
	if err != nil {
		return errors.New("the revocation failed")
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the revocation endpoint answered %d", resp.StatusCode)
	}
	return nil
}

// answer is a token endpoint's successful answer (RFC 6749 §5.1).
type answer struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Error        string `json:"error"`
}

// errInvalidGrant: the token endpoint refused the grant (RFC 6749 §5.2
// invalid_grant: a refresh token revoked, expired or already used).
var errInvalidGrant = errors.New("the token endpoint answered invalid_grant")

// errNoClientSecret: the client secret's source failed.
var errNoClientSecret = upstream.Unavailable("the client secret is unavailable", nil)

// statusText is an HTTP status as a cause names it: its number, or
// "an invalid status" (a fixed set of texts whatever the issuer sends).
func statusText(status int) string {
	if status < 100 || status > 599 {
		return "an invalid status"
	}
	return strconv.Itoa(status)
}

// requestToken posts form to the token endpoint, authenticating the client
// with HTTP basic when secret is set (client_secret_basic, id and secret
// form-encoded, §2.3.1) or naming it in the form otherwise (a public
// client, §3.2.1). No secret is ever put in the error.
func requestToken(ctx context.Context, client *http.Client, tokenURL *url.URL, clientID string, secret upstream.Secret, form url.Values) (answer, error) {
	if secret.IsZero() {
		form.Set("client_id", clientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenURL.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return answer{}, upstream.Unavailable("the token request could not be built", nil)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if !secret.IsZero() {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret.Reveal()))
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, upstream.Unavailable(upstream.NetCause(err, upstream.WhoIssuer), err)
	}
	defer resp.Body.Close()
	var out answer
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<20))
	if err := dec.Decode(&out); err != nil && resp.StatusCode == http.StatusOK {
		return answer{}, upstream.Unavailable("the issuer's token answer is malformed", nil)
	}
	if resp.StatusCode != http.StatusOK || out.AccessToken == "" {
		if out.Error == "invalid_grant" {
			return answer{}, upstream.Unavailable("the issuer answered invalid_grant", fmt.Errorf("%w (%d)", errInvalidGrant, resp.StatusCode))
		}
		code := out.Error
		if len(code) > 40 || strings.ContainsFunc(code, func(r rune) bool { return r < '!' || r > '~' }) {
			code = "?"
		}
		// The cause names the status alone; the issuer's error code is kept
		// in From (the mint's failure record says it).
		return answer{}, upstream.Unavailable("the issuer answered "+statusText(resp.StatusCode), fmt.Errorf("the token endpoint answered %d %s", resp.StatusCode, code))
	}
	if out.TokenType != "" && !strings.EqualFold(out.TokenType, "bearer") {
		return answer{}, upstream.Unavailable("the issuer issued a token that is not a bearer token", nil)
	}
	return out, nil
}

// lease is the answer's access token as a session's lease, expiring with
// expires_in and never past the session; extra are scrubbed with it.
func (a answer) lease(sc upstream.Scope, idPrefix string, extra ...upstream.Secret) upstream.Lease {
	l := upstream.Lease{Secret: upstream.NewSecret(a.AccessToken)}
	for _, x := range extra {
		if !x.IsZero() {
			l.Extra = append(l.Extra, x)
		}
	}
	if a.ExpiresIn > 0 {
		l.Expires = sc.Now.Add(time.Duration(a.ExpiresIn) * time.Second)
	}
	if !sc.Expires.IsZero() && (l.Expires.IsZero() || sc.Expires.Before(l.Expires)) {
		l.Expires = sc.Expires
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	l.ID = idPrefix + hex.EncodeToString(id[:])
	return l
}
