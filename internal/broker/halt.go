package broker

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// Bound returns a context for work done on behalf of a session (a wait
// for a decision): it ends when parent does, when the session is killed
// (cause session.ErrRevoked) or expires (session.ErrExpired), or when the
// global kill-switch is engaged (cause killswitch.ErrEngaged). Call stop when done.
func (b *Broker) Bound(parent context.Context, l *sessions.LiveSession) (ctx context.Context, stop func()) {
	return b.BoundTo(parent, l, nil)
}

// BoundTo is Bound for work that depends on grant g (the decision's: an
// upstream call, a stream, a relay, a wait for the decision on it): it
// ends besides when g is revoked (cause grants.ErrGrantRevoked) or
// expires (grants.ErrGrantExpired). See sessions.Service.Bound. Call stop
// when done.
func (b *Broker) BoundTo(parent context.Context, l *sessions.LiveSession, g *grants.Live) (ctx context.Context, stop func()) {
	return b.sess.Bound(parent, l, g)
}

// Interrupted returns why a Bound context was cut by a kill or a lifetime
// (killswitch.ErrEngaged, session.ErrRevoked, session.ErrExpired,
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
	for _, why := range []error{killswitch.ErrEngaged, session.ErrRevoked, session.ErrExpired, grants.ErrGrantRevoked, grants.ErrGrantExpired} {
		if errors.Is(err, why) {
			return true
		}
	}
	return false
}
