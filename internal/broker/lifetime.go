package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
)

// Lifetimes are hard bounds on work in flight (DESIGN §4): a session's
// standing (LiveSession.ctx) ends at its kill (session.ErrRevoked) or at its
// ExpiresAt (session.ErrExpired); each grant's standing (grants.Live.Bind)
// is a child of its session's and ends besides at its revocation
// (grants.ErrGrantRevoked) or its ExpiresAt (grants.ErrGrantExpired). One
// timer per session, and one per grant that expires before its session,
// on the broker's clock, cut them at the instant: no sweep decides. Work
// in flight (a call's send, a relay, a wait for a reviewer) attaches to the
// standing of the grant it depends on with one context.AfterFunc (Bound).

// lifetimes are a session's armed expiry timers, keyed by "" (the
// session's) and by grant id.
type lifetimes struct {
	mu      sync.Mutex
	timers  map[string]clock.Timer
	stopped bool // no timer is armed after stop
}

// set records key's timer (replacing an earlier one), unless stopped.
func (t *lifetimes) set(key string, tm clock.Timer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		tm.Stop()
		return
	}
	if t.timers == nil {
		t.timers = map[string]clock.Timer{}
	}
	if old, ok := t.timers[key]; ok {
		old.Stop()
	}
	t.timers[key] = tm
}

// done forgets key's timer once it fired.
func (t *lifetimes) done(key string) {
	t.mu.Lock()
	delete(t.timers, key)
	t.mu.Unlock()
}

// stop stops every timer: the session is over (killed, forgotten, the broker closing).
func (t *lifetimes) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for _, tm := range t.timers {
		tm.Stop()
	}
	t.timers = nil
}

// armed is the number of timers armed (tests).
func (t *lifetimes) armed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.timers)
}

// armAt calls f when the clock reaches at (a timer only wakes: an early
// wake-up sleeps again until at), recording the timer under key.
func (s *sessionService) armAt(l *LiveSession, key string, at time.Time, f func()) {
	tm := s.clock.AfterFunc(max(at.Sub(s.now()), 0), func() {
		if s.now().Before(at) {
			s.armAt(l, key, at, f)
			return
		}
		l.life.done(key)
		f()
	})
	l.life.set(key, tm)
}

// armLifetimes arms a session's expiry and its grants' (called once, as
// the session goes live).
func (s *sessionService) armLifetimes(l *LiveSession, gs []*grants.Live) {
	s.armAt(l, "", l.Session.ExpiresAt, func() {
		l.cancel(session.ErrExpired)
		if s.lapsed != nil {
			s.lapsed(l, nil)
		}
	})
	for _, g := range gs {
		s.armGrant(l, g)
	}
}

// armGrant arms a grant's expiry, when it comes before its session's (at
// the session's, the session's expiry ends it).
func (s *sessionService) armGrant(l *LiveSession, g *grants.Live) {
	if g.Revoked() || !g.Grant.ExpiresAt.Before(l.Session.ExpiresAt) {
		return
	}
	s.armAt(l, g.Grant.ID, g.Grant.ExpiresAt, func() {
		g.Expire()
		if s.lapsed != nil {
			s.lapsed(l, g)
		}
	})
}

// forget stops key's timer, if armed (a grant revoked before its expiry).
func (t *lifetimes) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tm, ok := t.timers[key]; ok {
		tm.Stop()
		delete(t.timers, key)
	}
}

// lapsed is the instant a session (g nil) or one of its grants expired:
// its work in flight was cut (the standing ended); here a lease minted
// with the grant is revoked, its held actions are denied (the reviewer can no longer let them run) and pages woken.
// Only a replica that holds actions of the session reads the store.
func (b *Broker) lapsed(l *LiveSession, g *grants.Live) {
	if g != nil {
		b.creds.Rescope(l.Session.ID, g.Grant.Upstream) // a lease minted with the grant is revoked at once
	}
	if l.pending.Load() > 0 {
		reason := "session expired"
		if g != nil {
			reason = "grant expired"
		}
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		defer cancel()
		b.appr.DenyLapsed(ctx, audit.Actor{Kind: "system"}, "", l.Session.ID, g, reason)
	}
	b.appr.Notify()
}

// grantRevoked ends what depends on a revoked grant in memory (by this
// replica, or another: changes.go): its standing (work in flight is cut),
// its expiry timer, and when deny is set or this replica holds actions of
// its session, its pending actions.
func (b *Broker) grantRevoked(ctx context.Context, gl *grants.Live, actor audit.Actor, reviewer string, deny bool) {
	gl.Revoke()
	l, ok := b.live(gl.Grant.SessionID)
	if ok {
		l.life.forget(gl.Grant.ID)
		deny = deny || l.pending.Load() > 0
	}
	if deny {
		b.appr.DenyLapsed(ctx, actor, reviewer, gl.Grant.SessionID, gl, "grant revoked")
	}
	b.creds.Rescope(gl.Grant.SessionID, gl.Grant.Upstream) // a lease minted with this grant is revoked at once
	b.appr.Notify()
}

// ErrTooManyStreams refuses a WebSocket relay or a streamed answer beyond
// the session's limit (max_streams_per_session): problem code rate_limited.
var ErrTooManyStreams = fmt.Errorf("%w: the session holds as many streams (WebSocket relays, streamed answers) open as max_streams_per_session allows; close one", ErrRateLimited)

// Stream takes one of the session's stream slots for long-lived work on
// this call (a WebSocket relay, before Send; a streamed answer, once the
// answer turned out to stream): release gives it back when the work ends.
// Beyond the limit it returns ErrTooManyStreams; a call not sent yet is
// then ended, its reservation given back (the door refuses it), and a
// sent one's answer is not to be relayed (the door completes it with the
// refusal's code). Other sessions' slots are their own.
func (c *call) stream() (release func(), err error) {
	if c.l == nil {
		return nil, ErrOutOfOrder
	}
	if c.b.maxStream > 0 && c.l.streams.Add(1) > c.b.maxStream {
		c.l.streams.Add(-1)
		if c.step == stepCleared || c.step == stepAuthorized {
			c.unreserve()
			c.step = stepSent
		}
		return nil, ErrTooManyStreams
	}
	if c.b.maxStream <= 0 {
		return func() {}, nil
	}
	var once sync.Once
	return func() { once.Do(func() { c.l.streams.Add(-1) }) }, nil
}
