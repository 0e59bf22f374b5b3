package sessions_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

var operator = auth.Principal{ID: "op", Role: auth.RoleOperator}

// others records what the session service asks of the audit log, the gate
// and the credential service.
type others struct {
	mu       sync.Mutex
	events   []string
	denied   []string // sessions denied whole, and "grant revoked"/"grant expired"/"session expired" reasons
	rescoped []string // sessionID/upstream
	ended    []string
}

func (o *others) Append(_ context.Context, ev audit.Event, _ *grants.UsageUpdate) (audit.Event, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, ev.Type)
	return ev, nil
}

func (o *others) DenySession(_ context.Context, _ auth.Principal, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.denied = append(o.denied, id)
}

func (o *others) DenyLapsed(_ context.Context, _ audit.Actor, _, _ string, _ *grants.Live, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.denied = append(o.denied, reason)
}

func (o *others) Notify() {}

func (o *others) Period() context.Context { return context.Background() }

func (o *others) Engaged() bool { return false }

func (o *others) Rescope(sessionID, upstream string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rescoped = append(o.rescoped, sessionID+"/"+upstream)
}

func (o *others) seen() (events, denied, rescoped, ended []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string{}, o.events...), append([]string{}, o.denied...), append([]string{}, o.rescoped...), append([]string{}, o.ended...)
}

// fixture is a session service over a real bbolt store, on a fake clock.
type fixture struct {
	svc   *sessions.Service
	store *boltstore.Bolt
	clk   *clock.Fake
	o     *others
}

func mustSessions(t *testing.T) *fixture {
	t.Helper()
	st, err := boltstore.OpenBolt(filepath.Join(t.TempDir(), "airlock.db"), "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f := &fixture{store: st, clk: clock.NewFake(t0), o: &others{}}
	f.svc = f.service(t)
	return f
}

// service is a session service over the fixture's store (another
// replica's, when called again).
func (f *fixture) service(t *testing.T) *sessions.Service {
	t.Helper()
	tokens, err := session.NewTokens([]byte("0123456789abcdef0123456789abcdef"), f.clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sessions.New(sessions.Config{
		Store: f.store, Clock: f.clk, Tokens: tokens, AWSKey: []byte("aws-key"),
		MaxTTL: 2 * time.Hour, DefaultTTL: time.Hour,
		Audit: f.o, Actor: func(p auth.Principal) audit.Actor { return audit.Actor{Kind: p.Role, ID: p.ID} },
		Gate: f.o, Credentials: f.o, Killswitch: f.o,
		RuleOfTwo: func(untrusted bool, _ []*grants.Live) session.RuleOfTwo {
			return session.RuleOfTwo{UntrustedInput: untrusted}
		},
		Kind: func(name string) (string, bool) { return "http", name == "api" },
		AWS:  func(string) bool { return false },
		Ended: func(l *sessions.LiveSession, _ time.Time) {
			f.o.mu.Lock()
			defer f.o.mu.Unlock()
			f.o.ended = append(f.o.ended, l.Session.ID)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc.Start()
	t.Cleanup(svc.Stop)
	return svc
}

func (f *fixture) create(t *testing.T, gs ...grants.Spec) sessions.SessionView {
	t.Helper()
	no := false
	v, err := f.svc.Create(context.Background(), operator, sessions.SessionRequest{TaskID: "t", TTL: time.Hour, Isolation: "microvm", UntrustedInput: &no, Grants: gs})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var pay = []grants.Rule{{Method: "POST", Path: "/pay"}}

// TestNewNamesEachRequiredField: New refuses a Config without its
// required fields, naming each.
func TestNewNamesEachRequiredField(t *testing.T) {
	_, err := sessions.New(sessions.Config{})
	if err == nil {
		t.Fatal("New of an empty Config succeeded")
	}
	for _, f := range []string{"Store", "Clock", "Tokens", "AWSKey", "Audit", "Actor", "Gate", "Credentials", "Killswitch", "RuleOfTwo", "Kind", "AWS", "Ended"} {
		if !strings.Contains(err.Error(), "sessions: Config."+f+" is required") {
			t.Errorf("the error does not name %s: %v", f, err)
		}
	}
}

// TestCreateRefusesBadRequests: one row per field a request can get wrong.
func TestCreateRefusesBadRequests(t *testing.T) {
	f := mustSessions(t)
	tests := []struct {
		name string
		req  sessions.SessionRequest
		want string
	}{
		{name: "no task", req: sessions.SessionRequest{Isolation: "microvm"}, want: "task_id"},
		{name: "negative ttl", req: sessions.SessionRequest{TaskID: "t", TTL: -time.Second, Isolation: "microvm"}, want: "ttl"},
		{name: "ttl over the maximum", req: sessions.SessionRequest{TaskID: "t", TTL: 3 * time.Hour, Isolation: "microvm"}, want: "ttl"},
		{name: "unknown isolation", req: sessions.SessionRequest{TaskID: "t", Isolation: "vm"}, want: "isolation"},
		{name: "bad bind_cidr", req: sessions.SessionRequest{TaskID: "t", Isolation: "microvm", BindCIDR: "here"}, want: "bind_cidr"},
		{name: "unknown upstream", req: sessions.SessionRequest{TaskID: "t", Isolation: "microvm", Grants: []grants.Spec{{Upstream: "nope", Rules: pay}}}, want: "grants[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.Create(context.Background(), operator, tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Create = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestKill: a kill ends the session's standing (session.ErrRevoked) and
// its grants, is stored and audited, denies its pending actions, and is
// idempotent; an unknown session is ErrNotFound.
func TestKill(t *testing.T) {
	f := mustSessions(t)
	ctx := context.Background()
	v := f.create(t, grants.Spec{Upstream: "api", Rules: pay})
	l, err := f.svc.Identify(v.Token)
	if err != nil {
		t.Fatal(err)
	}
	k, err := f.svc.Kill(ctx, operator, v.Session.ID)
	if err != nil {
		t.Fatal(err)
	}
	if k.Status != "revoked" || k.Grants[0].Status != "revoked" {
		t.Errorf("killed: session %s, grant %s; want revoked, revoked", k.Status, k.Grants[0].Status)
	}
	if got := context.Cause(l.Context()); !errors.Is(got, session.ErrRevoked) {
		t.Errorf("the session's standing ended with %v, want session.ErrRevoked", got)
	}
	if err := l.Standing(f.clk.Now(), netip.MustParseAddr("127.0.0.1")); !errors.Is(err, session.ErrRevoked) {
		t.Errorf("Standing after the kill = %v, want session.ErrRevoked", err)
	}
	stored, err := f.store.Session(ctx, v.Session.ID)
	if err != nil || stored.RevokedAt.IsZero() {
		t.Errorf("stored after the kill: %+v, %v; want revoked", stored, err)
	}
	if _, err := f.svc.Kill(ctx, operator, v.Session.ID); err != nil {
		t.Errorf("a second kill: %v", err)
	}
	events, denied, _, ended := f.o.seen()
	if diff := cmp.Diff([]string{audit.TypeSessionCreated, audit.TypeSessionRevoked}, events); diff != "" {
		t.Errorf("audit records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{v.Session.ID}, denied); diff != "" {
		t.Errorf("denied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{v.Session.ID}, ended); diff != "" {
		t.Errorf("ended (-want +got):\n%s", diff)
	}
	if _, err := f.svc.Kill(ctx, operator, "ses_unknown"); !errors.Is(err, sessions.ErrNotFound) {
		t.Errorf("Kill(unknown) = %v, want sessions.ErrNotFound", err)
	}
	if _, err := f.svc.AddGrant(ctx, operator, v.Session.ID, grants.Spec{Upstream: "api", Rules: pay}); !errors.Is(err, sessions.ErrInactive) {
		t.Errorf("AddGrant to a killed session = %v, want sessions.ErrInactive", err)
	}
}

// TestLifetimesOnTheClock: a grant shorter than its session lapses at its
// instant on the clock (its lease rescoped), the session at its own
// (session.ErrExpired), not a nanosecond before.
func TestLifetimesOnTheClock(t *testing.T) {
	f := mustSessions(t)
	v := f.create(t, grants.Spec{Upstream: "api", TTL: 10 * time.Minute, Rules: pay})
	l, ok := f.svc.Live(v.Session.ID)
	if !ok {
		t.Fatal("the new session is not live")
	}
	g := l.Grants()[0]
	f.clk.Advance(10*time.Minute - time.Nanosecond)
	if g.Standing().Err() != nil {
		t.Fatal("the grant ended before its expiry")
	}
	f.clk.Advance(time.Nanosecond)
	if got := context.Cause(g.Standing()); !errors.Is(got, grants.ErrGrantExpired) {
		t.Errorf("the grant's standing ended with %v, want grants.ErrGrantExpired", got)
	}
	if _, _, rescoped, _ := f.o.seen(); !cmp.Equal(rescoped, []string{v.Session.ID + "/api"}) {
		t.Errorf("rescoped at the grant's expiry: %v", rescoped)
	}
	if l.Context().Err() != nil {
		t.Fatal("the session ended with its grant")
	}
	f.clk.Advance(50 * time.Minute)
	if got := context.Cause(l.Context()); !errors.Is(got, session.ErrExpired) {
		t.Errorf("the session's standing ended with %v, want session.ErrExpired", got)
	}
}

// TestReadThrough: a session another replica created on the store is
// identified here by its token, its grants loaded, and a grant added
// there is found here once synced.
func TestReadThrough(t *testing.T) {
	f := mustSessions(t)
	ctx := context.Background()
	v := f.create(t, grants.Spec{Upstream: "api", Rules: pay})
	other := f.service(t)
	l, err := other.Identify(v.Token)
	if err != nil {
		t.Fatalf("another replica's session: %v", err)
	}
	if len(l.Grants()) != 1 {
		t.Fatalf("read through with %d grants, want 1", len(l.Grants()))
	}
	gv, err := f.svc.AddGrant(ctx, operator, v.Session.ID, grants.Spec{Upstream: "api", Rules: pay})
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := other.SyncGrants(ctx, l); err != nil || !changed {
		t.Fatalf("SyncGrants = %v, %v; want a change", changed, err)
	}
	if _, ok := other.LiveGrant(gv.Grant.ID); !ok {
		t.Error("the grant added on the first replica is not live on the other")
	}
	if _, err := other.Identify(v.Token + "x"); !errors.Is(err, session.ErrInvalidToken) {
		t.Errorf("a forged token: %v, want session.ErrInvalidToken", err)
	}
}
