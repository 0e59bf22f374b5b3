package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/meta"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

// portsOnly is an adapter whose not-found errors match only the ports'
// sentinels (as a PostgreSQL adapter's "no rows" would), never
// store.ErrNotFound.
type portsOnly struct{ *boltstore.Bolt }

func onlyPort(err, sentinel error) error {
	if errors.Is(err, sentinel) {
		return fmt.Errorf("no rows in result set: %w", sentinel)
	}
	return err
}

func (s portsOnly) Session(ctx context.Context, id string) (session.Session, error) {
	v, err := s.Bolt.Session(ctx, id)
	return v, onlyPort(err, sessions.ErrNotFound)
}

func (s portsOnly) Grant(ctx context.Context, id string) (sessions.GrantRecord, error) {
	v, err := s.Bolt.Grant(ctx, id)
	return v, onlyPort(err, sessions.ErrNotFound)
}

func (s portsOnly) DeleteToken(ctx context.Context, id string) error {
	return onlyPort(s.Bolt.DeleteToken(ctx, id), apitokens.ErrNotFound)
}

func (s portsOnly) Meta(ctx context.Context, key string) ([]byte, error) {
	v, err := s.Bolt.Meta(ctx, key)
	return v, onlyPort(err, meta.ErrNotFound)
}

// The broker reads its ports' not-found sentinels, not an adapter's error:
// on a fresh store it creates its installation secret and reports the
// kill-switch released, and unknown sessions, grants and tokens are its
// own ErrNotFound.
func TestBrokerReadsOnlyThePortsSentinels(t *testing.T) {
	ctx := context.Background()
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	p := portsOnly{st}
	if _, err := p.Meta(ctx, "installation_secret"); !errors.Is(err, meta.ErrNotFound) || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the fake's not-found = %v: want the port's sentinel only", err)
	}
	b := brokertest.MustOpenBroker(t, brokertest.WithStore(st), brokertest.WithOptions(func(o *broker.Options) {
		o.Sessions, o.Tokens, o.Meta, o.Killswitch = p, p, p, p
	})).Broker // New reads the installation secret: not found is "create it"
	if ks, err := b.Killswitch(ctx); err != nil || ks.Engaged {
		t.Errorf("Killswitch on a fresh store = %+v, %v; want released", ks, err)
	}
	if _, err := b.Session(ctx, "ses_unknown"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("Session(unknown) = %v, want broker.ErrNotFound", err)
	}
	if _, err := b.Grant(ctx, "grt_unknown"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("Grant(unknown) = %v, want broker.ErrNotFound", err)
	}
	admin := auth.Principal{ID: "admin", Role: auth.RoleAdmin}
	if err := b.RevokeToken(ctx, admin, "tok_unknown"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("RevokeToken(unknown) = %v, want broker.ErrNotFound", err)
	}
}
