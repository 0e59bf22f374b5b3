package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// MustOpen opens a bbolt store in a temp dir and checks its consistency at cleanup.
func MustOpen(tb testing.TB, durability string) *boltstore.Bolt {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "airlock.db")
	s, err := boltstore.OpenBolt(path, durability, discard)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
		CheckConsistency(tb, path)
	})
	return s
}

// CheckConsistency runs bbolt's own check on a closed database file (a
// check beside a running writer can report pages that writer is freeing).
func CheckConsistency(tb testing.TB, path string) {
	tb.Helper()
	if err := boltstore.CheckFile(path); err != nil {
		tb.Errorf("bbolt consistency check: %v", err)
	}
}

func TestSessionsAndGrants(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, store.DurabilityFsync)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 5; i++ {
		sess := &session.Session{ID: fmt.Sprintf("ses_%02d", i), TaskID: "t", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := s.PutSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	page, err := s.Sessions(ctx, "ses_01", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[0].ID != "ses_02" || page[1].ID != "ses_03" {
		t.Fatalf("page after ses_01 = %+v", page)
	}
	g := &grants.Grant{ID: "grt_1", SessionID: "ses_01", Spec: grants.Spec{Upstream: "gh", Budget: map[string]float64{"body.amount": 10}}}
	if err := s.PutGrant(ctx, g, grants.Usage{Uses: 2, Spent: map[string]float64{"body.amount": 4}}); err != nil {
		t.Fatal(err)
	}
	// Usage written with an audit record lands in the same transaction.
	err = s.CommitAudit(ctx, []audit.Entry{{Seq: 1, Data: []byte(`{}`), Side: &grants.UsageUpdate{GrantID: "grt_1", Usage: grants.Usage{Uses: 3, Spent: map[string]float64{"body.amount": 6}}}}})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.SessionGrants(ctx, "ses_01")
	if err != nil || len(recs) != 1 {
		t.Fatalf("SessionGrants = %v, %v", recs, err)
	}
	if recs[0].Usage.Uses != 3 || recs[0].Usage.Spent["body.amount"] != 6 {
		t.Fatalf("usage = %+v", recs[0].Usage)
	}
	if _, err := s.Session(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing session: %v", err)
	}
}

func TestAuditGroupCommitChain(t *testing.T) {
	for _, durability := range []string{store.DurabilityFsync, store.DurabilityBuffered} {
		t.Run(durability, func(t *testing.T) {
			ctx := context.Background()
			s := MustOpen(t, durability)
			w, err := audit.NewWriter(ctx, s, time.Now, discard)
			if err != nil {
				t.Fatal(err)
			}
			const writers, each = 32, 40
			var wg sync.WaitGroup
			for i := 0; i < writers; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					for j := 0; j < each; j++ {
						if _, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: fmt.Sprint("ses_", i)}, nil); err != nil {
							t.Error(err)
							return
						}
					}
				}(i)
			}
			wg.Wait()
			w.Close()
			var v audit.Verifier
			if err := s.ScanAudit(ctx, 0, func(seq uint64, data []byte) error { return v.Next(data) }); err != nil {
				t.Fatal(err)
			}
			if v.Count() != writers*each {
				t.Fatalf("records = %d, want %d", v.Count(), writers*each)
			}
			// A new writer continues the same chain.
			w2, err := audit.NewWriter(ctx, s, time.Now, discard)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := w2.Append(ctx, audit.Event{Type: audit.TypeBrokerStarted}, nil)
			w2.Close()
			if err != nil || ev.Seq != writers*each+1 || ev.PrevHash != v.Head() {
				t.Fatalf("continued record = %+v, %v", ev, err)
			}
		})
	}
}

// Records nobody waits for (call outcomes, credential fetches) queued when
// the writer closes are all written, however many batches they fill.
func TestAuditCloseWritesEveryQueuedRecord(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, store.DurabilityFsync)
	w, err := audit.NewWriter(ctx, s, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	const queued = 3*512 + 7 // several of the writer's batches
	for i := 0; i < queued; i++ {
		w.AppendAsync(audit.Event{Type: audit.TypeCallCompleted, SessionID: fmt.Sprint("ses_", i)})
	}
	w.Close()
	var v audit.Verifier
	if err := s.ScanAudit(ctx, 0, func(seq uint64, data []byte) error { return v.Next(data) }); err != nil {
		t.Fatal(err)
	}
	// The flusher may have written some before Close; none may be lost.
	if v.Count() != queued {
		t.Fatalf("records after Close = %d, want %d", v.Count(), queued)
	}
}

// flakySink fails commits while failing is set.
type flakySink struct {
	*boltstore.Bolt
	failing atomic.Bool
}

func (f *flakySink) WriteAudit(ctx context.Context, e []audit.Entry) (bool, error) {
	if f.failing.Load() {
		return false, errors.New("injected disk failure")
	}
	return f.Bolt.WriteAudit(ctx, e)
}

func TestAuditFailureLeavesNoGap(t *testing.T) {
	ctx := context.Background()
	f := &flakySink{Bolt: MustOpen(t, store.DurabilityFsync)}
	w, err := audit.NewWriter(ctx, f, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Append(ctx, audit.Event{Type: "a"}, nil); err != nil {
		t.Fatal(err)
	}
	f.failing.Store(true)
	if _, err := w.Append(ctx, audit.Event{Type: "b"}, nil); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("failed write: %v, want ErrUnavailable", err)
	}
	f.failing.Store(false)
	ev, err := w.Append(ctx, audit.Event{Type: "c"}, nil)
	if err != nil || ev.Seq != 2 {
		t.Fatalf("after recovery: seq %d, %v", ev.Seq, err)
	}
	var v audit.Verifier
	if err := f.ScanAudit(ctx, 0, func(seq uint64, data []byte) error { return v.Next(data) }); err != nil || v.Count() != 2 {
		t.Fatalf("chain after a failed commit: %d records, %v", v.Count(), err)
	}
}

func TestVerifierCatchesTampering(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, store.DurabilityFsync)
	w, _ := audit.NewWriter(ctx, s, time.Now, discard)
	for i := 0; i < 5; i++ {
		if _, err := w.Append(ctx, audit.Event{Type: "call.allowed", Code: fmt.Sprint(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	var recs [][]byte
	_ = s.ScanAudit(ctx, 0, func(seq uint64, data []byte) error { recs = append(recs, append([]byte(nil), data...)); return nil })
	check := func(rs [][]byte) error {
		var v audit.Verifier
		for _, r := range rs {
			if err := v.Next(r); err != nil {
				return err
			}
		}
		return nil
	}
	modified := append([][]byte{}, recs...)
	modified[2] = []byte(string(recs[2][:len(recs[2])-2]) + ` "}`)
	edited := append([][]byte{}, recs...)
	edited[2] = []byte(replaceOnce(string(recs[2]), `"code":"2"`, `"code":"X"`))
	tests := map[string][][]byte{
		"modified":  edited,
		"garbled":   modified,
		"deleted":   append(append([][]byte{}, recs[:2]...), recs[3:]...),
		"reordered": {recs[0], recs[2], recs[1], recs[3], recs[4]},
		"inserted":  append(append(append([][]byte{}, recs[:2]...), recs[1]), recs[2:]...),
	}
	for name, rs := range tests {
		var ve *audit.VerifyError
		if err := check(rs); !errors.As(err, &ve) {
			t.Errorf("%s: verify = %v, want a VerifyError", name, err)
		}
	}
	if err := check(recs); err != nil {
		t.Fatalf("untouched chain: %v", err)
	}
}

func replaceOnce(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	panic("not found: " + old)
}

// BenchmarkAuditAppend compares one transaction per record with group
// commit under concurrency (64 writers), both fsync'd.
func BenchmarkAuditAppend(b *testing.B) {
	b.Run("single-update", func(b *testing.B) {
		s := MustOpen(b, store.DurabilityFsync)
		var seq uint64
		for b.Loop() {
			seq++
			if err := s.CommitAudit(context.Background(), []audit.Entry{{Seq: seq, Data: []byte(`{"type":"call.allowed"}`)}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, d := range []string{store.DurabilityFsync, store.DurabilityBuffered} {
		for _, par := range []int{1, 8, 32} { // 2, 16 and 64 writers on 2 cores
			b.Run(fmt.Sprintf("group-commit-%s-%d", d, 2*par), func(b *testing.B) {
				s := MustOpen(b, d)
				w, _ := audit.NewWriter(context.Background(), s, time.Now, discard)
				defer w.Close()
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := w.Append(context.Background(), audit.Event{Type: audit.TypeCallAllowed}, nil); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// pipelineSink watches the writer's two stages on the real store: which
// records were written, which a finished sync covers, and whether writes go
// on while a sync runs.
type pipelineSink struct {
	*boltstore.Bolt
	written    atomic.Uint64 // highest seq written
	synced     atomic.Uint64 // highest seq a finished sync covers
	syncing    atomic.Bool
	overlapped chan struct{} // closed once a write happened during a sync
	once       sync.Once
	failSync   atomic.Bool
}

func (p *pipelineSink) WriteAudit(ctx context.Context, e []audit.Entry) (bool, error) {
	needSync, err := p.Bolt.WriteAudit(ctx, e)
	if err == nil {
		p.written.Store(e[len(e)-1].Seq)
		if p.syncing.Load() {
			p.once.Do(func() { close(p.overlapped) })
		}
	}
	return needSync, err
}

func (p *pipelineSink) SyncAudit(ctx context.Context) error {
	covers := p.written.Load() // a sync covers what was written before it began
	p.syncing.Store(true)
	defer p.syncing.Store(false)
	if p.failSync.Load() {
		return errors.New("injected: fsync EIO")
	}
	// Hold the first sync until a write arrives meanwhile: a writer that
	// waits for each sync before writing the next batch never gets there.
	select {
	case <-p.overlapped:
	case <-time.After(10 * time.Second):
	}
	if err := p.Bolt.SyncAudit(ctx); err != nil {
		return err
	}
	if covers > p.synced.Load() {
		p.synced.Store(covers)
	}
	return nil
}

func TestAuditAnswersOnlyAfterASyncCoveringTheRecord(t *testing.T) {
	ctx := context.Background()
	p := &pipelineSink{Bolt: MustOpen(t, store.DurabilityFsync), overlapped: make(chan struct{})}
	w, err := audit.NewWriter(ctx, p, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	for range 16 {
		g.Go(func() error {
			for range 50 {
				ev, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed}, nil)
				if err != nil {
					return err
				}
				if s := p.synced.Load(); ev.Seq > s {
					return fmt.Errorf("record %d answered before a sync covered it (synced through %d)", ev.Seq, s)
				}
				w.AppendAsync(audit.Event{Type: audit.TypeCallCompleted})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.overlapped:
	default:
		t.Fatal("no batch was written while a sync ran: the stages do not overlap")
	}
	w.Close()
	var v audit.Verifier
	if err := p.ScanAudit(ctx, 0, func(seq uint64, data []byte) error { return v.Next(data) }); err != nil || v.Count() != 16*50*2 {
		t.Fatalf("chain: %d records, %v", v.Count(), err)
	}
}

func TestAuditFailedSyncStopsTheWriter(t *testing.T) {
	ctx := context.Background()
	p := &pipelineSink{Bolt: MustOpen(t, store.DurabilityFsync), overlapped: make(chan struct{})}
	close(p.overlapped)
	w, err := audit.NewWriter(ctx, p, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Append(ctx, audit.Event{Type: "a"}, nil); err != nil || w.Healthy() != nil {
		t.Fatalf("healthy writer: %v, %v", err, w.Healthy())
	}
	p.failSync.Store(true)
	if _, err := w.Append(ctx, audit.Event{Type: "b"}, nil); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("append whose sync failed: %v, want ErrUnavailable", err)
	}
	// The disk "recovers", but what the page cache holds is no longer known:
	// the writer stays stopped, and says so.
	p.failSync.Store(false)
	if _, err := w.Append(ctx, audit.Event{Type: "c"}, nil); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("append after a failed sync: %v, want ErrUnavailable", err)
	}
	if err := w.Healthy(); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("Healthy after a failed sync: %v", err)
	}
}

// TestWritesDuringCloseAreRefused: a write that races with Close (an
// approved action finishing during shutdown) is refused, never run against
// closed files (the race detector watches this test).
func TestWritesDuringCloseAreRefused(t *testing.T) {
	ctx := context.Background()
	s, err := boltstore.OpenBolt(filepath.Join(t.TempDir(), "a.db"), store.DurabilityFsync, discard)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var g errgroup.Group
	var started sync.WaitGroup
	for w := range 4 {
		started.Add(1)
		g.Go(func() error {
			for i := 0; ; i++ {
				sess := &session.Session{ID: fmt.Sprintf("ses_%d_%d", w, i), TaskID: "t", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
				err := s.PutSession(ctx, sess)
				if i == 0 {
					started.Done()
				}
				if err != nil {
					if strings.Contains(err.Error(), "closed") {
						return nil
					}
					return err
				}
			}
		})
	}
	started.Wait() // every writer is at work
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("a write during Close failed other than by refusal: %v", err)
	}
	if _, err := s.WriteAudit(ctx, []audit.Entry{{Seq: 1, Data: []byte(`{}`)}}); err == nil {
		t.Fatal("an audit write after Close succeeded")
	}
}
