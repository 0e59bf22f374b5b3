package broker

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/store"
)

// Verify resolves a session token to its live session: the signature and
// claims once per token (then from memory), and the session's state on
// every call, so a kill takes effect at once.
func (b *Broker) Verify(token string, remote netip.Addr) (*Live, error) {
	b.mu.RLock()
	l, ok := b.byToken[token]
	b.mu.RUnlock()
	if !ok {
		c, err := b.tokens.Verify(token)
		if err != nil {
			return nil, err
		}
		l, ok = b.live(c.SessionID)
		if !ok {
			// Not in memory: expired and forgotten, revoked, or never existed.
			s, err := b.store.Session(context.Background(), c.SessionID)
			switch {
			case err == nil && !s.RevokedAt.IsZero():
				return nil, session.ErrRevoked
			case err == nil:
				return nil, session.ErrExpired
			}
			return nil, session.ErrInvalidToken
		}
		if c.TokenID != l.Session.TokenID {
			return nil, session.ErrInvalidToken
		}
		b.mu.Lock()
		b.byToken[token] = l
		b.mu.Unlock()
	}
	if l.revoked.Load() {
		return l, session.ErrRevoked
	}
	if !b.now().Before(l.Session.ExpiresAt) {
		return l, session.ErrExpired
	}
	if l.bound && !l.bind.Contains(remote.Unmap()) {
		return l, session.ErrWrongSource
	}
	return l, nil
}

// ErrRateLimited means the session called faster than its limit.
var ErrRateLimited = errors.New("session call rate exceeded")

// Check refuses every sandbox call while the global kill-switch is
// engaged, then verifies the token and session (see Verify), then the
// session's call rate.
func (b *Broker) Check(token string, remote netip.Addr) (*Live, error) {
	if b.killswitch.Load() {
		return nil, ErrKillswitch
	}
	l, err := b.Verify(token, remote)
	if err != nil {
		return l, err
	}
	if l.limiter != nil && !l.limiter.Allow() {
		return l, ErrRateLimited
	}
	return l, nil
}

// Decide evaluates a canonical call of a verified session against its
// grants. On success one use (and any budget) of the grant is reserved;
// Release it if the call does not happen. Whether the call must wait for a
// human is Gated's answer.
func (b *Broker) Decide(l *Live, upstreamName string, call *grants.Call) (*grants.Decision, error) {
	if _, ok := b.upstreams[upstreamName]; !ok {
		return nil, ErrUnknownUpstream
	}
	return grants.Evaluate(b.now(), l.Grants(), upstreamName, call)
}

// Permit checks a further permission a call needs (see grants.Permit)
// against the session's grants, reserving nothing.
func (b *Broker) Permit(l *Live, upstreamName string, call *grants.Call, held *grants.Decision) (*grants.Decision, error) {
	if _, ok := b.upstreams[upstreamName]; !ok {
		return nil, ErrUnknownUpstream
	}
	return grants.Permit(b.now(), l.Grants(), upstreamName, call, held.Grant)
}

// CallRecord describes a sandbox call for the audit log.
type CallRecord struct {
	RequestID string
	Upstream  string
	Method    string
	Path      string
	BytesIn   int64
}

// RecordAllowed writes the durable "allowed" record of a call before it is
// forwarded, with the grant's usage (taken after the decision's
// reservation, so it counts this call; versioned, so a concurrent call's
// older snapshot sequenced after it cannot replace it in the store). If it
// cannot be written the reservation is released and the error wraps
// audit.ErrUnavailable: the call must not happen.
func (b *Broker) RecordAllowed(ctx context.Context, l *Live, d *grants.Decision, c CallRecord) error {
	ev := b.callEvent(l, c)
	ev.Type, ev.Decision = audit.TypeCallAllowed, "allow"
	ev.GrantID = d.Grant.Grant.ID
	var side any
	if d.Grant.Grant.MaxUses > 0 || len(d.Grant.Grant.Budget) > 0 {
		side = &store.UsageUpdate{GrantID: d.Grant.Grant.ID, Usage: d.Grant.Usage()}
	}
	if _, err := b.audit.Append(ctx, ev, side); err != nil {
		d.Release()
		return err
	}
	return nil
}

// RecordDenied writes the durable record of a refused call.
func (b *Broker) RecordDenied(ctx context.Context, l *Live, c CallRecord, code string, cause error) error {
	ev := b.callEvent(l, c)
	ev.Type, ev.Decision, ev.Code = audit.TypeCallDenied, "deny", code
	ev.Reason = denialReason(cause)
	_, err := b.audit.Append(ctx, ev, nil)
	return err
}

// RecordCompleted appends the outcome of a forwarded call, off the
// caller's path (the decision is already durable).
func (b *Broker) RecordCompleted(l *Live, d *grants.Decision, c CallRecord, status int, latencyUS, bytesOut int64, code string) {
	ev := b.callEvent(l, c)
	ev.Type, ev.Status, ev.LatencyUS, ev.BytesOut, ev.Code = audit.TypeCallCompleted, status, latencyUS, bytesOut, code
	if d != nil {
		ev.GrantID = d.Grant.Grant.ID
	}
	b.audit.AppendAsync(ev)
}

func (b *Broker) callEvent(l *Live, c CallRecord) audit.Event {
	ev := audit.Event{
		Actor: audit.Actor{Kind: "sandbox"}, RequestID: c.RequestID, Upstream: c.Upstream,
		Method: c.Method, Path: c.Path, BytesIn: c.BytesIn,
	}
	if l != nil {
		ev.Actor.ID = l.Session.ID
		ev.SessionID, ev.TaskID = l.Session.ID, l.Session.TaskID
	}
	return ev
}

// denialReason is the audit's reason: the error text for domain errors (they
// name parameters and constraints, never values or secrets).
func denialReason(err error) string {
	var v *grants.Violation
	if errors.As(err, &v) {
		return v.Error()
	}
	if errors.Is(err, grants.ErrBadRequest) {
		return err.Error()
	}
	if err == nil {
		return ""
	}
	for _, known := range []error{ErrKillswitch, ErrRateLimited, ErrTooManyPending, ErrUnknownUpstream, grants.ErrNoMatchingGrant,
		grants.ErrGrantExpired, grants.ErrGrantExhausted, grants.ErrBudgetExceeded, session.ErrInvalidToken,
		session.ErrExpired, session.ErrRevoked, session.ErrWrongSource} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	return "refused"
}

// KillswitchState is the global kill-switch.
type KillswitchState struct {
	Engaged bool   `json:"engaged"`
	Since   string `json:"since,omitempty"`
	By      string `json:"by,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Killswitch returns the global state.
func (b *Broker) Killswitch(ctx context.Context) (KillswitchState, error) {
	var st KillswitchState
	data, err := b.store.Meta(ctx, metaKillswitch)
	if errors.Is(err, store.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, err
	}
	st.Engaged = b.killswitch.Load()
	return st, nil
}

// SetKillswitch engages or releases the global kill-switch. Engaged, every
// sandbox call is refused; the state survives a restart. Only an admin may
// release it.
func (b *Broker) SetKillswitch(ctx context.Context, p auth.Principal, engaged bool, reason string) (KillswitchState, error) {
	if !engaged && p.Role != auth.RoleAdmin {
		return KillswitchState{}, fmt.Errorf("%w: only an admin may release the kill-switch", ErrForbidden)
	}
	if len(reason) > 500 {
		return KillswitchState{}, fieldErr("reason", "at most 500 characters")
	}
	b.ksMu.Lock() // one change at a time: an engage acknowledged is never undone by a concurrent release
	defer b.ksMu.Unlock()
	st := KillswitchState{Engaged: engaged, By: p.ID, Reason: reason, Since: b.now().UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	if engaged {
		b.engage() // refuse new calls and cut running ones at once, before the write
	}
	data, _ := json.Marshal(st)
	if err := b.store.PutMeta(ctx, metaKillswitch, data); err != nil {
		return KillswitchState{}, fmt.Errorf("persist kill-switch: %w", err)
	}
	typ := audit.TypeKillswitch
	if !engaged {
		typ = audit.TypeKillswitchOff
	}
	if _, err := b.audit.Append(ctx, audit.Event{Type: typ, Actor: b.actorOf(p), Reason: reason}, nil); err != nil {
		return KillswitchState{}, err
	}
	if !engaged {
		b.release()
	}
	return st, nil
}

// AWSSecret is the session's SigV4 signing secret: derived from the session
// id under an installation key, never stored, worth nothing anywhere but
// at this broker for this session.
func (b *Broker) AWSSecret(sessionID string) string {
	m := hmac.New(sha256.New, b.awsKey)
	m.Write([]byte(sessionID))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckAWS is Check for SigV4 callers: the access key id is the session id.
// The caller must then verify the signature with AWSSecret.
func (b *Broker) CheckAWS(sessionID string, remote netip.Addr) (*Live, error) {
	if b.killswitch.Load() {
		return nil, ErrKillswitch
	}
	l, ok := b.live(sessionID)
	if !ok {
		return nil, session.ErrInvalidToken
	}
	switch {
	case l.revoked.Load():
		return l, session.ErrRevoked
	case !b.now().Before(l.Session.ExpiresAt):
		return l, session.ErrExpired
	case l.bound && !l.bind.Contains(remote.Unmap()):
		return l, session.ErrWrongSource
	case l.limiter != nil && !l.limiter.Allow():
		return l, ErrRateLimited
	}
	return l, nil
}
