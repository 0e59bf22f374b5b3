// Package changefeed is how broker replicas on one store learn each
// other's changes (DESIGN §9): the Feed port a shared store implements, and
// the Follower that delivers its changes, in order, to the applier the
// broker gives it and says whether this replica is current.
package changefeed

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Kinds of Change.
const (
	SessionKilled = "session.killed" // Key: the session id
	GrantRevoked  = "grant.revoked"  // Key: the grant id
	Killswitch    = "killswitch"     // Key: ""; the state is in the meta store (killswitch.MetaKey)
	Action        = "action"         // Key: the action id (created, decided, executing, finished)
)

// Change is one state change a replica made, as the feed tells it.
type Change struct {
	Pos  int64  // its position in the feed (increasing)
	Kind string // one of the kinds above
	Key  string
}

// Feed is the change feed of a store several brokers share: a session
// killed, a grant revoked, the kill-switch set, an action created or moved.
// The store that implements it records each such change in the same
// transaction as the change itself (PutSession of a revoked session,
// PutGrant of a revoked grant, PutMeta(killswitch.MetaKey), PutAction,
// UpdateAction), so a change is in the feed exactly when it is committed.
// Without a feed (the embedded store) the broker is the only replica and
// its in-process state is the truth.
type Feed interface {
	// ChangePosition is the position of the last change recorded.
	ChangePosition(ctx context.Context) (int64, error)
	// FollowChanges calls apply with every change after position from, in
	// order, and current(t) each time every change committed before t was
	// applied. It reconnects by itself after a failure, and catches up from
	// the last change applied; an apply error is handled as one (the change
	// is delivered again). It returns when ctx ends.
	FollowChanges(ctx context.Context, from int64, apply func(Change) error, current func(time.Time)) error
}

// DefaultStaleAfter is how long a replica may go without confirming it is
// current before it refuses sandbox calls (DESIGN §9: 2 s).
const DefaultStaleAfter = 2 * time.Second

// Follower applies a Feed to this replica and says whether it is current.
type Follower struct {
	feed       Feed
	staleAfter time.Duration
	base       time.Time    // the monotonic origin of confirmed
	confirmed  atomic.Int64 // time since base of the last "current as of"
	position   atomic.Int64 // the last change applied
	cancel     context.CancelFunc
	done       chan struct{}
}

// New reads the feed's position: call it before the broker loads its state
// (changes made meanwhile are applied again: applying is idempotent), and
// Start once it is loaded. staleAfter is how long without confirming it is
// current the replica is stale (0: DefaultStaleAfter).
func New(ctx context.Context, feed Feed, staleAfter time.Duration) (*Follower, error) {
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	f := &Follower{feed: feed, staleAfter: staleAfter, base: time.Now()}
	pos, err := feed.ChangePosition(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the change feed's position: %w", err)
	}
	f.position.Store(pos)
	return f, nil
}

// Lag is how long ago the replica last confirmed it is current.
func (f *Follower) Lag() time.Duration {
	return time.Since(f.base) - time.Duration(f.confirmed.Load())
}

// Stale reports whether the feed has not confirmed for staleAfter that
// this replica is current (it then refuses sandbox calls).
func (f *Follower) Stale() bool { return f.Lag() > f.staleAfter }

// Start delivers every change after New's position to apply, in order,
// until Stop; a change whose apply fails is delivered again. The replica
// counts as current as of New: its state was read after that position.
func (f *Follower) Start(apply func(context.Context, Change) error) {
	f.confirmed.Store(0) // current as of New
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		_ = f.feed.FollowChanges(ctx, f.position.Load(), func(c Change) error {
			if err := apply(ctx, c); err != nil {
				return err
			}
			f.position.Store(c.Pos)
			return nil
		}, func(t time.Time) {
			if d := t.Sub(f.base); d > time.Duration(f.confirmed.Load()) {
				f.confirmed.Store(int64(d))
			}
		})
	}()
}

// Stop stops delivering changes and waits for the one being applied.
func (f *Follower) Stop() {
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
}
