package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/store"
)

// TestAuditRefusesKilledSession: a guarded record (a call's "allowed"
// record) is refused inside the append's transaction once another broker
// committed its session's kill, its grant's revoke or the kill-switch:
// ErrKilled, not in the chain, which continues unbroken; an unguarded
// record of the same session (the kill's own record) is written.
func TestAuditRefusesKilledSession(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, store.DurabilityFsync)
	other := MustOpenDSN(t, s.Pool().Config().ConnString(), store.DurabilityFsync) // "another broker"
	now := time.Now().UTC().Truncate(time.Microsecond)
	mk := func(id string) (session.Session, grants.Grant) {
		ss := session.Session{ID: id, TaskID: "t", TokenID: "jti_" + id, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Isolation: session.IsolationProcess}
		g := grants.Grant{ID: "grt_" + id, SessionID: id, TaskID: "t", Spec: grants.Spec{Upstream: "api"}, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := s.CreateSession(ctx, &ss, []grants.Grant{g}); err != nil {
			t.Fatal(err)
		}
		return ss, g
	}
	w, err := audit.NewWriter(ctx, s, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	allowed := func(ss session.Session, g grants.Grant) error {
		_, err := w.AppendGuarded(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: ss.ID, GrantID: g.ID, Decision: "allow"}, nil)
		return err
	}

	s1, g1 := mk("ses_1")
	if err := allowed(s1, g1); err != nil {
		t.Fatalf("allowed record of a live session: %v", err)
	}
	killed := s1
	killed.RevokedAt = now
	if err := other.PutSession(ctx, &killed); err != nil {
		t.Fatal(err)
	}
	if err := allowed(s1, g1); !errors.Is(err, audit.ErrKilled) {
		t.Fatalf("allowed record after the session's kill: %v, want ErrKilled", err)
	}
	if _, err := w.Append(ctx, audit.Event{Type: audit.TypeSessionRevoked, SessionID: s1.ID}, nil); err != nil {
		t.Fatalf("the kill's own record: %v", err)
	}

	s2, g2 := mk("ses_2")
	revoked := g2
	revoked.RevokedAt = now
	if err := other.PutGrant(ctx, &revoked, grants.Usage{}); err != nil {
		t.Fatal(err)
	}
	if err := allowed(s2, g2); !errors.Is(err, audit.ErrKilled) {
		t.Fatalf("allowed record after its grant's revoke: %v, want ErrKilled", err)
	}

	s3, g3 := mk("ses_3")
	if err := other.PutMeta(ctx, killswitch.MetaKey, []byte(`{"engaged":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := allowed(s3, g3); !errors.Is(err, audit.ErrKilled) {
		t.Fatalf("allowed record with the kill-switch engaged: %v, want ErrKilled", err)
	}
	if err := other.PutMeta(ctx, killswitch.MetaKey, []byte(`{"engaged":false}`)); err != nil {
		t.Fatal(err)
	}
	if err := allowed(s3, g3); err != nil {
		t.Fatalf("allowed record after the release: %v", err)
	}

	// The chain holds 3 records (allowed, revoked, allowed), unbroken.
	var v audit.Verifier
	if err := s.ScanAudit(ctx, 1, func(seq uint64, data []byte) error {
		return v.Next(data)
	}); err != nil {
		t.Fatalf("chain: %v", err)
	}
	if v.Count() != 3 {
		t.Fatalf("the chain holds %d records, want 3 (refused ones left out)", v.Count())
	}

	// Each change above is in the feed, in order.
	var kinds []string
	if err := s.Pool().QueryRow(ctx, "SELECT array_agg(kind ORDER BY id) FROM changes").Scan(&kinds); err != nil {
		t.Fatal(err)
	}
	want := []string{changefeed.SessionKilled, changefeed.GrantRevoked, changefeed.Killswitch, changefeed.Killswitch}
	if len(kinds) != len(want) {
		t.Fatalf("changes = %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("changes = %v, want %v", kinds, want)
		}
	}
}
