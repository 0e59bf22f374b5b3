package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/session"
)

// Kinds of Change.
const (
	ChangeSessionKilled = "session.killed" // Key: the session id
	ChangeGrantRevoked  = "grant.revoked"  // Key: the grant id
	ChangeKillswitch    = "killswitch"     // Key: ""; read the state with killswitch.Service.Apply
	ChangeAction        = "action"         // Key: the action id (created, decided, executing, finished)
)

// Change is one state change another replica made, as the feed tells it.
type Change struct {
	Pos  int64  // its position in the feed (increasing)
	Kind string // Change* above
	Key  string
}

// ChangeFeed is how replicas on one store learn each other's changes
// (DESIGN §9): a session killed, a grant revoked, the kill-switch set, an
// action created or moved. The store that implements it records each such
// change in the same transaction as the change itself (PutSession of a
// revoked session, PutGrant of a revoked grant, PutMeta(killswitch.MetaKey),
// PutAction, UpdateAction), so a change is in the feed exactly when it is
// committed. Without a feed (Options.Changes nil, the embedded store) the
// broker is the only replica and its in-process state is the truth.
type ChangeFeed interface {
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

// ErrStale refuses sandbox calls on a replica whose change feed has not
// confirmed for StaleAfter that it is current: a kill made elsewhere might
// be unknown here (problem code broker_unavailable, 503).
var ErrStale = fault.New(fault.BrokerUnavailable, "this broker cannot confirm it is current with the other replicas; retry on another")

// follower applies a ChangeFeed to this broker and says whether it is current.
type follower struct {
	feed       ChangeFeed
	staleAfter time.Duration
	base       time.Time    // the monotonic origin of confirmed
	confirmed  atomic.Int64 // time since base of the last "current as of"
	position   atomic.Int64 // the last change applied
	cancel     context.CancelFunc
	done       chan struct{}
}

// lag is how long ago the replica last confirmed it is current.
func (f *follower) lag() time.Duration {
	return time.Since(f.base) - time.Duration(f.confirmed.Load())
}

// stale reports whether this replica refuses sandbox calls: it has a feed
// that has not confirmed for staleAfter that it is current.
func (b *Broker) stale() bool {
	return b.feed != nil && b.feed.lag() > b.feed.staleAfter
}

// FeedLag is how long ago the change feed last confirmed this replica is
// current (0 without a feed).
func (b *Broker) FeedLag() time.Duration {
	if b.feed == nil {
		return 0
	}
	return max(b.feed.lag(), 0)
}

// newFollower reads the feed's position before the broker loads its state
// (changes made meanwhile are applied again: applying is idempotent).
func newFollower(ctx context.Context, feed ChangeFeed, staleAfter time.Duration) (*follower, error) {
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	f := &follower{feed: feed, staleAfter: staleAfter, base: time.Now()}
	pos, err := feed.ChangePosition(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the change feed's position: %w", err)
	}
	f.position.Store(pos)
	return f, nil
}

// startFollowing applies the feed until Close.
func (b *Broker) startFollowing() {
	f := b.feed
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		_ = f.feed.FollowChanges(ctx, f.position.Load(), func(c Change) error {
			if err := b.applyChange(ctx, c); err != nil {
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

// stopFollowing stops applying the feed and waits for it.
func (b *Broker) stopFollowing() {
	if b.feed != nil && b.feed.cancel != nil {
		b.feed.cancel()
		<-b.feed.done
	}
}

// applyChange brings this replica's memory in line with a change made by
// any replica (its own included: applying is idempotent).
func (b *Broker) applyChange(ctx context.Context, c Change) error {
	switch c.Kind {
	case ChangeSessionKilled:
		b.killedElsewhere(c.Key)
	case ChangeGrantRevoked:
		if gl, ok := b.sess.grant(c.Key); ok {
			b.grantRevoked(ctx, gl, audit.Actor{Kind: "system"}, "", false)
		} else {
			b.appr.notifier.Notify("")
		}
	case ChangeKillswitch:
		return b.ks.Apply(ctx)
	case ChangeAction:
		return b.appr.applyChange(ctx, c.Key)
	}
	return nil
}

// killedElsewhere ends a session in memory that was killed (by any
// replica): its token stops working, its grants are revoked and its
// in-flight calls are cut (Bound's cause session.ErrRevoked). What the kill
// persisted and audited was done by the replica that killed it.
func (b *Broker) killedElsewhere(id string) {
	l, ok := b.live(id)
	if !ok || l.revoked.Swap(true) {
		return
	}
	now := b.now().UTC()
	l.killed.Store(now.UnixNano())
	l.life.stop()
	l.cancel(session.ErrRevoked) // first: work in flight ends as the session's, not its grants'
	for _, g := range l.Grants() {
		g.Revoke()
	}
	b.sessionEnded(l, now)
	b.appr.notifier.Notify("")
}

// applyChange wakes this replica's waiters and live pages on an action's
// change made by any replica, arms its expiry here while it is pending (any
// replica may expire it: the row-locked transition has one winner, which
// records it), and gives back what this replica held for it once it left
// pending elsewhere.
func (s *approvals) applyChange(ctx context.Context, id string) error {
	s.notifier.Notify(id)
	a, err := s.store.Action(ctx, id)
	if errors.Is(err, approval.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if a.Status == approval.Pending {
		if !s.expiry.armed(id) {
			s.expiry.schedule(id, a.ExpiresAt)
		}
		return nil
	}
	s.expiry.stop(id)
	s.leftPending(a) // only if this replica still counts it
	return nil
}
