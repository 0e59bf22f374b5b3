package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
)

// The change feed's contract (changefeed.Feed), for a store that offers
// one (Ports.Feed; PostgreSQL, where several brokers share the store). A
// store without one (bbolt: one broker) skips it.
//
// What every feed must do:
//   - each change another replica must learn is recorded by the write
//     that makes it, in that write's commit: a session killed (PutSession of
//     a revoked session), a grant revoked (PutGrant of a revoked grant), the
//     kill-switch (PutMeta(killswitch.MetaKey)), an action created or
//     moved (PutAction, UpdateAction); ChangePosition then is the last one's
//     position, and positions increase;
//   - FollowChanges delivers every change after from, in position order,
//     none at or before from: the catch-up of a follower that stopped;
//   - a change committed while a follower runs is delivered to it, and to
//     every other follower, and current(t) is called with a t after the
//     commit only once the change was applied;
//   - a change whose apply fails is delivered again (at least once), and
//     nothing after it is applied before it is;
//   - FollowChanges returns when its context ends.

// feedWait bounds every wait for the feed (a hang guard, not a timing
// requirement: a feed that works delivers in milliseconds).
const feedWait = 20 * time.Second

// follower runs FollowChanges on a feed and keeps what it delivered.
type follower struct {
	mu      sync.Mutex
	applied []changefeed.Change
	current time.Time // the latest t current(t) was called with
	fail    func(changefeed.Change) bool

	cancel context.CancelFunc
	done   chan error
}

// follow starts a follower from position from; fail (or nil) says which
// deliveries apply refuses. It is stopped at the test's end.
func follow(t *testing.T, feed changefeed.Feed, from int64, fail func(changefeed.Change) bool) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{fail: fail, cancel: cancel, done: make(chan error, 1)}
	go func() {
		f.done <- feed.FollowChanges(ctx, from, f.apply, f.confirm)
	}()
	t.Cleanup(func() { f.stop(t) })
	return f
}

func (f *follower) apply(c changefeed.Change) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil && f.fail(c) {
		return errors.New("storetest: apply refused")
	}
	f.applied = append(f.applied, c)
	return nil
}

func (f *follower) confirm(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.current) {
		f.current = t
	}
}

// changes is what the follower applied so far.
func (f *follower) changes() []changefeed.Change {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]changefeed.Change(nil), f.applied...)
}

// stop ends the follower and waits for FollowChanges to return.
func (f *follower) stop(t *testing.T) {
	t.Helper()
	if f.cancel == nil {
		return
	}
	f.cancel()
	f.cancel = nil
	select {
	case <-f.done:
	case <-time.After(feedWait):
		t.Fatal("FollowChanges did not return after its context ended")
	}
}

// awaitFeed polls cond until it holds; it fails the test after feedWait.
func awaitFeed(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(feedWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("the feed never %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitChanges waits until f applied n changes and returns them.
func awaitChanges(t *testing.T, f *follower, n int) []changefeed.Change {
	t.Helper()
	awaitFeed(t, "delivered the changes", func() bool { return len(f.changes()) >= n })
	return f.changes()
}

// kindKeys are changes without their positions.
func kindKeys(cs []changefeed.Change) [][2]string {
	out := make([][2]string, len(cs))
	for i, c := range cs {
		out[i] = [2]string{c.Kind, c.Key}
	}
	return out
}

// increasing fails the test unless the changes' positions increase, all
// after from.
func increasing(t *testing.T, cs []changefeed.Change, from int64) {
	t.Helper()
	for _, c := range cs {
		if c.Pos <= from {
			t.Fatalf("change %+v at or before position %d", c, from)
		}
		from = c.Pos
	}
}

// feedWrites are the five writes that record a change, in this order, on
// a store with session ses_1 and its grant grt_1 (created by feedStore):
// the session killed, the grant revoked, the kill-switch engaged, action
// act_1 created, then executing.
var feedWrites = []struct {
	want  [2]string
	write func(ctx context.Context, p Ports) error
}{
	{[2]string{changefeed.SessionKilled, "ses_1"}, func(ctx context.Context, p Ports) error {
		s := sampleSession("ses_1")
		s.RevokedAt = t0.Add(time.Minute)
		return p.Sessions.PutSession(ctx, &s)
	}},
	{[2]string{changefeed.GrantRevoked, "grt_1"}, func(ctx context.Context, p Ports) error {
		g := sampleGrant("grt_1", "ses_1")
		g.RevokedAt = t0.Add(time.Minute)
		return p.Sessions.PutGrant(ctx, &g, grants.Usage{})
	}},
	{[2]string{changefeed.Killswitch, ""}, func(ctx context.Context, p Ports) error {
		v, err := json.Marshal(killswitch.State{Engaged: true})
		if err != nil {
			return err
		}
		return p.Meta.PutMeta(ctx, killswitch.MetaKey, v)
	}},
	{[2]string{changefeed.Action, "act_1"}, func(ctx context.Context, p Ports) error {
		a := sampleAction("act_1", approval.Pending, t0)
		return p.Actions.PutAction(ctx, &a)
	}},
	{[2]string{changefeed.Action, "act_1"}, func(ctx context.Context, p Ports) error {
		_, err := p.Actions.UpdateAction(ctx, "act_1", func(a *approval.Action) error { a.Status = approval.Executing; return nil })
		return err
	}},
}

// feedStore opens a store with a feed, and session ses_1 with grant
// grt_1.
func feedStore(t *testing.T, open func(t *testing.T) Ports) Ports {
	t.Helper()
	p := open(t)
	if p.Feed == nil {
		t.Fatal("the store has no change feed")
	}
	s := sampleSession("ses_1")
	must(t, p.Sessions.CreateSession(context.Background(), &s, []grants.Grant{sampleGrant("grt_1", s.ID)}))
	return p
}

// position is the feed's position.
func position(t *testing.T, feed changefeed.Feed) int64 {
	t.Helper()
	pos, err := feed.ChangePosition(context.Background())
	must(t, err)
	return pos
}

func testChanges(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()
	if open(t).Feed == nil {
		t.Skip("the store has no change feed (one broker per store)")
	}

	t.Run("EachWriteRecordsItsChange", func(t *testing.T) {
		p := feedStore(t, open)
		last := position(t, p.Feed)
		from := last
		var want [][2]string
		for _, w := range feedWrites {
			must(t, w.write(ctx, p))
			pos := position(t, p.Feed)
			if pos <= last {
				t.Fatalf("after the write of %v the position is %d, not past %d", w.want, pos, last)
			}
			last = pos
			want = append(want, w.want)
		}
		f := follow(t, p.Feed, from, nil)
		got := awaitChanges(t, f, len(want))
		diff(t, "changes recorded", want, kindKeys(got))
		increasing(t, got, from)
		if got[len(got)-1].Pos != last {
			t.Errorf("the last change is at %d, ChangePosition says %d", got[len(got)-1].Pos, last)
		}
	})

	t.Run("FollowFromPosition", func(t *testing.T) {
		p := feedStore(t, open)
		var mid int64
		for i, w := range feedWrites {
			must(t, w.write(ctx, p))
			if i == 1 {
				mid = position(t, p.Feed)
			}
		}
		f := follow(t, p.Feed, mid, nil)
		got := awaitChanges(t, f, len(feedWrites)-2)
		diff(t, "changes after the position", kindKeys(recordedFrom(2)), kindKeys(got))
		increasing(t, got, mid)
		// Nothing else arrives: none at or before mid is delivered late.
		awaitCurrent(t, f, time.Now())
		diff(t, "changes once current", kindKeys(got), kindKeys(f.changes()))
	})

	t.Run("LiveToEveryFollower", func(t *testing.T) {
		p := feedStore(t, open)
		from := position(t, p.Feed)
		a, b := follow(t, p.Feed, from, nil), follow(t, p.Feed, from, nil)
		for i, w := range feedWrites {
			must(t, w.write(ctx, p))
			committed := time.Now()
			for _, f := range []*follower{a, b} {
				// current(t) for a t after the commit: the change was applied.
				awaitCurrent(t, f, committed)
				if got := f.changes(); len(got) != i+1 || kindKeys(got)[i] != w.want {
					t.Fatalf("current after the commit of %v, but applied %v", w.want, kindKeys(got))
				}
			}
		}
		diff(t, "the two followers' changes", a.changes(), b.changes())
	})

	t.Run("CatchUpAfterStop", func(t *testing.T) {
		p := feedStore(t, open)
		from := position(t, p.Feed)
		f := follow(t, p.Feed, from, nil)
		for _, w := range feedWrites[:2] {
			must(t, w.write(ctx, p))
		}
		first := awaitChanges(t, f, 2)
		f.stop(t)
		for _, w := range feedWrites[2:] {
			must(t, w.write(ctx, p)) // the store works with no follower
		}
		g := follow(t, p.Feed, first[len(first)-1].Pos, nil)
		rest := awaitChanges(t, g, len(feedWrites)-2)
		diff(t, "changes caught up", kindKeys(recordedFrom(2)), kindKeys(rest))
		increasing(t, rest, first[len(first)-1].Pos)
		if len(f.changes()) != 2 {
			t.Errorf("a stopped follower applied %v", kindKeys(f.changes()))
		}
	})

	t.Run("FailedApplyRedelivered", func(t *testing.T) {
		p := feedStore(t, open)
		from := position(t, p.Feed)
		var mu sync.Mutex
		refusals := 0
		f := follow(t, p.Feed, from, func(c changefeed.Change) bool {
			mu.Lock()
			defer mu.Unlock()
			if c.Kind == changefeed.GrantRevoked && refusals < 2 {
				refusals++
				return true
			}
			return false
		})
		for _, w := range feedWrites {
			must(t, w.write(ctx, p))
		}
		got := awaitChanges(t, f, len(feedWrites))
		// At least once: a change refused twice is there once applied; in
		// order: nothing after it was applied first.
		diff(t, "changes applied", kindKeys(recordedFrom(0)), kindKeys(got))
		increasing(t, got, from)
		mu.Lock()
		defer mu.Unlock()
		if refusals != 2 {
			t.Errorf("the refused change was delivered %d times before it was applied, want 2 refusals", refusals)
		}
	})

	t.Run("ReturnsWhenContextEnds", func(t *testing.T) {
		p := feedStore(t, open)
		f := follow(t, p.Feed, position(t, p.Feed), nil)
		awaitCurrent(t, f, time.Time{})
		f.stop(t) // fails the test if FollowChanges does not return
	})
}

// feedWrites2 are the changes feedWrites records from the i-th on.
func recordedFrom(i int) []changefeed.Change {
	var out []changefeed.Change
	for _, w := range feedWrites[i:] {
		out = append(out, changefeed.Change{Kind: w.want[0], Key: w.want[1]})
	}
	return out
}

// awaitCurrent waits until f's feed called current(t) with a t after at.
func awaitCurrent(t *testing.T, f *follower, at time.Time) {
	t.Helper()
	awaitFeed(t, "confirmed it is current", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.current.After(at)
	})
}
