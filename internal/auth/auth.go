// Package auth authenticates control-plane callers by API token and role.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
)

// Roles.
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleReviewer = "reviewer"
	RoleAuditor  = "auditor"
)

// ValidRole reports whether r is a known role.
func ValidRole(r string) bool {
	switch r {
	case RoleAdmin, RoleOperator, RoleReviewer, RoleAuditor:
		return true
	}
	return false
}

// Errors.
var (
	ErrInvalidToken = fault.Hidden(fault.InvalidToken, "invalid API token")
	ErrNotFound     = errors.New("token not found")
	ErrExpired      = errors.New("token expired")
)

// Token is a stored API token: only a digest of its secret is kept.
type Token struct {
	ID        string
	Name      string
	Role      string
	Digest    []byte
	CreatedAt time.Time
	ExpiresAt time.Time // zero: no expiry
	CreatedBy string
}

// Principal is an authenticated control-plane identity.
type Principal struct {
	ID   string
	Name string
	Role string
}

// Allowed reports whether the principal holds one of roles; admin holds all.
func (p Principal) Allowed(roles ...string) bool {
	if p.Role == RoleAdmin {
		return true
	}
	for _, r := range roles {
		if p.Role == r {
			return true
		}
	}
	return false
}

const tokenPrefix = "alk_"

// BootstrapID is the principal id of the bootstrap admin token.
const BootstrapID = "bootstrap-admin"

// NewSecret makes a token string for id: "alk_<id>.<secret>", and its digest.
func NewSecret(id string) (token string, digest []byte) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	secret := base64.RawURLEncoding.EncodeToString(b)
	return tokenPrefix + id + "." + secret, Digest(secret)
}

// Digest is the stored form of a secret.
func Digest(secret string) []byte {
	s := sha256.Sum256([]byte(secret))
	return s[:]
}

// Authenticator checks bearer tokens against the bootstrap admin token and
// stored API tokens, held in memory.
type Authenticator struct {
	now       func() time.Time
	bootstrap []byte // digest of the bootstrap admin token, or nil

	mu     sync.RWMutex
	tokens map[string]Token
}

// NewAuthenticator uses bootstrap (may be empty) as the admin token.
func NewAuthenticator(bootstrap string, tokens []Token, now func() time.Time) *Authenticator {
	a := &Authenticator{now: now, tokens: map[string]Token{}}
	if bootstrap != "" {
		a.bootstrap = Digest(bootstrap)
	}
	for _, t := range tokens {
		a.tokens[t.ID] = t
	}
	return a
}

// Put adds or replaces a token.
func (a *Authenticator) Put(t Token) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens[t.ID] = t
}

// Delete removes a token.
func (a *Authenticator) Delete(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.tokens, id)
}

// List returns the stored tokens.
func (a *Authenticator) List() []Token {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]Token, 0, len(a.tokens))
	for _, t := range a.tokens {
		out = append(out, t)
	}
	return out
}

// TokenID is the id an API token's bearer string names (not verified), or
// false when bearer is not shaped as one.
func TokenID(bearer string) (string, bool) {
	rest, ok := strings.CutPrefix(bearer, tokenPrefix)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, ".")
	return id, ok && id != ""
}

// Authenticate resolves a bearer token to a principal. Comparisons of
// secrets are constant-time.
func (a *Authenticator) Authenticate(bearer string) (Principal, error) {
	if rest, ok := strings.CutPrefix(bearer, tokenPrefix); ok {
		if id, secret, ok := strings.Cut(rest, "."); ok {
			a.mu.RLock()
			t, found := a.tokens[id]
			a.mu.RUnlock()
			if found && subtle.ConstantTimeCompare(Digest(secret), t.Digest) == 1 {
				if !t.ExpiresAt.IsZero() && !a.now().Before(t.ExpiresAt) {
					return Principal{}, ErrInvalidToken
				}
				return Principal{ID: t.ID, Name: t.Name, Role: t.Role}, nil
			}
		}
	}
	if a.bootstrap != nil && bearer != "" && subtle.ConstantTimeCompare(Digest(bearer), a.bootstrap) == 1 {
		return Principal{ID: BootstrapID, Name: "bootstrap admin", Role: RoleAdmin}, nil
	}
	return Principal{}, ErrInvalidToken
}

// Lookup resolves a principal id (an API token's id) to the principal as
// it stands now, for callers that authenticated the token earlier and hold
// only its id (the web page's log-in): ErrNotFound once the token is
// revoked (or was never stored), ErrExpired once it is past its expiry. It
// is a map read under a read lock.
func (a *Authenticator) Lookup(id string) (Principal, error) {
	if id == BootstrapID {
		if a.bootstrap == nil {
			return Principal{}, ErrNotFound
		}
		return Principal{ID: BootstrapID, Name: "bootstrap admin", Role: RoleAdmin}, nil
	}
	a.mu.RLock()
	t, found := a.tokens[id]
	a.mu.RUnlock()
	switch {
	case !found:
		return Principal{}, ErrNotFound
	case !t.ExpiresAt.IsZero() && !a.now().Before(t.ExpiresAt):
		return Principal{}, ErrExpired
	}
	return Principal{ID: t.ID, Name: t.Name, Role: t.Role}, nil
}
