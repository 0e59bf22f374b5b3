package upstream

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
	"strings"
	"time"
)

// OAuth2ClientCredentials mints an OAuth2 access token per session with
// the client_credentials grant (RFC 6749 §4.4): the client authenticates
// with HTTP basic (client_secret_basic, §2.3.1), the scopes are the
// configured ones. Renew asks for a new token; Revoke forgets it (the
// token ends with its expires_in; a server-side revocation endpoint is not
// called).
type OAuth2ClientCredentials struct {
	TokenURL     *url.URL
	ClientID     string
	ClientSecret Source
	Scopes       []string
	Client       *http.Client
}

// Describe implements Minter.
func (o *OAuth2ClientCredentials) Describe() string {
	return "oauth2:client_credentials:" + o.TokenURL.Host + "/" + o.ClientID
}

// Mint implements Minter.
func (o *OAuth2ClientCredentials) Mint(ctx context.Context, sc Scope) (Lease, error) {
	secret, err := o.ClientSecret.Fetch(ctx)
	if err != nil || secret.IsZero() {
		return Lease{}, errors.New("the client secret is unavailable")
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if len(o.Scopes) > 0 {
		form.Set("scope", strings.Join(o.Scopes, " "))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.TokenURL.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return Lease{}, errors.New("cannot build the token request")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(o.ClientID), url.QueryEscape(secret.Reveal()))
	resp, err := o.Client.Do(req)
	if err != nil {
		return Lease{}, errors.New("the token request failed")
	}
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		ExpiresIn   int64  `json:"expires_in"`
		Error       string `json:"error"`
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<20))
	if err := dec.Decode(&out); err != nil && resp.StatusCode == http.StatusOK {
		return Lease{}, errors.New("the token answer is malformed")
	}
	if resp.StatusCode != http.StatusOK || out.AccessToken == "" {
		code := out.Error
		if len(code) > 40 || strings.ContainsFunc(code, func(r rune) bool { return r < '!' || r > '~' }) {
			code = "?"
		}
		return Lease{}, fmt.Errorf("the token endpoint answered %d %s", resp.StatusCode, code)
	}
	if out.TokenType != "" && !strings.EqualFold(out.TokenType, "bearer") {
		return Lease{}, errors.New("the token endpoint issued a token that is not a bearer token")
	}
	l := Lease{Secret: NewSecret(out.AccessToken), Extra: []Secret{secret}}
	if out.ExpiresIn > 0 {
		l.Expires = sc.Now.Add(time.Duration(out.ExpiresIn) * time.Second)
	}
	if !sc.Expires.IsZero() && (l.Expires.IsZero() || sc.Expires.Before(l.Expires)) {
		l.Expires = sc.Expires
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	l.ID = "oauth2-" + hex.EncodeToString(id[:])
	return l, nil
}

// Renew implements Minter: a new token.
func (o *OAuth2ClientCredentials) Renew(ctx context.Context, sc Scope, _ Lease) (Lease, error) {
	return o.Mint(ctx, sc)
}

// Revoke implements Minter: nothing to call; the token lapses at its expiry.
func (o *OAuth2ClientCredentials) Revoke(context.Context, Lease) error { return nil }
