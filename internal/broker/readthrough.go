package broker

// Read-through of the grants on a refusal (the session service reads
// sessions and grants through on a miss: internal/sessions/readthrough.go).

import (
	"context"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// decideFresh evaluates the call; when no grant in memory allows it and
// other brokers share the store, it reads the session's grants through
// once (a grant another broker added) and evaluates again if any came. The
// only broker of its store holds every grant in memory: a refusal there
// costs no store read (a sandbox spamming refused calls makes no I/O).
func (b *Broker) decideFresh(l *sessions.LiveSession, upstreamName string, call *grants.Call) (*grants.Decision, error) {
	d, err := grants.Evaluate(b.now(), l.Grants(), upstreamName, call)
	if err == nil || b.feed == nil {
		return d, err
	}
	if !b.resync(l) {
		return nil, err
	}
	return grants.Evaluate(b.now(), l.Grants(), upstreamName, call)
}

// resync reads the session's grants through (a grant another broker added
// or revoked) and reports whether any changed. Only when other brokers
// share the store, and at a bounded rate of reads per session
// (LiveSession.AllowResync): a sandbox spamming refused calls costs the
// database little; a grant another broker added is seen by the first
// refused call after it, unless the session has just spent its burst.
func (b *Broker) resync(l *sessions.LiveSession) bool {
	if b.feed == nil || !l.AllowResync() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), sessions.ReadTimeout)
	defer cancel()
	changed, err := b.sess.SyncGrants(ctx, l)
	return err == nil && changed
}
