package sessions

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/ids"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
)

// ErrInactive refuses a grant added to a session that is no longer
// active (killed or expired): problem code conflict.
var ErrInactive = fault.New(fault.Conflict, "the session is no longer active")

// SessionRequest is what an operator asks for.
type SessionRequest struct {
	TaskID         string
	TTL            time.Duration
	UntrustedInput *bool
	Isolation      string
	BindCIDR       string
	Labels         map[string]string
	Grants         []grants.Spec
	// Traceparent is the operator's trace context, stored with the
	// session as it is (the caller keeps only a valid one).
	Traceparent string
}

// fieldErr is a bad request naming its field.
func fieldErr(field, format string, args ...any) error {
	return &fault.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Create validates req, stores the session and its grants, and returns
// its token (shown once).
func (s *Service) Create(ctx context.Context, p auth.Principal, req SessionRequest) (SessionView, error) {
	now := s.now().UTC()
	ses, err := s.newSession(&req, p, now)
	if err != nil {
		return SessionView{}, err
	}
	var live []*grants.Live
	var recs []grants.Grant
	for i := range req.Grants {
		g, err := s.newGrant(fmt.Sprintf("grants[%d]", i), &ses, req.Grants[i], p, now)
		if err != nil {
			return SessionView{}, err
		}
		l, err := grants.Compile(g, grants.Usage{})
		if err != nil {
			return SessionView{}, fieldErr(fmt.Sprintf("grants[%d]", i), "%v", err)
		}
		recs = append(recs, g)
		live = append(live, l)
	}
	r2 := s.ruleOfTwo(ses.UntrustedInput, live)
	if s.enforce && ses.Isolation < r2.RequiredIsolation() {
		return SessionView{}, fmt.Errorf("%w: %s required, %q declared", session.ErrIsolationWeak, r2.RequiredIsolation(), ses.Isolation)
	}
	if s.placeholders != nil {
		if ses.Placeholders, err = s.placeholders(); err != nil {
			return SessionView{}, err
		}
	}
	token, err := s.tokens.Issue(&ses)
	if err != nil {
		return SessionView{}, fmt.Errorf("issue token: %w", err)
	}
	ca, err := s.storeSession(ctx, p, &ses, recs)
	if err != nil {
		return SessionView{}, err
	}
	l := s.addLive(ses, live)
	if ca != nil {
		l.setCA(ca)
	}
	v := s.view(l)
	v.Token = token
	for _, g := range recs {
		if s.aws(g.Upstream) {
			v.AWSSecret = s.AWSSecret(ses.ID)
		}
	}
	return v, nil
}

// newSession checks a session request (its grants aside) and makes the
// session it asks for, created now by p.
func (s *Service) newSession(req *SessionRequest, p auth.Principal, now time.Time) (session.Session, error) {
	ttl := req.TTL
	switch {
	case ttl == 0:
		ttl = s.defTTL
	case ttl < 0:
		return session.Session{}, fieldErr("ttl", "must be positive")
	case ttl > s.maxTTL:
		return session.Session{}, fieldErr("ttl", "exceeds the server maximum of %s", s.maxTTL)
	}
	if req.TaskID == "" || len(req.TaskID) > 200 {
		return session.Session{}, fieldErr("task_id", "is required (at most 200 characters)")
	}
	iso, ok := session.ParseIsolation(req.Isolation)
	if !ok {
		return session.Session{}, fieldErr("isolation", "must be process, container, gvisor or microvm")
	}
	if req.BindCIDR != "" {
		pfx, err := netip.ParsePrefix(req.BindCIDR)
		if err != nil {
			addr, aerr := netip.ParseAddr(req.BindCIDR)
			if aerr != nil {
				return session.Session{}, fieldErr("bind_cidr", "must be a CIDR prefix or an address")
			}
			pfx = netip.PrefixFrom(addr, addr.BitLen())
		}
		req.BindCIDR = pfx.Masked().String()
	}
	if len(req.Labels) > 64 {
		return session.Session{}, fieldErr("labels", "at most 64 labels")
	}
	untrusted := true
	if req.UntrustedInput != nil {
		untrusted = *req.UntrustedInput
	}
	return session.Session{
		ID: ids.New("ses_", now), TaskID: req.TaskID, TokenID: ids.New("jti_", now),
		CreatedAt: now, ExpiresAt: now.Add(ttl), UntrustedInput: untrusted, Isolation: iso,
		BindCIDR: req.BindCIDR, Labels: req.Labels, CreatedBy: p.ID, Traceparent: req.Traceparent,
	}, nil
}

// storeSession makes the session and its audit record durable side by
// side (two files, two syncs at once): the session goes live, and its
// token is shown, only when both are. The proxy door's CA (when it is on:
// Config.NewCA) is made while the audit record syncs.
func (s *Service) storeSession(ctx context.Context, p auth.Principal, ses *session.Session, recs []grants.Grant) (*proxyca.CA, error) {
	var g errgroup.Group
	var ca *proxyca.CA
	g.Go(func() error {
		if s.newCA != nil {
			var err error
			if ca, err = s.newCA(ses); err != nil {
				return err
			}
		}
		if err := s.store.CreateSession(ctx, ses, recs); err != nil {
			return fmt.Errorf("store session: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		_, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeSessionCreated, Actor: s.actor(p), SessionID: ses.ID, TaskID: ses.TaskID}, nil)
		return err
	})
	return ca, g.Wait()
}

func (s *Service) newGrant(field string, ses *session.Session, spec grants.Spec, p auth.Principal, now time.Time) (grants.Grant, error) {
	remaining := ses.ExpiresAt.Sub(now)
	if err := grants.Validate(field, &spec, s.kind, remaining); err != nil {
		return grants.Grant{}, err
	}
	ttl := spec.TTL
	if ttl == 0 {
		ttl = remaining
	}
	return grants.Grant{
		ID: ids.New("grt_", now), SessionID: ses.ID, TaskID: ses.TaskID, Spec: spec,
		CreatedAt: now, ExpiresAt: now.Add(ttl), CreatedBy: p.ID,
	}, nil
}

// Kill ends a session at once: its token stops working, its grants are
// revoked, and its in-flight upstream calls are cancelled. Killing one
// that is over returns its view; an unknown id is ErrNotFound.
func (s *Service) Kill(ctx context.Context, p auth.Principal, id string) (SessionView, error) {
	l, _, err := s.lookup(ctx, id) // created by another broker: read through
	if err != nil && !errors.Is(err, ErrNotFound) {
		return SessionView{}, err
	}
	if l == nil {
		v, err := s.Session(ctx, id)
		if err != nil {
			return SessionView{}, err
		}
		return v, nil // already over; killing is idempotent
	}
	now := s.now().UTC()
	if !s.revoke(l, now) {
		return s.view(l), nil
	}
	s.ended(l, now)
	ses := l.Session
	ses.RevokedAt = now
	var firstErr error
	if err := s.store.PutSession(ctx, &ses); err != nil {
		firstErr = err
	}
	for _, g := range l.Grants() {
		rec := g.Grant
		if rec.RevokedAt.IsZero() {
			rec.RevokedAt = now
		}
		if err := s.store.PutGrant(ctx, &rec, g.Usage()); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if _, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeSessionRevoked, Actor: s.actor(p), SessionID: ses.ID, TaskID: ses.TaskID}, nil); err != nil && firstErr == nil {
		firstErr = err
	}
	s.gate.DenySession(ctx, p, ses.ID)
	s.gate.Notify()
	v := s.view(l)
	if firstErr != nil {
		// The session is dead in memory whatever happened; the store failure is reported.
		return v, fmt.Errorf("session killed, but persisting it failed: %w", firstErr)
	}
	return v, nil
}

// KilledElsewhere ends a session in memory that was killed (by any
// replica, see Config.Shared): its token stops working, its grants are
// revoked and its in-flight calls are cut (cause session.ErrRevoked).
// What the kill persisted and audited was done by the replica that killed it.
func (s *Service) KilledElsewhere(id string) {
	l, ok := s.Live(id)
	if !ok || !s.revoke(l, s.now().UTC()) {
		return
	}
	s.ended(l, l.killedAt())
	s.gate.Notify()
}

// AddGrant attaches a grant to an active session (ErrNotFound for an
// unknown one, ErrInactive for one that is over).
func (s *Service) AddGrant(ctx context.Context, p auth.Principal, sessionID string, spec grants.Spec) (GrantView, error) {
	l, _, err := s.lookup(ctx, sessionID) // created by another broker: read through
	if err != nil && !errors.Is(err, ErrNotFound) {
		return GrantView{}, err
	}
	if l == nil || l.Revoked() || !s.now().Before(l.Session.ExpiresAt) {
		if _, err := s.Session(ctx, sessionID); err != nil {
			return GrantView{}, err
		}
		return GrantView{}, ErrInactive
	}
	now := s.now().UTC()
	g, err := s.newGrant("", &l.Session, spec, p, now)
	if err != nil {
		var fe *fault.FieldError
		if errors.As(err, &fe) && len(fe.Field) > 0 && fe.Field[0] == '.' {
			fe.Field = fe.Field[1:]
		}
		return GrantView{}, err
	}
	gl, err := grants.Compile(g, grants.Usage{})
	if err != nil {
		return GrantView{}, err
	}
	next := append(append([]*grants.Live{}, l.Grants()...), gl)
	r2 := s.ruleOfTwo(l.Session.UntrustedInput, next)
	if s.enforce && l.Session.Isolation < r2.RequiredIsolation() {
		return GrantView{}, fmt.Errorf("%w: this grant raises the required isolation to %s", session.ErrIsolationWeak, r2.RequiredIsolation())
	}
	if err := s.store.PutGrant(ctx, &g, grants.Usage{}); err != nil {
		return GrantView{}, fmt.Errorf("store grant: %w", err)
	}
	if _, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeGrantCreated, Actor: s.actor(p), SessionID: g.SessionID, TaskID: g.TaskID, GrantID: g.ID, Upstream: g.Upstream}, nil); err != nil {
		return GrantView{}, err
	}
	s.addGrantOnce(l, gl)
	s.creds.Rescope(g.SessionID, g.Upstream)
	return s.grantView(gl, false), nil
}

// RevokeGrant makes a grant unusable at once (ErrNotFound for an unknown id).
func (s *Service) RevokeGrant(ctx context.Context, p auth.Principal, id string) (GrantView, error) {
	gl, ok, err := s.grantOrLoad(ctx, id) // a grant of another broker's session: read through
	if err != nil && !errors.Is(err, ErrNotFound) {
		return GrantView{}, err
	}
	if !ok {
		return s.Grant(ctx, id)
	}
	if gl.Revoked() {
		return s.grantView(gl, false), nil
	}
	gl.Revoke() // at once: work in flight on it ends (its held actions are denied once it is recorded)
	rec := gl.Grant
	rec.RevokedAt = s.now().UTC()
	if err := s.store.PutGrant(ctx, &rec, gl.Usage()); err != nil {
		return GrantView{}, fmt.Errorf("grant revoked, but persisting it failed: %w", err)
	}
	if _, err := s.audit.Append(ctx, audit.Event{Type: audit.TypeGrantRevoked, Actor: s.actor(p), SessionID: rec.SessionID, TaskID: rec.TaskID, GrantID: rec.ID, Upstream: rec.Upstream}, nil); err != nil {
		return GrantView{}, err
	}
	s.GrantRevoked(ctx, gl, s.actor(p), p.ID, true)
	v := s.grantView(gl, false)
	v.Grant.RevokedAt = rec.RevokedAt
	return v, nil
}

// GrantRevoked ends what depends on a revoked grant in memory (by this
// replica, or another: the broker's change feed): its standing (work in
// flight is cut), its expiry timer, and when deny is set or this replica
// holds actions of its session, its pending actions.
func (s *Service) GrantRevoked(ctx context.Context, gl *grants.Live, actor audit.Actor, reviewer string, deny bool) {
	gl.Revoke()
	l, ok := s.Live(gl.Grant.SessionID)
	if ok {
		l.life.forget(gl.Grant.ID)
		deny = deny || l.pendingActions() > 0
	}
	if deny {
		s.gate.DenyLapsed(ctx, actor, reviewer, gl.Grant.SessionID, gl, "grant revoked")
	}
	s.creds.Rescope(gl.Grant.SessionID, gl.Grant.Upstream) // a lease minted with this grant is revoked at once
	s.gate.Notify()
}

// lapsed is the instant a session (g nil) or one of its grants expired:
// its work in flight was cut (the standing ended); here a lease minted
// with the grant is revoked, its held actions are denied (the reviewer can
// no longer let them run) and pages woken. Only a replica that holds
// actions of the session reads the store.
func (s *Service) lapsed(l *LiveSession, g *grants.Live) {
	if g != nil {
		s.creds.Rescope(l.Session.ID, g.Grant.Upstream) // a lease minted with the grant is revoked at once
	}
	if l.pendingActions() > 0 {
		reason := "session expired"
		if g != nil {
			reason = "grant expired"
		}
		ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
		defer cancel()
		s.gate.DenyLapsed(ctx, audit.Actor{Kind: "system"}, "", l.Session.ID, g, reason)
	}
	s.gate.Notify()
}

// Identify finds the live session of a session token: one already
// verified from memory, else verified and read through (a session another
// broker created); one that is over says why (session.ErrRevoked,
// session.ErrExpired), an unknown or replaced one is
// session.ErrInvalidToken.
func (s *Service) Identify(token string) (*LiveSession, error) {
	l, ok := s.tokenLive(token)
	if ok {
		return l, nil
	}
	c, err := s.tokens.Verify(token)
	if err != nil {
		return nil, err
	}
	l, ok = s.Live(c.SessionID)
	if !ok {
		// Not in memory: created by another broker on the store (read
		// through), expired and forgotten, revoked, or never existed.
		var err error
		if l, err = s.identifyStored(c.SessionID); err != nil {
			return nil, err
		}
	}
	if c.TokenID != l.Session.TokenID {
		return nil, session.ErrInvalidToken
	}
	s.remember(token, l)
	return l, nil
}
