package broker

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
)

// AuditStore is where the audit chain lives: the writer's sink, plus the
// index by session that a session's trail and a filtered export read
// instead of scanning the whole log.
type AuditStore interface {
	audit.Sink
	// ScanSessionAudit calls fn with each record of a session from
	// sequence from on, in order; data is valid only during the call.
	ScanSessionAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error
	// LastSessionAudit calls fn with a session's last records, newest
	// first, at most limit; data is valid only during the call.
	LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error
}

// checkpointer signs the chain head every N records or T, and on Close.
type checkpointer struct {
	every    uint64
	interval time.Duration
	since    atomic.Uint64 // records since the last checkpoint
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

// PublicKey is the base64 Ed25519 key that verifies checkpoints.
func (b *Broker) PublicKey() string {
	return base64.StdEncoding.EncodeToString(b.signKey.Public().(ed25519.PublicKey))
}

// Checkpoints lists the signed checkpoints.
func (b *Broker) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	return b.auditStore.Checkpoints(ctx)
}

func (b *Broker) startCheckpointer(every uint64, interval time.Duration) {
	if every == 0 {
		every = 1000
	}
	if interval <= 0 {
		interval = time.Minute
	}
	c := &checkpointer{every: every, interval: interval, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	b.cp = c
	go func() {
		defer close(c.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
			case <-c.kick:
			}
			if _, err := b.Checkpoint(context.Background()); err != nil {
				b.log.Error("audit checkpoint failed", "err", err)
			}
		}
	}()
}

// committed counts records towards the next checkpoint.
func (b *Broker) committed(n int) {
	if b.cp == nil {
		return
	}
	if b.cp.since.Add(uint64(n)) >= b.cp.every {
		select {
		case b.cp.kick <- struct{}{}:
		default:
		}
	}
}

// Checkpoint signs the current chain head if it moved since the last one.
func (b *Broker) Checkpoint(ctx context.Context) (audit.Checkpoint, error) {
	b.cpMu.Lock()
	defer b.cpMu.Unlock()
	seq, head := b.audit.Head()
	if seq == 0 || seq == b.lastCheckpoint {
		return audit.Checkpoint{}, nil
	}
	c := audit.Checkpoint{Seq: seq, Hash: head, Time: b.now().UTC()}
	c.Sign(b.signKey)
	if err := b.auditStore.PutCheckpoint(ctx, c); err != nil {
		return c, err
	}
	b.lastCheckpoint = seq
	if b.cp != nil {
		b.cp.since.Store(0)
	}
	return c, nil
}

func (b *Broker) stopCheckpointer() {
	if b.cp != nil {
		close(b.cp.stop)
		<-b.cp.done
	}
}

// Verify walks the whole chain with its checkpoints.
func (b *Broker) VerifyAudit(ctx context.Context) (audit.Report, error) {
	cps, err := b.auditStore.Checkpoints(ctx)
	if err != nil {
		return audit.Report{}, err
	}
	cv, err := audit.NewChainVerifier(b.signKey.Public().(ed25519.PublicKey), cps)
	if err != nil {
		return audit.Report{}, err
	}
	err = b.auditStore.ScanAudit(ctx, 0, func(_ uint64, data []byte) error { return cv.Next(data) })
	if err != nil && !audit.IsStop(err) {
		return audit.Report{}, err
	}
	return cv.Finish(), nil
}

// PruneAudit removes the records older than before, keeping the rest
// verifiable: the last removed record becomes a signed anchoring checkpoint.
// The newest record is always kept.
func (b *Broker) PruneAudit(ctx context.Context, p auth.Principal, before time.Time) (uint64, audit.Checkpoint, error) {
	var anchor audit.Checkpoint
	head, _ := b.audit.Head()
	err := b.auditStore.ScanAudit(ctx, 0, func(seq uint64, data []byte) error {
		var e struct {
			Time time.Time `json:"time"`
			Hash string    `json:"hash"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		if !e.Time.Before(before) || seq >= head {
			return errStopScan
		}
		anchor = audit.Checkpoint{Seq: seq, Hash: e.Hash}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return 0, anchor, err
	}
	if anchor.Seq == 0 {
		return 0, anchor, nil
	}
	anchor.Time, anchor.Anchor = b.now().UTC(), true
	anchor.Sign(b.signKey)
	n, err := b.auditStore.PruneAudit(ctx, anchor)
	if err != nil {
		return n, anchor, fmt.Errorf("prune: %w", err)
	}
	_, err = b.audit.Append(ctx, audit.Event{Type: "audit.pruned", Actor: b.actorOf(p),
		Reason: fmt.Sprintf("records up to seq %d removed; anchor %s", anchor.Seq, anchor.Hash)}, nil)
	return n, anchor, err
}

var errStopScan = errors.New("stop scan")

// ScanAudit calls fn with each stored audit record from sequence from on, in
// order. With a sessionID it reads only that session's records, from the
// store's index by session (not a scan of the whole log). data is valid only
// during the call.
func (b *Broker) ScanAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error {
	if sessionID != "" {
		return b.auditStore.ScanSessionAudit(ctx, sessionID, from, fn)
	}
	return b.auditStore.ScanAudit(ctx, from, fn)
}

// LastSessionAudit calls fn with a session's last audit records, newest
// first, at most limit of them, from the store's index by session. data is
// valid only during the call.
func (b *Broker) LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error {
	return b.auditStore.LastSessionAudit(ctx, sessionID, limit, fn)
}
