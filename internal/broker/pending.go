package broker

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/usage"
)

// DefaultMaxPending bounds a session's pending actions unless configured
// (approval.max_pending_per_session).
const DefaultMaxPending = 16

// ErrTooManyPending refuses a gated call when its session already has its
// limit of pending actions.
var ErrTooManyPending = fault.New(fault.TooManyPending, "the session has too many pending actions")

// A pending action holds two things until it leaves pending: a slot of its
// session's pending limit (LiveSession.pending) and its grant's reservation of one
// use and its budgeted amounts (grants.Live pending counters). Hold takes
// both; the one transition out of pending that wins in the store gives them
// back: leftPending for denied, expired and failed actions, or, for an
// approved one, freeSlot at the decision and the grant's reservation turned
// into usage (or released) by execute. approvals.load rebuilds both after a
// restart from the stored pending actions. The approvals service is the
// only one that counts them.

// takePendingSlot counts one more pending action of the session unless it
// has limit already.
func (l *LiveSession) takePendingSlot(limit int64) bool {
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

// leftPending gives back what this replica counted for a pending action
// once a row-locked transition moved it out of pending unsent (denied,
// expired, failed), whichever replica won it: the session's slot and the
// grant's reservation. On a shared count (usage.Store) the store released
// the reservation in that transition's transaction, once for the cluster:
// here only this replica's mirror moves. Alone (no usage.Store), the
// grant's in-memory count is the reservation.
func (s *approvals) leftPending(a approval.Action) {
	if !s.unhold(a.ID) { // never counted here, or given back already
		return
	}
	s.freeSlot(a.SessionID)
	s.dropReservation(a)
}

// unhold reports whether this replica counted action id's reservation and
// stops counting it: true once per action, whichever path gives it back
// (a replica only gives back what it counted; see changes.go).
func (s *approvals) unhold(id string) bool {
	_, ok := s.held.LoadAndDelete(id)
	return ok
}

// dropReservation gives back this replica's count of an action's
// reservation on its grant: the mirror of a shared count, or alone the
// count itself.
func (s *approvals) dropReservation(a approval.Action) {
	g, ok := s.gate.grant(a.GrantID)
	switch {
	case !ok:
	case s.usage != nil:
		g.ForgetPending(a.Amounts)
	default:
		g.ReleasePending(a.Amounts)
	}
}

// releaseShared gives back an action's reservation on the shared count
// (no-op without a usage.Store). Only one replica may call it per action:
// the one that won its executing claim, or the one that reserved an action
// never stored. When the store cannot take it, the use stays counted.
func (s *approvals) releaseShared(a approval.Action) {
	if s.usage == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), usage.Timeout)
	defer cancel()
	if err := s.usage.Release(ctx, a.GrantID, a.Amounts); err != nil {
		s.log.Error("release an action's use; it stays counted", "action_id", a.ID, "grant_id", a.GrantID, "err", err)
	}
}

// unsent gives back the reservation of an approved action this replica
// claimed (executing) and did not send: on the shared count, and in this
// replica's count when it counted it (mirrored).
func (s *approvals) unsent(a approval.Action, mirrored bool) {
	s.releaseShared(a)
	if mirrored {
		s.dropReservation(a)
	}
}

// neverStored gives back what Hold took for an action whose PutAction
// failed. On a shared store the write may have committed with its answer
// lost: the action is then failed row-locked (that transition releases
// it); only an action the store does not hold is released here.
func (s *approvals) neverStored(a approval.Action) {
	if s.usage != nil {
		_, err := s.store.UpdateAction(context.Background(), a.ID, func(x *approval.Action) error {
			if x.Status != approval.Pending {
				return errUnchanged
			}
			x.Status, x.Reason = approval.Failed, "store unavailable"
			return nil
		})
		switch {
		case err == nil || errors.Is(err, errUnchanged): // released by a transition
		case errors.Is(err, approval.ErrNotFound):
			s.releaseShared(a)
		default: // unknown: it stays counted (a lost use, never one more)
			s.log.Error("an action whose store write failed stays counted", "action_id", a.ID, "err", err)
		}
	}
	s.leftPending(a)
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
