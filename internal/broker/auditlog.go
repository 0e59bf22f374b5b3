package broker

import (
	"context"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
)

// The audit log's operations, served by auditlog.Service.

// PublicKey is the base64 Ed25519 key that verifies checkpoints.
func (b *Broker) PublicKey() string { return b.auditLog.PublicKey() }

// Checkpoints lists the signed checkpoints.
func (b *Broker) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	return b.auditLog.Checkpoints(ctx)
}

// Checkpoint signs the current chain head if it moved since the last one.
func (b *Broker) Checkpoint(ctx context.Context) (audit.Checkpoint, error) {
	return b.auditLog.Checkpoint(ctx)
}

// VerifyAudit walks the whole chain with its checkpoints.
func (b *Broker) VerifyAudit(ctx context.Context) (audit.Report, error) {
	return b.auditLog.Verify(ctx)
}

// PruneAudit removes the records older than before, keeping the rest
// verifiable: the last removed record becomes a signed anchoring checkpoint.
// The newest record is always kept.
func (b *Broker) PruneAudit(ctx context.Context, p auth.Principal, before time.Time) (uint64, audit.Checkpoint, error) {
	return b.auditLog.Prune(ctx, b.actorOf(p), before)
}

// ScanAudit calls fn with each stored audit record from sequence from on, in
// order. With a sessionID it reads only that session's records, from the
// store's index by session (not a scan of the whole log). data is valid only
// during the call.
func (b *Broker) ScanAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error {
	return b.auditLog.Scan(ctx, sessionID, from, fn)
}

// LastSessionAudit calls fn with a session's last audit records, newest
// first, at most limit of them, from the store's index by session. data is
// valid only during the call.
func (b *Broker) LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error {
	return b.auditLog.Last(ctx, sessionID, limit, fn)
}
