package broker

import (
	"errors"

	"github.com/airlock-broker/airlock/internal/approval"
)

// DefaultMaxPending bounds a session's pending actions unless configured
// (approval.max_pending_per_session).
const DefaultMaxPending = 16

// ErrTooManyPending refuses a gated call when its session already has its
// limit of pending actions.
var ErrTooManyPending = errors.New("the session has too many pending actions")

// A pending action holds two things until it leaves pending: a slot of its
// session's pending limit (Live.pending) and its grant's reservation of one
// use and its budgeted amounts (grants.Live pending counters). Hold takes
// both; the one transition out of pending that wins in the store gives them
// back: releasePending for denied, expired and failed actions, or, for an
// approved one, freeSlot at the decision and the grant's reservation turned
// into usage (or released) by execute. approvals.load rebuilds both after a
// restart from the stored pending actions. The approvals service is the
// only one that counts them.

// takePendingSlot counts one more pending action of the session unless it
// has limit already.
func (l *Live) takePendingSlot(limit int64) bool {
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

// freeSlot gives back the session's slot of an action that left pending.
func (s *approvals) freeSlot(sessionID string) {
	if l, ok := s.gate.live(sessionID); ok {
		l.pending.Add(-1)
	}
}

// releasePending gives back everything a pending action held, when it left
// pending without being sent (denied, expired, failed, its session killed).
func (s *approvals) releasePending(a approval.Action) {
	if !s.unhold(a.ID) { // counted on another replica, or given back already
		return
	}
	s.freeSlot(a.SessionID)
	s.releaseReservation(a)
}

// unhold reports whether this replica counted action id's reservation and
// stops counting it: true once per action, whichever path gives it back
// (a replica only gives back what it counted; see changes.go).
func (s *approvals) unhold(id string) bool {
	_, ok := s.held.LoadAndDelete(id)
	return ok
}

// releaseReservation gives back the use and amounts an action holds on its
// grant (its session slot is freed apart, at the decision).
func (s *approvals) releaseReservation(a approval.Action) {
	if g, ok := s.gate.grant(a.GrantID); ok {
		g.ReleasePending(a.Amounts)
	}
}

// restorePending counts a stored pending action again after a restart.
func (s *approvals) restorePending(a approval.Action) {
	if _, loaded := s.held.LoadOrStore(a.ID, struct{}{}); loaded {
		return
	}
	if l, ok := s.gate.live(a.SessionID); ok {
		l.pending.Add(1)
	}
	if g, ok := s.gate.grant(a.GrantID); ok {
		g.RestorePending(a.Amounts)
	}
}
