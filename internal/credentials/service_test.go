package credentials_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/credentials"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// fakeMinter issues tokens living a minute (never past the session),
// renews by extending them, and records revocations.
type fakeMinter struct {
	mu      sync.Mutex
	n       int
	revoked map[string]bool
}

func (f *fakeMinter) Mint(_ context.Context, sc upstream.Scope) (upstream.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(sc.Rules) == 0 {
		return upstream.Lease{}, errors.New("empty scope")
	}
	return upstream.Lease{Secret: upstream.NewSecret(fmt.Sprintf("minted-secret-%d-%d", f.n, len(sc.Rules))),
		ID: fmt.Sprintf("lease-%d", f.n), Expires: leaseEnd(sc)}, nil
}

func (f *fakeMinter) Renew(_ context.Context, sc upstream.Scope, l upstream.Lease) (upstream.Lease, error) {
	l.Expires = leaseEnd(sc)
	return l, nil
}

func (f *fakeMinter) Revoke(_ context.Context, l upstream.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked[l.ID] = true
	return nil
}

func (f *fakeMinter) isRevoked(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.revoked[id]
}

func leaseEnd(sc upstream.Scope) time.Time {
	if e := sc.Now.Add(time.Minute); e.Before(sc.Expires) {
		return e
	}
	return sc.Expires
}

func (f *fakeMinter) Describe() string { return "fake-minter" }

// failingRenewMinter mints leases of a minute and fails every renewal.
type failingRenewMinter struct {
	fakeMinter
	renews atomic.Int64
}

func (f *failingRenewMinter) Renew(context.Context, upstream.Scope, upstream.Lease) (upstream.Lease, error) {
	f.renews.Add(1)
	return upstream.Lease{}, errors.New("issuer down")
}

// liveSession is a credentials.Holder in memory.
type liveSession struct {
	id      string
	expires time.Time
	revoked atomic.Bool
	mu      sync.Mutex
	grants  []*grants.Live
}

func (l *liveSession) SessionID() string  { return l.id }
func (l *liveSession) Expires() time.Time { return l.expires }
func (l *liveSession) Revoked() bool      { return l.revoked.Load() }
func (l *liveSession) Grants() []*grants.Live {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grants
}

// addGrant gives the session a grant on upstream "api" allowing GET path.
func (l *liveSession) addGrant(id, path string) *grants.Live {
	g := &grants.Live{Grant: grants.Grant{ID: id, SessionID: l.id, ExpiresAt: l.expires,
		Spec: grants.Spec{Upstream: "api", Rules: []grants.Rule{{Method: "GET", Path: path}}}}}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grants = append(l.grants, g)
	return g
}

// auditLog records what the service appends.
type auditLog struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (a *auditLog) AppendAsync(ev audit.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, ev)
}

func (a *auditLog) events() []audit.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]audit.Event(nil), a.evs...)
}

func hmacOf(v string) string {
	h := sha256.Sum256([]byte("installation key|" + v))
	return hex.EncodeToString(h[:16])
}

// mapState is a StateStore in memory.
type mapState struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *mapState) LoadState(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k], nil
}

func (s *mapState) SaveState(_ context.Context, k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = v
	return nil
}

// fixture is a service of one minted upstream "api" with one live session.
type fixture struct {
	svc   *credentials.Service
	clk   *clock.Fake
	up    *upstream.Upstream
	sess  *liveSession
	audit *auditLog
}

func mustService(tb testing.TB, m upstream.Minter, reg prometheus.Registerer) *fixture {
	tb.Helper()
	base, _ := url.Parse("http://127.0.0.1:1")
	u := &upstream.Upstream{Name: "api", Kind: "http", BaseURL: base, Timeout: 10 * time.Second,
		Inject: upstream.Injection{Header: "Authorization", Format: "Bearer {secret}"}, RotationGrace: time.Hour,
		Minter: m, Source: upstream.MintedSource(m)}
	f := &fixture{clk: clock.NewFake(t0), up: u, audit: &auditLog{},
		sess: &liveSession{id: "ses_1", expires: t0.Add(time.Hour)}}
	f.sess.addGrant("gr_1", "/items")
	var halted atomic.Bool
	svc, err := credentials.New(credentials.Config{
		Upstreams: map[string]*upstream.Upstream{"api": u}, Clock: f.clk,
		State: &mapState{m: map[string][]byte{}}, StateKey: make([]byte, 32),
		Audit: f.audit, HMAC: hmacOf, Halted: halted.Load, Metrics: reg,
		Live: func(id string) (credentials.Holder, bool) {
			if id != f.sess.id {
				return nil, false
			}
			return f.sess, true
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(svc.Close)
	f.svc = svc
	return f
}

// credential is the session's credential on "api", required.
func (f *fixture) credential(tb testing.TB) upstream.Credential {
	tb.Helper()
	c, err := f.svc.Credential(context.Background(), f.sess, f.up)
	if err != nil {
		tb.Fatalf("the session's credential: %v", err)
	}
	return c
}

// A Config without its required parts is refused, each named.
func TestNewRequires(t *testing.T) {
	_, err := credentials.New(credentials.Config{StateKey: make([]byte, 32)})
	if err == nil {
		t.Fatal("an empty Config accepted")
	}
	for _, f := range []string{"Clock", "State", "Audit", "HMAC", "Live", "Halted"} {
		if !strings.Contains(err.Error(), "Config."+f+" ") {
			t.Errorf("%s not named: %v", f, err)
		}
	}
}
