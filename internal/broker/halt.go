package broker

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
)

// halt is one period of the global kill-switch being released: its context
// is cancelled (with cause ErrKillswitch) when the switch is engaged, and a
// release starts a new period.
type halt struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newHalt(engaged bool) *halt {
	ctx, cancel := context.WithCancelCause(context.Background())
	if engaged {
		cancel(ErrKillswitch)
	}
	return &halt{ctx: ctx, cancel: cancel}
}

// Bound returns a context for work done on behalf of a session (a wait
// for a decision): it ends when parent does, when the session is killed
// (cause session.ErrRevoked) or expires (session.ErrExpired), or when the
// global kill-switch is engaged (cause ErrKillswitch). Call stop when done.
func (b *Broker) Bound(parent context.Context, l *LiveSession) (ctx context.Context, stop func()) {
	return b.BoundTo(parent, l, nil)
}

// BoundTo is Bound for work that depends on grant g (the decision's: an
// upstream call, a stream, a relay, a wait for the decision on it): it
// ends besides when g is revoked (cause grants.ErrGrantRevoked) or
// expires (grants.ErrGrantExpired). It attaches to the grant's standing,
// which ends with the session's (lifetime.go): one AfterFunc for the
// lifetimes, one for the kill-switch, no timer of its own. Call stop when
// done.
func (b *Broker) BoundTo(parent context.Context, l *LiveSession, g *grants.Live) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	h := b.ks.halt.Load()
	if h.ctx.Err() != nil || b.ks.engaged.Load() {
		cancel(ErrKillswitch)
		return ctx, func() {}
	}
	standing := l.ctx
	if g != nil {
		if gs := g.Standing(); gs != nil {
			standing = gs
		}
	}
	stopLife := context.AfterFunc(standing, func() { cancel(context.Cause(standing)) })
	stopHalt := context.AfterFunc(h.ctx, func() { cancel(ErrKillswitch) })
	return ctx, func() {
		stopLife()
		stopHalt()
		cancel(context.Canceled)
	}
}

// Interrupted returns why a Bound context was cut by a kill or a lifetime
// (ErrKillswitch, session.ErrRevoked, session.ErrExpired,
// grants.ErrGrantRevoked, grants.ErrGrantExpired), or nil when it was not.
func Interrupted(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if c := context.Cause(ctx); IsCut(c) {
		return c
	}
	return nil
}

// IsCut reports whether err is why a kill or a lifetime cut work in
// flight (see Interrupted).
func IsCut(err error) bool {
	for _, why := range []error{ErrKillswitch, session.ErrRevoked, session.ErrExpired, grants.ErrGrantRevoked, grants.ErrGrantExpired} {
		if errors.Is(err, why) {
			return true
		}
	}
	return false
}
