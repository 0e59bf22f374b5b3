package gate

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/approval"
)

// ApplyChange wakes this replica's waiters and live pages on an action's
// change made by any replica, arms its expiry here while it is pending (any
// replica may expire it: the row-locked transition has one winner, which
// records it), and gives back what this replica held for it once it left
// pending elsewhere.
func (s *Service) ApplyChange(ctx context.Context, id string) error {
	s.notifier.Notify(id)
	a, err := s.store.Action(ctx, id)
	if errors.Is(err, approval.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	s.index(a) // an MCP action held on another replica: its retries join it here too
	if a.Status == approval.Pending {
		if !s.expiry.Armed(id) {
			s.expiry.Set(id, a.ExpiresAt)
		}
		return nil
	}
	s.expiry.Stop(id)
	s.leftPending(a) // only if this replica still counts it
	return nil
}
