package sessions

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/session"
)

// Lifetimes are hard bounds on work in flight (DESIGN §4): a session's
// standing (LiveSession.Context) ends at its kill (session.ErrRevoked) or at its
// ExpiresAt (session.ErrExpired); each grant's standing (grants.Live.Bind)
// is a child of its session's and ends besides at its revocation
// (grants.ErrGrantRevoked) or its ExpiresAt (grants.ErrGrantExpired). One
// timer per session, and one per grant that expires before its session,
// on the service's clock, cut them at the instant: no sweep decides. Work
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

// forget stops key's timer, if armed (a grant revoked before its expiry).
func (t *lifetimes) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tm, ok := t.timers[key]; ok {
		tm.Stop()
		delete(t.timers, key)
	}
}

// armAt calls f when the clock reaches at (a timer only wakes: an early
// wake-up sleeps again until at), recording the timer under key.
func (s *Service) armAt(l *LiveSession, key string, at time.Time, f func()) {
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
func (s *Service) armLifetimes(l *LiveSession, gs []*grants.Live) {
	s.armAt(l, "", l.Session.ExpiresAt, func() {
		l.cancel(session.ErrExpired)
		s.lapsed(l, nil)
	})
	for _, g := range gs {
		s.armGrant(l, g)
	}
}

// armGrant arms a grant's expiry, when it comes before its session's (at
// the session's, the session's expiry ends it).
func (s *Service) armGrant(l *LiveSession, g *grants.Live) {
	if g.Revoked() || !g.Grant.ExpiresAt.Before(l.Session.ExpiresAt) {
		return
	}
	s.armAt(l, g.Grant.ID, g.Grant.ExpiresAt, func() {
		g.Expire()
		s.lapsed(l, g)
	})
}

// Bound returns a context for work done on behalf of session l that
// depends on grant g (the decision's: an upstream call, a stream, a relay,
// a wait for the decision on it), or on the session alone (g nil): it ends
// when parent does, when the session is killed (cause session.ErrRevoked)
// or expires (session.ErrExpired), when g is revoked
// (grants.ErrGrantRevoked) or expires (grants.ErrGrantExpired), or when
// the global kill-switch is engaged (killswitch.ErrEngaged, the cause its
// Period ends with). It attaches to the grant's standing, which ends with
// the session's: one AfterFunc for the lifetimes, one for the
// kill-switch, no timer of its own. Call stop when done.
func (s *Service) Bound(parent context.Context, l *LiveSession, g *grants.Live) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	period := s.ks.Period()
	if period.Err() != nil || s.ks.Engaged() {
		cancel(killswitch.ErrEngaged)
		return ctx, func() {}
	}
	standing := l.Context()
	if g != nil {
		if gs := g.Standing(); gs != nil {
			standing = gs
		}
	}
	stopLife := context.AfterFunc(standing, func() { cancel(context.Cause(standing)) })
	stopHalt := context.AfterFunc(period, func() { cancel(killswitch.ErrEngaged) })
	return ctx, func() {
		stopLife()
		stopHalt()
		cancel(context.Canceled)
	}
}
