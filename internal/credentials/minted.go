package credentials

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// The minting of credentials per session (upstream.Minter, see
// internal/upstream/mint.go for the contract): one lease per (session,
// upstream), minted on first use, renewed once 2/3 of its life has passed,
// minted anew when the session's live grants on the upstream change, and
// revoked when the session is killed or expires or the kill-switch is
// engaged. Leases are not revoked at shutdown: they outlive a restart only
// until their own expiry (never past the session's).

// mintEntry is one session's lease on one upstream.
type mintEntry struct {
	owner   string     // its values' owner in the held Secrets
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

// minted is the session's credential on minted upstream u: the lease
// minted, renewed or re-minted as needed, with a scrubber of its values and
// of the leases it replaced within their grace. It fails closed, wrapping
// upstream.ErrCredentialUnavailable.
func (s *Service) minted(ctx context.Context, l Holder, u *upstream.Upstream) (upstream.Credential, error) {
	now := s.clk.Now()
	e := s.entry(l, u.Name)
	if e == nil {
		return upstream.Credential{}, fmt.Errorf("%w: %s: the session has ended", upstream.ErrCredentialUnavailable, u.Minter.Describe())
	}
	fp := scopeFingerprint(l, u.Name, now)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return upstream.Credential{}, fmt.Errorf("%w: %s: the session's credentials were revoked", upstream.ErrCredentialUnavailable, u.Minter.Describe())
	}
	switch {
	case !e.have || e.scope != fp:
		if err := s.mint(ctx, l, u, e, fp, now); err != nil {
			return upstream.Credential{}, err
		}
	case renewalDue(e, now):
		if err := s.renew(ctx, l, u, e, fp, now); err != nil {
			return upstream.Credential{}, err
		}
	}
	if len(e.retired) > 0 && !now.Before(e.retired[0].until) {
		e.retired = slices.DeleteFunc(e.retired, func(r retiredLease) bool { return !now.Before(r.until) })
		s.rebuildScrub(e)
	}
	if s.halted() || l.Revoked() {
		// A kill came while the lease was minted: it is revoked now (the
		// call itself is refused by the caller's check that follows).
		s.EndSession(l.SessionID(), "session ended during a mint")
	}
	return e.cred, nil
}

// entry is the session's entry on upstream name, created on first use; nil
// once the session ended or the service closed.
func (s *Service) entry(l Holder, name string) *mintEntry {
	id := l.SessionID()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil || l.Revoked() {
		return nil
	}
	byUp := s.entries[id]
	if byUp == nil {
		byUp = map[string]*mintEntry{}
		s.entries[id] = byUp
		s.timers.schedule(id, l.Expires())
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
func scopeFingerprint(l Holder, name string, now time.Time) uint64 {
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
func scope(l Holder, name string, now time.Time) upstream.Scope {
	sc := upstream.Scope{SessionID: l.SessionID(), Upstream: name, Expires: l.Expires(), Now: now}
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

func (s *Service) mint(ctx context.Context, l Holder, u *upstream.Upstream, e *mintEntry, fp uint64, now time.Time) error {
	lease, err := u.Minter.Mint(ctx, scope(l, u.Name, now))
	if err == nil && lease.Secret.IsZero() {
		s.revokeLease(l.SessionID(), u, lease, "empty credential")
		err = fmt.Errorf("minted an empty credential")
	}
	if err != nil {
		s.failed(l.SessionID(), u, "mint", err)
		return fmt.Errorf("%w: %s: mint failed", upstream.ErrCredentialUnavailable, u.Minter.Describe())
	}
	if e.have {
		// The scope changed: the lease of the old scope is replaced and revoked.
		old := e.lease
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.revokeLease(l.SessionID(), u, old, "scope changed") }()
	}
	s.install(u, e, lease, fp, now)
	s.mints.WithLabelValues(u.Name, "mint", "ok").Inc()
	s.audit(audit.TypeCredentialMinted, l.SessionID(), u, lease, "")
	return nil
}

func (s *Service) renew(ctx context.Context, l Holder, u *upstream.Upstream, e *mintEntry, fp uint64, now time.Time) error {
	lease, err := u.Minter.Renew(ctx, scope(l, u.Name, now), e.lease)
	if err == nil && lease.Secret.IsZero() {
		err = fmt.Errorf("renewed to an empty credential")
	}
	if err != nil {
		s.failed(l.SessionID(), u, "renew", err)
		if now.Before(e.lease.Expires) {
			// Still valid: used until its expiry; the renewal is retried after a
			// pause (an issuer outage costs one failure record per pause per
			// session, not one per call).
			e.retryAt = now.Add(min(renewRetry, e.lease.Expires.Sub(now)/2))
			return nil
		}
		return fmt.Errorf("%w: %s: renewal failed", upstream.ErrCredentialUnavailable, u.Minter.Describe())
	}
	if lease.ID != e.lease.ID {
		old := e.lease // minted anew: the one replaced is revoked
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.revokeLease(l.SessionID(), u, old, "replaced at renewal") }()
	}
	s.install(u, e, lease, fp, now)
	s.mints.WithLabelValues(u.Name, "renew", "ok").Inc()
	s.audit(audit.TypeCredentialRenewed, l.SessionID(), u, lease, "")
	return nil
}

// install makes lease the entry's, retiring the values of the one it
// replaces (see retire).
func (s *Service) install(u *upstream.Upstream, e *mintEntry, lease upstream.Lease, fp uint64, now time.Time) {
	values := u.LeaseValues(lease)
	if e.have && !slices.Equal(values, e.values) {
		retire(u, e, now)
	}
	e.have, e.lease, e.minted, e.scope, e.values = true, lease, now, fp, values
	e.cred = u.LeaseCredential(lease)
	s.rebuildScrub(e)
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

// leaseOwner names a session's lease on an upstream in the held Secrets.
func leaseOwner(sessionID, upstreamName string) string {
	return "lease/" + sessionID + "/" + upstreamName
}

// Rescope revokes at once, at the issuer, the session's lease on the
// upstream when the session's live grants there changed (a grant revoked
// or added; a grant expired, at its instant): the lease was minted for a scope the session no
// longer has, and a broader credential must not outlive the grant that
// justified it. The next call mints one for the scope the session has.
func (s *Service) Rescope(sessionID, name string) {
	s.mu.Lock()
	e := s.entries[sessionID][name]
	s.mu.Unlock()
	l, ok := s.live(sessionID)
	if e == nil || !ok {
		return
	}
	u := s.ups[name]
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		e.mu.Lock()
		defer e.mu.Unlock()
		now := s.clk.Now()
		if !e.have || e.gone || e.scope == scopeFingerprint(l, name, now) {
			return
		}
		retire(u, e, now)
		e.have = false
		s.rebuildScrub(e)
		s.revokeLease(sessionID, u, e.lease, "the session's grants changed")
	}()
}

// renewRetry is the pause after a failed renewal of a still-valid lease.
const renewRetry = 30 * time.Second

// maxRetiredLeases bounds the replaced leases scrubbed per entry.
const maxRetiredLeases = 16

// rebuildScrub puts the entry's values (current, if it has a lease, and
// retired) in the held Secrets: every answer is scrubbed of them.
func (s *Service) rebuildScrub(e *mintEntry) {
	var all []string
	if e.have {
		all = slices.Clone(e.values)
	}
	for _, r := range e.retired {
		all = append(all, r.values...)
	}
	if len(all) == 0 {
		s.secrets.Remove(e.owner)
	} else {
		s.secrets.Set(e.owner, all...)
	}
	e.cred.Scrub = s.secrets.Scrubber()
}

// forget removes an ended entry's values from the broker's Secrets once
// the last of them could no longer work (see retire).
func (s *Service) forget(e *mintEntry, now time.Time) {
	var last time.Time
	for _, r := range e.retired {
		if r.until.After(last) {
			last = r.until
		}
	}
	if !now.Before(last) {
		s.secrets.Remove(e.owner)
		return
	}
	owner := e.owner
	s.clk.AfterFunc(last.Sub(now), func() { s.secrets.Remove(owner) })
}

// EndSession revokes every lease of a session (killed, expired, or the
// kill-switch): asynchronously, each once; no lease is minted for it again
// unless the session still stands (the kill-switch released).
func (s *Service) EndSession(id, why string) {
	s.timers.stop(id)
	s.mu.Lock()
	byUp := s.entries[id]
	delete(s.entries, id)
	s.mu.Unlock()
	for name, e := range byUp {
		u := s.ups[name]
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			e.mu.Lock() // after any mint in flight
			defer e.mu.Unlock()
			e.gone = true
			if e.have {
				retire(u, e, s.clk.Now())
				s.revokeLease(id, u, e.lease, why)
				e.have = false
			}
			s.forget(e, s.clk.Now())
		}()
	}
}

// EndAll revokes every session's leases (the kill-switch).
func (s *Service) EndAll(why string) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.entries))
	for id := range s.entries {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.EndSession(id, why)
	}
}

func (s *Service) revokeLease(sessionID string, u *upstream.Upstream, l upstream.Lease, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	if err := u.Minter.Revoke(ctx, l); err != nil {
		s.failed(sessionID, u, "revoke", err)
		return
	}
	s.mints.WithLabelValues(u.Name, "revoke", "ok").Inc()
	s.audit(audit.TypeCredentialRevoked, sessionID, u, l, why)
}

func (s *Service) failed(sessionID string, u *upstream.Upstream, op string, err error) {
	s.mints.WithLabelValues(u.Name, op, "error").Inc()
	s.records.AppendAsync(audit.Event{Type: audit.TypeCredentialFailed, Actor: audit.Actor{Kind: "system"},
		SessionID: sessionID, Upstream: u.Name, Reason: clip(op+": "+u.Minter.Describe()+": "+err.Error(), 500)})
}

// audit records a lease: its source, id (HMAC'd) and expiry, never a value.
func (s *Service) audit(typ, sessionID string, u *upstream.Upstream, l upstream.Lease, why string) {
	reason := u.Minter.Describe()
	if l.ID != "" {
		reason += " lease " + s.hmac(l.ID)
	}
	if !l.Expires.IsZero() {
		reason += " until " + l.Expires.UTC().Format(time.RFC3339)
	}
	if why != "" {
		reason += ": " + why
	}
	s.records.AppendAsync(audit.Event{Type: typ, Actor: audit.Actor{Kind: "system"}, SessionID: sessionID, Upstream: u.Name, Reason: reason})
}
