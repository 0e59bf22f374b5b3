package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// mintService is the lifecycle of credentials minted per session
// (upstream.Minter, see internal/upstream/mint.go for the contract): one
// lease per (session, upstream), minted on first use, renewed once 2/3 of
// its life has passed, minted anew when the session's live grants on the
// upstream change, and revoked when the session is killed or expires or the
// kill-switch is engaged. Leases are not revoked at shutdown: they outlive
// a restart only until their own expiry (never past the session's).
type mintService struct {
	b      *Broker
	clk    clock.Clock
	timers *expiryTimers // a session's leases are revoked at its expiry (keyed by session id)
	count  *prometheus.CounterVec
	wg     sync.WaitGroup // running revocations

	mu      sync.Mutex
	entries map[string]map[string]*mintEntry // session id → upstream → entry; nil once closed
}

// mintEntry is one session's lease on one upstream.
type mintEntry struct {
	owner   string     // its values' owner in the broker's Secrets
	mu      sync.Mutex // one mint, renewal or revocation at a time: calls wait on one (single flight)
	have    bool
	gone    bool // revoked and removed: never minted again
	lease   upstream.Lease
	minted  time.Time // when the lease was minted or renewed (broker clock)
	scope   uint64    // fingerprint of the live grants it was minted for
	cred    upstream.Credential
	values  []string       // the lease's values that answers must not carry
	retired []retiredLease // replaced leases, scrubbed within the rotation grace
	retryAt time.Time      // a failed renewal of a still-valid lease is retried from then
}

type retiredLease struct {
	values []string
	until  time.Time
}

// revokeTimeout bounds one revocation (network time, not an expiry).
const revokeTimeout = 30 * time.Second

func newMintService(b *Broker, clk clock.Clock) *mintService {
	m := &mintService{b: b, clk: clk, entries: map[string]map[string]*mintEntry{},
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_mints_total",
			Help: "Operations on credentials minted per session, by upstream, op (mint, renew, revoke) and result (ok, error).",
		}, []string{"upstream", "op", "result"})}
	m.timers = newExpiryTimers(clk, b.now, func(id string) { m.endSession(id, "session expired") })
	return m
}

// Causes of a minted credential the session no longer has.
var (
	errSessionEndedCred   = upstream.Unavailable("the session has ended", nil)
	errSessionCredRevoked = upstream.Unavailable("the session's credentials were revoked", nil)
)

// credential is the session's credential on minted upstream u: the lease
// minted, renewed or re-minted as needed, with a scrubber of its values and
// of the leases it replaced within their grace. It fails closed, wrapping
// upstream.ErrCredentialUnavailable.
func (m *mintService) credential(ctx context.Context, l *LiveSession, u *upstream.Upstream) (upstream.Credential, error) {
	now := m.b.now()
	e := m.entry(l, u.Name)
	if e == nil {
		return upstream.Credential{}, fmt.Errorf("%s: %w", u.Minter.Describe(), errSessionEndedCred)
	}
	fp := scopeFingerprint(l, u.Name, now)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return upstream.Credential{}, fmt.Errorf("%s: %w", u.Minter.Describe(), errSessionCredRevoked)
	}
	switch {
	case !e.have || e.scope != fp:
		if err := m.mint(ctx, l, u, e, fp, now); err != nil {
			return upstream.Credential{}, err
		}
	case renewalDue(e, now):
		if err := m.renew(ctx, l, u, e, fp, now); err != nil {
			return upstream.Credential{}, err
		}
	}
	if len(e.retired) > 0 && !now.Before(e.retired[0].until) {
		e.retired = slices.DeleteFunc(e.retired, func(r retiredLease) bool { return !now.Before(r.until) })
		m.rebuildScrub(e)
	}
	if m.b.ks.engaged.Load() || l.revoked.Load() {
		// A kill came while the lease was minted: it is revoked now (the
		// call itself is refused by Send's check that follows).
		m.endSession(l.Session.ID, "session ended during a mint")
	}
	return e.cred, nil
}

// entry is the session's entry on upstream name, created on first use; nil
// once the session ended or the service closed.
func (m *mintService) entry(l *LiveSession, name string) *mintEntry {
	id := l.Session.ID
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil || l.revoked.Load() {
		return nil
	}
	byUp := m.entries[id]
	if byUp == nil {
		byUp = map[string]*mintEntry{}
		m.entries[id] = byUp
		m.timers.schedule(id, l.Session.ExpiresAt)
	}
	e := byUp[name]
	if e == nil {
		e = &mintEntry{owner: leaseOwner(id, name)}
		byUp[name] = e
	}
	return e
}

// scopeFingerprint identifies the session's live grants on the upstream
// (FNV-1a over their ids): a change means a new scope.
func scopeFingerprint(l *LiveSession, name string, now time.Time) uint64 {
	h := uint64(14695981039346656037)
	for _, g := range l.Grants() {
		if g.Grant.Upstream != name || g.Revoked() || !now.Before(g.Grant.ExpiresAt) {
			continue
		}
		for i := 0; i < len(g.Grant.ID); i++ {
			h ^= uint64(g.Grant.ID[i])
			h *= 1099511628211
		}
		h ^= 0xff
		h *= 1099511628211
	}
	return h
}

// scope is what the session may do on the upstream now.
func (m *mintService) scope(l *LiveSession, name string, now time.Time) upstream.Scope {
	sc := upstream.Scope{SessionID: l.Session.ID, Upstream: name, Expires: l.Session.ExpiresAt, Now: now}
	for _, g := range l.Grants() {
		if g.Grant.Upstream == name && !g.Revoked() && now.Before(g.Grant.ExpiresAt) {
			sc.Rules = append(sc.Rules, g.Grant.Rules...)
		}
	}
	return sc
}

// renewalDue: 2/3 of the lease's life has passed, or it expired; after a
// failed renewal of a lease still valid, not before its retry time.
func renewalDue(e *mintEntry, now time.Time) bool {
	if e.lease.Expires.IsZero() {
		return false
	}
	if now.Before(e.retryAt) && now.Before(e.lease.Expires) {
		return false
	}
	life := e.lease.Expires.Sub(e.minted)
	return !now.Before(e.minted.Add(life - life/3))
}

func (m *mintService) mint(ctx context.Context, l *LiveSession, u *upstream.Upstream, e *mintEntry, fp uint64, now time.Time) error {
	lease, err := u.Minter.Mint(ctx, m.scope(l, u.Name, now))
	if err == nil && lease.Secret.IsZero() {
		m.revokeLease(l.Session.ID, u, lease, "empty credential")
		err = fmt.Errorf("minted an empty credential")
	}
	if err != nil {
		m.failed(l.Session.ID, u, "mint", err)
		return fmt.Errorf("%s: mint failed: %w", u.Minter.Describe(), upstream.CredentialFailed(err, "the credential could not be minted"))
	}
	if e.have {
		// The scope changed: the lease of the old scope is replaced and revoked.
		old := e.lease
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.revokeLease(l.Session.ID, u, old, "scope changed") }()
	}
	m.install(u, e, lease, fp, now)
	m.count.WithLabelValues(u.Name, "mint", "ok").Inc()
	m.audit(audit.TypeCredentialMinted, l.Session.ID, u, lease, "")
	return nil
}

func (m *mintService) renew(ctx context.Context, l *LiveSession, u *upstream.Upstream, e *mintEntry, fp uint64, now time.Time) error {
	lease, err := u.Minter.Renew(ctx, m.scope(l, u.Name, now), e.lease)
	if err == nil && lease.Secret.IsZero() {
		err = fmt.Errorf("renewed to an empty credential")
	}
	if err != nil {
		m.failed(l.Session.ID, u, "renew", err)
		if now.Before(e.lease.Expires) {
			// Still valid: used until its expiry; the renewal is retried after a
			// pause (an issuer outage costs one failure record per pause per
			// session, not one per call).
			e.retryAt = now.Add(min(renewRetry, e.lease.Expires.Sub(now)/2))
			return nil
		}
		return fmt.Errorf("%s: renewal failed: %w", u.Minter.Describe(), upstream.CredentialFailed(err, "the credential could not be renewed"))
	}
	if lease.ID != e.lease.ID {
		old := e.lease // minted anew: the one replaced is revoked
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.revokeLease(l.Session.ID, u, old, "replaced at renewal") }()
	}
	m.install(u, e, lease, fp, now)
	m.count.WithLabelValues(u.Name, "renew", "ok").Inc()
	m.audit(audit.TypeCredentialRenewed, l.Session.ID, u, lease, "")
	return nil
}

// install makes lease the entry's, retiring the values of the one it
// replaces (see retire).
func (m *mintService) install(u *upstream.Upstream, e *mintEntry, lease upstream.Lease, fp uint64, now time.Time) {
	values := u.LeaseValues(lease)
	if e.have && !slices.Equal(values, e.values) {
		retire(u, e, now)
	}
	e.have, e.lease, e.minted, e.scope, e.values = true, lease, now, fp, values
	e.cred = u.LeaseCredential(lease)
	m.rebuildScrub(e)
}

// retire keeps the values of the entry's current lease scrubbed after it is
// replaced or revoked: for the upstream's rotation grace, and no longer than
// the lease could still work (its expiry).
func retire(u *upstream.Upstream, e *mintEntry, now time.Time) {
	if u.RotationGrace <= 0 {
		return
	}
	until := now.Add(u.RotationGrace)
	if !e.lease.Expires.IsZero() && e.lease.Expires.Before(until) {
		until = e.lease.Expires
	}
	if !now.Before(until) {
		return
	}
	if len(e.retired) >= maxRetiredLeases {
		e.retired = e.retired[1:]
	}
	e.retired = append(e.retired, retiredLease{values: e.values, until: until})
}

// leaseOwner names a session's lease on an upstream in the broker's Secrets.
func leaseOwner(sessionID, upstreamName string) string {
	return "lease/" + sessionID + "/" + upstreamName
}

// rescope revokes at once, at the issuer, the session's lease on the
// upstream when the session's live grants there changed (a grant revoked
// or added; a grant expired, at its instant: lifetime.go): the lease was minted for a scope the session no
// longer has, and a broader credential must not outlive the grant that
// justified it. The next call mints one for the scope the session has.
func (m *mintService) rescope(sessionID, name string) {
	m.mu.Lock()
	e := m.entries[sessionID][name]
	m.mu.Unlock()
	l, ok := m.b.live(sessionID)
	if e == nil || !ok {
		return
	}
	u := m.b.upstreams[name]
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		e.mu.Lock()
		defer e.mu.Unlock()
		now := m.b.now()
		if !e.have || e.gone || e.scope == scopeFingerprint(l, name, now) {
			return
		}
		retire(u, e, now)
		e.have = false
		m.rebuildScrub(e)
		m.revokeLease(sessionID, u, e.lease, "the session's grants changed")
	}()
}

// renewRetry is the pause after a failed renewal of a still-valid lease.
const renewRetry = 30 * time.Second

// maxRetiredLeases bounds the replaced leases scrubbed per entry.
const maxRetiredLeases = 16

// rebuildScrub puts the entry's values (current, if it has a lease, and
// retired) in the broker's Secrets: every answer is scrubbed of them.
func (m *mintService) rebuildScrub(e *mintEntry) {
	var all []string
	if e.have {
		all = slices.Clone(e.values)
	}
	for _, r := range e.retired {
		all = append(all, r.values...)
	}
	if len(all) == 0 {
		m.b.secrets.Remove(e.owner)
	} else {
		m.b.secrets.Set(e.owner, all...)
	}
	e.cred.Scrub = m.b.secrets.Scrubber()
}

// forget removes an ended entry's values from the broker's Secrets once
// the last of them could no longer work (see retire).
func (m *mintService) forget(e *mintEntry, now time.Time) {
	var last time.Time
	for _, r := range e.retired {
		if r.until.After(last) {
			last = r.until
		}
	}
	if !now.Before(last) {
		m.b.secrets.Remove(e.owner)
		return
	}
	owner := e.owner
	m.clk.AfterFunc(last.Sub(now), func() { m.b.secrets.Remove(owner) })
}

// endSession revokes every lease of a session (killed, expired, or the
// kill-switch): asynchronously, each once; no lease is minted for it again
// unless the session still stands (the kill-switch released).
func (m *mintService) endSession(id, why string) {
	m.timers.stop(id)
	m.mu.Lock()
	byUp := m.entries[id]
	delete(m.entries, id)
	m.mu.Unlock()
	for name, e := range byUp {
		u := m.b.upstreams[name]
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			e.mu.Lock() // after any mint in flight
			defer e.mu.Unlock()
			e.gone = true
			if e.have {
				retire(u, e, m.b.now())
				m.revokeLease(id, u, e.lease, why)
				e.have = false
			}
			m.forget(e, m.b.now())
		}()
	}
}

// endAll revokes every session's leases (the kill-switch).
func (m *mintService) endAll(why string) {
	m.mu.Lock()
	ids := make([]string, 0, len(m.entries))
	for id := range m.entries {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.endSession(id, why)
	}
}

func (m *mintService) revokeLease(sessionID string, u *upstream.Upstream, l upstream.Lease, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	if err := u.Minter.Revoke(ctx, l); err != nil {
		m.failed(sessionID, u, "revoke", err)
		return
	}
	m.count.WithLabelValues(u.Name, "revoke", "ok").Inc()
	m.audit(audit.TypeCredentialRevoked, sessionID, u, l, why)
}

func (m *mintService) failed(sessionID string, u *upstream.Upstream, op string, err error) {
	m.count.WithLabelValues(u.Name, op, "error").Inc()
	m.b.audit.AppendAsync(audit.Event{Type: audit.TypeCredentialFailed, Actor: audit.Actor{Kind: "system"},
		SessionID: sessionID, Upstream: u.Name, Reason: clip(op+": "+u.Minter.Describe()+": "+err.Error(), 500)})
}

// audit records a lease: its source, id (HMAC'd) and expiry, never a value.
func (m *mintService) audit(typ, sessionID string, u *upstream.Upstream, l upstream.Lease, why string) {
	reason := u.Minter.Describe()
	if l.ID != "" {
		reason += " lease " + m.b.HMAC(l.ID)
	}
	if !l.Expires.IsZero() {
		reason += " until " + l.Expires.UTC().Format(time.RFC3339)
	}
	if why != "" {
		reason += ": " + why
	}
	m.b.audit.AppendAsync(audit.Event{Type: typ, Actor: audit.Actor{Kind: "system"}, SessionID: sessionID, Upstream: u.Name, Reason: reason})
}

// close stops the expiry timers and waits for running revocations; the
// leases held are left to their own expiry.
func (m *mintService) close() {
	m.timers.close()
	m.mu.Lock()
	m.entries = nil
	m.mu.Unlock()
	m.wg.Wait()
}
