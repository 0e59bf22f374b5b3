package pgstore_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/pgstore"
)

// openBrokers starts n brokers at once, each on its own store (its own
// pool) over the database dsn, as n replicas starting together would: the
// stores are opened (and the schema migrated) first, then every broker
// starts on the same signal.
func openBrokers(t *testing.T, dsn string, n int) []*broker.Broker {
	t.Helper()
	sts := make([]*pgstore.PG, n)
	for i := range n {
		sts[i] = MustOpenDSN(t, dsn, store.DurabilityFsync)
	}
	bs := make([]*broker.Broker, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			bs[i], errs[i] = broker.New(context.Background(), broker.Options{Ports: brokertest.Ports(sts[i]), AdminToken: brokertest.AdminToken,
				MaxSessionTTL: time.Hour, DefaultTTL: 10 * time.Minute, Log: brokertest.Discard()})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("broker %d: %v", i, err)
		}
		t.Cleanup(bs[i].Close)
	}
	return bs
}

var admin = auth.Principal{ID: auth.BootstrapID, Name: "bootstrap admin", Role: auth.RoleAdmin}

// TestInstallationSecretOnceWhenBrokersStartTogether: six brokers started
// at once on an empty database create the installation secret once and all
// keep it: the audit log names identifiers alike on each, and a session
// token one signed is verified by every other.
func TestInstallationSecretOnceWhenBrokersStartTogether(t *testing.T) {
	bs := openBrokers(t, pgtest.DSN(t), 6)
	for i, b := range bs[1:] {
		if got, want := b.HMAC("probe"), bs[0].HMAC("probe"); got != want {
			t.Errorf("broker %d keys the audit HMAC differently: %s, broker 0 %s", i+1, got, want)
		}
	}
	v, err := bs[0].CreateSession(context.Background(), admin, sessions.SessionRequest{TaskID: "t", TTL: time.Hour, Isolation: "microvm"})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bs {
		if _, err := b.Check(v.Token, netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Errorf("broker %d: the token signed by broker 0 does not verify: %v", i, err)
		}
	}
}
