package broker

import (
	"context"
	"errors"

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

// Bound returns a context for work done on behalf of a session's call (an
// upstream call, a long-poll for a decision): it ends when parent does,
// when the session is killed (cause session.ErrRevoked) or when the global
// kill-switch is engaged (cause ErrKillswitch). Call stop when done.
func (b *Broker) Bound(parent context.Context, l *Live) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	h := b.ks.halt.Load()
	if h.ctx.Err() != nil || b.ks.engaged.Load() {
		cancel(ErrKillswitch)
		return ctx, func() {}
	}
	stopKill := context.AfterFunc(l.ctx, func() { cancel(session.ErrRevoked) })
	stopHalt := context.AfterFunc(h.ctx, func() { cancel(ErrKillswitch) })
	return ctx, func() {
		stopKill()
		stopHalt()
		cancel(context.Canceled)
	}
}

// Interrupted returns why a Bound context was cut by a kill
// (session.ErrRevoked or ErrKillswitch), or nil when it was not.
func Interrupted(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if c := context.Cause(ctx); errors.Is(c, ErrKillswitch) || errors.Is(c, session.ErrRevoked) {
		return c
	}
	return nil
}
