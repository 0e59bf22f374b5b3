package oauth2

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// Refresh mints an OAuth2 access token per session with the
// refresh_token grant (RFC 6749 §6). The refresh token is per upstream:
// one chain shared by every session (and every replica on one store),
// used under a lock, so two sessions never present a refresh token the
// server rotated away. When the server rotates it (answers a new
// refresh_token), the new one is saved (upstream.MintState, sealed by the broker)
// before the access token is used: the next refresh, and a broker restart,
// use it. The configured refresh token (Initial) is used only until a
// rotated one is stored, and again once the operator configures another
// one (the stored chain names the configured token it started from). An invalid_grant (revoked, expired, reused) first reloads
// the stored token (another replica may have rotated it) and retries once;
// otherwise it fails closed. Every refresh token the lease's refresh used
// or got, and the client secret, are scrubbed with the access token.
type Refresh struct {
	TokenURL     *url.URL
	ClientID     string
	ClientSecret upstream.Source // nil: a public client (client_id in the form)
	Initial      upstream.Source // the refresh token the operator configured
	Scopes       []string
	ScopesFor    []ScopeRule
	// Resource, when set, is the RFC 8707 resource indicator each token
	// request names (an MCP server's canonical URI).
	Resource string
	// RevocationURL is the server's RFC 7009 endpoint, or nil; only a
	// session's access token is revoked there, never the shared chain.
	RevocationURL *url.URL
	Client        *http.Client

	mu      sync.Mutex // one refresh at a time: the chain is single-use
	state   upstream.MintState
	current upstream.Secret // the chain's latest refresh token, once known
	origin  string          // SHA-256 of the configured token the chain started from
}

// BindState implements upstream.StatefulMinter.
func (o *Refresh) BindState(s upstream.MintState) { o.state = s }

// Describe implements upstream.Minter.
func (o *Refresh) Describe() string {
	return "oauth2:refresh_token:" + o.TokenURL.Host + "/" + o.ClientID
}

// refreshToken is the chain's latest refresh token: in memory, else the
// stored one, else the configured one. A chain started from another
// configured token than today's is not used: an operator who configures a
// new refresh token (after a revocation) starts a new chain. reload skips
// memory. origin identifies the configured token the chain started from.
func (o *Refresh) refreshToken(ctx context.Context, reload bool) (rt upstream.Secret, origin string, err error) {
	initial, err := o.Initial.Fetch(ctx)
	if err != nil || initial.IsZero() {
		return upstream.Secret{}, "", upstream.Unavailable("the refresh token is unavailable", nil)
	}
	sum := sha256.Sum256([]byte(initial.Reveal()))
	origin = hex.EncodeToString(sum[:])
	if !reload && !o.current.IsZero() && o.origin == origin {
		return o.current, origin, nil
	}
	if o.state != nil {
		v, err := o.state.Load(ctx)
		if err != nil {
			return upstream.Secret{}, "", upstream.Unavailable("the stored refresh token is unreadable", nil)
		}
		if from, tok, ok := strings.Cut(string(v), "\n"); ok && from == origin && tok != "" {
			return upstream.NewSecret(tok), origin, nil
		}
	}
	if reload && o.origin == origin && !o.current.IsZero() {
		return o.current, origin, nil
	}
	return initial, origin, nil
}

// Mint implements upstream.Minter.
func (o *Refresh) Mint(ctx context.Context, sc upstream.Scope) (upstream.Lease, error) {
	scopes, err := Scopes(sc.Rules, o.Scopes, o.ScopesFor)
	if err != nil {
		return upstream.Lease{}, err
	}
	var secret upstream.Secret
	if o.ClientSecret != nil {
		if secret, err = o.ClientSecret.Fetch(ctx); err != nil || secret.IsZero() {
			return upstream.Lease{}, errNoClientSecret
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	rt, origin, err := o.refreshToken(ctx, false)
	if err != nil {
		return upstream.Lease{}, err
	}
	out, err := o.refresh(ctx, secret, rt, scopes)
	if errors.Is(err, errInvalidGrant) {
		if again, _, rerr := o.refreshToken(ctx, true); rerr == nil && !again.IsZero() && again.Reveal() != rt.Reveal() {
			rt = again
			out, err = o.refresh(ctx, secret, rt, scopes)
		}
	}
	if err != nil {
		return upstream.Lease{}, err
	}
	o.current, o.origin = rt, origin
	var rotated upstream.Secret
	if out.RefreshToken != "" && out.RefreshToken != rt.Reveal() {
		rotated = upstream.NewSecret(out.RefreshToken)
		o.current = rotated // in memory first: the old one is dead either way
		if o.state != nil {
			if err := o.state.Save(ctx, []byte(origin+"\n"+out.RefreshToken)); err != nil {
				return upstream.Lease{}, upstream.Unavailable("the rotated refresh token could not be stored", nil)
			}
		}
	}
	return out.lease(sc, "oauth2rt-", rt, rotated, secret), nil
}

func (o *Refresh) refresh(ctx context.Context, secret, rt upstream.Secret, scopes []string) (answer, error) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt.Reveal()}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	if o.Resource != "" {
		form.Set("resource", o.Resource)
	}
	return requestToken(ctx, o.Client, o.TokenURL, o.ClientID, secret, form)
}

// Renew implements upstream.Minter: a new access token from the chain.
func (o *Refresh) Renew(ctx context.Context, sc upstream.Scope, _ upstream.Lease) (upstream.Lease, error) {
	return o.Mint(ctx, sc)
}

// Revoke implements upstream.Minter: the access token at RevocationURL when set
// (else it lapses at its expiry); the refresh token is the upstream's, not
// the session's, and is kept.
func (o *Refresh) Revoke(ctx context.Context, l upstream.Lease) error {
	return revokeToken(ctx, o.Client, o.RevocationURL, o.ClientID, o.ClientSecret, l)
}
