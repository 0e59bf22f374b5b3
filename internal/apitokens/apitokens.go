// Package apitokens is the control plane's API tokens: the authenticator
// that holds them in memory (read on every control-plane request), checked
// against their durable digests in the store on each use (a token created
// or revoked by another broker on the store is honoured exactly), and
// their audit records. The tokens and roles themselves are internal/auth's.
package apitokens

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/ids"
)

// ErrNotFound is Store.Token's and Store.DeleteToken's error for an
// unknown token id (an adapter may wrap it with its own error: errors.Is
// matches). The contract suite internal/store/storetest checks it.
var ErrNotFound = errors.New("API token not found")

// Store is what API tokens need persisted: only each token's digest,
// never its secret.
type Store interface {
	// PutToken creates or replaces a token (by its id).
	PutToken(ctx context.Context, t auth.Token) error
	// DeleteToken removes a token, or returns ErrNotFound for an unknown
	// id.
	DeleteToken(ctx context.Context, id string) error
	// Tokens lists every stored token.
	Tokens(ctx context.Context) ([]auth.Token, error)
	// Token returns one token, or ErrNotFound for an unknown id.
	Token(ctx context.Context, id string) (auth.Token, error)
}

// Names is how the audit log names control-plane identities and token
// ids (HMAC'd per installation: the broker's).
type Names interface {
	Actor(p auth.Principal) audit.Actor
	AuditID(tokenID string) string
}

// Config is what a Service is made of; every field but OnRevoke is
// required.
type Config struct {
	Store      Store
	AdminToken string // the bootstrap admin's token (the configuration's)
	Audit      *audit.Writer
	Names      Names
	Now        func() time.Time
	Log        *slog.Logger
	// OnRevoke runs after a token is revoked (live web pages reload, and
	// a log-in made with it ends), or nil.
	OnRevoke func()
}

// Service is the API tokens' service.
type Service struct {
	store    Store
	auth     *auth.Authenticator
	audit    *audit.Writer
	names    Names
	now      func() time.Time
	log      *slog.Logger
	onRevoke func()
}

// New loads the stored tokens into the authenticator.
func New(ctx context.Context, c Config) (*Service, error) {
	ts, err := c.Store.Tokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("load API tokens: %w", err)
	}
	return &Service{
		store: c.Store, auth: auth.NewAuthenticator(c.AdminToken, ts, c.Now),
		audit: c.Audit, names: c.Names, now: c.Now, log: c.Log, onRevoke: c.OnRevoke,
	}, nil
}

// checkTimeout bounds the store read that checks an API token.
const checkTimeout = 5 * time.Second

// Authenticate resolves a control-plane bearer token. It checks the token
// against the store first (refresh), so a token created or revoked by
// another broker on the same store is honoured exactly; the bootstrap
// admin token is the configuration's.
func (s *Service) Authenticate(bearer string) (auth.Principal, error) {
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
func (s *Service) refresh(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	t, err := s.store.Token(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		s.auth.Delete(id)
	case err != nil:
		return fmt.Errorf("check API token: %w", err)
	default:
		s.auth.Put(t)
	}
	return nil
}

// Create makes an API token for role on behalf of p; the token string is
// returned once and only its digest is stored.
func (s *Service) Create(ctx context.Context, p auth.Principal, role, name string, ttl time.Duration) (auth.Token, string, error) {
	if !auth.ValidRole(role) {
		return auth.Token{}, "", &fault.FieldError{Field: "role", Msg: "must be admin, operator, reviewer or auditor"}
	}
	if name == "" || len(name) > 100 {
		return auth.Token{}, "", &fault.FieldError{Field: "name", Msg: "is required (at most 100 characters)"}
	}
	if ttl < 0 {
		return auth.Token{}, "", &fault.FieldError{Field: "ttl", Msg: "must be positive"}
	}
	now := s.now().UTC()
	t := auth.Token{ID: ids.New("tok_", now), Name: name, Role: role, CreatedAt: now, CreatedBy: p.ID}
	if ttl > 0 {
		t.ExpiresAt = now.Add(ttl)
	}
	secret, digest := auth.NewSecret(t.ID)
	t.Digest = digest
	if err := s.store.PutToken(ctx, t); err != nil {
		return auth.Token{}, "", fmt.Errorf("store token: %w", err)
	}
	if _, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeTokenCreated, Actor: s.names.Actor(p), Reason: "role " + role + ", token " + s.names.AuditID(t.ID)}, nil); err != nil {
		return auth.Token{}, "", err
	}
	s.auth.Put(t)
	return t, secret, nil
}

// List lists every broker's API tokens from the store (never their
// secrets), by id; this broker's when the store cannot answer.
func (s *Service) List() []auth.Token {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	ts, err := s.store.Tokens(ctx) // every broker's tokens
	if err != nil {
		s.log.Error("list API tokens from the store; listing this broker's", "err", err)
		ts = s.auth.List()
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	return ts
}

// Revoke deletes API token id at once on behalf of p (ErrNotFound for an
// unknown id).
func (s *Service) Revoke(ctx context.Context, p auth.Principal, id string) error {
	if err := s.store.DeleteToken(ctx, id); err != nil {
		return err
	}
	s.auth.Delete(id)
	_, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeTokenRevoked, Actor: s.names.Actor(p), Reason: "token " + s.names.AuditID(id)}, nil)
	if s.onRevoke != nil {
		s.onRevoke()
	}
	return err
}

// Principal is the control-plane identity with API token id id as it
// stands now (auth.ErrNotFound once revoked, auth.ErrExpired once
// expired).
func (s *Service) Principal(id string) (auth.Principal, error) {
	if id != auth.BootstrapID {
		if err := s.refresh(id); err != nil {
			return auth.Principal{}, err
		}
	}
	return s.auth.Lookup(id)
}

// RecordLogout audits the end of a reviewer's web log-in (a failure is
// logged).
func (s *Service) RecordLogout(ctx context.Context, p auth.Principal, reason string) {
	ev := audit.Event{Type: audit.TypeUILogout, Actor: s.names.Actor(p), Reason: reason}
	if _, err := s.audit.Append(ctx, ev, nil); err != nil {
		s.log.Error("audit of a log-out failed", "err", err)
	}
}
