package session

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	t0  = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key = []byte("0123456789abcdef0123456789abcdef")
)

func mustTokens(tb testing.TB, now time.Time) *Tokens {
	tb.Helper()
	tk, err := NewTokens(key, func() time.Time { return now })
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}

func sess() *Session {
	return &Session{ID: "ses_1", TokenID: "jti_1", CreatedAt: t0, ExpiresAt: t0.Add(10 * time.Minute)}
}

func sign(tb testing.TB, method jwt.SigningMethod, k any, claims jwt.MapClaims) string {
	tb.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(k)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func validClaims() jwt.MapClaims {
	return jwt.MapClaims{"iss": tokenIssuer, "aud": []string{tokenAudience}, "sub": "ses_1", "jti": "jti_1",
		"iat": t0.Unix(), "nbf": t0.Unix(), "exp": t0.Add(10 * time.Minute).Unix()}
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for kk, vv := range c {
		out[kk] = vv
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func TestVerify(t *testing.T) {
	tk := mustTokens(t, t0.Add(time.Minute))
	good, err := tk.Issue(sess())
	if err != nil {
		t.Fatal(err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	parts := strings.Split(good, ".")
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	tamperedPayload := base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"airlock","aud":["airlock-sandbox"],"sub":"ses_2","jti":"jti_1","iat":1,"nbf":1,"exp":9999999999}`))

	tests := []struct {
		name    string
		token   string
		now     time.Time
		wantErr error
	}{
		{name: "ok", token: good},
		{name: "fail-forged signature", token: sign(t, jwt.SigningMethodHS256, []byte("another key, also 32 bytes long!"), validClaims()), wantErr: ErrInvalidToken},
		{name: "fail-alg none", token: noneHeader + "." + parts[1] + ".", wantErr: ErrInvalidToken},
		{name: "fail-alg none with library", token: sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, validClaims()), wantErr: ErrInvalidToken},
		{name: "fail-other HMAC algorithm, same key", token: sign(t, jwt.SigningMethodHS512, key, validClaims()), wantErr: ErrInvalidToken},
		{name: "fail-asymmetric algorithm", token: sign(t, jwt.SigningMethodES256, ec, validClaims()), wantErr: ErrInvalidToken},
		{name: "fail-tampered payload", token: parts[0] + "." + tamperedPayload + "." + parts[2], wantErr: ErrInvalidToken},
		{name: "fail-expired", token: good, now: t0.Add(11 * time.Minute), wantErr: ErrExpired},
		{name: "fail-not yet valid", token: sign(t, jwt.SigningMethodHS256, key, with(validClaims(), "nbf", t0.Add(5*time.Minute).Unix())), wantErr: ErrInvalidToken},
		{name: "fail-wrong audience", token: sign(t, jwt.SigningMethodHS256, key, with(validClaims(), "aud", []string{"airlock-control"})), wantErr: ErrInvalidToken},
		{name: "fail-wrong issuer", token: sign(t, jwt.SigningMethodHS256, key, with(validClaims(), "iss", "someone")), wantErr: ErrInvalidToken},
		{name: "fail-no exp", token: sign(t, jwt.SigningMethodHS256, key, with(validClaims(), "exp", nil)), wantErr: ErrInvalidToken},
		{name: "fail-no jti", token: sign(t, jwt.SigningMethodHS256, key, with(validClaims(), "jti", nil)), wantErr: ErrInvalidToken},
		{name: "fail-no nbf", token: sign(t, jwt.SigningMethodHS256, key, with(validClaims(), "nbf", nil)), wantErr: ErrInvalidToken},
		{name: "fail-issued in the future", token: sign(t, jwt.SigningMethodHS256, key, with(validClaims(), "iat", t0.Add(time.Hour).Unix())), wantErr: ErrInvalidToken},
		{name: "fail-garbage", token: "not-a-jwt", wantErr: ErrInvalidToken},
		{name: "fail-empty", token: "", wantErr: ErrInvalidToken},
		{name: "fail-expired and forged", token: sign(t, jwt.SigningMethodHS256, []byte("another key, also 32 bytes long!"), with(validClaims(), "exp", t0.Unix())), wantErr: ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = t0.Add(time.Minute)
			}
			c, err := mustTokens(t, now).Verify(tt.token)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Verify err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.SessionID != "ses_1" || c.TokenID != "jti_1" {
				t.Fatalf("claims = %+v", c)
			}
		})
	}
}

func TestRuleOfTwo(t *testing.T) {
	tests := []struct {
		r     RuleOfTwo
		tier  Isolation
		gated bool
	}{
		{RuleOfTwo{}, IsolationProcess, false},
		{RuleOfTwo{ExternalAction: true}, IsolationContainer, false},
		{RuleOfTwo{SensitiveAccess: true}, IsolationContainer, false},
		{RuleOfTwo{SensitiveAccess: true, ExternalAction: true}, IsolationContainer, false},
		{RuleOfTwo{UntrustedInput: true}, IsolationGVisor, false},
		{RuleOfTwo{UntrustedInput: true, ExternalAction: true}, IsolationGVisor, false},
		{RuleOfTwo{UntrustedInput: true, SensitiveAccess: true}, IsolationMicroVM, false},
		{RuleOfTwo{UntrustedInput: true, SensitiveAccess: true, ExternalAction: true}, IsolationMicroVM, true},
	}
	for _, tt := range tests {
		if got := tt.r.RequiredIsolation(); got != tt.tier {
			t.Errorf("%+v: tier %s, want %s", tt.r, got, tt.tier)
		}
		if tt.r.Gated() != tt.gated || (tt.r.Hint() != "") != tt.gated {
			t.Errorf("%+v: gated %v hint %q", tt.r, tt.r.Gated(), tt.r.Hint())
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	tk := mustTokens(b, t0.Add(time.Minute))
	tok, _ := tk.Issue(sess())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tk.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}
