package broker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// callBroker is a broker on a real bbolt file with a per-session rate of
// one call a second (burst 1) on the test's clock.
func callBroker(t *testing.T, now func() time.Time) *broker.Broker {
	t.Helper()
	st, err := boltstore.OpenBolt(filepath.Join(t.TempDir(), "airlock.db"), store.DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse("http://127.0.0.1:1")
	b, err := broker.New(context.Background(), broker.Options{Ports: brokertest.Ports(st), AdminToken: "admin-admin-admin-admin",
		Upstreams:     map[string]*upstream.Upstream{"pay": {Name: "pay", Kind: "http", BaseURL: base}},
		MaxSessionTTL: time.Hour, DefaultTTL: 10 * time.Minute, RateLimit: 1, RateBurst: 1, Clock: clock.WithNow(now),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); _ = st.Close() })
	return b
}

// A bearer and a SigV4 caller of the same session pass the same check
// list, in the same order, with the same errors.
func TestAdmitOneCheckListForEveryCaller(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := start
	now := func() time.Time { return at }
	admin := auth.Principal{ID: "admin", Role: auth.RoleAdmin}
	home := netip.MustParseAddr("10.0.0.7")
	tests := []struct {
		name   string
		remote netip.Addr
		setup  func(t *testing.T, b *broker.Broker, v sessions.SessionView)
		want   error
	}{
		{name: "ok", remote: home},
		{name: "fail-killswitch", remote: home, want: killswitch.ErrEngaged, setup: func(t *testing.T, b *broker.Broker, _ sessions.SessionView) {
			if _, err := b.SetKillswitch(context.Background(), admin, true, "test"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "fail-revoked", remote: home, want: session.ErrRevoked, setup: func(t *testing.T, b *broker.Broker, v sessions.SessionView) {
			if _, err := b.KillSession(context.Background(), admin, v.Session.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "fail-expired", remote: home, want: session.ErrExpired, setup: func(*testing.T, *broker.Broker, sessions.SessionView) {
			at = at.Add(10 * time.Minute)
		}},
		{name: "fail-wrong source", remote: netip.MustParseAddr("10.0.1.7"), want: session.ErrWrongSource},
		{name: "fail-rate", remote: home, want: broker.ErrRateLimited, setup: func(t *testing.T, b *broker.Broker, v sessions.SessionView) {
			c := b.NewCall("pay", "GET")
			if err := c.Admit(broker.BearerCaller(v.Token, home)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	callers := map[string]func(v sessions.SessionView, remote netip.Addr) broker.Caller{
		"bearer": func(v sessions.SessionView, remote netip.Addr) broker.Caller {
			return broker.BearerCaller(v.Token, remote)
		},
		"sigv4": func(v sessions.SessionView, remote netip.Addr) broker.Caller {
			return broker.SigV4Caller(v.Session.ID, remote)
		},
	}
	for _, tt := range tests {
		for kind, caller := range callers {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				at = start
				b := callBroker(t, now)
				v, err := b.CreateSession(context.Background(), admin, sessions.SessionRequest{TaskID: "t", Isolation: "microvm", BindCIDR: "10.0.0.0/24"})
				if err != nil {
					t.Fatal(err)
				}
				if tt.setup != nil {
					tt.setup(t, b, v)
				}
				c := b.NewCall("pay", "GET")
				err = c.Admit(caller(v, tt.remote))
				if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
					t.Fatalf("Admit: %v, want %v", err, tt.want)
				}
				// Once identified, the session stays on the call for the refusal's
				// record. (A token past its expiry is refused by its own claims,
				// before it names a session.)
				identified := tt.want != killswitch.ErrEngaged && (tt.want != session.ErrExpired || kind == "sigv4")
				if identified && c.SessionID() != v.Session.ID {
					t.Fatalf("call's session %q, want %q", c.SessionID(), v.Session.ID)
				}
			})
		}
	}
}

// The pipeline's steps run only in order: a door cannot send a call the
// gate holds (without asking the gate, or after it said so), send twice, or
// authorize an unadmitted caller; a refused Send gives the reservation back.
func TestCallStepsRunInOrder(t *testing.T) {
	k := payBroker(t)
	b := k.Broker
	v, err := b.CreateSession(context.Background(), operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm", UntrustedInput: ptr(false),
		Grants: []grants.Spec{{Upstream: "pay", MaxUses: 3, Approval: grants.ApprovalAlways, Rules: []grants.Rule{{Method: "POST", Path: "/pay"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("127.0.0.1")
	req := func() *broker.Request {
		return &broker.Request{Call: grants.Call{Method: "POST", Segments: []string{"pay"}, Header: http.Header{}}}
	}
	uses := func() int64 {
		g, err := b.Grant(context.Background(), v.Grants[0].Grant.ID)
		if err != nil {
			t.Fatal(err)
		}
		return g.Usage.Uses
	}

	c := b.NewCall("pay", "POST")
	if err := c.Authorize(req()); !errors.Is(err, broker.ErrOutOfOrder) {
		t.Fatalf("Authorize before Admit: %v", err)
	}
	if err := c.Admit(broker.BearerCaller(v.Token, addr)); err != nil {
		t.Fatal(err)
	}
	if err := c.Authorize(req()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background()); !errors.Is(err, broker.ErrOutOfOrder) {
		t.Fatalf("Send without asking the gate: %v", err)
	}
	if n := uses(); n != 0 {
		t.Fatalf("a refused Send kept its use: %d", n)
	}

	c = b.NewCall("pay", "POST")
	if err := c.Admit(broker.BearerCaller(v.Token, addr)); err != nil {
		t.Fatal(err)
	}
	if err := c.Authorize(req()); err != nil {
		t.Fatal(err)
	}
	if !c.Gated() {
		t.Fatal("an approval: always grant's call is not gated")
	}
	if _, err := c.Send(context.Background()); !errors.Is(err, broker.ErrOutOfOrder) {
		t.Fatalf("Send of a gated call: %v", err)
	}
	if n := uses(); n != 0 {
		t.Fatalf("a refused Send kept its use: %d", n)
	}
}
