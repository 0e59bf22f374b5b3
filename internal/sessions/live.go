package sessions

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
)

// LiveSession is an active session in memory.
type LiveSession struct {
	Session session.Session
	bind    netip.Prefix
	bound   bool
	revoked atomic.Bool
	killed  atomic.Int64            // unix nanoseconds of the kill, 0 if alive
	limiter *rate.Limiter           // per-session call rate, nil when unlimited
	pending atomic.Int64            // pending actions (the gate counts them: gate.Sandbox)
	streams atomic.Int64            // relays and streamed answers open (see TakeStream)
	ctx     context.Context         // the session's standing (see lifetime.go)
	cancel  context.CancelCauseFunc // ends it, with why: session.ErrRevoked, session.ErrExpired
	grants  atomic.Pointer[[]*grants.Live]
	life    lifetimes                    // the timers at its expiry and its grants' (lifetime.go)
	ca      atomic.Pointer[proxyca.CA]   // the session's CA once open (see OpenCA)
	caMu    sync.Mutex                   // one opening at a time
	resync  atomic.Pointer[rate.Limiter] // read-throughs of its grants on refusals (see AllowResync)
	watches sync.Map                     // standing (its own or a grant's) → *standingWatch of the current period (lifetime.go)
	watchMu sync.Mutex                   // one watch made at a time
}

// watch is the watch of standing (the session's or one of its grants') in
// the kill-switch's period, made on first use in each period.
func (l *LiveSession) watch(standing, period context.Context) *standingWatch {
	if v, ok := l.watches.Load(standing); ok {
		if w := v.(*standingWatch); w.period == period {
			return w
		}
	}
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	if v, ok := l.watches.Load(standing); ok {
		if w := v.(*standingWatch); w.period == period {
			return w
		}
	}
	w := newStandingWatch(standing, period)
	l.watches.Store(standing, w)
	return w
}

// Context ends when the session is killed (cause session.ErrRevoked) or
// expires (session.ErrExpired): in-flight calls derive from it.
func (l *LiveSession) Context() context.Context { return l.ctx }

// Grants returns the session's grants (including revoked and expired ones).
func (l *LiveSession) Grants() []*grants.Live {
	if p := l.grants.Load(); p != nil {
		return *p
	}
	return nil
}

// Standing checks the session on every call: not killed, not expired at
// now, called from its bound source.
func (l *LiveSession) Standing(now time.Time, remote netip.Addr) error {
	switch {
	case l.revoked.Load():
		return session.ErrRevoked
	case !now.Before(l.Session.ExpiresAt):
		return session.ErrExpired
	case l.bound && !l.bind.Contains(remote.Unmap()):
		return session.ErrWrongSource
	}
	return nil
}

// Allow reports whether the session's call rate admits one more call now
// (always, when unlimited).
func (l *LiveSession) Allow() bool { return l.limiter == nil || l.limiter.Allow() }

// killedAt is when the session was killed in memory, or zero.
func (l *LiveSession) killedAt() time.Time {
	if k := l.killed.Load(); k != 0 {
		return time.Unix(0, k).UTC()
	}
	return time.Time{}
}

// pendingActions is the number of the session's pending actions.
func (l *LiveSession) pendingActions() int64 { return l.pending.Load() }

// TakeStream counts one more stream (a WebSocket relay, a streamed
// answer) of the session unless it holds limit already.
func (l *LiveSession) TakeStream(limit int64) bool {
	if l.streams.Add(1) > limit {
		l.streams.Add(-1)
		return false
	}
	return true
}

// FreeStream gives back a stream's slot.
func (l *LiveSession) FreeStream() { l.streams.Add(-1) }

// LiveGrantOn reports whether the session holds a live grant (not revoked,
// not expired) on upstream name.
func (l *LiveSession) LiveGrantOn(name string, now time.Time) bool {
	for _, g := range l.Grants() {
		if g.Grant.Upstream == name && !g.Revoked() && now.Before(g.Grant.ExpiresAt) {
			return true
		}
	}
	return false
}

// How often a session's refused calls may read its grants through.
const (
	resyncRate  rate.Limit = 5
	resyncBurst            = 5
)

// AllowResync reports whether a refused call of the session may read its
// grants through now: at a bounded rate per session (5 a second, in
// bursts of 5).
func (l *LiveSession) AllowResync() bool {
	lim := l.resync.Load()
	if lim == nil {
		l.resync.CompareAndSwap(nil, rate.NewLimiter(resyncRate, resyncBurst))
		lim = l.resync.Load()
	}
	return lim.Allow()
}

// setCA keeps the session's CA open in memory (made with the session).
func (l *LiveSession) setCA(ca *proxyca.CA) { l.ca.Store(ca) }

// OpenCA is the session's CA: the one in memory, else open's (called once
// at a time, its CA then kept).
func (l *LiveSession) OpenCA(open func() (*proxyca.CA, error)) (*proxyca.CA, error) {
	if ca := l.ca.Load(); ca != nil {
		return ca, nil
	}
	l.caMu.Lock()
	defer l.caMu.Unlock()
	if ca := l.ca.Load(); ca != nil {
		return ca, nil
	}
	ca, err := open()
	if err != nil {
		return nil, err
	}
	l.ca.Store(ca)
	return ca, nil
}

// What the human gate (internal/gate) needs: a LiveSession is a gate.Sandbox
// (SessionID and Grants are also credentials.Holder's).

// TaskID is the session's task.
func (l *LiveSession) TaskID() string { return l.Session.TaskID }

// CreatedBy is the principal that created the session (who may not approve
// its actions).
func (l *LiveSession) CreatedBy() string { return l.Session.CreatedBy }

// UntrustedInput reports whether the session reads untrusted input (Rule
// of Two's A).
func (l *LiveSession) UntrustedInput() bool { return l.Session.UntrustedInput }

// TakePending counts one more pending action of the session unless it has
// limit already.
func (l *LiveSession) TakePending(limit int64) bool {
	for {
		n := l.pending.Load()
		if n >= limit {
			return false
		}
		if l.pending.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// RestorePending counts a stored pending action of the session again.
func (l *LiveSession) RestorePending() { l.pending.Add(1) }

// FreePending gives back the slot of an action that left pending.
func (l *LiveSession) FreePending() { l.pending.Add(-1) }

// What the credential service (internal/credentials) needs: a LiveSession is a
// credentials.Holder.

// SessionID is the session's id.
func (l *LiveSession) SessionID() string { return l.Session.ID }

// Expires is the session's expiry.
func (l *LiveSession) Expires() time.Time { return l.Session.ExpiresAt }

// Revoked reports whether the session was killed.
func (l *LiveSession) Revoked() bool { return l.revoked.Load() }
