package sessions

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
)

// Read-through: several brokers may share one store (DESIGN §9). A
// session or grant this broker has not in memory is read from the store
// on a miss, so what another broker created works here at once; a miss is
// never remembered as "not found". Once loaded, a session and its grants
// serve the hot path from memory.

// ReadTimeout bounds a read-through when the caller has no context of its
// own (a sandbox call's admission).
const ReadTimeout = 5 * time.Second

// lookup finds session id: in memory, else read from the store. A session
// alive in the store (not revoked, not expired) is loaded with its grants
// and returned as l; one that is over is returned as stored, with l nil.
// An unknown id is ErrNotFound.
func (s *Service) lookup(ctx context.Context, id string) (l *LiveSession, stored session.Session, err error) {
	if l, ok := s.Live(id); ok {
		return l, l.Session, nil
	}
	ss, err := s.store.Session(ctx, id)
	if err != nil {
		return nil, session.Session{}, err
	}
	if !ss.RevokedAt.IsZero() || !s.now().Before(ss.ExpiresAt) {
		return nil, ss, nil
	}
	gs, err := s.loadGrants(ctx, ss.ID)
	if err != nil {
		return nil, ss, err
	}
	l = s.addLive(ss, gs)
	if s.killed != nil {
		// Other replicas share the store: a kill that committed after the
		// read above may have been applied by the change feed before the
		// session was in memory (nothing to end then). Read it again now
		// that it is: a kill committed before this read is seen here, one
		// committed after it is applied by the feed to the live session.
		again, err := s.store.Session(ctx, id)
		if err != nil {
			return nil, ss, err // this call is refused; later kills reach it by the feed
		}
		if !again.RevokedAt.IsZero() {
			s.killed(id)
			return nil, again, nil
		}
	}
	return l, ss, nil
}

// LiveOrLoad is lookup for callers that need only a live session.
func (s *Service) LiveOrLoad(id string) (*LiveSession, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	l, _, err := s.lookup(ctx, id)
	return l, err == nil && l != nil
}

// grantOrLoad finds grant id: in memory, else through its session's
// read-through (which loads every grant of a live session, this one too).
func (s *Service) grantOrLoad(ctx context.Context, id string) (*grants.Live, bool, error) {
	if g, ok := s.LiveGrant(id); ok {
		return g, true, nil
	}
	r, err := s.store.Grant(ctx, id)
	if err != nil {
		return nil, false, err
	}
	l, _, err := s.lookup(ctx, r.Grant.SessionID)
	if err != nil || l == nil {
		return nil, false, err
	}
	if _, err := s.SyncGrants(ctx, l); err != nil {
		return nil, false, err
	}
	g, ok := s.LiveGrant(id)
	return g, ok, nil
}

// GrantOrLoadNow is grantOrLoad for callers without a context.
func (s *Service) GrantOrLoadNow(id string) (*grants.Live, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	g, ok, err := s.grantOrLoad(ctx, id)
	return g, ok && err == nil
}

// SyncGrants adds to a live session the grants the store holds that
// memory lacks (added by another broker), and revokes those the store says
// are revoked. It reports whether anything changed.
func (s *Service) SyncGrants(ctx context.Context, l *LiveSession) (bool, error) {
	recs, err := s.store.SessionGrants(ctx, l.Session.ID)
	if err != nil {
		return false, err
	}
	changed := false
	have := make(map[string]*grants.Live, len(l.Grants()))
	for _, g := range l.Grants() {
		have[g.Grant.ID] = g
	}
	for _, r := range recs {
		if g, ok := have[r.Grant.ID]; ok {
			if !r.Grant.RevokedAt.IsZero() && !g.Revoked() {
				g.Revoke()
				changed = true
			}
			continue
		}
		g, err := grants.Compile(r.Grant, r.Usage)
		if err != nil {
			return changed, err
		}
		if !r.Grant.RevokedAt.IsZero() {
			g.Revoke()
		}
		if s.addGrantOnce(l, g) {
			changed = true
		}
	}
	return changed, nil
}

// addGrantOnce adds a grant to a live session unless one with its id is
// there (another read-through got there first), and arms its expiry.
func (s *Service) addGrantOnce(l *LiveSession, gl *grants.Live) bool {
	s.share(gl)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := l.Grants()
	for _, g := range cur {
		if g.Grant.ID == gl.Grant.ID {
			return false
		}
	}
	updated := append(append([]*grants.Live{}, cur...), gl)
	gl.Bind(l.ctx) // before it is found: work on it ends with it
	l.grants.Store(&updated)
	s.grantIdx[gl.Grant.ID] = gl
	s.armGrant(l, gl)
	return true
}

// identifyStored finds a verified token's session on a miss in memory:
// read through; one that is over says why (revoked, expired), one the store
// does not hold is an invalid token.
func (s *Service) identifyStored(id string) (*LiveSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	l, ss, err := s.lookup(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, session.ErrInvalidToken
	case err != nil:
		return nil, err
	case l != nil:
		return l, nil
	case !ss.RevokedAt.IsZero():
		return nil, session.ErrRevoked
	}
	return nil, session.ErrExpired
}

// SigV4Session finds the session a SigV4 access key names (its id): only a
// well-formed session id is read through, so made-up keys cost no store
// read beyond a cheap check.
func (s *Service) SigV4Session(id string) (*LiveSession, bool) {
	if l, ok := s.Live(id); ok {
		return l, true
	}
	if !strings.HasPrefix(id, "ses_") || len(id) != len("ses_")+28 {
		return nil, false
	}
	return s.LiveOrLoad(id)
}
