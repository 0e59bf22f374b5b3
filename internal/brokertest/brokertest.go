// Package brokertest opens a real broker on a real bbolt file for tests:
// the one place that knows how a test broker is wired, so the tests of
// every package say only what differs (a clock, an upstream, durability).
//
//	k := brokertest.MustOpenBroker(t, brokertest.WithFakeClock(t0), brokertest.WithUpstream(u))
//	k.Clock.Advance(time.Minute)
//
// Everything it opens is closed by tb.Cleanup: the broker first, then the
// store, whose file then passes bbolt's consistency check.
package brokertest

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/usage"
)

// AdminToken is the bootstrap admin token of a broker the kit opens,
// unless WithOptions sets another.
const AdminToken = "admin-admin-admin-admin"

// Kit is a broker opened for a test and what it was opened on.
type Kit struct {
	Broker *broker.Broker
	Store  *boltstore.Bolt // the bbolt store under the broker (WithOptions may wrap it)
	Clock  *clock.Fake     // the broker's clock when it is a Fake, else nil
	once   sync.Once
}

// Close closes the broker (once; the test's cleanup does too), which
// commits its queued audit records. The store stays open until cleanup.
func (k *Kit) Close() { k.once.Do(k.Broker.Close) }

// Option changes how MustOpenBroker opens the broker.
type Option func(*settings)

type settings struct {
	durability string
	st         *boltstore.Bolt
	clock      clock.Clock
	upstreams  map[string]*upstream.Upstream
	edits      []func(*broker.Options)
}

// WithDurability opens the store in durability d (default
// store.DurabilityBuffered). It has no effect with WithStore.
func WithDurability(d string) Option { return func(s *settings) { s.durability = d } }

// WithStore runs the broker on st (from MustOpenStore) instead of a store
// of its own, so a test can open several brokers on one file in turn.
func WithStore(st *boltstore.Bolt) Option { return func(s *settings) { s.st = st } }

// WithFakeClock runs the broker on a clock.Fake at t0, returned as Kit.Clock.
func WithFakeClock(t0 time.Time) Option { return WithClock(clock.NewFake(t0)) }

// WithClock runs the broker on c (a Fake the test shares, or a Clock of
// its own). A *clock.Fake is returned as Kit.Clock.
func WithClock(c clock.Clock) Option { return func(s *settings) { s.clock = c } }

// WithNow runs the broker on now with the runtime's timers (clock.WithNow).
func WithNow(now func() time.Time) Option { return WithClock(clock.WithNow(now)) }

// WithUpstream adds u under its name.
func WithUpstream(u *upstream.Upstream) Option {
	return func(s *settings) { s.upstreams[u.Name] = u }
}

// WithOptions edits the broker's options after the kit's defaults and the
// other options: TTLs, isolation, webhook, logger, even the store.
func WithOptions(edit func(*broker.Options)) Option {
	return func(s *settings) { s.edits = append(s.edits, edit) }
}

// MustOpenStore opens a bbolt store in durability d in tb.TempDir().
// tb.Cleanup closes it and runs bbolt's consistency check on the file.
func MustOpenStore(tb testing.TB, d string) *boltstore.Bolt {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "airlock.db")
	st, err := boltstore.OpenBolt(path, d, Discard())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := st.Close(); err != nil {
			tb.Errorf("close the store: %v", err)
			return
		}
		if err := boltstore.CheckFile(path); err != nil {
			tb.Errorf("the store after the test: %v", err)
		}
	})
	return st
}

// MustOpenBroker opens a broker for tb. Without options it runs on a
// buffered bbolt store of its own in tb.TempDir(), with no upstream,
// AdminToken, a one-hour session TTL cap, ten-minute default TTL, the
// wall clock and a logger that discards.
func MustOpenBroker(tb testing.TB, opts ...Option) *Kit {
	tb.Helper()
	s := settings{durability: store.DurabilityBuffered, upstreams: map[string]*upstream.Upstream{}}
	for _, opt := range opts {
		opt(&s)
	}
	st := s.st
	if st == nil {
		st = MustOpenStore(tb, s.durability)
	}
	o := broker.Options{Ports: Ports(st), AdminToken: AdminToken, MaxSessionTTL: time.Hour, DefaultTTL: 10 * time.Minute, Log: Discard()}
	if len(s.upstreams) > 0 {
		o.Upstreams = s.upstreams
	}
	if s.clock != nil {
		o.Clock = s.clock
	}
	for _, edit := range s.edits {
		edit(&o)
	}
	b, err := broker.New(context.Background(), o)
	if err != nil {
		tb.Fatal(err)
	}
	k := &Kit{Broker: b, Store: st}
	k.Clock, _ = s.clock.(*clock.Fake)
	tb.Cleanup(k.Close)
	return k
}

// Unreachable is an http upstream named name whose address nothing
// listens on, marked sensitive: a call that reached it would fail.
func Unreachable(name string) *upstream.Upstream {
	base, _ := url.Parse("http://127.0.0.1:1")
	return &upstream.Upstream{Name: name, Kind: "http", BaseURL: base, Sensitive: true}
}

// Discard is a logger that writes nothing.
func Discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Ports are st's ports for a broker (as cmd/broker wires them).
func Ports(st store.Store) broker.Ports {
	u, _ := st.(usage.Store)
	return broker.Ports{Sessions: st, Audit: st, Actions: st, Tokens: st, Killswitch: st, Meta: st, Health: st, Usage: u}
}
