// Package auditlog is the audit log's service over its store: the signed
// checkpoints of the chain's head (every N records or T, and on demand),
// the chain's verification, pruning behind an anchoring checkpoint, and
// the scans of the whole log or of one session. The chain itself is
// written by an audit.Writer, which the service is given.
package auditlog

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
)

// Store is where the audit chain lives: the writer's sink, plus the index
// by session that a session's trail and a filtered export read instead of
// scanning the whole log. It has no not-found error: a session with no
// records (or an unknown one) is an empty scan, not a failure.
type Store interface {
	audit.Sink
	// ScanSessionAudit calls fn with each record of a session from
	// sequence from on, in order; data is valid only during the call.
	ScanSessionAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error
	// LastSessionAudit calls fn with a session's last records, newest
	// first, at most limit; data is valid only during the call.
	LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error
}

// Config is what a Service is made of; every field but the cadence is
// required.
type Config struct {
	Store   Store
	Writer  *audit.Writer      // the chain's writer (over Store)
	SignKey ed25519.PrivateKey // signs checkpoints
	Now     func() time.Time
	Log     *slog.Logger
	// Every and Interval: the checkpointer signs the head every Every
	// records (default 1000) and at least every Interval when it moved
	// (default 1m).
	Every    uint64
	Interval time.Duration
}

// Service is the audit log's service.
type Service struct {
	store   Store
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
	started  bool
}

// New makes the service, reading the last checkpoint from the store (none
// readable: the next one signs the head as it is). Start starts its
// checkpointer.
func New(ctx context.Context, c Config) *Service {
	if c.Every == 0 {
		c.Every = 1000
	}
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	s := &Service{store: c.Store, w: c.Writer, now: c.Now, log: c.Log, signKey: c.SignKey,
		cp: &checkpointer{every: c.Every, interval: c.Interval, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}}
	if cps, err := c.Store.Checkpoints(ctx); err == nil && len(cps) > 0 {
		s.lastCheckpoint = cps[len(cps)-1].Seq
	}
	return s
}

// PublicKey is the base64 Ed25519 key that verifies checkpoints.
func (s *Service) PublicKey() string {
	return base64.StdEncoding.EncodeToString(s.signKey.Public().(ed25519.PublicKey))
}

// Start signs the head in the background every Config.Every records (see
// Committed) or Config.Interval, until Stop.
func (s *Service) Start() {
	c := s.cp
	c.started = true
	go func() {
		defer close(c.done)
		t := time.NewTicker(c.interval)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
			case <-c.kick:
			}
			if _, err := s.Checkpoint(context.Background()); err != nil {
				s.log.Error("audit checkpoint failed", "err", err)
			}
		}
	}()
}

// Stop stops the checkpointer Start started and waits for it.
func (s *Service) Stop() {
	if s.cp.started {
		close(s.cp.stop)
		<-s.cp.done
	}
}

// Committed counts n records written towards the next checkpoint (the
// writer's commit hook calls it).
func (s *Service) Committed(n int) {
	if s.cp.since.Add(uint64(n)) >= s.cp.every {
		select {
		case s.cp.kick <- struct{}{}:
		default:
		}
	}
}

// Checkpoints lists the signed checkpoints.
func (s *Service) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	return s.store.Checkpoints(ctx)
}

// Checkpoint signs the current chain head if it moved since the last one.
func (s *Service) Checkpoint(ctx context.Context) (audit.Checkpoint, error) {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	seq, head := s.w.Head()
	if seq == 0 || seq == s.lastCheckpoint {
		return audit.Checkpoint{}, nil
	}
	c := audit.Checkpoint{Seq: seq, Hash: head, Time: s.now().UTC()}
	c.Sign(s.signKey)
	if err := s.store.PutCheckpoint(ctx, c); err != nil {
		return c, err
	}
	s.lastCheckpoint = seq
	s.cp.since.Store(0)
	return c, nil
}

// Verify walks the whole chain with its checkpoints.
func (s *Service) Verify(ctx context.Context) (audit.Report, error) {
	cps, err := s.store.Checkpoints(ctx)
	if err != nil {
		return audit.Report{}, err
	}
	cv, err := audit.NewChainVerifier(s.signKey.Public().(ed25519.PublicKey), cps)
	if err != nil {
		return audit.Report{}, err
	}
	err = s.store.ScanAudit(ctx, 0, func(_ uint64, data []byte) error { return cv.Next(data) })
	if err != nil && !audit.IsStop(err) {
		return audit.Report{}, err
	}
	return cv.Finish(), nil
}

// Prune removes the records older than before on behalf of actor, keeping
// the rest verifiable: the last removed record becomes a signed anchoring
// checkpoint. The newest record is always kept.
func (s *Service) Prune(ctx context.Context, actor audit.Actor, before time.Time) (uint64, audit.Checkpoint, error) {
	var anchor audit.Checkpoint
	head, _ := s.w.Head()
	err := s.store.ScanAudit(ctx, 0, func(seq uint64, data []byte) error {
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
	anchor.Time, anchor.Anchor = s.now().UTC(), true
	anchor.Sign(s.signKey)
	n, err := s.store.PruneAudit(ctx, anchor)
	if err != nil {
		return n, anchor, fmt.Errorf("prune: %w", err)
	}
	_, err = s.w.Append(ctx, audit.Event{Type: "audit.pruned", Actor: actor,
		Reason: fmt.Sprintf("records up to seq %d removed; anchor %s", anchor.Seq, anchor.Hash)}, nil)
	return n, anchor, err
}

var errStopScan = errors.New("stop scan")

// Scan calls fn with each stored audit record from sequence from on, in
// order: with a sessionID only that session's, from the store's index by
// session (not a scan of the whole log). data is valid only during the
// call.
func (s *Service) Scan(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error {
	if sessionID != "" {
		return s.store.ScanSessionAudit(ctx, sessionID, from, fn)
	}
	return s.store.ScanAudit(ctx, from, fn)
}

// Last calls fn with a session's last audit records, newest first, at most
// limit of them, from the store's index by session. data is valid only
// during the call.
func (s *Service) Last(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error {
	return s.store.LastSessionAudit(ctx, sessionID, limit, fn)
}
