package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-broker/airlock/internal/grants"
)

// Minted credentials (issue 15): an upstream whose Minter is set gets its
// credential per session instead of from its Source. The broker owns the
// lifecycle (internal/credentials/minted.go); a Minter only talks to its issuer:
//
//   - Mint is called on a session's first call to the upstream, and again
//     whenever the session's live grants on the upstream change (a grant
//     added, revoked or expired: the Scope changed). Calls of one session
//     to one upstream wait on one Mint (single flight).
//   - Renew is called once 2/3 of the lease's life (from when it was minted
//     to Lease.Expires) has passed, or when it expired. A Minter whose
//     credentials cannot be extended mints anew (returns a new Lease with a
//     new ID); the broker then revokes the lease it replaced.
//   - Revoke is called when the session is killed (here or on another
//     replica), expires (a timer on the broker's clock), when the global
//     kill-switch is engaged (every session's leases), and for a lease
//     replaced by a re-mint. It is called at most once per lease, never
//     concurrently with Mint/Renew of the same (session, upstream), with a
//     context bounded by the broker. Leases are NOT revoked at broker
//     shutdown: they outlive a restart only until their own expiry, which
//     is never past the session's (Scope.Expires).
//
// Errors: return any error; the broker wraps it in ErrCredentialUnavailable,
// fails the call closed (503 credential_unavailable, nothing sent) and
// audits it (credential.failed). An error's text goes to the audit log and
// to operators: never put a secret in it.
//
// What the broker does with a Lease: Secret (and AWS, for aws upstreams) is
// injected exactly as a Source's secret would be (Upstream.Inject or SigV4);
// Secret, AWS.SessionToken, the injected forms of Secret and every value
// of Extra are scrubbed from answers, for the lease's life and, once it is
// replaced, for the upstream's RotationGrace. ID is audited only as an
// HMAC. Expires bounds the lease's use: past it the call waits on Renew.

// Scope is what one session may do on one upstream: the narrowest
// credential covering it.
type Scope struct {
	SessionID string
	Upstream  string
	Expires   time.Time     // the session's expiry: nothing minted outlives it
	Rules     []grants.Rule // the rules of the session's live grants on this upstream
	// Now is the broker's clock at the time of the mint (the session's
	// remaining life is Expires.Sub(Now)); a Minter must not read the wall
	// clock to decide a duration.
	Now time.Time
}

// Remaining is the session's remaining life at the time of the mint.
func (sc Scope) Remaining() time.Duration { return sc.Expires.Sub(sc.Now) }

// Lease is a credential minted for one session.
type Lease struct {
	Secret Secret
	// AWS is the key set for aws upstreams (Secret is then its secret
	// access key); zero otherwise.
	AWS AWSCredentials
	// Extra are further values the answers must not carry (a refresh
	// token, a signing key): scrubbed, never injected.
	Extra   []Secret
	ID      string    // the lease/token id (audited only as an HMAC), "" if none
	Expires time.Time // renew before this (zero: never expires)
}

// Minter mints, renews and revokes per-session credentials. An upstream
// whose credential source is a Minter (Upstream.Minter) gets its secret per
// session instead of from Fetch.
type Minter interface {
	Mint(ctx context.Context, sc Scope) (Lease, error)
	Renew(ctx context.Context, sc Scope, l Lease) (Lease, error) // may just Mint again
	Revoke(ctx context.Context, l Lease) error
	// Describe names the source for operators (never a value).
	Describe() string
}

// MintState is a small durable value a Minter keeps across sessions and
// broker restarts (oauth2.Refresh: the current refresh token). The broker
// seals it at rest (AES-256-GCM under a key derived from the installation
// secret, bound to the upstream) and stores it through its meta.Store.
type MintState interface {
	// Load returns the value last saved, or nil when none was.
	Load(ctx context.Context) ([]byte, error)
	// Save replaces the value; it is durable when it returns.
	Save(ctx context.Context, value []byte) error
}

// StatefulMinter is a Minter that keeps durable state: the broker binds
// it once, at start, before any mint. Unbound, the state lives in memory.
type StatefulMinter interface {
	Minter
	BindState(MintState)
}

// MintedSource is the Source of an upstream whose credential is minted per
// session: it describes the Minter and fails every Fetch closed (a minted
// credential is never had without a session).
func MintedSource(m Minter) Source { return mintedSource{m} }

type mintedSource struct{ m Minter }

func (s mintedSource) Fetch(context.Context) (Secret, error) {
	return Secret{}, fmt.Errorf("%w: %s is minted per session", ErrCredentialUnavailable, s.m.Describe())
}
func (s mintedSource) Describe() string { return s.m.Describe() }

// LeaseCredential is the credential a call injects from a lease, without
// its scrubber (the broker builds one per session, see LeaseValues).
func (u *Upstream) LeaseCredential(l Lease) Credential {
	return Credential{Secret: l.Secret, AWS: l.AWS}
}

// LeaseValues are the values of a lease that an answer must not carry: the
// secret, what is sent derived from it, the session token and Extra.
func (u *Upstream) LeaseValues(l Lease) []string {
	values := u.scrubValues(u.LeaseCredential(l))
	for _, x := range l.Extra {
		if !x.IsZero() {
			values = append(values, x.Reveal())
		}
	}
	return values
}
