package broker

import (
	"context"
	"fmt"
	"sync"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// lapsed is the instant a session (g nil) or one of its grants expired:
// its work in flight was cut (the standing ended); here a lease minted
// with the grant is revoked, its held actions are denied (the reviewer can no longer let them run) and pages woken.
// Only a replica that holds actions of the session reads the store.
func (b *Broker) lapsed(l *sessions.LiveSession, g *grants.Live) {
	if g != nil {
		b.creds.Rescope(l.Session.ID, g.Grant.Upstream) // a lease minted with the grant is revoked at once
	}
	if l.Pending() > 0 {
		reason := "session expired"
		if g != nil {
			reason = "grant expired"
		}
		ctx, cancel := context.WithTimeout(context.Background(), sessions.ReadTimeout)
		defer cancel()
		b.appr.DenyLapsed(ctx, audit.Actor{Kind: "system"}, "", l.Session.ID, g, reason)
	}
	b.appr.Notify()
}

// grantRevoked ends what depends on a revoked grant in memory (by this
// replica, or another: changes.go): its standing (work in flight is cut),
// its expiry timer, and when deny is set or this replica holds actions of
// its session, its pending actions.
func (b *Broker) grantRevoked(ctx context.Context, gl *grants.Live, actor audit.Actor, reviewer string, deny bool) {
	gl.Revoke()
	l, ok := b.live(gl.Grant.SessionID)
	if ok {
		l.Disarm(gl.Grant.ID)
		deny = deny || l.Pending() > 0
	}
	if deny {
		b.appr.DenyLapsed(ctx, actor, reviewer, gl.Grant.SessionID, gl, "grant revoked")
	}
	b.creds.Rescope(gl.Grant.SessionID, gl.Grant.Upstream) // a lease minted with this grant is revoked at once
	b.appr.Notify()
}

// ErrTooManyStreams refuses a WebSocket relay or a streamed answer beyond
// the session's limit (max_streams_per_session): problem code rate_limited.
var ErrTooManyStreams = fmt.Errorf("%w: the session holds as many streams (WebSocket relays, streamed answers) open as max_streams_per_session allows; close one", ErrRateLimited)

// Stream takes one of the session's stream slots for long-lived work on
// this call (a WebSocket relay, before Send; a streamed answer, once the
// answer turned out to stream): release gives it back when the work ends.
// Beyond the limit it returns ErrTooManyStreams; a call not sent yet is
// then ended, its reservation given back (the door refuses it), and a
// sent one's answer is not to be relayed (the door completes it with the
// refusal's code). Other sessions' slots are their own.
func (c *call) stream() (release func(), err error) {
	if c.l == nil {
		return nil, ErrOutOfOrder
	}
	if c.b.maxStream > 0 && !c.l.TakeStream(c.b.maxStream) {
		if c.step == stepCleared || c.step == stepAuthorized {
			c.unreserve()
			c.step = stepSent
		}
		return nil, ErrTooManyStreams
	}
	if c.b.maxStream <= 0 {
		return func() {}, nil
	}
	var once sync.Once
	return func() { once.Do(c.l.FreeStream) }, nil
}
