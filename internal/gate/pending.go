package gate

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/usage"
)

// A pending action holds two things until it leaves pending: a slot of its
// session's pending limit (Sandbox.TakePending) and its grant's reservation of one
// use and its budgeted amounts (grants.Live pending counters). Hold takes
// both; the one transition out of pending that wins in the store gives them
// back: leftPending for denied, expired and failed actions, or, for an
// approved one, freeSlot at the decision and the grant's reservation turned
// into usage (or released) by execute. Load rebuilds both after a
// restart from the stored pending actions. The gate is the only one
// that counts them.

// freeSlot gives back the session's slot of an action that left pending.
func (s *Service) freeSlot(sessionID string) {
	if l, ok := s.live(sessionID); ok {
		l.FreePending()
	}
}

// leftPending gives back what this replica counted for a pending action
// once a row-locked transition moved it out of pending unsent (denied,
// expired, failed), whichever replica won it: the session's slot and the
// grant's reservation. On a shared count (usage.Store) the store released
// the reservation in that transition's transaction, once for the cluster:
// here only this replica's mirror moves. Alone (no usage.Store), the
// grant's in-memory count is the reservation.
func (s *Service) leftPending(a approval.Action) {
	if !s.unhold(a.ID) { // never counted here, or given back already
		return
	}
	s.freeSlot(a.SessionID)
	s.dropReservation(a)
}

// unhold reports whether this replica counted action id's reservation and
// stops counting it: true once per action, whichever path gives it back
// (a replica only gives back what it counted; see ApplyChange).
func (s *Service) unhold(id string) bool {
	_, ok := s.held.LoadAndDelete(id)
	return ok
}

// dropReservation gives back this replica's count of an action's
// reservation on its grant: the mirror of a shared count, or alone the
// count itself.
func (s *Service) dropReservation(a approval.Action) {
	g, ok := s.grant(a.GrantID)
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
func (s *Service) releaseShared(a approval.Action) {
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
func (s *Service) unsent(a approval.Action, mirrored bool) {
	s.releaseShared(a)
	if mirrored {
		s.dropReservation(a)
	}
}

// neverStored gives back what Hold took for an action whose PutAction
// failed. On a shared store the write may have committed with its answer
// lost: the action is then failed row-locked (that transition releases
// it); only an action the store does not hold is released here.
func (s *Service) neverStored(a approval.Action) {
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
func (s *Service) restorePending(a approval.Action) {
	if _, loaded := s.held.LoadOrStore(a.ID, struct{}{}); loaded {
		return
	}
	if l, ok := s.live(a.SessionID); ok {
		l.RestorePending()
	}
	if g, ok := s.grant(a.GrantID); ok {
		g.RestorePending(a.Amounts)
	}
}
