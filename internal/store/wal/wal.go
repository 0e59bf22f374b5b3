// Package wal is the audit log's write-ahead journal and its applier: a
// commit is one write to the journal (and one fdatasync in fsync mode); the
// applier moves journaled records into the database in large batches off
// the callers' path; on open, records the database does not hold yet (a
// crash between the two) are replayed into it. The database is reached only
// through Options.Apply, so the package knows nothing of bbolt.
package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
)

// SyncInterval bounds the unsynced window in buffered mode.
const SyncInterval = 10 * time.Millisecond

// The applier moves journaled records into the database at least every
// applyInterval, or sooner once applyBatch records wait. The journal already
// holds them durably and readers flush first (Flush), so this only bounds
// memory and the work a restart replays; larger batches cost the callers'
// CPU less (one database transaction and sync each).
const (
	applyInterval = 250 * time.Millisecond
	applyBatch    = 16384
)

// DefaultMaxBacklog bounds the records written to the journal but not yet in
// the database unless Options.MaxBacklog says otherwise.
const DefaultMaxBacklog = 1 << 18

// SideCodec encodes an audit.Entry's Side into a journal entry and back.
// Encode returns nil for a side it does not persist.
type SideCodec struct {
	Encode func(side *grants.UsageUpdate) ([]byte, error)
	Decode func(data []byte) (*grants.UsageUpdate, error)
}

// Options configure a Log.
type Options struct {
	Path     string // the journal file; sealed segments are Path.<last seq>
	Limit    int64  // size at which the current file is sealed (0: never)
	Buffered bool   // buffered durability: synced within SyncInterval, not by Sync
	// Apply writes records (and their sides) to the database durably,
	// skipping those it already holds (a replay after a crash). It runs on
	// the applier's goroutine, or on Open's for the replay.
	Apply func(entries []audit.Entry) error
	Codec SideCodec
	// MaxBacklog bounds the records written and not yet applied: past it
	// (the database failing for a long time) writes fail, so calls fail
	// closed instead of the broker running out of memory.
	MaxBacklog uint64
	Log        *slog.Logger
}

// Log is an open journal with its applier and, in buffered mode, its sync loop.
type Log struct {
	o       Options
	journal *journal

	// Journaled records waiting for the applier: a slice, not a channel, so
	// a commit does not wake the applier (it looks every applyInterval, or
	// when kicked because many wait).
	pendMu  sync.Mutex
	pend    []audit.Entry
	kick    chan struct{}
	flushes chan chan error
	applied atomic.Uint64 // last seq durable in the database
	// unapplied counts records written to the journal by this process and
	// not yet in the database (the applier's backlog).
	unapplied atomic.Uint64
	dirty     atomic.Bool

	stop     chan struct{}
	stopped  sync.WaitGroup
	stopOnce sync.Once
}

// Open opens (creating) the journal, replays what it holds through
// o.Apply, and starts the applier.
func Open(o Options) (*Log, error) {
	if o.MaxBacklog == 0 {
		o.MaxBacklog = DefaultMaxBacklog
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	l := &Log{o: o, stop: make(chan struct{}), kick: make(chan struct{}, 1), flushes: make(chan chan error)}
	var err error
	if l.journal, err = openJournal(o.Path, o.Limit, o.Codec, o.Log); err != nil {
		return nil, err
	}
	// Records acknowledged before a crash but not yet in the database are in the journal.
	var replay []audit.Entry
	err = l.journal.replay(func(e audit.Entry) error {
		e.Data = bytes.Clone(e.Data)
		replay = append(replay, e)
		return nil
	})
	if err == nil && len(replay) > 0 {
		err = l.apply(replay)
	}
	if err == nil {
		err = l.journal.truncateIfApplied(l.applied.Load(), 0)
	}
	if err != nil {
		l.journal.close()
		return nil, fmt.Errorf("replay the audit journal: %w", err)
	}
	l.journal.prepare()
	l.stopped.Add(2)
	go l.applier()
	go l.syncLoop()
	return l, nil
}

// apply hands entries to the database and notes the last one as applied.
func (l *Log) apply(entries []audit.Entry) error {
	if err := l.o.Apply(entries); err != nil {
		return err
	}
	if n := len(entries); n > 0 {
		l.applied.Store(entries[n-1].Seq)
	}
	return nil
}

// applier moves journaled records into the database in large batches.
func (l *Log) applier() {
	defer l.stopped.Done()
	var batch []audit.Entry
	flush := func() error {
		l.pendMu.Lock()
		batch = append(batch, l.pend...)
		clear(l.pend)
		l.pend = l.pend[:0]
		l.pendMu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		err := l.apply(batch)
		if err != nil {
			// The batch stays for the next try; the journal keeps the records.
			l.o.Log.Error("applying the audit journal to the database failed (the journal keeps the records)", "err", err)
			return err
		}
		l.unapplied.Add(-uint64(len(batch)))
		clear(batch)
		batch = batch[:0]
		if err := l.journal.truncateIfApplied(l.applied.Load(), 1<<62); err != nil { // sealed segments only
			l.o.Log.Error("truncate the audit journal", "err", err)
		}
		return nil
	}
	t := time.NewTicker(applyInterval)
	defer t.Stop()
	for {
		select {
		case <-l.kick:
			_ = flush()
		case <-t.C:
			_ = flush()
		case done := <-l.flushes:
			done <- flush()
		case <-l.stop:
			_ = flush()
			return
		}
	}
}

// Flush waits until every journaled record is in the database (readers of
// the log call it first). After Stop it returns nil at once.
func (l *Log) Flush() error {
	done := make(chan error, 1)
	select {
	case l.flushes <- done:
		return <-done
	case <-l.stop:
		return nil
	}
}

func (l *Log) syncLoop() {
	defer l.stopped.Done()
	t := time.NewTicker(SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if l.dirty.Swap(false) {
				if err := l.journal.sync(); err != nil {
					l.o.Log.Error("audit journal sync failed", "err", err)
				}
			}
		}
	}
}

// Write appends entries with one journal write; the applier moves them into
// the database. In fsync mode they are durable after the next Sync (needSync);
// in buffered mode the sync loop syncs within SyncInterval. The Log keeps
// the entries (not the slice).
func (l *Log) Write(entries []audit.Entry) (needSync bool, err error) {
	if backlog := l.unapplied.Load(); backlog >= l.o.MaxBacklog {
		return false, fmt.Errorf("%d audit records are not yet in the database (is it failing?)", backlog)
	}
	if err := l.journal.append(entries); err != nil {
		return false, err
	}
	if l.o.Buffered {
		l.dirty.Store(true)
	}
	if err := l.journal.rotateIfFull(); err != nil {
		// The batch is written; the journal only grows past its limit.
		l.o.Log.Error("sealing the audit journal failed; it keeps growing", "err", err)
	}
	l.unapplied.Add(uint64(len(entries)))
	l.pendMu.Lock()
	l.pend = append(l.pend, entries...)
	n := len(l.pend)
	l.pendMu.Unlock()
	if n >= applyBatch {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return !l.o.Buffered, nil
}

// Sync makes every written entry durable (one fdatasync).
func (l *Log) Sync() error {
	if err := l.journal.sync(); err != nil {
		return fmt.Errorf("audit journal sync: %w", err)
	}
	return nil
}

// Stop applies what waits and stops the applier and the sync loop. The
// caller makes sure no Write runs meanwhile or later.
func (l *Log) Stop() {
	l.stopOnce.Do(func() {
		close(l.stop)
		l.stopped.Wait()
	})
}

// Close stops the Log and closes the journal; with truncate (the database is
// synced), it first empties the journal of what the database holds.
func (l *Log) Close(truncate bool) error {
	l.Stop()
	var errs []error
	if truncate {
		errs = append(errs, l.journal.truncateIfApplied(l.applied.Load(), 0))
	}
	return errors.Join(append(errs, l.journal.close())...)
}
