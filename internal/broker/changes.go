package broker

import (
	"context"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/fault"
)

// ErrStale refuses sandbox calls on a replica whose change feed has not
// confirmed for StaleAfter that it is current: a kill made elsewhere might
// be unknown here (problem code broker_unavailable, 503).
var ErrStale = fault.New(fault.BrokerUnavailable, "this broker cannot confirm it is current with the other replicas; retry on another")

// stale reports whether this replica refuses sandbox calls: it has a feed
// that has not confirmed for its StaleAfter that it is current.
func (b *Broker) stale() bool {
	return b.feed != nil && b.feed.Stale()
}

// FeedLag is how long ago the change feed last confirmed this replica is
// current (0 without a feed).
func (b *Broker) FeedLag() time.Duration {
	if b.feed == nil {
		return 0
	}
	return max(b.feed.Lag(), 0)
}

// applyChange brings this replica's memory in line with a change made by
// any replica (its own included: applying is idempotent).
func (b *Broker) applyChange(ctx context.Context, c changefeed.Change) error {
	switch c.Kind {
	case changefeed.SessionKilled:
		b.sess.KilledElsewhere(c.Key)
	case changefeed.GrantRevoked:
		if gl, ok := b.sess.LiveGrant(c.Key); ok {
			b.sess.GrantRevoked(ctx, gl, audit.Actor{Kind: "system"}, "", false)
		} else {
			b.appr.Notify()
		}
	case changefeed.Killswitch:
		return b.ks.Apply(ctx)
	case changefeed.Action:
		return b.appr.ApplyChange(ctx, c.Key)
	}
	return nil
}
