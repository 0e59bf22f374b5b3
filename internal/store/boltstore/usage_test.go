package boltstore_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

// Two concurrent calls on a grant each take a usage snapshot after their
// reservation and before their audit record is sequenced, so the older,
// smaller snapshot can reach the store last; so can a grant write (a kill,
// a revoke) racing with the journal's applier. Whatever the order, the
// usage a restart loads must count every call: the grant must not allow
// one use (or one budget unit) more than it should.
func TestUsageOlderSnapshotNeverWins(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	g := grants.Grant{ID: "grt_1", SessionID: "ses_1", ExpiresAt: now.Add(time.Hour), Spec: grants.Spec{
		Upstream: "api", MaxUses: 3, Budget: map[string]float64{"body.amount": 10},
		Rules: []grants.Rule{{Method: "POST", Path: "/pay"}},
	}}
	body := func(amount float64) *grants.Call {
		return &grants.Call{Method: "POST", Segments: []string{"pay"}, Header: http.Header{},
			Body: map[string]any{"amount": amount}, BodyJSON: true, HasBody: true}
	}
	// Two calls decided in this order, each snapshotting the usage after
	// its reservation, as RecordAllowed does.
	snapshots := func(t *testing.T) (first, second grants.Usage) {
		live, err := grants.Compile(g, grants.Usage{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := grants.Evaluate(now, []*grants.Live{live}, "api", body(4)); err != nil {
			t.Fatal(err)
		}
		first = live.Usage()
		if _, err := grants.Evaluate(now, []*grants.Live{live}, "api", body(4)); err != nil {
			t.Fatal(err)
		}
		return first, live.Usage()
	}
	side := func(u grants.Usage) *grants.UsageUpdate { return &grants.UsageUpdate{GrantID: g.ID, Usage: u} }
	entry := func(seq uint64, u grants.Usage) audit.Entry {
		return audit.Entry{Seq: seq, Data: []byte(`{}`), Side: side(u)}
	}
	tests := []struct {
		name  string
		write func(ctx context.Context, s *boltstore.Bolt, first, second grants.Usage) error
	}{
		{"journal: reversed in one batch", func(ctx context.Context, s *boltstore.Bolt, first, second grants.Usage) error {
			return s.CommitAudit(ctx, []audit.Entry{entry(1, second), entry(2, first)})
		}},
		{"journal: reversed across batches", func(ctx context.Context, s *boltstore.Bolt, first, second grants.Usage) error {
			if err := s.CommitAudit(ctx, []audit.Entry{entry(1, second)}); err != nil {
				return err
			}
			return s.CommitAudit(ctx, []audit.Entry{entry(2, first)})
		}},
		{"grant write after the journal", func(ctx context.Context, s *boltstore.Bolt, first, second grants.Usage) error {
			if err := s.CommitAudit(ctx, []audit.Entry{entry(1, second)}); err != nil {
				return err
			}
			if _, err := s.Grant(ctx, g.ID); err != nil { // the applier has applied it
				return err
			}
			return s.PutGrant(ctx, &g, first)
		}},
		{"journal after a grant write", func(ctx context.Context, s *boltstore.Bolt, first, second grants.Usage) error {
			if err := s.PutGrant(ctx, &g, second); err != nil {
				return err
			}
			return s.CommitAudit(ctx, []audit.Entry{entry(1, first)})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "airlock.db")
			s, err := boltstore.OpenBolt(path, store.DurabilityFsync, discard)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.PutGrant(ctx, &g, grants.Usage{}); err != nil {
				t.Fatal(err)
			}
			first, second := snapshots(t)
			if err := tt.write(ctx, s, first, second); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			CheckConsistency(t, path)
			// The restart.
			s, err = boltstore.OpenBolt(path, store.DurabilityFsync, discard)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec, err := s.Grant(ctx, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Usage.Uses != 2 || rec.Usage.Spent["body.amount"] != 8 {
				t.Fatalf("usage after restart: %d uses, %v spent; want 2 uses and 8 spent", rec.Usage.Uses, rec.Usage.Spent["body.amount"])
			}
			live, err := grants.Compile(rec.Grant, rec.Usage)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := grants.Evaluate(now, []*grants.Live{live}, "api", body(4)); !errors.Is(err, grants.ErrBudgetExceeded) {
				t.Fatalf("a third payment of 4 with 8 of 10 spent: %v, want budget exceeded", err)
			}
			if _, err := grants.Evaluate(now, []*grants.Live{live}, "api", body(2)); err != nil {
				t.Fatalf("the third use: %v", err)
			}
			if _, err := grants.Evaluate(now, []*grants.Live{live}, "api", body(0)); !errors.Is(err, grants.ErrGrantExhausted) {
				t.Fatalf("a fourth use of max_uses 3: %v, want exhausted", err)
			}
		})
	}
}
