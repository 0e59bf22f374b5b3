package boltstore

import (
	"context"

	"github.com/airlock-broker/airlock/internal/audit"
)

// CommitAudit writes entries and, in fsync mode, syncs them: WriteAudit and
// SyncAudit in one call, for tests that write the journal without the audit writer.
func (s *Bolt) CommitAudit(ctx context.Context, entries []audit.Entry) error {
	needSync, err := s.WriteAudit(ctx, entries)
	if err == nil && needSync {
		err = s.SyncAudit(ctx)
	}
	return err
}
