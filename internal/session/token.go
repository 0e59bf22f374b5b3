package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	tokenIssuer   = "airlock"
	tokenAudience = "airlock-sandbox"
)

// Tokens issues and verifies session tokens: HS256 JWTs (the one accepted
// algorithm) with iss, aud, sub (session id), jti, iat, nbf and exp.
type Tokens struct {
	key    []byte
	now    func() time.Time
	parser *jwt.Parser
}

// NewTokens uses key (at least 32 bytes) to sign; now is the clock.
func NewTokens(key []byte, now func() time.Time) (*Tokens, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("session signing key too short: %d bytes", len(key))
	}
	return &Tokens{
		key: key,
		now: now,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithIssuer(tokenIssuer),
			jwt.WithAudience(tokenAudience),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithTimeFunc(now),
		),
	}, nil
}

// Claims are what a verified token says.
type Claims struct {
	SessionID string
	TokenID   string
	ExpiresAt time.Time
}

// Issue signs a token for s.
func (t *Tokens) Issue(s *Session) (string, error) {
	claims := jwt.RegisteredClaims{
		Issuer:    tokenIssuer,
		Audience:  jwt.ClaimStrings{tokenAudience},
		Subject:   s.ID,
		ID:        s.TokenID,
		IssuedAt:  jwt.NewNumericDate(s.CreatedAt),
		NotBefore: jwt.NewNumericDate(s.CreatedAt),
		ExpiresAt: jwt.NewNumericDate(s.ExpiresAt),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(t.key)
}

// Verify checks signature, algorithm, issuer, audience and time claims.
// It does not consult session state; the caller must (kill is immediate).
// Every failure is ErrInvalidToken, except an expired token, ErrExpired.
func (t *Tokens) Verify(token string) (Claims, error) {
	var rc jwt.RegisteredClaims
	_, err := t.parser.ParseWithClaims(token, &rc, func(*jwt.Token) (any, error) { return t.key, nil })
	if err != nil {
		if jwtExpired(err) {
			return Claims{}, ErrExpired
		}
		return Claims{}, ErrInvalidToken
	}
	if rc.Subject == "" || rc.ID == "" || rc.NotBefore == nil {
		return Claims{}, ErrInvalidToken
	}
	return Claims{SessionID: rc.Subject, TokenID: rc.ID, ExpiresAt: rc.ExpiresAt.Time}, nil
}

func jwtExpired(err error) bool {
	// Only a token whose signature verified reports expiry; a forged one is invalid.
	return err != nil && jwtIs(err, jwt.ErrTokenExpired) && !jwtIs(err, jwt.ErrTokenSignatureInvalid)
}

func jwtIs(err, target error) bool { return errors.Is(err, target) }
