package brokertest_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
)

var (
	t0       = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	operator = auth.Principal{ID: "op", Role: auth.RoleOperator}
	loopback = netip.MustParseAddr("127.0.0.1")
)

func trusted(ttl time.Duration) sessions.SessionRequest {
	f := false
	return sessions.SessionRequest{TaskID: "t", TTL: ttl, Isolation: "microvm", UntrustedInput: &f}
}

// The kit's broker answers its admin token, and WithFakeClock hands the
// test the clock that decides its expiries.
func TestMustOpenBrokerFakeClock(t *testing.T) {
	k := brokertest.MustOpenBroker(t, brokertest.WithFakeClock(t0))
	if p, err := k.Broker.Authenticate(brokertest.AdminToken); err != nil || p.Role != auth.RoleAdmin {
		t.Fatalf("admin token: %v %v", p, err)
	}
	v, err := k.Broker.CreateSession(context.Background(), operator, trusted(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !v.Session.ExpiresAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("expires at %v, want t0+1m", v.Session.ExpiresAt)
	}
	k.Clock.Advance(time.Minute)
	if _, err := k.Broker.Check(v.Token, loopback); !errors.Is(err, session.ErrExpired) {
		t.Fatalf("after the TTL on the fake clock: %v, want ErrExpired", err)
	}
	if k := brokertest.MustOpenBroker(t); k.Clock != nil {
		t.Fatal("a kit without a fake clock returned one")
	}
}

// WithStore lets brokers opened in turn share one file: what the first
// stored, the second finds.
func TestWithStoreSharedAcrossBrokers(t *testing.T) {
	st := brokertest.MustOpenStore(t, store.DurabilityFsync)
	first := brokertest.MustOpenBroker(t, brokertest.WithStore(st))
	v, err := first.Broker.CreateSession(context.Background(), operator, trusted(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	first.Close() // idempotent, as is the cleanup's
	second := brokertest.MustOpenBroker(t, brokertest.WithStore(st))
	if second.Store != st {
		t.Fatal("the kit did not run on the store it was given")
	}
	if _, err := second.Broker.Session(context.Background(), v.Session.ID); err != nil {
		t.Fatalf("the second broker lost the first one's session: %v", err)
	}
}
