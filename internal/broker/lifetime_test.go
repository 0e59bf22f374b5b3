package broker_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	airclock "github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
)

// TestLifetimeTimers: on the broker's (fake) clock, work bound to a grant
// ends at the grant's expiry and work bound to the session at the
// session's, not a nanosecond before, each with its cause; a revocation
// ends the grant's at once; a kill stops every timer the session armed.
func TestLifetimeTimers(t *testing.T) {
	clk := airclock.NewFake(expT0)
	b := expBroker(t, brokertest.MustOpenStore(t, store.DurabilityBuffered), brokertest.WithClock(clk)).Broker
	ctx := context.Background()
	rule := []grants.Rule{{Method: "POST", Path: "/pay"}}
	v, err := b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", TTL: time.Hour, Isolation: "microvm", UntrustedInput: ptr(false),
		Grants: []grants.Spec{{Upstream: "pay", TTL: 10 * time.Minute, Rules: rule}, {Upstream: "pay", Rules: rule}, {Upstream: "pay", Rules: rule}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := clk.Timers(); n != 2 { // the session's and the short grant's
		t.Fatalf("%d timers armed by a session with one grant shorter than it, want 2", n)
	}
	l, err := b.Check(v.Token, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	gs := l.Grants()
	short, _ := b.BoundTo(ctx, l, gs[0])
	long, _ := b.BoundTo(ctx, l, gs[1])
	revoked, _ := b.BoundTo(ctx, l, gs[2])
	sess, _ := b.Bound(ctx, l)

	if _, err := b.RevokeGrant(ctx, operator, gs[2].Grant.ID); err != nil {
		t.Fatal(err)
	}
	waitCut(t, revoked, grants.ErrGrantRevoked)

	clk.Advance(10*time.Minute - time.Nanosecond)
	if broker.Interrupted(short) != nil || broker.Interrupted(long) != nil {
		t.Fatal("work cut a nanosecond before its grant's expiry")
	}
	clk.Advance(time.Nanosecond)
	waitCut(t, short, grants.ErrGrantExpired)
	if broker.Interrupted(long) != nil || broker.Interrupted(sess) != nil {
		t.Fatal("a grant's expiry cut work that does not depend on it")
	}
	clk.Advance(50*time.Minute - time.Nanosecond)
	if broker.Interrupted(long) != nil {
		t.Fatal("work cut a nanosecond before its session's expiry")
	}
	clk.Advance(time.Nanosecond)
	waitCut(t, long, session.ErrExpired)
	waitCut(t, sess, session.ErrExpired)
	if n := clk.Timers(); n != 0 {
		t.Fatalf("%d timers armed after every lifetime ended", n)
	}

	// A kill stops the timers its session armed.
	v, err = b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", TTL: time.Hour, Isolation: "microvm", UntrustedInput: ptr(false),
		Grants: []grants.Spec{{Upstream: "pay", TTL: time.Minute, Rules: rule}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.KillSession(ctx, operator, v.Session.ID); err != nil {
		t.Fatal(err)
	}
	if n := clk.Timers(); n != 0 {
		t.Fatalf("%d timers armed after the session's kill", n)
	}
}

// waitCut waits for ctx's cut (context.AfterFunc runs in its own goroutine) and checks its cause.
func waitCut(t *testing.T, ctx context.Context, want error) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("not cut, want %v", want)
	}
	if got := broker.Interrupted(ctx); !errors.Is(got, want) {
		t.Fatalf("cut by %v, want %v", got, want)
	}
}
