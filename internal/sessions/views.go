package sessions

import (
	"context"
	"time"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
)

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

// view is a live session's view now.
func (s *Service) view(l *LiveSession) SessionView {
	gs := l.Grants()
	r2 := s.ruleOfTwo(l.Session.UntrustedInput, gs)
	now := s.now()
	v := SessionView{
		Session: l.Session, RuleOfTwo: r2, Required: r2.RequiredIsolation(),
		IsolationTooWeak: l.Session.Isolation < r2.RequiredIsolation(), EnforcedIsolation: s.enforce,
		Status: status(l.Revoked() || !l.Session.RevokedAt.IsZero(), l.Session.ExpiresAt, now),
	}
	if pc := l.Session.ProxyCA; pc != nil {
		v.ProxyCAPEM = proxyca.CertPEM(pc.CertDER)
	}
	if k := l.killedAt(); !k.IsZero() && v.Session.RevokedAt.IsZero() {
		v.Session.RevokedAt = k
	}
	for _, g := range gs {
		v.Grants = append(v.Grants, s.grantView(g, v.Status != "active"))
	}
	return v
}

func (s *Service) grantView(g *grants.Live, sessionOver bool) GrantView {
	return GrantView{Grant: g.Grant, Usage: g.Usage(), Pending: g.Pending(),
		Status: status(g.Revoked() || !g.Grant.RevokedAt.IsZero() || sessionOver, g.Grant.ExpiresAt, s.now())}
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

// Session returns a session's view, from memory when active, else from
// the store (ErrNotFound for an unknown id).
func (s *Service) Session(ctx context.Context, id string) (SessionView, error) {
	if l, ok := s.Live(id); ok {
		return s.view(l), nil
	}
	ss, err := s.store.Session(ctx, id)
	if err != nil {
		return SessionView{}, err
	}
	return s.storedView(ctx, ss)
}

func (s *Service) storedView(ctx context.Context, ss session.Session) (SessionView, error) {
	recs, err := s.store.SessionGrants(ctx, ss.ID)
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
	return s.view(stored(ss, gs)), nil
}

// stored is a session that is over (or not in memory), as stored, with
// its grants: for views, never live.
func stored(ss session.Session, gs []*grants.Live) *LiveSession {
	l := &LiveSession{Session: ss}
	l.revoked.Store(!ss.RevokedAt.IsZero())
	l.grants.Store(&gs)
	return l
}

// Sessions lists sessions in creation order after cursor after, at most
// limit, and the cursor of the next page ("" at the end).
func (s *Service) Sessions(ctx context.Context, after string, limit int) ([]SessionView, string, error) {
	ss, err := s.store.Sessions(ctx, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ss) > limit {
		ss = ss[:limit]
		next = ss[limit-1].ID
	}
	out := make([]SessionView, 0, len(ss))
	for _, one := range ss {
		if l, ok := s.Live(one.ID); ok {
			out = append(out, s.view(l))
			continue
		}
		v, err := s.storedView(ctx, one)
		if err != nil {
			return nil, "", err
		}
		out = append(out, v)
	}
	return out, next, nil
}

// Grant returns one grant (ErrNotFound for an unknown id).
func (s *Service) Grant(ctx context.Context, id string) (GrantView, error) {
	gl, ok := s.LiveGrant(id)
	if ok {
		l, live := s.Live(gl.Grant.SessionID)
		return s.grantView(gl, !live || l.Revoked()), nil
	}
	r, err := s.store.Grant(ctx, id)
	if err != nil {
		return GrantView{}, err
	}
	gl, err = grants.Compile(r.Grant, r.Usage)
	if err != nil {
		return GrantView{}, err
	}
	ses, err := s.store.Session(ctx, r.Grant.SessionID)
	return s.grantView(gl, err != nil || !ses.RevokedAt.IsZero()), nil
}

// Active lists the sessions in memory that are alive.
func (s *Service) Active() []SessionView {
	ls := s.all()
	out := make([]SessionView, 0, len(ls))
	for _, l := range ls {
		if v := s.view(l); v.Status == "active" {
			out = append(out, v)
		}
	}
	return out
}
