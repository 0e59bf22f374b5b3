package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
)

// maxBatch bounds one group commit.
const maxBatch = 512

// Writer appends events to the chain with group commit, and without a
// goroutine of its own on the callers' path: the callers take turns.
//
// A caller queues its record; if nobody is writing, it becomes the writer:
// it seals and writes everything queued in one batch, and hands the writer's
// turn to a caller still queued, if any, before it waits for its own
// record's fate. Syncing is a second turn of the same kind: when a written
// batch needs a sync and none runs, the caller that wrote it syncs every
// batch written so far; callers whose batches are written while a sync runs
// wait for the next one, which the first of them runs. So a lone caller
// writes and syncs its own record with no hand-off at all, the disk is never
// idle while callers wait, and many concurrent calls share one fsync.
//
// The chain head advances only when a write succeeded, so a failed write
// leaves no gap. A failed sync stops the writer for good (fail closed: after
// a failed fsync the kernel's page cache no longer says what is on disk).
type Writer struct {
	sink      Sink
	sequencer Sequencer // sink, when it holds the head itself (replicas), or nil
	now       func() time.Time
	log       *slog.Logger

	mu       sync.Mutex
	idle     *sync.Cond // signalled when a turn ends (Close waits for it)
	queue    []*pending // records not yet written, in arrival order
	unsynced []*pending // waiting callers whose records are written, not yet synced
	writing  bool       // a caller holds the writer's turn
	syncing  bool       // a caller holds the sync turn
	closed   bool
	broken   bool // a sync failed: nothing more is written
	dirty    bool // written records (waited for or not) await a sync
	entries  []Entry
	stop     chan struct{}
	done     chan struct{}

	onCommit    func(records int, d time.Duration)
	onSequenced func(d time.Duration) // per record on a shared chain: submission to commit

	headMu sync.Mutex
	seq    uint64
	head   string
}

type pending struct {
	ev      Event
	side    *grants.UsageUpdate
	guard   bool       // refused when its session, grant or the kill-switch was killed first (a Sequencer's check)
	refused bool       // the Sequencer refused it (ErrKilled): it is not in the chain
	done    chan error // nil for records nobody waits for
	written time.Time  // when its batch was written (commit latency metric)
	queued  time.Time  // when it was submitted (sequencing lag metric; set only when observed)
}

// Turns handed to a waiting caller through its done channel.
var (
	errTakeWrite = errors.New("audit: your turn to write")
	errTakeSync  = errors.New("audit: your turn to sync")
)

// errSyncFailed answers every append after a failed sync.
var errSyncFailed = errors.New("an earlier sync of the audit log failed; restart the broker")

// The causes of a writer that takes no record.
var (
	errBroken = fault.Because(ErrUnavailable, "the audit log refuses records after a failed sync (restart the broker)", errSyncFailed)
	errClosed = fault.Because(ErrUnavailable, "the audit log is closed (the broker is stopping)", nil)
)

// NewWriter starts a writer over sink, continuing its chain.
func NewWriter(ctx context.Context, sink Sink, now func() time.Time, log *slog.Logger) (*Writer, error) {
	seq, head, err := sink.AuditHead(ctx)
	if err != nil {
		return nil, fmt.Errorf("read audit head: %w", err)
	}
	w := &Writer{
		sink: sink, now: now, log: log,
		stop: make(chan struct{}),
		done: make(chan struct{}),
		seq:  seq, head: head,
	}
	w.sequencer, _ = sink.(Sequencer)
	w.idle = sync.NewCond(&w.mu)
	go w.flusher()
	return w, nil
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan error, 1)} }}

// asyncPool holds the pendings of records nobody waits for (AppendAsync):
// their done is nil, as pendingPool's never is, so a pending's kind never
// changes. One goes back once its batch is written (see recycleAsync).
var asyncPool = sync.Pool{New: func() any { return new(pending) }}

// spareQueue is the largest written batch whose array the queue takes
// back (a larger one is let go).
const spareQueue = 64

// recycleAsync gives back the pendings of batch's records nobody waits
// for, once the batch was committed or failed: no list holds them (only
// waited-for ones join unsynced), and the entries written were encoded
// apart. It reads only done of the others, which no one writes after New:
// a caller answered already may have reused its pending.
func recycleAsync(batch []*pending) {
	for _, p := range batch {
		if p.done == nil {
			*p = pending{}
			asyncPool.Put(p)
		}
	}
}

// Append writes ev durably and returns it sealed (Seq, Time, hashes set).
// side, if not nil, is persisted by the sink in the same transaction.
// Any failure is wrapped in ErrUnavailable.
func (w *Writer) Append(ctx context.Context, ev Event, side *grants.UsageUpdate) (Event, error) {
	return w.append(ctx, ev, side, false)
}

// AppendGuarded is Append for a record that must not be written once its
// session was killed, its grant revoked or the kill-switch engaged (a
// call's "allowed" record): over a Sequencer (replicas on one database)
// the check is made inside the transaction that writes it, against what
// other replicas committed, and a refused record is ErrKilled (not
// ErrUnavailable). Over another sink it is Append: the broker's own
// in-memory checks are the whole truth on one replica.
func (w *Writer) AppendGuarded(ctx context.Context, ev Event, side *grants.UsageUpdate) (Event, error) {
	return w.append(ctx, ev, side, true)
}

func (w *Writer) append(ctx context.Context, ev Event, side *grants.UsageUpdate, guard bool) (Event, error) {
	if err := ctx.Err(); err != nil {
		return ev, fault.Because(ErrUnavailable, "the request ended before its audit record was written", err)
	}
	if ev.Time.IsZero() {
		ev.Time = w.now()
	}
	ev.Time = ev.Time.UTC() // stored times are UTC: a record re-encodes as it was hashed
	p := pendingPool.Get().(*pending)
	p.ev, p.side, p.guard = ev, side, guard
	if w.onSequenced != nil {
		p.queued = time.Now()
	}
	w.mu.Lock()
	if err := w.refusing(); err != nil {
		w.mu.Unlock()
		pendingPool.Put(p)
		return ev, err
	}
	w.queue = append(w.queue, p)
	lead := !w.writing
	w.writing = w.writing || lead
	w.mu.Unlock()
	if lead {
		w.write(p)
	}
	// Wait for the outcome even if ctx ends: the record may be committed.
	err := <-p.done
	for err == errTakeWrite || err == errTakeSync {
		if err == errTakeWrite {
			w.write(p)
		} else {
			w.sync(p)
		}
		err = <-p.done
	}
	out := p.ev
	p.ev, p.side, p.written, p.queued, p.guard, p.refused = Event{}, nil, time.Time{}, time.Time{}, false, false
	pendingPool.Put(p)
	if errors.Is(err, ErrKilled) {
		return out, err
	}
	if err != nil {
		// The sink's own error is logged where it happened (write, sync).
		return out, fault.Because(ErrUnavailable, "the audit log's write failed", err)
	}
	return out, nil
}

// refusing says why no record is accepted now, if so. w.mu is held.
func (w *Writer) refusing() error {
	switch {
	case w.closed:
		return errClosed
	case w.broken:
		return errBroken
	}
	return nil
}

// AppendAsync queues ev without waiting for it to be written; a failure is
// logged. It is for records that follow an already-durable decision (a
// call's completion): they ride along with the next batch, or are written
// within asyncFlush, so they never delay the caller's answer.
func (w *Writer) AppendAsync(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = w.now()
	}
	ev.Time = ev.Time.UTC()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.refusing(); err != nil {
		w.log.Error("audit record lost", "type", ev.Type, "err", err)
		return
	}
	p := asyncPool.Get().(*pending)
	p.ev = ev
	w.queue = append(w.queue, p)
}

// asyncFlush bounds how long a record nobody waits for stays in memory
// when no waited-for record comes along to carry it.
const asyncFlush = 5 * time.Millisecond

// flusher writes queued records nobody waits for when no caller does.
func (w *Writer) flusher() {
	defer close(w.done)
	tick := time.NewTicker(asyncFlush)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		lead := !w.writing && len(w.queue) > 0
		w.writing = w.writing || lead
		w.mu.Unlock()
		if lead {
			w.write(nil)
		}
	}
}

// write holds the writer's turn: it writes what is queued, in batches, until
// the batch holding own (nil: the flusher's turn, one batch) is written, then
// hands the turn to a caller still queued, or gives it up. A written batch
// that needs a sync joins the unsynced list; if no sync runs, own's writer
// runs it (for own's batch and whatever else is written by then).
func (w *Writer) write(own *pending) {
	for {
		w.mu.Lock()
		n := min(len(w.queue), maxBatch)
		batch := w.queue[:n:n]
		w.queue = w.queue[n:]
		if len(w.queue) == 0 {
			w.queue = nil // let the old array go
		}
		mine := own == nil || containsPending(batch, own)
		w.mu.Unlock()

		needSync, killed := w.commit(batch)

		w.mu.Lock()
		if needSync {
			w.dirty = true
			for _, p := range batch {
				if p.done != nil && !p.refused {
					w.unsynced = append(w.unsynced, p)
				}
			}
		}
		recycleAsync(batch)
		if w.queue == nil && cap(batch) <= spareQueue {
			// Nothing reads the batch's array any more: the next records
			// queue in it rather than in a new one.
			clear(batch)
			w.queue = batch[:0]
		}
		// Refused records are answered last: an answered record's pending
		// goes back to the pool at once (and may be reused), so nothing of
		// the batch may be read after it.
		for _, p := range killed {
			p.done <- ErrKilled
		}
		if !mine {
			w.mu.Unlock()
			continue
		}
		// Own record is written: pass the turn on, and sync if needed.
		w.writing = false
		if next := firstWaiter(w.queue); next != nil {
			w.writing = true
			next.done <- errTakeWrite
		}
		// The flusher syncs the records nobody waits for, too.
		runSync := (len(w.unsynced) > 0 || own == nil && w.dirty) && !w.syncing && !w.broken
		w.syncing = w.syncing || runSync
		w.idle.Broadcast()
		w.mu.Unlock()
		if runSync {
			w.sync(own)
		}
		return
	}
}

// commit seals batch onto the chain and writes it. It answers the batch's
// callers unless the write needs a sync (then the sync turn does), and
// reports whether it does. Records the Sequencer refused are not answered:
// they are returned as killed, for the caller to answer with ErrKilled once
// it no longer reads the batch.
func (w *Writer) commit(batch []*pending) (needSync bool, killed []*pending) {
	if len(batch) == 0 {
		return false, nil
	}
	w.mu.Lock()
	broken := w.broken
	w.mu.Unlock()
	if broken {
		w.fail(batch, errSyncFailed)
		return false, nil
	}
	start := time.Now()
	var (
		seq  uint64
		head string
		err  error
	)
	if w.sequencer != nil {
		seq, head, needSync, err = w.appendShared(batch)
	} else {
		seq, head = w.seqHead()
		if seq, head, err = w.seal(batch, seq, head); err == nil {
			needSync, err = w.sink.WriteAudit(context.Background(), w.entries)
		}
	}
	clear(w.entries)
	if err != nil {
		w.log.Error("audit write failed", "records", len(batch), "err", err)
		w.fail(batch, err)
		return false, nil
	}
	w.setHead(seq, head)
	if w.onSequenced != nil {
		now := time.Now()
		for _, p := range batch {
			if p.done != nil && !p.refused && !p.queued.IsZero() {
				w.onSequenced(now.Sub(p.queued))
			}
		}
	}
	for _, p := range batch {
		if p.refused { // in no batch to sync; answered by the caller, last
			killed = append(killed, p)
		}
	}
	if needSync {
		for _, p := range batch {
			p.written = start
		}
		return true, killed
	}
	if w.onCommit != nil {
		w.onCommit(len(batch), time.Since(start))
	}
	for _, p := range batch {
		if p.done != nil && !p.refused {
			p.done <- nil
		}
	}
	return false, killed
}

// seal seals batch onto the chain after seq and head into w.entries, and
// returns the new last sequence number and hash.
func (w *Writer) seal(batch []*pending, seq uint64, head string) (uint64, string, error) {
	entries := w.entries[:0] // only the writer's turn uses it
	for _, p := range batch {
		if p.refused {
			continue
		}
		seq++
		p.ev.Seq = seq
		p.ev.PrevHash = head
		data, err := seal(&p.ev)
		if err != nil {
			w.entries = entries
			return 0, "", err
		}
		head = p.ev.Hash
		entries = append(entries, Entry{Seq: seq, Data: data, Side: p.side, SessionID: p.ev.SessionID})
	}
	w.entries = entries
	return seq, head, nil
}

// appendShared has the Sequencer seal batch onto the head it holds, inside
// its own transaction (the chain is shared by replicas).
func (w *Writer) appendShared(batch []*pending) (seq uint64, head string, needSync bool, err error) {
	var guards []Guard
	var guarded []*pending
	for _, p := range batch {
		if p.guard && p.done != nil {
			guards = append(guards, Guard{SessionID: p.ev.SessionID, GrantID: p.ev.GrantID})
			guarded = append(guarded, p)
		}
	}
	needSync, err = w.sequencer.AppendAudit(context.Background(), guards, func(s uint64, h string, refused []bool) ([]Entry, error) {
		for i, p := range guarded {
			p.refused = i < len(refused) && refused[i]
		}
		var err error
		seq, head, err = w.seal(batch, s, h)
		return w.entries, err
	})
	if err != nil {
		for _, p := range guarded {
			p.refused = false // the whole batch failed: answered with err
		}
	}
	return seq, head, needSync, err
}

// sync holds the sync turn: it makes every written batch durable and
// answers their callers, until own is answered; then it hands the turn to a
// caller still unsynced, or gives it up.
func (w *Writer) sync(own *pending) {
	for {
		w.mu.Lock()
		batch := w.unsynced
		w.unsynced, w.dirty = nil, false
		w.mu.Unlock()

		err := w.sink.SyncAudit(context.Background())
		if err != nil {
			w.mu.Lock()
			first := !w.broken
			w.broken = true
			w.mu.Unlock()
			if first {
				w.log.Error("audit sync failed: refusing every audited action until restart", "err", err)
			}
		} else if w.onCommit != nil && len(batch) > 0 {
			w.onCommit(len(batch), time.Since(batch[0].written))
		}
		mine := own == nil || containsPending(batch, own)
		for _, p := range batch {
			p.done <- err
		}

		w.mu.Lock()
		if !mine && len(w.unsynced) > 0 {
			w.mu.Unlock()
			continue
		}
		w.syncing = false
		if len(w.unsynced) > 0 {
			w.syncing = true
			w.unsynced[0].done <- errTakeSync
		}
		w.idle.Broadcast()
		w.mu.Unlock()
		return
	}
}

func containsPending(batch []*pending, p *pending) bool {
	for _, q := range batch {
		if q == p {
			return true
		}
	}
	return false
}

func firstWaiter(queue []*pending) *pending {
	for _, p := range queue {
		if p.done != nil {
			return p
		}
	}
	return nil
}

// Close stops accepting events, writes and syncs what is queued, and
// returns when no turn is held.
func (w *Writer) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	for w.writing || w.syncing {
		w.idle.Wait()
	}
	// Records nobody waits for may still be queued, more than one batch of
	// them: write and sync them all.
	for len(w.queue) > 0 && !w.broken {
		w.writing = true
		w.mu.Unlock()
		w.write(nil)
		w.mu.Lock()
		for w.writing || w.syncing {
			w.idle.Wait()
		}
	}
	w.mu.Unlock()
	if err := w.sink.SyncAudit(context.Background()); err != nil {
		w.log.Error("final audit sync failed", "err", err)
	}
}

// Healthy is nil while records can be written, and an ErrUnavailable once a
// sync failed (for readiness checks).
func (w *Writer) Healthy() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken {
		return errBroken
	}
	return nil
}

// Head returns the last committed sequence number and hash.
func (w *Writer) Head() (uint64, string) {
	return w.seqHead()
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

// OnSequenced registers a function told, for every record a caller waits
// for (Append, AppendGuarded) committed on a shared chain (the sink is a
// Sequencer: brokers on one database), its sequencing lag: the time from
// its submission to the commit of the transaction that took the chain's
// head lock and appended it (the wait for the head behind other brokers'
// batches included). Records of AppendAsync, batched on purpose, are not
// observed. It is never called over a sink of one writer. Set it before
// the first Append.
func (w *Writer) OnSequenced(fn func(d time.Duration)) {
	if w.sequencer != nil {
		w.onSequenced = fn
	}
}

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
