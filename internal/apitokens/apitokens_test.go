package apitokens_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

// plainNames names identities as they are (the broker HMACs token ids).
type plainNames struct{}

func (plainNames) Actor(p auth.Principal) audit.Actor { return audit.Actor{Kind: p.Role, ID: p.ID} }
func (plainNames) AuditID(id string) string           { return id }

func mustService(t *testing.T, st *boltstore.Bolt, onRevoke func()) *apitokens.Service {
	t.Helper()
	w, err := audit.NewWriter(context.Background(), st, time.Now, brokertest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	s, err := apitokens.New(context.Background(), apitokens.Config{Store: st, AdminToken: brokertest.AdminToken,
		Audit: w, Names: plainNames{}, Now: time.Now, Log: brokertest.Discard(), OnRevoke: onRevoke})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A token revoked through one service (one broker) stops working at once
// on another over the same store; an unknown id is the port's ErrNotFound.
func TestRevokeIsExactAcrossServices(t *testing.T) {
	ctx := context.Background()
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	revoked := 0
	one, other := mustService(t, st, func() { revoked++ }), mustService(t, st, nil)
	admin := auth.Principal{ID: auth.BootstrapID, Role: auth.RoleAdmin}
	tok, secret, err := one.Create(ctx, admin, auth.RoleOperator, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := other.Authenticate(secret); err != nil || p.ID != tok.ID {
		t.Fatalf("the other service authenticates the new token as %+v, %v", p, err)
	}
	if err := one.Revoke(ctx, admin, tok.ID); err != nil || revoked != 1 {
		t.Fatalf("Revoke = %v (OnRevoke ran %d times)", err, revoked)
	}
	if _, err := other.Authenticate(secret); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("the revoked token on the other service = %v, want %v", err, auth.ErrInvalidToken)
	}
	if err := one.Revoke(ctx, admin, "tok_unknown"); !errors.Is(err, apitokens.ErrNotFound) {
		t.Fatalf("Revoke(unknown) = %v, want %v", err, apitokens.ErrNotFound)
	}
}
