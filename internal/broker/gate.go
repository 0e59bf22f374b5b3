package broker

import (
	"context"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// liveSandbox is the live session of id (read through the store), as the
// gate sees it.
func (b *Broker) liveSandbox(id string) (gate.Sandbox, bool) {
	l, ok := b.sess.LiveOrLoad(id)
	if !ok {
		return nil, false
	}
	return l, true
}

// ruleOfTwoOf is a session's Rule-of-Two standing now, as the gate asks it.
func (b *Broker) ruleOfTwoOf(s gate.Sandbox) session.RuleOfTwo {
	return b.ruleOfTwo(s.UntrustedInput(), s.Grants())
}

// DecideAction records a reviewer's verdict. The final approval executes the
// stored request exactly once, in the background; the answer does not wait
// for the upstream.
func (b *Broker) DecideAction(ctx context.Context, p auth.Principal, id, verdict, comment string) (approval.Action, error) {
	return b.appr.Decide(ctx, p, id, verdict, comment)
}

// Action returns one action (approval.ErrNotFound for an unknown id).
func (b *Broker) Action(ctx context.Context, id string) (approval.Action, error) {
	return b.appr.Action(ctx, id)
}

// Actions lists actions by status ("" for all), newest first, at most limit.
func (b *Broker) Actions(ctx context.Context, status approval.Status, limit int) ([]approval.Action, error) {
	return b.appr.Actions(ctx, status, limit)
}

// SessionAction returns an action of the sandbox's own session
// (approval.ErrNotFound for another session's).
func (b *Broker) SessionAction(ctx context.Context, l *sessions.LiveSession, id string) (approval.Action, error) {
	return b.appr.SessionAction(ctx, l, id)
}

// WaitAction waits up to d for the action to reach a terminal state, waking
// on its change (no polling).
func (b *Broker) WaitAction(ctx context.Context, id string, d time.Duration) (approval.Action, error) {
	return b.appr.Wait(ctx, id, d)
}

// Changes returns a channel closed at the next change of any action or
// session, for live pages.
func (b *Broker) Changes() <-chan struct{} { return b.appr.Changes() }
