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
// standing of the grant it depends on (Bound, Bind): to the list of the
// standing's watch in the kill-switch's period, made once per standing and
// period with one context.AfterFunc on each, so a call adds no AfterFunc
// of its own.

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
// Period ends with). See Bind. Call stop when done.
func (s *Service) Bound(parent context.Context, l *LiveSession, g *grants.Live) (ctx context.Context, stop func()) {
	b := new(Binding)
	return s.Bind(parent, l, g, b), b.Stop
}

// Bind is Bound for a caller that keeps the binding (a call, in its own
// struct): the context ends as Bound's does; call b.Stop when done. A
// Binding is used for one Bind. The context is parent's child; what else
// ends it is the watch of the grant's standing in the kill-switch's
// current period (standingWatch), shared by every call bound to them:
// no AfterFunc, timer or goroutine per call.
func (s *Service) Bind(parent context.Context, l *LiveSession, g *grants.Live, b *Binding) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	b.cancel = cancel
	period := s.ks.Period()
	if period.Err() != nil || s.ks.Engaged() {
		cancel(killswitch.ErrEngaged)
		return ctx
	}
	standing := l.Context()
	if g != nil {
		if gs := g.Standing(); gs != nil {
			standing = gs
		}
	}
	l.watch(standing, period).add(b)
	return ctx
}

// Binding is a context's attachment to a standing (see Bind).
type Binding struct {
	cancel     context.CancelCauseFunc
	w          *standingWatch
	prev, next *Binding // on w's list while linked (w.mu)
	linked     bool
}

// Stop detaches the binding and ends its context (cause context.Canceled,
// unless it ended already).
func (b *Binding) Stop() {
	if w := b.w; w != nil {
		w.mu.Lock()
		w.unlink(b)
		w.mu.Unlock()
	}
	if b.cancel != nil {
		b.cancel(context.Canceled)
	}
}

// standingWatch ends the contexts bound to one standing (a session's or a
// grant's) in one kill-switch period: with the standing's cause when it
// ends, with killswitch.ErrEngaged when the period does. It is made once
// per standing and period, with one AfterFunc on each; calls join and
// leave its list.
type standingWatch struct {
	period context.Context
	mu     sync.Mutex
	cause  error    // why it ended; nil while it stands
	head   *Binding // the bindings attached
	stops  [2]func() bool
}

func newStandingWatch(standing, period context.Context) *standingWatch {
	w := &standingWatch{period: period}
	w.mu.Lock() // an AfterFunc that runs at once waits for stops
	w.stops[0] = context.AfterFunc(standing, func() { w.end(context.Cause(standing)) })
	w.stops[1] = context.AfterFunc(period, func() { w.end(killswitch.ErrEngaged) })
	w.mu.Unlock()
	return w
}

// add attaches b: ended already, b's context ends now with the cause.
func (w *standingWatch) add(b *Binding) {
	w.mu.Lock()
	if w.cause != nil {
		cause := w.cause
		w.mu.Unlock()
		b.cancel(cause)
		return
	}
	b.w, b.prev, b.next, b.linked = w, nil, w.head, true
	if w.head != nil {
		w.head.prev = b
	}
	w.head = b
	w.mu.Unlock()
}

// unlink takes b off the list, if it is on it (w.mu held).
func (w *standingWatch) unlink(b *Binding) {
	if !b.linked {
		return
	}
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		w.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	}
	b.prev, b.next, b.linked = nil, nil, false
}

// end ends every context attached, with cause (the first end counts), and
// drops the other AfterFunc (the standing ended: the period's; the period
// ended: the standing's).
func (w *standingWatch) end(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause != nil {
		return
	}
	w.cause = cause
	for b := w.head; b != nil; {
		next := b.next
		b.cancel(cause)
		b.prev, b.next, b.linked = nil, nil, false
		b = next
	}
	w.head = nil
	w.stops[0]()
	w.stops[1]()
}
