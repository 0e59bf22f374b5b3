package auth

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLookup(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := now
	a := NewAuthenticator("boot", []Token{
		{ID: "tok_live", Name: "Rita", Role: RoleReviewer},
		{ID: "tok_ttl", Name: "Tim", Role: RoleReviewer, ExpiresAt: now.Add(time.Minute)},
		{ID: "tok_gone", Name: "Gus", Role: RoleReviewer},
	}, func() time.Time { return clock })
	a.Delete("tok_gone")
	tests := []struct {
		name    string
		id      string
		advance time.Duration
		want    Principal
		wantErr error
	}{
		{"fail-revoked", "tok_gone", 0, Principal{}, ErrNotFound},
		{"fail-unknown", "tok_never", 0, Principal{}, ErrNotFound},
		{"fail-expired", "tok_ttl", time.Minute, Principal{}, ErrExpired},
		{"ok-before-expiry", "tok_ttl", time.Minute - time.Nanosecond, Principal{ID: "tok_ttl", Name: "Tim", Role: RoleReviewer}, nil},
		{"ok", "tok_live", 0, Principal{ID: "tok_live", Name: "Rita", Role: RoleReviewer}, nil},
		{"ok-bootstrap", BootstrapID, 0, Principal{ID: BootstrapID, Name: "bootstrap admin", Role: RoleAdmin}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock = now.Add(tt.advance)
			got, err := a.Lookup(tt.id)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
		})
	}
	// Without a bootstrap token, its id resolves to nothing.
	if _, err := NewAuthenticator("", nil, time.Now).Lookup(BootstrapID); !errors.Is(err, ErrNotFound) {
		t.Errorf("bootstrap id without a bootstrap token: %v", err)
	}
}
