package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch bounds one group commit.
const maxBatch = 512

// Writer appends events to the chain with group commit: callers that arrive
// while a batch is being written share the next one. Writing and syncing
// are two stages: while one fsync runs, the next batch is sealed and
// written, and the next fsync makes it durable, so the disk is never idle
// while callers wait and many concurrent calls cost one fsync. The chain
// head only advances when a write succeeded, so a failed write leaves no
// gap; a failed sync stops the writer (fail closed: after a failed fsync
// the kernel's page cache no longer says what is on disk).
type Writer struct {
	sink Sink
	now  func() time.Time
	log  *slog.Logger

	in      chan *pending // records whose caller waits
	async   chan *pending // records nobody waits for: they ride along with the next commit
	stop    chan struct{}
	done    chan struct{}
	closeMu sync.RWMutex
	closed  bool

	onCommit func(records int, d time.Duration)

	// The sync stage: callers whose records are written but not yet synced.
	syncReq  chan struct{} // capacity 1: "there is something to sync"
	syncDone chan struct{}
	syncMu   sync.Mutex
	unsynced []*pending
	spare    []*pending
	broken   atomic.Bool // a sync failed: nothing more is written

	headMu sync.Mutex
	seq    uint64
	head   string
}

type pending struct {
	ev      Event
	side    any
	done    chan error
	written time.Time // when its batch was written (commit latency metric)
}

// NewWriter starts a writer over sink, continuing its chain.
func NewWriter(ctx context.Context, sink Sink, now func() time.Time, log *slog.Logger) (*Writer, error) {
	seq, head, err := sink.AuditHead(ctx)
	if err != nil {
		return nil, fmt.Errorf("read audit head: %w", err)
	}
	w := &Writer{
		sink: sink, now: now, log: log,
		in:       make(chan *pending, 4*maxBatch),
		async:    make(chan *pending, 16*maxBatch),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		syncReq:  make(chan struct{}, 1),
		syncDone: make(chan struct{}),
		seq:      seq, head: head,
	}
	go w.loop()
	go w.syncer()
	return w, nil
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan error, 1)} }}

// Append writes ev durably and returns it sealed (Seq, Time, hashes set).
// side, if not nil, is persisted by the sink in the same transaction.
// Any failure is wrapped in ErrUnavailable.
func (w *Writer) Append(ctx context.Context, ev Event, side any) (Event, error) {
	if ev.Time.IsZero() {
		ev.Time = w.now()
	}
	ev.Time = ev.Time.UTC() // stored times are UTC: a record re-encodes as it was hashed
	p := pendingPool.Get().(*pending)
	p.ev, p.side = ev, side
	w.closeMu.RLock()
	if w.closed {
		w.closeMu.RUnlock()
		pendingPool.Put(p)
		return ev, fmt.Errorf("%w: writer closed", ErrUnavailable)
	}
	select {
	case w.in <- p:
	case <-ctx.Done():
		w.closeMu.RUnlock()
		pendingPool.Put(p)
		return ev, fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
	}
	w.closeMu.RUnlock()
	// Wait for the outcome even if ctx ends: the record may be committed.
	err := <-p.done
	out := p.ev
	p.ev, p.side = Event{}, nil
	pendingPool.Put(p)
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return out, nil
}

// AppendAsync queues ev without waiting for it to be written; a failure is
// logged. It is for records that follow an already-durable decision (a
// call's completion), so it never blocks the caller's answer.
func (w *Writer) AppendAsync(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = w.now()
	}
	ev.Time = ev.Time.UTC() // stored times are UTC: a record re-encodes as it was hashed
	p := &pending{ev: ev}
	w.closeMu.RLock()
	defer w.closeMu.RUnlock()
	if w.closed {
		w.log.Error("audit append after close", "type", ev.Type)
		return
	}
	w.async <- p // blocks only when 8192 records wait: back-pressure, never a drop
}

// Close stops accepting events and waits for queued ones to be written.
func (w *Writer) Close() {
	w.closeMu.Lock()
	if w.closed {
		w.closeMu.Unlock()
		<-w.done
		<-w.syncDone
		return
	}
	w.closed = true
	close(w.stop)
	w.closeMu.Unlock()
	<-w.done
	<-w.syncDone
}

// Healthy is nil while records can be written, and an ErrUnavailable once a
// sync failed (for readiness checks).
func (w *Writer) Healthy() error {
	if w.broken.Load() {
		return fmt.Errorf("%w: %v", ErrUnavailable, errSyncFailed)
	}
	return nil
}

// Head returns the last committed sequence number and hash.
func (w *Writer) Head() (uint64, string) {
	return w.seqHead()
}

// asyncFlush bounds how long a record nobody waits for stays in memory
// when no waited-for record comes along to carry it.
const asyncFlush = 5 * time.Millisecond

func (w *Writer) loop() {
	defer close(w.done)
	defer close(w.syncReq) // the syncer syncs what is left, then stops
	batch := make([]*pending, 0, maxBatch)
	entries := make([]Entry, 0, maxBatch)
	tick := time.NewTicker(asyncFlush)
	defer tick.Stop()
	for {
		batch = batch[:0]
		select {
		case p := <-w.in:
			batch = append(batch, p)
		case <-tick.C:
		case <-w.stop:
			// Drain what was queued before Close.
			for {
				batch = w.fill(batch)
				if len(batch) == 0 {
					return
				}
				w.commit(batch, entries)
				batch = batch[:0]
			}
		}
		if batch = w.fill(batch); len(batch) > 0 {
			w.commit(batch, entries)
		}
	}
}

// fill adds queued records, waited-for ones first, up to maxBatch.
func (w *Writer) fill(batch []*pending) []*pending {
	for len(batch) < maxBatch {
		select {
		case p := <-w.in:
			batch = append(batch, p)
			continue
		default:
		}
		select {
		case p := <-w.async:
			batch = append(batch, p)
		default:
			return batch
		}
	}
	return batch
}

func (w *Writer) commit(batch []*pending, entries []Entry) {
	if w.broken.Load() {
		w.fail(batch, errSyncFailed)
		return
	}
	entries = entries[:0]
	seq, head := w.seqHead()
	for _, p := range batch {
		seq++
		p.ev.Seq = seq
		p.ev.PrevHash = head
		data, err := seal(&p.ev)
		if err != nil {
			w.fail(batch, err)
			return
		}
		head = p.ev.Hash
		entries = append(entries, Entry{Seq: seq, Data: data, Side: p.side})
	}
	start := time.Now()
	needSync, err := w.sink.WriteAudit(context.Background(), entries)
	if err != nil {
		w.log.Error("audit write failed", "records", len(batch), "err", err)
		w.fail(batch, err)
		return
	}
	w.setHead(seq, head)
	if !needSync {
		if w.onCommit != nil {
			w.onCommit(len(batch), time.Since(start))
		}
		for _, p := range batch {
			if p.done != nil {
				p.done <- nil
			}
		}
		return
	}
	// Hand the waiting callers to the sync stage and go on writing.
	w.syncMu.Lock()
	for _, p := range batch {
		if p.done != nil {
			p.written = start
			w.unsynced = append(w.unsynced, p)
		}
	}
	w.syncMu.Unlock()
	select {
	case w.syncReq <- struct{}{}:
	default: // a sync is already asked for; it will take these too
	}
}

// errSyncFailed answers every append after a failed sync.
var errSyncFailed = errors.New("an earlier sync of the audit log failed; restart the broker")

// syncer is the sync stage: each sync makes durable every batch written
// before it started, then answers those batches' callers.
func (w *Writer) syncer() {
	defer close(w.syncDone)
	for range w.syncReq {
		w.syncMu.Lock()
		batch := w.unsynced
		if len(batch) == 0 { // taken by the previous sync
			w.syncMu.Unlock()
			continue
		}
		w.unsynced = w.spare[:0] // the two slices take turns
		w.syncMu.Unlock()
		err := w.sink.SyncAudit()
		if err != nil && !w.broken.Swap(true) {
			w.log.Error("audit sync failed: refusing every audited action until restart", "err", err)
		}
		if err == nil && w.onCommit != nil {
			w.onCommit(len(batch), time.Since(batch[0].written))
		}
		for _, p := range batch {
			p.done <- err
		}
		clear(batch)
		w.spare = batch[:0]
	}
	// Close: whatever the last batches left unsynced.
	if len(w.unsynced) > 0 {
		err := w.sink.SyncAudit()
		for _, p := range w.unsynced {
			p.done <- err
		}
		w.unsynced = nil
	}
}

func (w *Writer) fail(batch []*pending, err error) {
	if err == nil {
		err = errors.New("unknown")
	}
	for _, p := range batch {
		if p.done != nil {
			p.done <- err
		} else {
			w.log.Error("audit record lost after a failed commit", "type", p.ev.Type, "err", err)
		}
	}
}

// OnCommit registers a function told the size and duration of every commit
// (metrics). Set it before the first Append.
func (w *Writer) OnCommit(fn func(records int, d time.Duration)) { w.onCommit = fn }

func (w *Writer) seqHead() (uint64, string) {
	w.headMu.Lock()
	defer w.headMu.Unlock()
	return w.seq, w.head
}

func (w *Writer) setHead(seq uint64, head string) {
	w.headMu.Lock()
	defer w.headMu.Unlock()
	w.seq, w.head = seq, head
}
