package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/pgtest"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/pgstore"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestMigrationsOnceWhenBrokersStartTogether: brokers opening one empty
// database at the same moment each see the whole schema, applied once.
func TestMigrationsOnceWhenBrokersStartTogether(t *testing.T) {
	dsn := pgtest.DSN(t)
	const n = 6
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := pgstore.Open(context.Background(), dsn, store.DurabilityFsync, discard)
			if err == nil {
				err = s.Ready(context.Background())
				s.Close()
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Open beside other brokers: %v", err)
		}
	}
	conn := mustConn(t, dsn)
	var count, distinct int
	if err := conn.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT version) FROM schema_migrations").Scan(&count, &distinct); err != nil {
		t.Fatal(err)
	}
	if count == 0 || count != distinct {
		t.Errorf("schema_migrations holds %d rows for %d versions, want each version once", count, distinct)
	}
	// Opening again applies nothing and keeps the data.
	s := MustOpenDSN(t, dsn, store.DurabilityFsync)
	if err := s.PutMeta(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	s2 := MustOpenDSN(t, dsn, store.DurabilityFsync)
	if v, err := s2.Meta(context.Background(), "k"); err != nil || string(v) != "v" {
		t.Errorf("Meta after a second Open = %q, %v", v, err)
	}
}

// TestMigrationsRefuseANewerSchema: a database a newer broker migrated is
// not used by an older one.
func TestMigrationsRefuseANewerSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	MustOpenDSN(t, dsn, store.DurabilityFsync)
	conn := mustConn(t, dsn)
	if _, err := conn.Exec(context.Background(), "INSERT INTO schema_migrations (version, name) VALUES (999, '0999_future.sql')"); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.Open(context.Background(), dsn, store.DurabilityFsync, discard)
	if err == nil || !strings.Contains(err.Error(), "newer than this broker") {
		t.Errorf("Open on a newer schema = %v, want a refusal", err)
	}
}

// TestOneChainAcrossBrokers: two brokers (each its own pool and audit
// writer) appending to one database at once make one chain that the
// offline verifier checks: consecutive sequence numbers, each record
// linked to the one before, whoever wrote it; every acknowledged record is
// in it, once.
func TestOneChainAcrossBrokers(t *testing.T) {
	for _, d := range []string{store.DurabilityFsync, store.DurabilityBuffered} {
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			dsn := pgtest.DSN(t)
			a, b := MustOpenDSN(t, dsn, d), MustOpenDSN(t, dsn, d)
			const perWriter, callers = 60, 8
			acked := map[uint64]string{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for wi, s := range []*pgstore.PG{a, b} {
				w, err := audit.NewWriter(ctx, s, time.Now, discard)
				if err != nil {
					t.Fatal(err)
				}
				for c := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range perWriter / callers {
							ev, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: fmt.Sprintf("ses_%d_%d", wi, c), Reason: fmt.Sprint(i)}, nil)
							if err != nil {
								t.Errorf("append: %v", err)
								return
							}
							mu.Lock()
							if prev, dup := acked[ev.Seq]; dup {
								t.Errorf("seq %d acknowledged twice (%s and %s)", ev.Seq, prev, ev.Hash)
							}
							acked[ev.Seq] = ev.Hash
							mu.Unlock()
						}
					}()
				}
				t.Cleanup(w.Close)
			}
			wg.Wait()
			var v audit.Verifier
			seen := map[uint64]bool{}
			if err := a.ScanAudit(ctx, 0, func(seq uint64, data []byte) error {
				seen[seq] = true
				if h, ok := acked[seq]; ok && !strings.Contains(string(data), h) {
					t.Errorf("record %d is not the one acknowledged", seq)
				}
				return v.Next(data)
			}); err != nil {
				t.Fatalf("the chain does not verify: %v", err)
			}
			want := 2 * (perWriter / callers) * callers
			if v.Count() != uint64(want) || len(acked) != want {
				t.Errorf("chain holds %d records, %d acknowledged; want %d", v.Count(), len(acked), want)
			}
			for seq := range acked {
				if !seen[seq] {
					t.Errorf("acknowledged record %d is missing", seq)
				}
			}
			seq, head, err := b.AuditHead(ctx)
			if err != nil || seq != uint64(want) || head != v.Head() {
				t.Errorf("AuditHead = %d, %q, %v; want %d, %q", seq, head, err, want, v.Head())
			}
		})
	}
}

// TestAuditAppendFailsClosed: a record the database cannot take is an
// error for its caller (audit.ErrUnavailable), and a rejected batch leaves
// nothing behind (the head does not move).
func TestAuditAppendFailsClosed(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpenDSN(t, dsn, store.DurabilityFsync)
	w, err := audit.NewWriter(ctx, s, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Append(ctx, audit.Event{Type: audit.TypeBrokerStarted}, nil); err != nil {
		t.Fatal(err)
	}
	// A writer that seals records itself onto a stale head: refused whole.
	_, err = s.WriteAudit(ctx, []audit.Entry{{Seq: 1, Data: []byte(`{"seq":1}`)}})
	if err == nil {
		t.Error("WriteAudit of records that do not follow the head succeeded")
	}
	// The database refuses the insert (its table is gone): the caller
	// gets ErrUnavailable and the head stays.
	conn := mustConn(t, dsn)
	if _, err := conn.Exec(ctx, "ALTER TABLE audit RENAME TO audit_gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed}, nil); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("Append with the database refusing = %v, want audit.ErrUnavailable", err)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE audit_gone RENAME TO audit"); err != nil {
		t.Fatal(err)
	}
	if seq, _, err := s.AuditHead(ctx); err != nil || seq != 1 {
		t.Errorf("head after a refused batch = %d, %v; want 1", seq, err)
	}
	// The database back, the chain goes on from its head.
	ev, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed}, nil)
	if err != nil || ev.Seq != 2 {
		t.Errorf("Append after recovery = seq %d, %v; want 2", ev.Seq, err)
	}
	// With the pool closed (the database gone), Append fails closed.
	s.Close()
	if _, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed}, nil); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("Append with the store closed = %v, want audit.ErrUnavailable", err)
	}
}

// TestOneExecutingClaimAcrossBrokers: reviewers on two brokers approve one
// action at once: the row lock lets exactly one claim it.
func TestOneExecutingClaimAcrossBrokers(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	stores := []*pgstore.PG{MustOpenDSN(t, dsn, store.DurabilityFsync), MustOpenDSN(t, dsn, store.DurabilityFsync)}
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := approval.Action{ID: "act_1", SessionID: "ses_1", Status: approval.Pending, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		SessionCreatedBy: "tok_op", ApprovalsRequired: 1}
	if err := stores[0].PutAction(ctx, &a); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	start := make(chan struct{})
	wins := make(chan int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var execute bool
			_, err := stores[i%2].UpdateAction(ctx, a.ID, func(x *approval.Action) error {
				var err error
				execute, err = approval.Decide(x, approval.Reviewer{ID: fmt.Sprint("tok_r", i), Name: fmt.Sprint("r", i)}, "approve", "", now)
				return err
			})
			switch {
			case err == nil && execute:
				wins <- i
			case err != nil && !errors.Is(err, approval.ErrDecided):
				t.Errorf("reviewer %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(wins)
	if len(wins) != 1 {
		t.Errorf("%d reviewers' approvals claimed the action, want exactly 1", len(wins))
	}
	got, err := stores[1].Action(ctx, a.ID)
	if err != nil || got.Status != approval.Executing || len(got.Decisions) != 1 {
		t.Errorf("action after the race: %s with %d decisions, %v", got.Status, len(got.Decisions), err)
	}
}

// TestOpenRefusesWithoutEchoingTheDSN: a DSN that does not parse is
// refused without quoting it (it may hold a password).
func TestOpenRefusesWithoutEchoingTheDSN(t *testing.T) {
	_, err := pgstore.Open(context.Background(), "postgres://u:CANARY-pw@host:notaport/db", store.DurabilityFsync, discard)
	if err == nil || strings.Contains(err.Error(), "CANARY") {
		t.Errorf("Open with a bad DSN = %v; want an error without the password", err)
	}
	if _, err := pgstore.Open(context.Background(), pgtest.DSN(t), "sometimes", discard); err == nil {
		t.Error("Open with an unknown durability succeeded")
	}
}

func mustConn(tb testing.TB, dsn string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
