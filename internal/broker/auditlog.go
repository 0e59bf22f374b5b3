package broker

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
)

// AuditStore is where the audit chain lives: the writer's sink, plus the
// index by session that a session's trail and a filtered export read
// instead of scanning the whole log. It has no not-found error: a session
// with no records (or an unknown one) is an empty scan, not a failure.
type AuditStore interface {
	audit.Sink
	// ScanSessionAudit calls fn with each record of a session from
	// sequence from on, in order; data is valid only during the call.
	ScanSessionAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error
	// LastSessionAudit calls fn with a session's last records, newest
	// first, at most limit; data is valid only during the call.
	LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error
}

// auditLog is the audit log's service: the chain's writer and store, the
// key that signs its checkpoints and the checkpointer that signs the head
// every N records or T; verify, prune and the scans read the store.
type auditLog struct {
	store   AuditStore
	w       *audit.Writer
	now     func() time.Time
	log     *slog.Logger
	signKey ed25519.PrivateKey

	cp             *checkpointer
	cpMu           sync.Mutex
	lastCheckpoint uint64
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
func (b *Broker) PublicKey() string { return b.auditLog.publicKey() }

// Checkpoints lists the signed checkpoints.
func (b *Broker) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	return b.auditLog.store.Checkpoints(ctx)
}

// Checkpoint signs the current chain head if it moved since the last one.
func (b *Broker) Checkpoint(ctx context.Context) (audit.Checkpoint, error) {
	return b.auditLog.checkpoint(ctx)
}

// VerifyAudit walks the whole chain with its checkpoints.
func (b *Broker) VerifyAudit(ctx context.Context) (audit.Report, error) {
	return b.auditLog.verify(ctx)
}

// PruneAudit removes the records older than before, keeping the rest
// verifiable: the last removed record becomes a signed anchoring checkpoint.
// The newest record is always kept.
func (b *Broker) PruneAudit(ctx context.Context, p auth.Principal, before time.Time) (uint64, audit.Checkpoint, error) {
	return b.auditLog.prune(ctx, b.actorOf(p), before)
}

// ScanAudit calls fn with each stored audit record from sequence from on, in
// order. With a sessionID it reads only that session's records, from the
// store's index by session (not a scan of the whole log). data is valid only
// during the call.
func (b *Broker) ScanAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error {
	return b.auditLog.scan(ctx, sessionID, from, fn)
}

// LastSessionAudit calls fn with a session's last audit records, newest
// first, at most limit of them, from the store's index by session. data is
// valid only during the call.
func (b *Broker) LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error {
	return b.auditLog.store.LastSessionAudit(ctx, sessionID, limit, fn)
}

func (l *auditLog) publicKey() string {
	return base64.StdEncoding.EncodeToString(l.signKey.Public().(ed25519.PublicKey))
}

func (l *auditLog) startCheckpointer(every uint64, interval time.Duration) {
	if every == 0 {
		every = 1000
	}
	if interval <= 0 {
		interval = time.Minute
	}
	c := &checkpointer{every: every, interval: interval, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.cp = c
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
			if _, err := l.checkpoint(context.Background()); err != nil {
				l.log.Error("audit checkpoint failed", "err", err)
			}
		}
	}()
}

// committed counts records towards the next checkpoint.
func (l *auditLog) committed(n int) {
	if l.cp == nil {
		return
	}
	if l.cp.since.Add(uint64(n)) >= l.cp.every {
		select {
		case l.cp.kick <- struct{}{}:
		default:
		}
	}
}

// checkpoint signs the current chain head if it moved since the last one.
func (l *auditLog) checkpoint(ctx context.Context) (audit.Checkpoint, error) {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	seq, head := l.w.Head()
	if seq == 0 || seq == l.lastCheckpoint {
		return audit.Checkpoint{}, nil
	}
	c := audit.Checkpoint{Seq: seq, Hash: head, Time: l.now().UTC()}
	c.Sign(l.signKey)
	if err := l.store.PutCheckpoint(ctx, c); err != nil {
		return c, err
	}
	l.lastCheckpoint = seq
	if l.cp != nil {
		l.cp.since.Store(0)
	}
	return c, nil
}

func (l *auditLog) stopCheckpointer() {
	if l.cp != nil {
		close(l.cp.stop)
		<-l.cp.done
	}
}

// verify walks the whole chain with its checkpoints.
func (l *auditLog) verify(ctx context.Context) (audit.Report, error) {
	cps, err := l.store.Checkpoints(ctx)
	if err != nil {
		return audit.Report{}, err
	}
	cv, err := audit.NewChainVerifier(l.signKey.Public().(ed25519.PublicKey), cps)
	if err != nil {
		return audit.Report{}, err
	}
	err = l.store.ScanAudit(ctx, 0, func(_ uint64, data []byte) error { return cv.Next(data) })
	if err != nil && !audit.IsStop(err) {
		return audit.Report{}, err
	}
	return cv.Finish(), nil
}

// prune removes the records older than before (see Broker.PruneAudit) on
// behalf of actor.
func (l *auditLog) prune(ctx context.Context, actor audit.Actor, before time.Time) (uint64, audit.Checkpoint, error) {
	var anchor audit.Checkpoint
	head, _ := l.w.Head()
	err := l.store.ScanAudit(ctx, 0, func(seq uint64, data []byte) error {
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
	anchor.Time, anchor.Anchor = l.now().UTC(), true
	anchor.Sign(l.signKey)
	n, err := l.store.PruneAudit(ctx, anchor)
	if err != nil {
		return n, anchor, fmt.Errorf("prune: %w", err)
	}
	_, err = l.w.Append(ctx, audit.Event{Type: "audit.pruned", Actor: actor,
		Reason: fmt.Sprintf("records up to seq %d removed; anchor %s", anchor.Seq, anchor.Hash)}, nil)
	return n, anchor, err
}

var errStopScan = errors.New("stop scan")

// scan calls fn with each stored audit record from sequence from on, of
// one session (from the index by session) or of all (see Broker.ScanAudit).
func (l *auditLog) scan(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error {
	if sessionID != "" {
		return l.store.ScanSessionAudit(ctx, sessionID, from, fn)
	}
	return l.store.ScanAudit(ctx, from, fn)
}
