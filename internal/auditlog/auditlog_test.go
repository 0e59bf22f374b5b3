package auditlog_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auditlog"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/store"
)

// Pruning keeps the chain verifiable: the records before the cut go, an
// anchoring checkpoint signs the last of them, and the rest verify.
func TestPruneKeepsTheChainVerifiable(t *testing.T) {
	ctx := context.Background()
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	clk := func() time.Time { return now }
	w, err := audit.NewWriter(ctx, st, clk, brokertest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	l := auditlog.New(ctx, auditlog.Config{Store: st, Writer: w, Now: clk, Log: brokertest.Discard(),
		SignKey: ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))})
	admin := audit.Actor{Kind: "admin", ID: "admin"}
	for range 3 {
		if _, err := w.Append(ctx, audit.Event{Type: audit.TypeKillswitch, Actor: admin}, nil); err != nil {
			t.Fatal(err)
		}
	}
	now = t0.Add(time.Hour)
	if _, err := w.Append(ctx, audit.Event{Type: audit.TypeKillswitchOff, Actor: admin}, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := l.Checkpoint(ctx); err != nil || c.Seq != 4 {
		t.Fatalf("Checkpoint = %+v, %v; want the head, seq 4", c, err)
	}
	if c, err := l.Checkpoint(ctx); err != nil || c.Seq != 0 {
		t.Fatalf("Checkpoint of an unmoved head = %+v, %v; want none", c, err)
	}
	n, anchor, err := l.Prune(ctx, admin, t0.Add(30*time.Minute))
	if err != nil || n != 3 || anchor.Seq != 3 || !anchor.Anchor {
		t.Fatalf("Prune = %d, %+v, %v; want 3 removed behind an anchor at seq 3", n, anchor, err)
	}
	r, err := l.Verify(ctx)
	if err != nil || !r.OK || r.FirstSeq != 4 || r.LastSeq != 5 {
		t.Fatalf("Verify after the prune = %+v, %v; want ok over seq 4..5 (the prune's own record last)", r, err)
	}
}
