package changefeed_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/changefeed"
)

// feed is a Feed in memory that honours the contract the follower relies
// on: changes after from, in order, each again after a failed apply, then
// current. (The contract itself is checked on PostgreSQL by storetest.)
type feed struct{ changes []changefeed.Change }

func (f *feed) ChangePosition(context.Context) (int64, error) { return 2, nil }

func (f *feed) FollowChanges(ctx context.Context, from int64, apply func(changefeed.Change) error, current func(time.Time)) error {
	for _, c := range f.changes {
		if c.Pos <= from {
			continue
		}
		for apply(c) != nil {
		}
	}
	current(time.Now())
	<-ctx.Done()
	return ctx.Err()
}

// The follower delivers the changes after the position New read, in
// order, again after a failed apply, and is current once the feed says so.
func TestFollowerDeliversFromItsPosition(t *testing.T) {
	f := &feed{changes: []changefeed.Change{
		{Pos: 1, Kind: changefeed.Action, Key: "act_old"},
		{Pos: 2, Kind: changefeed.Action, Key: "act_old"},
		{Pos: 3, Kind: changefeed.SessionKilled, Key: "ses_1"},
		{Pos: 4, Kind: changefeed.Killswitch},
	}}
	fl, err := changefeed.New(context.Background(), f, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []changefeed.Change
	failed := false
	done := make(chan struct{})
	fl.Start(func(_ context.Context, c changefeed.Change) error {
		mu.Lock()
		defer mu.Unlock()
		if c.Pos == 3 && !failed {
			failed = true
			return errors.New("apply failed")
		}
		got = append(got, c)
		if c.Pos == 4 {
			close(done)
		}
		return nil
	})
	<-done
	fl.Stop()
	if diff := cmp.Diff(f.changes[2:], got); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if fl.Stale() {
		t.Errorf("stale (lag %v) with a StaleAfter of an hour", fl.Lag())
	}
}
