package broker

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/auth"
)

// The API tokens' operations, served by apitokens.Service.

// Authenticate resolves a control-plane bearer token.
func (b *Broker) Authenticate(bearer string) (auth.Principal, error) {
	return b.toks.Authenticate(bearer)
}

// CreateToken makes an API token for role; the token string is returned
// once and only its digest is stored.
func (b *Broker) CreateToken(ctx context.Context, p auth.Principal, role, name string, ttl time.Duration) (auth.Token, string, error) {
	return b.toks.Create(ctx, p, role, name, ttl)
}

// Tokens lists API tokens (never their secrets).
func (b *Broker) Tokens() []auth.Token { return b.toks.List() }

// RevokeToken deletes an API token at once (ErrNotFound for an unknown id).
func (b *Broker) RevokeToken(ctx context.Context, p auth.Principal, id string) error {
	err := b.toks.Revoke(ctx, p, id)
	if errors.Is(err, apitokens.ErrNotFound) {
		return ErrNotFound
	}
	return err
}

// Principal is the control-plane identity with API token id id as it
// stands now (auth.ErrNotFound once revoked, auth.ErrExpired once expired):
// the web page checks its reviewer's token with it on every request.
func (b *Broker) Principal(id string) (auth.Principal, error) { return b.toks.Principal(id) }

// RecordLogout audits the end of a reviewer's web log-in: logged out, or
// ended because its token was revoked, expired or lost its role.
func (b *Broker) RecordLogout(ctx context.Context, p auth.Principal, reason string) {
	b.toks.RecordLogout(ctx, p, reason)
}
