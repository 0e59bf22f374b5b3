package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
)

// TokenStore is what API tokens need persisted: only each token's digest,
// never its secret.
type TokenStore interface {
	// PutToken creates or replaces a token (by its id).
	PutToken(ctx context.Context, t auth.Token) error
	// DeleteToken removes a token, or returns ErrTokenNotFound for an
	// unknown id.
	DeleteToken(ctx context.Context, id string) error
	// Tokens lists every stored token.
	Tokens(ctx context.Context) ([]auth.Token, error)
	// Token returns one token, or ErrTokenNotFound for an unknown id.
	Token(ctx context.Context, id string) (auth.Token, error)
}

// tokenService is the control plane's API tokens: the authenticator that
// holds them in memory (read on every control-plane request), their
// durable digests, and their audit records.
type tokenService struct {
	store    TokenStore
	auth     *auth.Authenticator
	audit    *audit.Writer
	names    auditNames
	now      func() time.Time
	log      *slog.Logger
	notifier *approval.Notifier // live pages reload when a token goes
}

// CreateToken makes an API token for role; the token string is returned
// once and only its digest is stored.
func (b *Broker) CreateToken(ctx context.Context, p auth.Principal, role, name string, ttl time.Duration) (auth.Token, string, error) {
	return b.toks.create(ctx, p, role, name, ttl)
}

// Tokens lists API tokens (never their secrets).
func (b *Broker) Tokens() []auth.Token { return b.toks.list() }

// RevokeToken deletes an API token at once.
func (b *Broker) RevokeToken(ctx context.Context, p auth.Principal, id string) error {
	return b.toks.revoke(ctx, p, id)
}

// Principal is the control-plane identity with API token id id as it
// stands now (auth.ErrNotFound once revoked, auth.ErrExpired once expired):
// the web page checks its reviewer's token with it on every request.
func (b *Broker) Principal(id string) (auth.Principal, error) { return b.toks.principal(id) }

// RecordLogout audits the end of a reviewer's web log-in: logged out, or
// ended because its token was revoked, expired or lost its role.
func (b *Broker) RecordLogout(ctx context.Context, p auth.Principal, reason string) {
	b.toks.recordLogout(ctx, p, reason)
}

// tokenCheckTimeout bounds the store read that checks an API token.
const tokenCheckTimeout = 5 * time.Second

// authenticate checks the token against the store first (refresh), so a
// token created or revoked by another broker on the same store is honoured
// exactly; the bootstrap admin token is the configuration's.
func (s *tokenService) authenticate(bearer string) (auth.Principal, error) {
	if id, ok := auth.TokenID(bearer); ok {
		if err := s.refresh(id); err != nil {
			return auth.Principal{}, err
		}
	}
	return s.auth.Authenticate(bearer)
}

// refresh makes the authenticator's copy of token id the store's: read
// every time (control-plane requests are not the hot path), so revocation
// is exact across brokers sharing the store. A store that cannot answer
// fails the request closed.
func (s *tokenService) refresh(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), tokenCheckTimeout)
	defer cancel()
	t, err := s.store.Token(ctx, id)
	switch {
	case errors.Is(err, ErrTokenNotFound):
		s.auth.Delete(id)
	case err != nil:
		return fmt.Errorf("check API token: %w", err)
	default:
		s.auth.Put(t)
	}
	return nil
}

func (s *tokenService) create(ctx context.Context, p auth.Principal, role, name string, ttl time.Duration) (auth.Token, string, error) {
	if !auth.ValidRole(role) {
		return auth.Token{}, "", fieldErr("role", "must be admin, operator, reviewer or auditor")
	}
	if name == "" || len(name) > 100 {
		return auth.Token{}, "", fieldErr("name", "is required (at most 100 characters)")
	}
	if ttl < 0 {
		return auth.Token{}, "", fieldErr("ttl", "must be positive")
	}
	now := s.now().UTC()
	t := auth.Token{ID: newID("tok_", now), Name: name, Role: role, CreatedAt: now, CreatedBy: p.ID}
	if ttl > 0 {
		t.ExpiresAt = now.Add(ttl)
	}
	secret, digest := auth.NewSecret(t.ID)
	t.Digest = digest
	if err := s.store.PutToken(ctx, t); err != nil {
		return auth.Token{}, "", fmt.Errorf("store token: %w", err)
	}
	if _, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeTokenCreated, Actor: s.names.actor(p), Reason: "role " + role + ", token " + s.names.AuditID(t.ID)}, nil); err != nil {
		return auth.Token{}, "", err
	}
	s.auth.Put(t)
	return t, secret, nil
}

func (s *tokenService) list() []auth.Token {
	ctx, cancel := context.WithTimeout(context.Background(), tokenCheckTimeout)
	defer cancel()
	ts, err := s.store.Tokens(ctx) // every broker's tokens
	if err != nil {
		s.log.Error("list API tokens from the store; listing this broker's", "err", err)
		ts = s.auth.List()
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	return ts
}

func (s *tokenService) revoke(ctx context.Context, p auth.Principal, id string) error {
	if err := s.store.DeleteToken(ctx, id); err != nil {
		if errors.Is(err, ErrTokenNotFound) {
			return ErrNotFound
		}
		return err
	}
	s.auth.Delete(id)
	_, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeTokenRevoked, Actor: s.names.actor(p), Reason: "token " + s.names.AuditID(id)}, nil)
	s.notifier.Notify("") // live web pages reload, and a log-in made with this token ends
	return err
}

func (s *tokenService) principal(id string) (auth.Principal, error) {
	if id != auth.BootstrapID {
		if err := s.refresh(id); err != nil {
			return auth.Principal{}, err
		}
	}
	return s.auth.Lookup(id)
}

func (s *tokenService) recordLogout(ctx context.Context, p auth.Principal, reason string) {
	ev := audit.Event{Type: audit.TypeUILogout, Actor: s.names.actor(p), Reason: reason}
	if _, err := s.audit.Append(ctx, ev, nil); err != nil {
		s.log.Error("audit of a log-out failed", "err", err)
	}
}
