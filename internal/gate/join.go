package gate

import (
	"context"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
)

// An MCP tool call that is held can be retried by its client: every
// identical retry (same session, upstream, tool and arguments: the action's
// MCP.Join key) until the action expires joins that action instead of
// holding another, and once it has executed gets its stored result;
// nothing is sent again (DESIGN §10). A call withdrawn before its decision
// (its client cancelled or went away) is no longer joined.

func joinKey(sessionID, join string) string { return sessionID + "\x00" + join }

// index records a held MCP action under its join key, on this replica.
func (s *Service) index(a approval.Action) {
	if a.MCP != nil && a.MCP.Join != "" && (a.Status == approval.Pending || a.Status == approval.Executing || a.Status == approval.Executed) {
		s.joins.Store(joinKey(a.SessionID, a.MCP.Join), a.ID)
	}
}

// Joined returns the action an identical retry of session sessionID joins:
// the one held under join, unless it expired, failed, or was withdrawn.
// An action held on another replica is found in the store while it is
// pending, and in this replica's index once its change reached this one
// (ApplyChange indexes it). Two identical calls arriving at once on two
// replicas may each hold an action (each runs at most once).
func (s *Service) Joined(ctx context.Context, sessionID, join string) (approval.Action, bool) {
	key := joinKey(sessionID, join)
	id, ok := s.joins.Load(key)
	if !ok {
		if !s.shared {
			return approval.Action{}, false // the only broker: its index is whole
		}
		return s.pendingJoin(ctx, sessionID, join)
	}
	a, err := s.store.Action(ctx, id.(string))
	if err != nil || a.MCP == nil || a.MCP.Join != join || a.SessionID != sessionID || !s.now().Before(a.ExpiresAt) ||
		a.Status == approval.Expired || a.Status == approval.Failed || a.Status == approval.Denied && a.Reason == reasonWithdrawn {
		s.joins.CompareAndDelete(key, id)
		return approval.Action{}, false
	}
	return a, true
}

// pendingJoin finds in the store an action of session sessionID held
// under join by another replica whose change has not reached this one
// yet, pending or executing (an executed one is joined once its change
// arrives, within the feed's bound), and indexes it.
func (s *Service) pendingJoin(ctx context.Context, sessionID, join string) (approval.Action, bool) {
	for _, status := range []approval.Status{approval.Pending, approval.Executing} {
		held, err := s.store.Actions(ctx, status, 0)
		if err != nil {
			return approval.Action{}, false
		}
		for _, a := range held {
			if a.SessionID == sessionID && a.MCP != nil && a.MCP.Join == join && s.now().Before(a.ExpiresAt) {
				s.index(a)
				return a, true
			}
		}
	}
	return approval.Action{}, false
}

// reasonWithdrawn is the reason of an action whose call was withdrawn.
const reasonWithdrawn = "withdrawn: the client cancelled or went away before the decision"

// Withdraw ends a pending MCP action whose client cancelled its call or
// went away before the decision: denied with reason withdrawn (its
// reservation given back, its waiters woken), and no longer joined. An
// action already decided is left as it is (after approval commits, the
// call executes exactly once).
func (s *Service) Withdraw(ctx context.Context, id string) {
	s.deny(ctx, audit.Actor{Kind: "sandbox"}, "", reasonWithdrawn, id)
}

// FailTool fails, unsent, the pending actions of session sessionID for
// MCP tool on upstream: the tool changed since they were held (a rug pull,
// DESIGN §10). reason says how.
func (s *Service) FailTool(ctx context.Context, sessionID, upstream, tool, reason string) {
	pending, err := s.store.Actions(ctx, approval.Pending, 0)
	if err != nil {
		s.log.Error("list pending actions", "err", err)
		return
	}
	for _, a := range pending {
		if a.SessionID != sessionID || a.Upstream != upstream || a.MCP == nil || a.MCP.Tool != tool {
			continue
		}
		a, err := s.store.UpdateAction(ctx, a.ID, func(a *approval.Action) error {
			if a.Status != approval.Pending {
				return errUnchanged
			}
			a.Status, a.Reason = approval.Failed, reason
			a.Result = &approval.Result{Code: "tool_changed", ExecutedAt: s.now().UTC()}
			return nil
		})
		if err != nil {
			continue
		}
		s.leftPending(a)
		s.expiry.Stop(a.ID)
		s.recordAction(a, typeActionFailed, audit.Actor{Kind: "system"}, reason)
		s.announce(a, typeActionFailed, "")
	}
}
