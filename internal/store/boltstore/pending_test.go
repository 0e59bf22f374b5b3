package boltstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/store"
)

// TestPendingSummary: the count and the oldest creation time of the pending
// actions, whatever order their ids sort in, following every transition.
func TestPendingSummary(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, store.DurabilityBuffered)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if n, oldest, err := s.PendingSummary(ctx); err != nil || n != 0 || !oldest.IsZero() {
		t.Fatalf("empty: %d %v %v", n, oldest, err)
	}
	// Ids sort against creation: act_a is the newest.
	for i, id := range []string{"act_a", "act_b", "act_c"} {
		a := &approval.Action{ID: id, Status: approval.Pending, CreatedAt: t0.Add(time.Duration(3-i) * time.Minute)}
		if err := s.PutAction(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name       string
		decide     string // action leaving pending first ("" none)
		to         approval.Status
		wantN      int
		wantOldest time.Time
	}{
		{"three pending", "", "", 3, t0.Add(time.Minute)},
		{"the oldest denied", "act_c", approval.Denied, 2, t0.Add(2 * time.Minute)},
		{"the newest expired", "act_a", approval.Expired, 1, t0.Add(2 * time.Minute)},
		{"the last one executing", "act_b", approval.Executing, 0, time.Time{}},
	}
	for _, tt := range tests {
		if tt.decide != "" {
			if _, err := s.UpdateAction(ctx, tt.decide, func(a *approval.Action) error { a.Status = tt.to; return nil }); err != nil {
				t.Fatal(err)
			}
		}
		n, oldest, err := s.PendingSummary(ctx)
		if err != nil || n != tt.wantN || !oldest.Equal(tt.wantOldest) {
			t.Errorf("%s: PendingSummary = %d, %v, %v; want %d, %v", tt.name, n, oldest, err, tt.wantN, tt.wantOldest)
		}
	}
}
