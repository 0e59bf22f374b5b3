package broker

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// identify finds the live session of a token (sessions.Service.Identify).
func (b *Broker) identify(token string) (*sessions.LiveSession, error) {
	return b.sess.Identify(token)
}

// standing checks an identified session on every call: not killed, not
// expired, called from its bound source.
func (b *Broker) standing(l *sessions.LiveSession, remote netip.Addr) error {
	return l.Standing(b.now(), remote)
}

// ErrRateLimited means the session called faster than its limit.
var ErrRateLimited = fault.New(fault.RateLimited, "session call rate exceeded")

// Check admits a bearer of a session token (see Call.Admit): the global
// kill-switch, the token and session (see Verify), the session's call rate.
func (b *Broker) Check(token string, remote netip.Addr) (*sessions.LiveSession, error) {
	return b.admit(BearerCaller(token, remote))
}

// decide evaluates a canonical call of a verified session against its
// grants. On success one use (and any budget) of the grant is reserved;
// Release it if the call does not happen. Whether the call must wait for a
// human is the gate's answer (gate.Service.Gated).
func (b *Broker) decide(l *sessions.LiveSession, upstreamName string, call *grants.Call) (*grants.Decision, error) {
	if _, ok := b.upstreams[upstreamName]; !ok {
		return nil, ErrUnknownUpstream
	}
	return b.decideFresh(l, upstreamName, call)
}

// permit checks a further permission a call needs (see grants.Permit)
// against the session's grants, reserving nothing.
func (b *Broker) permit(l *sessions.LiveSession, upstreamName string, call *grants.Call, held *grants.Decision) (*grants.Decision, error) {
	if _, ok := b.upstreams[upstreamName]; !ok {
		return nil, ErrUnknownUpstream
	}
	return grants.Permit(b.now(), l.Grants(), upstreamName, call, held.Grant)
}

// Killswitch returns the global state.
func (b *Broker) Killswitch(ctx context.Context) (killswitch.State, error) {
	return b.ks.State(ctx)
}

// SetKillswitch engages or releases the global kill-switch. Engaged, every
// sandbox call is refused; the state survives a restart. Only an admin may
// release it.
func (b *Broker) SetKillswitch(ctx context.Context, p auth.Principal, engaged bool, reason string) (killswitch.State, error) {
	if !engaged && p.Role != auth.RoleAdmin {
		return killswitch.State{}, fmt.Errorf("%w: only an admin may release the kill-switch", ErrForbidden)
	}
	if len(reason) > 500 {
		return killswitch.State{}, fieldErr("reason", "at most 500 characters")
	}
	return b.ks.Set(ctx, b.actorOf(p), p.ID, engaged, reason)
}

// AWSSecret is the session's SigV4 signing secret: derived from the session
// id under an installation key, never stored, worth nothing anywhere but
// at this broker for this session.
func (b *Broker) AWSSecret(sessionID string) string {
	return b.sess.AWSSecret(sessionID)
}
