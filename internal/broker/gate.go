package broker

import (
	"context"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/session"
)

// What the human gate (internal/gate) needs of the broker: a LiveSession
// is a gate.Sandbox (SessionID and Grants are also credentials.Holder's).

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

// liveSandbox is the live session of id (read through the store), as the
// gate sees it.
func (b *Broker) liveSandbox(id string) (gate.Sandbox, bool) {
	l, ok := b.sess.liveOrLoad(id)
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
func (b *Broker) SessionAction(ctx context.Context, l *LiveSession, id string) (approval.Action, error) {
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
