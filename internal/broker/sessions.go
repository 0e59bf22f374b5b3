package broker

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
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// SessionRequest is what an operator asks for.
type SessionRequest struct {
	TaskID         string
	TTL            time.Duration
	UntrustedInput *bool
	Isolation      string
	BindCIDR       string
	Labels         map[string]string
	Grants         []grants.Spec
	// Traceparent is the operator's trace context (the request's
	// traceparent header); invalid, it is ignored.
	Traceparent string
}

// SessionView is a session with its grants and derived standing.
type SessionView struct {
	Session           session.Session
	Grants            []GrantView
	RuleOfTwo         session.RuleOfTwo
	Required          session.Isolation
	IsolationTooWeak  bool
	Status            string // active, revoked or expired
	Token             string // only on creation
	ProxyCAPEM        []byte // the session's CA certificate (public), when it has one
	AWSSecret         string // the SigV4 secret, when a grant targets an aws upstream
	EnforcedIsolation bool
}

// GrantView is a grant with its usage and state.
type GrantView struct {
	Grant   grants.Grant
	Usage   grants.Usage
	Pending grants.Usage // uses and amounts held by pending actions
	Status  string       // active, revoked or expired
}

// fieldErr is a bad request naming its field.
func fieldErr(field, format string, args ...any) error {
	return &fault.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (b *Broker) upstreamKind(name string) (string, bool) {
	u, ok := b.upstreams[name]
	if !ok {
		return "", false
	}
	return u.Kind, true
}

// ruleOfTwo derives A, B, C from a session and its usable grants.
func (b *Broker) ruleOfTwo(untrusted bool, gs []*grants.Live) session.RuleOfTwo {
	r := session.RuleOfTwo{UntrustedInput: untrusted}
	now := b.now()
	for _, g := range gs {
		if g.Revoked() || !now.Before(g.Grant.ExpiresAt) {
			continue
		}
		if u, ok := b.upstreams[g.Grant.Upstream]; ok && u.Sensitive {
			r.SensitiveAccess = true
		}
		if g.HasIrreversible() {
			r.ExternalAction = true
		}
	}
	return r
}

// CreateSession validates req, stores the session and its grants, and
// returns its token (shown once).
func (b *Broker) CreateSession(ctx context.Context, p auth.Principal, req SessionRequest) (SessionView, error) {
	now := b.now().UTC()
	s, err := b.newSession(&req, p, now)
	if err != nil {
		return SessionView{}, err
	}
	var live []*grants.Live
	var recs []grants.Grant
	for i := range req.Grants {
		g, err := b.newGrant(fmt.Sprintf("grants[%d]", i), &s, req.Grants[i], p, now)
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
	r2 := b.ruleOfTwo(s.UntrustedInput, live)
	if b.enforce && s.Isolation < r2.RequiredIsolation() {
		return SessionView{}, fmt.Errorf("%w: %s required, %q declared", session.ErrIsolationWeak, r2.RequiredIsolation(), s.Isolation)
	}
	if b.proxyOn {
		if s.Placeholders, err = b.mintPlaceholders(); err != nil {
			return SessionView{}, err
		}
	}
	token, err := b.tokens.Issue(&s)
	if err != nil {
		return SessionView{}, fmt.Errorf("issue token: %w", err)
	}
	ca, err := b.storeSession(ctx, p, &s, recs)
	if err != nil {
		return SessionView{}, err
	}
	l := b.sess.Add(s, live)
	if ca != nil {
		l.SetCA(ca)
	}
	v := b.view(l)
	v.Token = token
	for _, g := range recs {
		if u := b.upstreams[g.Upstream]; u != nil && u.AWS != nil {
			v.AWSSecret = b.AWSSecret(s.ID)
		}
	}
	return v, nil
}

// newSession checks a session request (its grants aside) and makes the
// session it asks for, created now by p.
func (b *Broker) newSession(req *SessionRequest, p auth.Principal, now time.Time) (session.Session, error) {
	ttl := req.TTL
	switch {
	case ttl == 0:
		ttl = b.defTTL
	case ttl < 0:
		return session.Session{}, fieldErr("ttl", "must be positive")
	case ttl > b.maxTTL:
		return session.Session{}, fieldErr("ttl", "exceeds the server maximum of %s", b.maxTTL)
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
		ID: newID("ses_", now), TaskID: req.TaskID, TokenID: newID("jti_", now),
		CreatedAt: now, ExpiresAt: now.Add(ttl), UntrustedInput: untrusted, Isolation: iso,
		BindCIDR: req.BindCIDR, Labels: req.Labels, CreatedBy: p.ID, Traceparent: operatorTrace(req.Traceparent),
	}, nil
}

// storeSession makes the session and its audit record durable side by
// side (two files, two syncs at once): the session goes live, and its
// token is shown, only when both are. The proxy door's CA (when it is on)
// is made while the audit record syncs.
func (b *Broker) storeSession(ctx context.Context, p auth.Principal, s *session.Session, recs []grants.Grant) (*proxyca.CA, error) {
	var g errgroup.Group
	var ca *proxyca.CA
	g.Go(func() error {
		if b.proxyOn {
			var err error
			if ca, err = b.newProxyCA(s); err != nil {
				return err
			}
		}
		if err := b.sess.Store().CreateSession(ctx, s, recs); err != nil {
			return fmt.Errorf("store session: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		_, err := b.audit.Append(ctx, audit.Event{Type: audit.TypeSessionCreated, Actor: b.actorOf(p), SessionID: s.ID, TaskID: s.TaskID}, nil)
		return err
	})
	return ca, g.Wait()
}

func (b *Broker) newGrant(field string, s *session.Session, spec grants.Spec, p auth.Principal, now time.Time) (grants.Grant, error) {
	remaining := s.ExpiresAt.Sub(now)
	if err := grants.Validate(field, &spec, b.upstreamKind, remaining); err != nil {
		return grants.Grant{}, err
	}
	ttl := spec.TTL
	if ttl == 0 {
		ttl = remaining
	}
	return grants.Grant{
		ID: newID("grt_", now), SessionID: s.ID, TaskID: s.TaskID, Spec: spec,
		CreatedAt: now, ExpiresAt: now.Add(ttl), CreatedBy: p.ID,
	}, nil
}

func (b *Broker) view(l *sessions.LiveSession) SessionView {
	gs := l.Grants()
	r2 := b.ruleOfTwo(l.Session.UntrustedInput, gs)
	now := b.now()
	v := SessionView{
		Session: l.Session, RuleOfTwo: r2, Required: r2.RequiredIsolation(),
		IsolationTooWeak: l.Session.Isolation < r2.RequiredIsolation(), EnforcedIsolation: b.enforce,
		Status: status(l.Revoked() || !l.Session.RevokedAt.IsZero(), l.Session.ExpiresAt, now),
	}
	if pc := l.Session.ProxyCA; pc != nil {
		v.ProxyCAPEM = proxyca.CertPEM(pc.CertDER)
	}
	if k := l.KilledAt(); !k.IsZero() && v.Session.RevokedAt.IsZero() {
		v.Session.RevokedAt = k
	}
	for _, g := range gs {
		v.Grants = append(v.Grants, b.grantView(g, v.Status != "active"))
	}
	return v
}

func (b *Broker) grantView(g *grants.Live, sessionOver bool) GrantView {
	return GrantView{Grant: g.Grant, Usage: g.Usage(), Pending: g.Pending(),
		Status: status(g.Revoked() || !g.Grant.RevokedAt.IsZero() || sessionOver, g.Grant.ExpiresAt, b.now())}
}

func status(revoked bool, expires, now time.Time) string {
	switch {
	case !now.Before(expires):
		return "expired"
	case revoked:
		return "revoked"
	}
	return "active"
}

func (b *Broker) live(id string) (*sessions.LiveSession, bool) { return b.sess.Live(id) }

// Session returns a session's view, from memory when active, else from the store.
func (b *Broker) Session(ctx context.Context, id string) (SessionView, error) {
	if l, ok := b.live(id); ok {
		return b.view(l), nil
	}
	s, err := b.sess.Store().Session(ctx, id)
	if errors.Is(err, sessions.ErrNotFound) {
		return SessionView{}, ErrNotFound
	}
	if err != nil {
		return SessionView{}, err
	}
	return b.storedView(ctx, s)
}

func (b *Broker) storedView(ctx context.Context, s session.Session) (SessionView, error) {
	recs, err := b.sess.Store().SessionGrants(ctx, s.ID)
	if err != nil {
		return SessionView{}, err
	}
	var gs []*grants.Live
	for _, r := range recs {
		g, err := grants.Compile(r.Grant, r.Usage)
		if err != nil {
			return SessionView{}, err
		}
		gs = append(gs, g)
	}
	return b.view(sessions.Stored(s, gs)), nil
}

// Sessions lists sessions in creation order after cursor `after`.
func (b *Broker) Sessions(ctx context.Context, after string, limit int) ([]SessionView, string, error) {
	ss, err := b.sess.Store().Sessions(ctx, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ss) > limit {
		ss = ss[:limit]
		next = ss[limit-1].ID
	}
	out := make([]SessionView, 0, len(ss))
	for _, s := range ss {
		if l, ok := b.live(s.ID); ok {
			out = append(out, b.view(l))
			continue
		}
		v, err := b.storedView(ctx, s)
		if err != nil {
			return nil, "", err
		}
		out = append(out, v)
	}
	return out, next, nil
}

// KillSession ends a session at once: its token stops working, its grants
// are revoked, and its in-flight upstream calls are cancelled.
func (b *Broker) KillSession(ctx context.Context, p auth.Principal, id string) (SessionView, error) {
	l, _, err := b.sess.Lookup(ctx, id) // created by another broker: read through
	if err != nil && !errors.Is(err, sessions.ErrNotFound) {
		return SessionView{}, err
	}
	if l == nil {
		v, err := b.Session(ctx, id)
		if err != nil {
			return SessionView{}, err
		}
		return v, nil // already over; killing is idempotent
	}
	now := b.now().UTC()
	if !b.sess.Revoke(l, now) {
		return b.view(l), nil
	}
	b.sessionEnded(l, now)
	s := l.Session
	s.RevokedAt = now
	var firstErr error
	if err := b.sess.Store().PutSession(ctx, &s); err != nil {
		firstErr = err
	}
	for _, g := range l.Grants() {
		rec := g.Grant
		if rec.RevokedAt.IsZero() {
			rec.RevokedAt = now
		}
		if err := b.sess.Store().PutGrant(ctx, &rec, g.Usage()); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if _, err := b.audit.Append(ctx, audit.Event{Type: audit.TypeSessionRevoked, Actor: b.actorOf(p), SessionID: s.ID, TaskID: s.TaskID}, nil); err != nil && firstErr == nil {
		firstErr = err
	}
	b.appr.DenySession(ctx, p, s.ID)
	b.appr.Notify()
	v := b.view(l)
	if firstErr != nil {
		// The session is dead in memory whatever happened; the store failure is reported.
		return v, fmt.Errorf("session killed, but persisting it failed: %w", firstErr)
	}
	return v, nil
}

// AddGrant attaches a grant to an active session.
func (b *Broker) AddGrant(ctx context.Context, p auth.Principal, sessionID string, spec grants.Spec) (GrantView, error) {
	l, _, err := b.sess.Lookup(ctx, sessionID) // created by another broker: read through
	if err != nil && !errors.Is(err, sessions.ErrNotFound) {
		return GrantView{}, err
	}
	if l == nil || l.Revoked() || !b.now().Before(l.Session.ExpiresAt) {
		if _, err := b.Session(ctx, sessionID); err != nil {
			return GrantView{}, err
		}
		return GrantView{}, fmt.Errorf("%w: the session is no longer active", ErrConflict)
	}
	now := b.now().UTC()
	g, err := b.newGrant("", &l.Session, spec, p, now)
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
	r2 := b.ruleOfTwo(l.Session.UntrustedInput, next)
	if b.enforce && l.Session.Isolation < r2.RequiredIsolation() {
		return GrantView{}, fmt.Errorf("%w: this grant raises the required isolation to %s", session.ErrIsolationWeak, r2.RequiredIsolation())
	}
	if err := b.sess.Store().PutGrant(ctx, &g, grants.Usage{}); err != nil {
		return GrantView{}, fmt.Errorf("store grant: %w", err)
	}
	if _, err := b.audit.Append(ctx, audit.Event{Type: audit.TypeGrantCreated, Actor: b.actorOf(p), SessionID: g.SessionID, TaskID: g.TaskID, GrantID: g.ID, Upstream: g.Upstream}, nil); err != nil {
		return GrantView{}, err
	}
	b.sess.AddGrant(l, gl)
	b.creds.Rescope(g.SessionID, g.Upstream)
	return b.grantView(gl, false), nil
}

// Grant returns one grant.
func (b *Broker) Grant(ctx context.Context, id string) (GrantView, error) {
	gl, ok := b.sess.Grant(id)
	if ok {
		l, live := b.live(gl.Grant.SessionID)
		return b.grantView(gl, !live || l.Revoked()), nil
	}
	r, err := b.sess.Store().Grant(ctx, id)
	if errors.Is(err, sessions.ErrNotFound) {
		return GrantView{}, ErrNotFound
	}
	if err != nil {
		return GrantView{}, err
	}
	gl, err = grants.Compile(r.Grant, r.Usage)
	if err != nil {
		return GrantView{}, err
	}
	sess, err := b.sess.Store().Session(ctx, r.Grant.SessionID)
	return b.grantView(gl, err != nil || !sess.RevokedAt.IsZero()), nil
}

// RevokeGrant makes a grant unusable at once.
func (b *Broker) RevokeGrant(ctx context.Context, p auth.Principal, id string) (GrantView, error) {
	gl, ok, err := b.sess.GrantOrLoad(ctx, id) // a grant of another broker's session: read through
	if err != nil && !errors.Is(err, sessions.ErrNotFound) {
		return GrantView{}, err
	}
	if !ok {
		return b.Grant(ctx, id)
	}
	if gl.Revoked() {
		return b.grantView(gl, false), nil
	}
	gl.Revoke() // at once: work in flight on it ends (its held actions are denied once it is recorded)
	rec := gl.Grant
	rec.RevokedAt = b.now().UTC()
	if err := b.sess.Store().PutGrant(ctx, &rec, gl.Usage()); err != nil {
		return GrantView{}, fmt.Errorf("grant revoked, but persisting it failed: %w", err)
	}
	if _, err := b.audit.Append(ctx, audit.Event{Type: audit.TypeGrantRevoked, Actor: b.actorOf(p), SessionID: rec.SessionID, TaskID: rec.TaskID, GrantID: rec.ID, Upstream: rec.Upstream}, nil); err != nil {
		return GrantView{}, err
	}
	b.grantRevoked(ctx, gl, b.actorOf(p), p.ID, true)
	v := b.grantView(gl, false)
	v.Grant.RevokedAt = rec.RevokedAt
	return v, nil
}

// ActiveSessions lists the sessions in memory that are alive.
func (b *Broker) ActiveSessions() []SessionView {
	ls := b.sess.All()
	out := make([]SessionView, 0, len(ls))
	for _, l := range ls {
		if v := b.view(l); v.Status == "active" {
			out = append(out, v)
		}
	}
	return out
}

// RecordLogin audits a reviewer's log-in to the web page.
func (b *Broker) RecordLogin(ctx context.Context, p auth.Principal, ok bool, remote string) {
	ev := audit.Event{Type: audit.TypeUILogin, Actor: b.actorOf(p), Decision: "allow", Reason: "from " + remote}
	if !ok {
		ev.Decision, ev.Actor = "deny", audit.Actor{Kind: "unknown"}
	}
	if _, err := b.audit.Append(ctx, ev, nil); err != nil {
		b.log.Error("audit of a log-in failed", "err", err)
	}
	b.appr.Notify()
}
